// Loom layer library, T5's relative position bias (position = "relative"): Megatron-Core's
// RelativePositionEmbedding. Each stack (encoder, decoder) has a table of one learned value per
// head and bucket; a bucket is a function of the key's position minus the query's. The bias of
// a call, bias[h, t, s] = table[h, bucket(s - (p + t))], reaches the attention plugin as
// loom.attention-bias/1, and every layer of the stack shares it.
//
// Loom's table is (heads, buckets), Megatron's nn.Embedding (buckets, heads): one head's
// values are then one compact row, which is what the backend's embedding lookup gathers from
// (a (buckets, 1) table per head), and under tensor parallelism a rank's heads are its rows.
#include <cmath>

#include "loom/cpp/layers/t5/t5.hpp"

namespace loom::layers {

// Megatron's (and Hugging Face's) _relative_position_bucket, in its arithmetic: half the
// buckets (per direction when bidirectional) for exact small distances, the rest
// logarithmic up to max_distance, computed in float32 and truncated as torch does.
int32_t relative_bucket(int64_t rel, bool bidirectional, int64_t num_buckets,
                        int64_t max_distance) {
  int64_t bucket = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (rel > 0) bucket += num_buckets;
    rel = rel < 0 ? -rel : rel;
  } else {
    rel = rel < 0 ? -rel : 0;
  }
  const int64_t max_exact = num_buckets / 2;
  if (rel < max_exact) return (int32_t)(bucket + rel);
  const float scaled = std::log((float)rel / (float)max_exact) /
                       (float)std::log((double)max_distance / (double)max_exact) *
                       (float)(num_buckets - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + (int64_t)scaled, num_buckets - 1);
  return (int32_t)(bucket + large);
}

RelativeBias RelativeBias::make(const Options& o, ParamStore& ps, const std::string& name,
                                bool bidirectional) {
  RelativeBias r;
  Param& p = ps.at(name);
  r.table = p.value.get();
  r.dtable = p.grad.get();
  r.heads = o.hq();
  r.buckets = o.rel_buckets;
  r.max_distance = o.rel_max_distance;
  r.bidirectional = bidirectional;
  return r;
}

void RelativeBias::forward(const Ctx& c, DLTensor* bias, Tensor& ids, int64_t p, int64_t T,
                           int64_t S) const {
  std::vector<int32_t> host((size_t)(T * S));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s)
      host[t * S + s] = relative_bucket(s - (p + t), bidirectional, buckets, max_distance);
  if (ids.numel() < T * S) ids = c.alloc(loom_i32(), {T * S});
  View iv = view(ids, {T * S});
  loom::check(c.host, c.be.api()->from_host(c.be.self(), iv.get(), host.data(),
                                            host.size() * sizeof(int32_t)));
  for (int64_t h = 0; h < heads; ++h) {
    View out = view(bias, {T * S, 1}, h * T * S), row = view(table, {buckets, 1}, h * buckets);
    loom::embedding_forward(c.be, out.get(), iv, row, false);
  }
}

void RelativeBias::backward(const Ctx& c, const DLTensor* dbias, const Tensor& ids, int64_t T,
                            int64_t S) const {
  View iv = view(ids, {T * S});
  for (int64_t h = 0; h < heads; ++h) {
    View d = view(dbias, {T * S, 1}, h * T * S), row = view(dtable, {buckets, 1}, h * buckets);
    loom::embedding_backward(c.be, row.get(), iv, d);
  }
}

}  // namespace loom::layers
