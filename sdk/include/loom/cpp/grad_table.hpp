// Loom SDK C++ helpers for grad plugins: the loom_grad_api entry points that only forward to
// the plugin's class (each through loom::guard, so exceptions become ABI errors), and the
// checks of the args structs every grad plugin makes, with the same messages. grad/ddp,
// grad/distributed-optimizer and grad/fsdp share them.
#pragma once

#include <string>

#include "loom/cpp/plugin.hpp"
#include "loom/grad.h"

namespace loom {

// `G` has host() and whichever of shard_params(params, out), after_step(), bytes_per_param()
// and grad_ready(first, count) the plugin fills into its table.
template <class G>
struct GradEntries {
  static G* self(loom_grad* g) { return reinterpret_cast<G*>(g); }
  static void destroy(loom_grad* g) { delete self(g); }
  static loom_error* shard_params(loom_grad* g, DLTensor* const* params, loom_param_shard* out) {
    return guard(self(g)->host(), [&] { self(g)->shard_params(params, out); });
  }
  static loom_error* after_step(loom_grad* g) {
    return guard(self(g)->host(), [&] { self(g)->after_step(); });
  }
  static double bytes_per_param(loom_grad* g) { return self(g)->bytes_per_param(); }
  static loom_error* grad_ready(loom_grad* g, int64_t first, int64_t count) {
    return guard(self(g)->host(), [&] { self(g)->grad_ready(first, count); });
  }
};

// create's args: present, of ABI 2.0 at least, and no required extension `who`
// ("grad/ddp") does not know.
inline void check_grad_create_args(const loom_grad_create_args* args, const std::string& who) {
  require(args != nullptr && args->struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2,
          who + ": create args NULL or smaller than ABI 2.0's");
  require_known_exts(args->ext, {}, who);
}
// reduce's args, as create's.
inline void check_grad_reduce_args(const loom_grad_reduce_args* args, const std::string& who) {
  require(args != nullptr && args->struct_size >= LOOM_GRAD_REDUCE_ARGS_SIZE_V2,
          who + ": reduce args NULL or smaller than ABI 2.0's");
  require_known_exts(args->ext, {}, who);
}
// The reduce group of each gradient (ABI 2.6), or NULL from an older host.
inline const int32_t* grad_reduce_groups(const loom_grad_create_args& a) {
  return a.struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2_6 ? a.reduce_groups : nullptr;
}
// The host's comm group for a gradient of reduce group `kind`: data x context, or the
// expert-data group (a mixture of experts' expert parameters), the two a strategy averages
// over; another is refused by name. `who`: "grad/ddp"; `does`: what the strategy does over
// them ("ddp averages").
inline loom_comm_group* reduce_group(const loom_host* host, int32_t kind, const std::string& who,
                                     const std::string& does) {
  require(kind == LOOM_GROUP_DATA_CONTEXT || kind == LOOM_GROUP_EXPERT_DATA,
          who + ": a gradient asks for reduce group " + std::to_string(kind) + "; " + does +
              " over data x context or the expert-data group");
  loom_comm_group* g = nullptr;
  check(host, host->get_group(host->ctx, (loom_group_kind)kind, &g));
  return g;
}

}  // namespace loom
