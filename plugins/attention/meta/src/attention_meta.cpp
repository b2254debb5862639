// attention/meta: the attention of a walk-through on backend/meta (`loom validate --memory`):
// every call returns at once and allocates nothing, as a fused attention kernel keeps no
// T x S matrix. It lists every attention extension, so that any recipe's model accepts it;
// what the real plugin would allocate through the backend (attention/reference's scores) is
// not counted, which is why the engine keeps attention/reference itself on backend/meta.
#include "loom/attention.h"
#include "loom/cpp/plugin.hpp"

struct loom_attention {
  const loom_host* host;
};

namespace {

loom_error* create(const loom_host* host, const loom_config*, loom_attention** out) {
  return loom::guard(host, [&] { *out = new loom_attention{host}; });
}
void destroy(loom_attention* a) { delete a; }
loom_error* forward(loom_attention*, const loom_attention_fwd_args*) { return nullptr; }
loom_error* backward(loom_attention*, const loom_attention_bwd_args*) { return nullptr; }
loom_error* merge(loom_attention*, const loom_attention_merge_args*) { return nullptr; }

const loom_attention_api kApi = {
    LOOM_ATTENTION_API_SIZE_V2_7, create, destroy, forward, backward, merge};
const char* const kCapabilities[] = {LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_ATTENTION_SEQLENS,
                                     LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_ATTENTION_PARTIAL, nullptr};

}  // namespace

LOOM_PLUGIN(.description =
                "computes nothing, allocates nothing: the attention of backend/meta walk-throughs",
            .api = &kApi, .capabilities = kCapabilities)
