// The host's side of ABI 2's refusal rule: a call whose args carry an extension flagged
// LOOM_EXT_REQUIRED reaches a plugin only if the plugin lists that id in its capabilities.
// So a plugin that does not know a mask never sees it, whatever its code does with `ext`:
// the call fails, naming the plugin and the id, instead of computing something else.
#pragma once

#include <string>

#include "loader/registry.hpp"
#include "loom/attention.h"

namespace loom::engine {

// "" or why `plugin` cannot take a call carrying `chain`.
std::string unlisted_required_ext(const loom_ext* chain, const PluginInfo& plugin);

// The attention plugin's table with forward and backward checked first. Hand out ref().
class AttentionGate {
 public:
  AttentionGate(const PluginInfo& info, const loom_attention_api* api, loom_attention* self);
  loom_attention_ref ref() { return {&table_, reinterpret_cast<loom_attention*>(this)}; }

 private:
  static loom_error* forward(loom_attention* gate, const loom_attention_fwd_args* args);
  static loom_error* backward(loom_attention* gate, const loom_attention_bwd_args* args);
  static loom_error* merge(loom_attention* gate, const loom_attention_merge_args* args);
  loom_attention_api table_;
  const PluginInfo& info_;
  const loom_attention_api* api_;
  loom_attention* self_;
};

}  // namespace loom::engine
