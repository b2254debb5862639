#include "session/capability_gate.hpp"

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "session/host.hpp"
#include "session/step_timer.hpp"

namespace loom::engine {

std::string unlisted_required_ext(const loom_ext* chain, const PluginInfo& plugin) {
  for (const loom_ext* e = chain; e != nullptr; e = e->next) {
    if ((e->flags & LOOM_EXT_REQUIRED) == 0 || e->id == nullptr) continue;
    if (plugin.has_capability(e->id)) continue;
    const std::string kind = kind_name(plugin.kind);
    return kind + "/" + plugin.name + " does not implement '" + e->id +
           "', which this run needs (its capabilities: " + plugin.capabilities_text() +
           "); choose another " + kind + " plugin, one that lists it (loom plugins describe " +
           kind + "/NAME)";
  }
  return "";
}

namespace {
// The plugin's `slot` on `args`, unless args carry a required extension the plugin does not
// list.
template <class Args, class Slot>
loom_error* gated(const PluginInfo& info, const Args* args, Slot slot) {
  if (args != nullptr && args->struct_size >= LOOM_STRUCT_SIZE(Args, ext)) {
    const std::string why = unlisted_required_ext(args->ext, info);
    if (!why.empty()) return host_abi::error_new(LOOM_ERR_UNIMPLEMENTED, why.c_str());
  }
  return slot();
}
}  // namespace

AttentionGate::AttentionGate(const PluginInfo& info, const loom_attention_api* api,
                             loom_attention* self)
    : table_{}, info_(info), api_(api), self_(self) {
  // the plugin's table as far as it goes (an older plugin's is shorter), the rest NULL
  std::memcpy(&table_, api, std::min(api->struct_size, sizeof table_));
  table_.struct_size = sizeof table_;
  table_.forward = &AttentionGate::forward;
  table_.backward = &AttentionGate::backward;
  if (table_.merge) table_.merge = &AttentionGate::merge;
}

loom_error* AttentionGate::merge(loom_attention* gate, const loom_attention_merge_args* args) {
  auto* g = reinterpret_cast<AttentionGate*>(gate);
  return gated(g->info_, args, [&] { return g->api_->merge(g->self_, args); });
}

namespace {
// The step profile's work of one attention call (step_timer.hpp): q(B,T,Hq,D) against S keys
// is 4 B T Hq D S FLOPs forward in its two products (half of them under a causal mask), and
// 2.5 times that backward (five products); bytes are every tensor read or written once.
double attention_flops(const DLTensor* q, const DLTensor* k, int causal) {
  if (q == nullptr || k == nullptr || q->ndim != 4 || k->ndim != 4) return 0;
  return 4.0 * (double)loom_tensor_numel(q) * (double)k->shape[1] * (causal ? 0.5 : 1.0);
}
double sum_bytes(std::initializer_list<const DLTensor*> ts) {
  double b = 0;
  for (const DLTensor* t : ts) b += tensor_bytes(t);
  return b;
}
}  // namespace

loom_error* AttentionGate::forward(loom_attention* gate, const loom_attention_fwd_args* args) {
  auto* g = reinterpret_cast<AttentionGate*>(gate);
  Work w;
  if (args) {
    w.flops = attention_flops(args->q, args->k, args->causal);
    w.bytes = sum_bytes({args->q, args->k, args->v, args->out, args->lse});
  }
  const StepTimer::Scope timed(TimeKind::attn_fwd, w);
  return gated(g->info_, args, [&] { return g->api_->forward(g->self_, args); });
}

loom_error* AttentionGate::backward(loom_attention* gate, const loom_attention_bwd_args* args) {
  auto* g = reinterpret_cast<AttentionGate*>(gate);
  Work w;
  if (args) {
    w.flops = 2.5 * attention_flops(args->q, args->k, args->causal);
    w.bytes = sum_bytes({args->dout, args->q, args->k, args->v, args->out, args->lse, args->dq,
                         args->dk, args->dv});
  }
  const StepTimer::Scope timed(TimeKind::attn_bwd, w);
  return gated(g->info_, args, [&] { return g->api_->backward(g->self_, args); });
}

}  // namespace loom::engine
