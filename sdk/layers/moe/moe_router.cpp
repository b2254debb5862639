// Loom layer library, a mixture of experts' router on the host: routing, capacity, the
// balancing and z losses and their gradients (see loom/cpp/layers/moe/moe_router.hpp).
#include "loom/cpp/layers/moe/moe_router.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "loom/cpp/plugin.hpp"

namespace loom::layers {
namespace {

constexpr double kSigmoidEps = 1e-20;  // Megatron's guard in the sigmoid normalisation

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// row (E) -> its softmax; returns the logsumexp.
double softmax_row(const double* row, int64_t E, double* out) {
  const double mx = *std::max_element(row, row + E);
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += std::exp(row[e] - mx);
  for (int64_t e = 0; e < E; ++e) out[e] = std::exp(row[e] - mx) / z;
  return mx + std::log(z);
}

// The k largest of row (E), best first; ties to the lower index.
void topk_row(const double* row, int64_t E, int64_t k, int32_t* idx) {
  std::vector<int32_t> order((size_t)E);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  std::copy(order.begin(), order.begin() + k, idx);
}

// The k best of row (E), the scores routing reads; group-limited (Megatron's
// group_limited_topk, DeepSeek-V3's node-limited routing): only within the group_topk best of
// num_groups groups of E / num_groups experts, a group's score the sum of its
// topk / group_topk best scores.
void choose(const RouterConfig& c, const double* row, int32_t* idx) {
  const int64_t E = c.experts, K = c.topk, G = c.num_groups;
  if (G <= 0) return topk_row(row, E, K, idx);
  const int64_t per = E / G, best = K / c.group_topk;
  std::vector<double> group((size_t)G, 0.0);
  std::vector<int32_t> top((size_t)std::max(best, c.group_topk));
  for (int64_t g = 0; g < G; ++g) {
    topk_row(row + g * per, per, best, top.data());
    for (int64_t i = 0; i < best; ++i) group[(size_t)g] += row[g * per + top[(size_t)i]];
  }
  topk_row(group.data(), G, c.group_topk, top.data());
  std::vector<double> masked((size_t)E, -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < c.group_topk; ++i)
    std::copy(row + top[(size_t)i] * per, row + (top[(size_t)i] + 1) * per,
              masked.begin() + top[(size_t)i] * per);
  topk_row(masked.data(), E, K, idx);
}

void check(const RouterConfig& c) {
  require(c.experts >= 1 && c.topk >= 1 && c.topk <= c.experts,
          "moe router: topk (" + std::to_string(c.topk) +
              ") must be in [1, experts = " + std::to_string(c.experts) + "]");
  require(c.num_groups <= 0 ||
              (c.experts % c.num_groups == 0 && c.group_topk >= 1 && c.group_topk <= c.num_groups &&
               c.topk % c.group_topk == 0 && c.topk / c.group_topk <= c.experts / c.num_groups),
          "moe router: " + std::to_string(c.num_groups) + " groups with the best " +
              std::to_string(c.group_topk) + " of them do not route " + std::to_string(c.topk) +
              " of " + std::to_string(c.experts) + " experts");
  require(c.score == "softmax" || c.score == "sigmoid",
          "moe router: score function \"" + c.score + "\" is neither softmax nor sigmoid");
  require(c.drop_policy == "probs" || c.drop_policy == "position",
          "moe router: drop policy \"" + c.drop_policy + "\" is neither probs nor position");
}

// Each expert keeps `cap` of the choices routed to it: the likeliest, or the first tokens.
void apply_capacity(const RouterConfig& cfg, Routing& r) {
  const int64_t N = r.tokens, E = r.experts, K = r.topk;
  r.capacity = (int64_t)std::ceil((double)(N * K) / (double)E * cfg.capacity_factor);
  std::vector<std::vector<int64_t>> chosen((size_t)E);  // flat (n, j) indices per expert
  for (int64_t i = 0; i < N * K; ++i) chosen[(size_t)r.expert[(size_t)i]].push_back(i);
  for (auto& list : chosen) {
    if ((int64_t)list.size() <= r.capacity) continue;
    if (cfg.drop_policy == "probs")
      std::stable_sort(list.begin(), list.end(),
                       [&](int64_t a, int64_t b) { return r.prob[(size_t)a] > r.prob[(size_t)b]; });
    for (size_t j = (size_t)r.capacity; j < list.size(); ++j) {
      r.kept[(size_t)list[j]] = 0;
      r.prob[(size_t)list[j]] = 0.0;
    }
  }
}

// The scores the balancing loss reads: softmax, or sigmoid normalised per token.
void aux_scores(const RouterConfig& cfg, const double* logits, int64_t N, double* s) {
  const int64_t E = cfg.experts;
  for (int64_t n = 0; n < N; ++n) {
    const double* row = logits + n * E;
    double* out = s + n * E;
    if (cfg.score == "softmax") {
      softmax_row(row, E, out);
    } else {
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += (out[e] = sigmoid(row[e]));
      for (int64_t e = 0; e < E; ++e) out[e] /= z + kSigmoidEps;
    }
  }
}

}  // namespace

Routing route(const RouterConfig& cfg, const double* logits, int64_t N, const double* bias) {
  check(cfg);
  const int64_t E = cfg.experts, K = cfg.topk;
  Routing r;
  r.tokens = N;
  r.experts = E;
  r.topk = K;
  r.expert.resize((size_t)(N * K));
  r.prob.resize((size_t)(N * K));
  r.kept.assign((size_t)(N * K), 1);
  r.scores.resize((size_t)(N * E));
  std::vector<double> pick((size_t)E);
  for (int64_t n = 0; n < N; ++n) {
    const double* row = logits + n * E;
    double* s = r.scores.data() + n * E;
    int32_t* idx = r.expert.data() + n * K;
    double* p = r.prob.data() + n * K;
    if (cfg.score == "softmax" && cfg.pre_softmax) {
      softmax_row(row, E, s);
      choose(cfg, s, idx);
      for (int64_t j = 0; j < K; ++j) p[j] = s[idx[j]];
    } else if (cfg.score == "softmax") {
      std::copy(row, row + E, s);
      choose(cfg, s, idx);
      std::vector<double> chosen((size_t)K);
      for (int64_t j = 0; j < K; ++j) chosen[(size_t)j] = row[idx[j]];
      softmax_row(chosen.data(), K, p);
    } else {
      for (int64_t e = 0; e < E; ++e) {
        s[e] = sigmoid(row[e]);
        pick[(size_t)e] = s[e] + (bias ? bias[e] : 0.0);
      }
      choose(cfg, pick.data(), idx);
      double z = 0;
      for (int64_t j = 0; j < K; ++j) z += (p[j] = s[idx[j]]);
      if (K > 1)
        for (int64_t j = 0; j < K; ++j) p[j] /= z + kSigmoidEps;
    }
    if (cfg.topk_scaling_factor > 0)
      for (int64_t j = 0; j < K; ++j) p[j] *= cfg.topk_scaling_factor;
  }
  if (cfg.capacity_factor > 0) apply_capacity(cfg, r);
  r.tokens_per_expert.assign((size_t)E, 0);
  for (int64_t i = 0; i < N * K; ++i)
    if (r.kept[(size_t)i]) ++r.tokens_per_expert[(size_t)r.expert[(size_t)i]];
  return r;
}

void route_backward(const RouterConfig& cfg, const Routing& r, const double* logits,
                    const double* dprob, double* dlogits) {
  const int64_t E = r.experts, K = r.topk;
  std::vector<double> dp((size_t)K);
  const double scale = cfg.topk_scaling_factor > 0 ? cfg.topk_scaling_factor : 1.0;
  for (int64_t n = 0; n < r.tokens; ++n) {
    const int32_t* idx = r.expert.data() + n * K;
    const double* s = r.scores.data() + n * E;
    double* dl = dlogits + n * E;
    for (int64_t j = 0; j < K; ++j)  // a dropped choice weighs nothing, so passes nothing
      dp[(size_t)j] = r.kept[(size_t)(n * K + j)] ? scale * dprob[n * K + j] : 0.0;
    if (cfg.score == "softmax" && cfg.pre_softmax) {  // p_j = s[e_j], s = softmax(logits)
      double dot = 0;
      for (int64_t j = 0; j < K; ++j) dot += dp[(size_t)j] * s[idx[j]];
      for (int64_t m = 0; m < E; ++m) dl[m] -= s[m] * dot;
      for (int64_t j = 0; j < K; ++j) dl[idx[j]] += dp[(size_t)j] * s[idx[j]];
    } else if (cfg.score == "softmax") {  // p = softmax of the chosen logits
      std::vector<double> chosen((size_t)K), p((size_t)K);
      for (int64_t j = 0; j < K; ++j) chosen[(size_t)j] = logits[n * E + idx[j]];
      softmax_row(chosen.data(), K, p.data());
      double dot = 0;
      for (int64_t j = 0; j < K; ++j) dot += dp[(size_t)j] * p[(size_t)j];
      for (int64_t j = 0; j < K; ++j) dl[idx[j]] += p[(size_t)j] * (dp[(size_t)j] - dot);
    } else {  // p_j = s_j / (sum of chosen s + eps) (k > 1), or s_j; s = sigmoid(logit)
      std::vector<double> ds((size_t)K);
      if (K > 1) {
        double z = kSigmoidEps, dot = 0;
        for (int64_t j = 0; j < K; ++j) z += s[idx[j]];
        for (int64_t j = 0; j < K; ++j) dot += dp[(size_t)j] * s[idx[j]];
        for (int64_t j = 0; j < K; ++j) ds[(size_t)j] = dp[(size_t)j] / z - dot / (z * z);
      } else {
        ds[0] = dp[0];
      }
      for (int64_t j = 0; j < K; ++j) {
        const double sj = s[idx[j]];
        dl[idx[j]] += ds[(size_t)j] * sj * (1.0 - sj);
      }
    }
  }
}

double aux_loss(const RouterConfig& cfg, const double* logits, int64_t N, double coeff,
                int64_t seq_len, double grad_scale, double* dlogits,
                std::vector<int64_t>* tokens_per_expert, const SplitTokens* split) {
  check(cfg);
  const int64_t E = cfg.experts, K = cfg.topk;
  const int64_t T = seq_len > 0 ? seq_len : N;
  require(N % T == 0,
          "moe router: " + std::to_string(N) + " tokens are not sequences of " + std::to_string(T));
  const int64_t B = N / T, parts = split ? split->parts : 1;
  std::vector<double> s((size_t)(N * E));
  aux_scores(cfg, logits, N, s.data());
  // f (B, E): each group's top-k choices per expert, over every rank's part of the group
  std::vector<double> f((size_t)(B * E), 0.0);
  std::vector<int32_t> idx((size_t)K);
  for (int64_t n = 0; n < N; ++n) {
    topk_row(s.data() + n * E, E, K, idx.data());
    for (int64_t j = 0; j < K; ++j) f[(size_t)((n / T) * E + idx[(size_t)j])] += 1;
  }
  if (split && split->sum) split->sum(f);
  if (tokens_per_expert) tokens_per_expert->assign((size_t)E, 0);
  double loss = 0;
  const double Tall = (double)(T * parts);  // the group's tokens on every rank
  std::vector<double> P((size_t)E), g((size_t)E);
  for (int64_t b = 0; b < B; ++b) {  // each group: c * sum_e P_e f_e, P over this rank's tokens
    std::fill(P.begin(), P.end(), 0.0);
    for (int64_t n = b * T; n < (b + 1) * T; ++n)
      for (int64_t e = 0; e < E; ++e) P[(size_t)e] += s[(size_t)(n * E + e)];
    const double c = coeff * (double)E / ((double)K * Tall * Tall) / (double)B;
    for (int64_t e = 0; e < E; ++e) {
      const double fe = f[(size_t)(b * E + e)];
      loss += c * P[(size_t)e] * fe;
      g[(size_t)e] = c * fe;  // d loss / d s[n, e] for n in this group
      if (tokens_per_expert) (*tokens_per_expert)[(size_t)e] += (int64_t)fe;
    }
    if (!dlogits) continue;
    for (int64_t n = b * T; n < (b + 1) * T; ++n) {
      const double* sn = s.data() + n * E;
      double* dl = dlogits + n * E;
      if (cfg.score == "softmax") {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += sn[e] * g[(size_t)e];
        for (int64_t m = 0; m < E; ++m) dl[m] += grad_scale * sn[m] * (g[(size_t)m] - dot);
      } else {  // s = t / (sum t + eps), t = sigmoid(logit)
        double z = kSigmoidEps, dot = 0;
        std::vector<double> t((size_t)E);
        for (int64_t e = 0; e < E; ++e) z += (t[(size_t)e] = sigmoid(logits[n * E + e]));
        for (int64_t e = 0; e < E; ++e) dot += g[(size_t)e] * t[(size_t)e];
        for (int64_t m = 0; m < E; ++m) {
          const double tm = t[(size_t)m];
          dl[m] += grad_scale * tm * (1.0 - tm) * (g[(size_t)m] / z - dot / (z * z));
        }
      }
    }
  }
  return loss;
}

double z_loss(const double* logits, int64_t N, int64_t E, double coeff, double grad_scale,
              double* dlogits, int64_t parts) {
  std::vector<double> p((size_t)E);
  const double all = (double)(N * parts);  // the mean is over every rank's tokens
  double loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double lse = softmax_row(logits + n * E, E, p.data());
    loss += coeff * lse * lse / all;
    if (dlogits)
      for (int64_t e = 0; e < E; ++e)
        dlogits[n * E + e] += grad_scale * coeff * 2.0 * lse * p[(size_t)e] / all;
  }
  return loss;
}

void update_expert_bias(const std::vector<int64_t>& tokens_per_expert, double rate,
                        double* expert_bias) {
  const double mean =
      (double)std::accumulate(tokens_per_expert.begin(), tokens_per_expert.end(), int64_t{0}) /
      (double)tokens_per_expert.size();
  for (size_t e = 0; e < tokens_per_expert.size(); ++e) {
    const double offset = mean - (double)tokens_per_expert[e];
    expert_bias[e] += rate * (offset > 0 ? 1.0 : offset < 0 ? -1.0 : 0.0);
  }
}

}  // namespace loom::layers
