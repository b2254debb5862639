#include "capability_gate.hpp"

#include "host.hpp"

namespace loom::engine {

std::string unlisted_required_ext(const loom_ext* chain, const PluginInfo& plugin) {
  for (const loom_ext* e = chain; e != nullptr; e = e->next) {
    if ((e->flags & LOOM_EXT_REQUIRED) == 0 || e->id == nullptr) continue;
    if (plugin.has_capability(e->id)) continue;
    std::string listed;
    for (const std::string& c : plugin.capabilities) listed += (listed.empty() ? "" : ", ") + c;
    return kind_name(plugin.kind) + "/" + plugin.name + " does not implement '" + e->id +
           "', which this run needs (its capabilities: " + (listed.empty() ? "none" : listed) +
           "); choose another " + kind_name(plugin.kind) +
           " plugin, one that lists it (loom plugins " + "describe " + kind_name(plugin.kind) +
           "/NAME)";
  }
  return "";
}

AttentionGate::AttentionGate(const PluginInfo& info, const loom_attention_api* api,
                             loom_attention* self)
    : table_(*api), info_(info), api_(api), self_(self) {
  table_.forward = &AttentionGate::forward;
  table_.backward = &AttentionGate::backward;
}

loom_error* AttentionGate::forward(loom_attention* gate, const loom_attention_fwd_args* args) {
  auto* g = reinterpret_cast<AttentionGate*>(gate);
  if (args != nullptr && LOOM_HAS_FIELD(args, loom_attention_fwd_args, ext)) {
    std::string why = unlisted_required_ext(args->ext, g->info_);
    if (!why.empty()) return host_abi::error_new(LOOM_ERR_UNIMPLEMENTED, why.c_str());
  }
  return g->api_->forward(g->self_, args);
}

loom_error* AttentionGate::backward(loom_attention* gate, const loom_attention_bwd_args* args) {
  auto* g = reinterpret_cast<AttentionGate*>(gate);
  if (args != nullptr && LOOM_HAS_FIELD(args, loom_attention_bwd_args, ext)) {
    std::string why = unlisted_required_ext(args->ext, g->info_);
    if (!why.empty()) return host_abi::error_new(LOOM_ERR_UNIMPLEMENTED, why.c_str());
  }
  return g->api_->backward(g->self_, args);
}

}  // namespace loom::engine
