// Loom layer library (loom/cpp/layers/decoder/decoder.hpp has the overview): context parallelism,
// Megatron-Core's ring attention (cp_comm_type "p2p"), context_parallel.cpp.
//
// The T tokens of a sample are cut into 2 x CP chunks of Tc = T / (2 CP); context rank r
// holds chunks r and 2CP-1-r (Megatron's causal load balancing: every rank gets as much of
// the causal triangle), as its local rows [0, Tc) and [Tc, 2Tc). Every layer but the
// attention works on local tokens alone. The attention passes the keys and values around the
// ring of the context group (send/recv): at step j rank r holds those of rank src = r - j.
//   step 0: the local causal attention (chunk r to itself, chunk 2CP-1-r to both);
//   src < r: every local query sees src's first chunk whole;
//   src > r: only the second local chunk's queries see src's, both chunks whole.
// Each step's (out, lse) is merged into the running result by the attention plugin's merge
// (ABI 2.7). Backward goes round again with the merged out and lse (loom.attention-partial/1):
// each step's dk, dv travel with the keys they belong to and reach their rank at the end.
#pragma once

#include <cstdint>

#include "loom/cpp/layers/core/context.hpp"

namespace loom::layers {

// The global position of local row t of a sample (Tc rows per chunk).
inline int64_t cp_position(const ContextGroup& g, int64_t Tc, int64_t t) {
  if (g.size <= 1) return t;
  const int64_t chunk = t < Tc ? g.rank : 2 * g.size - 1 - g.rank;
  return chunk * Tc + t % Tc;
}

// This rank's rows of a (B, T) host array: (B, T / CP) into `out`.
void cp_slice(const ContextGroup& g, const int32_t* in, int64_t B, int64_t T, int32_t* out);

// Ring attention over local q (B,2Tc,Hq,D), k, v (B,2Tc,Hkv,D): out (B,2Tc,Hq,D) and lse
// (B,Hq,2Tc) of the attention over the whole sequence, causal.
struct RingScratch;
void ring_attention_forward(const Ctx& c, const DLTensor* q, const DLTensor* k, const DLTensor* v,
                            DLTensor* out, DLTensor* lse);
// dq, dk, dv (=) of the same, from dout and the forward's out and lse.
void ring_attention_backward(const Ctx& c, const DLTensor* dout, const DLTensor* q,
                             const DLTensor* k, const DLTensor* v, const DLTensor* out,
                             const DLTensor* lse, DLTensor* dq, DLTensor* dk, DLTensor* dv);

// All-to-all (Ulysses) context parallelism (cp_comm_type "a2a"): q, k, v trade the sequence
// split for a head split (all_to_all over the context group), the attention runs causal over
// the whole sequence for this rank's share of the heads, and its output comes back the same
// way. lse is (B, Hq/CP, T) in the same buffer. Backward exchanges the forward's operands again
// rather than keeping them per layer.
void a2a_attention_forward(const Ctx& c, const DLTensor* q, const DLTensor* k, const DLTensor* v,
                           DLTensor* out, DLTensor* lse);
void a2a_attention_backward(const Ctx& c, const DLTensor* dout, const DLTensor* q,
                            const DLTensor* k, const DLTensor* v, const DLTensor* out,
                            const DLTensor* lse, DLTensor* dq, DLTensor* dk, DLTensor* dv);

}  // namespace loom::layers
