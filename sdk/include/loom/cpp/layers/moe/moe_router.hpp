// Loom layer library: a mixture of experts' router, on the host (moe_router.cpp). Megatron-Core's
// TopKRouter (megatron/core/transformer/moe/router.py, moe_utils.py) in float64, from the
// router's logits (N tokens, E experts) to each token's k experts and combine weights, the
// capacity rule, the load-balancing and z losses, and every gradient back to the logits.
//
//   softmax, pre_softmax:  s = softmax(logits); top-k of s; probs = those s
//   softmax (default):     top-k of logits; probs = softmax over the k chosen logits
//   sigmoid:               s = sigmoid(logits); top-k of s + expert_bias (DeepSeek-V3's
//                          aux-loss-free balancing: the bias picks, never weighs);
//                          probs = the chosen s / their sum (k > 1)
//   group-limited (num_groups > 0, DeepSeek-V3's): the top-k only within the group_topk best
//     of num_groups groups of experts, a group scored by the sum of its topk / group_topk
//     best routing scores (Megatron's group_limited_topk)
//   topk_scaling_factor > 0: probs times it (DeepSeek-V3's routed_scaling_factor)
//   capacity (capacity_factor > 0): each expert keeps ceil(N k / E * factor) of the tokens
//     routed to it, the likeliest ("probs") or the first ("position"); a dropped choice's
//     weight is 0 and its token skips that expert
//   aux loss (Switch/GShard): coeff * E / (k N^2) * sum_e P_e f_e, P_e the summed scores of
//     expert e over the tokens (softmax, or sigmoid normalised per token), f_e the tokens
//     whose top-k of those scores holds e (no bias, no capacity): Megatron's
//     compute_routing_scores_for_aux_loss
//   sequence aux loss: the same per sequence of T tokens, mean over the B sequences
//   z loss: coeff * mean over tokens of logsumexp(logits)^2
// Ties between equal scores go to the lower expert (and, for capacity, the lower token).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/cpp/layers/core/options.hpp"

namespace loom::layers {

// One micro-batch's routing.
// RouterConfig (the recipe's router keys) is part of Options (core/options.hpp).
struct Routing {
  int64_t tokens = 0, experts = 0, topk = 0;
  std::vector<int32_t> expert;             // (N, k) the chosen experts, best first
  std::vector<double> prob;                // (N, k) combine weights; 0 where dropped
  std::vector<uint8_t> kept;               // (N, k) 1: within the expert's capacity
  std::vector<int64_t> tokens_per_expert;  // (E) kept choices per expert
  std::vector<double> scores;              // (N, E) what the top-k read (backward)
  int64_t capacity = 0;                    // per expert; 0 when dropless
};

// The routing of logits (N, E), row-major; expert_bias (E) or NULL (sigmoid only).
Routing route(const RouterConfig& cfg, const double* logits, int64_t tokens,
              const double* expert_bias = nullptr);

// dlogits (N, E) += d(objective)/d(logits) through the combine weights, from dprob (N, k),
// d(objective)/d(prob). Dropped choices pass nothing back.
void route_backward(const RouterConfig& cfg, const Routing& r, const double* logits,
                    const double* dprob, double* dlogits);

// Tokens split over ranks (context parallelism: each holds `parts` chunks' worth of every
// sequence, 1/parts of its tokens): `sum` adds a vector over the ranks.
struct SplitTokens {
  int64_t parts = 1;
  std::function<void(std::vector<double>&)> sum;
};

// The load-balancing loss of logits (N, E) and, when dlogits is not NULL, grad_scale times
// its gradient added to dlogits. seq_len > 0: the sequence form over N / seq_len sequences
// of seq_len tokens, back to back. tokens_per_expert (E), when not NULL, receives f_e.
// With `split`, the tokens are this rank's part of sequences `parts` times as long: f_e is
// summed over the ranks, the sizes are the whole sequences', and the value is this rank's
// share (its tokens' P_e against the whole f_e), so that the ranks' values add up to the
// loss of the whole batch (Megatron reduces tokens_per_expert over the context group alike).
double aux_loss(const RouterConfig& cfg, const double* logits, int64_t tokens, double coeff,
                int64_t seq_len, double grad_scale, double* dlogits,
                std::vector<int64_t>* tokens_per_expert = nullptr,
                const SplitTokens* split = nullptr);

// coeff * mean over the N x parts tokens of every rank of logsumexp(logits)^2: this rank's N
// tokens' share; grad_scale times its gradient is added to dlogits when not NULL.
double z_loss(const double* logits, int64_t tokens, int64_t experts, double coeff,
              double grad_scale, double* dlogits, int64_t parts = 1);

// Megatron's aux-loss-free update of the expert bias after a step: each expert's bias moves
// by `rate` towards the mean load (up when it had fewer tokens than the mean, down when more).
void update_expert_bias(const std::vector<int64_t>& tokens_per_expert, double rate,
                        double* expert_bias);

}  // namespace loom::layers
