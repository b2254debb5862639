#include "capability_gate.hpp"

#include <algorithm>
#include <cstring>

#include "host.hpp"

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

loom_error* AttentionGate::forward(loom_attention* gate, const loom_attention_fwd_args* args) {
  auto* g = reinterpret_cast<AttentionGate*>(gate);
  return gated(g->info_, args, [&] { return g->api_->forward(g->self_, args); });
}

loom_error* AttentionGate::backward(loom_attention* gate, const loom_attention_bwd_args* args) {
  auto* g = reinterpret_cast<AttentionGate*>(gate);
  return gated(g->info_, args, [&] { return g->api_->backward(g->self_, args); });
}

}  // namespace loom::engine
