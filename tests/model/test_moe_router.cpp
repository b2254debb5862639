// The mixture of experts' router (loom/cpp/layers/moe/moe_router.hpp): every gradient against
// central finite differences in float64 (the combine weights under each score function, the
// balancing loss in both forms, the z loss, with and without dropping), the losses' values
// against a recomputation written here from Megatron's formulas, the capacity rule's two
// policies on a case worked by hand, and the expert bias choosing without weighing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "loom/cpp/layer_pattern.hpp"
#include "loom/cpp/layers/moe/moe_router.hpp"

using loom::layers::RouterConfig;
using loom::layers::Routing;
using Vec = std::vector<double>;

namespace {

Vec random_vec(size_t n, uint64_t seed, double scale = 1.5) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (double& x : v) x = d(g);
  return v;
}

// objective(logits) = sum_j w_j prob_j + aux + z, with its analytic gradient.
struct Objective {
  RouterConfig cfg;
  int64_t N;
  Vec w, bias;
  double aux_coeff = 0.01, z_coeff = 0.001;
  int64_t seq_len = 0;
  double value(const Vec& logits, Vec* grad) const {
    const Routing r =
        loom::layers::route(cfg, logits.data(), N, bias.empty() ? nullptr : bias.data());
    double v = 0;
    for (size_t i = 0; i < r.prob.size(); ++i) v += w[i] * r.prob[i];
    if (grad) {
      grad->assign(logits.size(), 0.0);
      loom::layers::route_backward(cfg, r, logits.data(), w.data(), grad->data());
    }
    v += loom::layers::aux_loss(cfg, logits.data(), N, aux_coeff, seq_len, 1.0,
                                grad ? grad->data() : nullptr);
    v += loom::layers::z_loss(logits.data(), N, cfg.experts, z_coeff, 1.0,
                              grad ? grad->data() : nullptr);
    return v;
  }
};

void check_gradient(const Objective& o, uint64_t seed) {
  Vec logits = random_vec((size_t)(o.N * o.cfg.experts), seed);
  Vec grad;
  o.value(logits, &grad);
  const double h = 1e-6;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double x = logits[i];
    logits[i] = x + h;
    const double up = o.value(logits, nullptr);
    logits[i] = x - h;
    const double down = o.value(logits, nullptr);
    logits[i] = x;
    const double fd = (up - down) / (2 * h);
    worst = std::max(worst, std::fabs(fd - grad[i]));
    scale = std::max(scale, std::fabs(fd));
  }
  INFO(o.cfg.score << std::string(o.cfg.pre_softmax ? " pre-softmax" : "") << " k " << o.cfg.topk
                   << " capacity " << o.cfg.capacity_factor << " seq_len " << o.seq_len
                   << ": max |fd - analytic| " << worst << ", max |fd| " << scale);
  // the objective does depend on the logits (top-1 after the softmax weighs 1 whatever the
  // logits, Megatron's too: only the balancing and z losses remain)
  CHECK(scale > 1e-4);
  CHECK(worst <= 1e-7 * std::max(1.0, scale));
}

}  // namespace

TEST_CASE("moe router: gradients equal central finite differences (f64)") {
  struct Case {
    const char* score;
    bool pre;
    int64_t k;
    double capacity;
    const char* policy;
    bool bias;
    int64_t seq_len;
  };
  const Case cases[] = {
      {"softmax", false, 2, 0.0, "probs", false, 0},  // Mixtral
      {"softmax", true, 2, 0.0, "probs", false, 4},   // pre-softmax, sequence aux loss
      {"softmax", false, 1, 0.0, "probs", false, 0},  // Switch, top-1
      {"sigmoid", false, 2, 0.0, "probs", true, 0},   // DeepSeek-V3: bias picks
      {"sigmoid", false, 1, 0.0, "probs", false, 6},
      {"softmax", false, 2, 0.5, "probs", false, 0},  // dropping: half the capacity
      {"softmax", true, 2, 0.75, "position", false, 0},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    Objective o;
    o.cfg.experts = 6;
    o.cfg.topk = c.k;
    o.cfg.score = c.score;
    o.cfg.pre_softmax = c.pre;
    o.cfg.capacity_factor = c.capacity;
    o.cfg.drop_policy = c.policy;
    o.N = 12;
    o.seq_len = c.seq_len;
    o.w = random_vec((size_t)(o.N * c.k), seed + 100);
    if (c.bias) o.bias = random_vec(6, seed + 200, 0.3);
    check_gradient(o, seed++);
  }
}

// DeepSeek-V3's router in miniature (256 experts in 8 groups, the best 4 groups, top-8,
// weights x 2.5): 8 experts in 4 groups, the best 2 groups, top-4, x 2.5, with and without
// the expert bias; and the softmax router group-limited.
TEST_CASE("moe router: group-limited routing and the scaling factor, by finite differences") {
  uint64_t seed = 50;
  for (const char* score : {"sigmoid", "softmax"}) {
    for (bool bias : {false, true}) {
      if (bias && std::string(score) == "softmax") continue;
      Objective o;
      o.cfg.experts = 8;
      o.cfg.topk = 4;
      o.cfg.score = score;
      o.cfg.num_groups = 4;
      o.cfg.group_topk = 2;
      o.cfg.topk_scaling_factor = 2.5;
      o.N = 10;
      o.w = random_vec((size_t)(o.N * 4), seed + 100);
      if (bias) o.bias = random_vec(8, seed + 200, 0.3);
      CAPTURE(score);
      CAPTURE(bias);
      check_gradient(o, seed++);
    }
  }
}

// The group-limited choice recomputed here by sorting, token by token: each group's score the
// sum of its K / g best scores, the g best groups, then the K best experts of those, best
// first; the weights those of the plain router over the same experts, times the factor.
TEST_CASE("moe router: the group limit equals a recomputation of Megatron's rule") {
  const int64_t N = 200, E = 16, G = 4, g = 2, K = 4;
  RouterConfig cfg;
  cfg.experts = E;
  cfg.topk = K;
  cfg.score = "sigmoid";
  cfg.num_groups = G;
  cfg.group_topk = g;
  cfg.topk_scaling_factor = 2.5;
  const Vec logits = random_vec((size_t)(N * E), 99);
  const Routing r = loom::layers::route(cfg, logits.data(), N);
  RouterConfig plain = cfg;
  plain.num_groups = plain.group_topk = 0;
  plain.topk_scaling_factor = 0;
  const Routing p = loom::layers::route(plain, logits.data(), N);
  int64_t limited = 0;
  for (int64_t n = 0; n < N; ++n) {
    Vec s(E);
    for (int64_t e = 0; e < E; ++e) s[(size_t)e] = 1 / (1 + std::exp(-logits[(size_t)(n * E + e)]));
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t q = 0; q < G; ++q) {
      Vec in(s.begin() + q * (E / G), s.begin() + (q + 1) * (E / G));
      std::sort(in.rbegin(), in.rend());
      groups.push_back({-(in[0] + in[1]), q});  // K / g = 2 best
    }
    std::sort(groups.begin(), groups.end());
    std::vector<std::pair<double, int64_t>> allowed;
    for (int64_t i = 0; i < g; ++i)
      for (int64_t e = groups[(size_t)i].second * (E / G);
           e < (groups[(size_t)i].second + 1) * (E / G); ++e)
        allowed.push_back({-s[(size_t)e], e});
    std::sort(allowed.begin(), allowed.end());
    double z = 0;
    for (int64_t j = 0; j < K; ++j) z += -allowed[(size_t)j].first;
    bool differs = false;
    for (int64_t j = 0; j < K; ++j) {
      CHECK(r.expert[(size_t)(n * K + j)] == allowed[(size_t)j].second);
      CHECK(r.prob[(size_t)(n * K + j)] ==
            doctest::Approx(2.5 * -allowed[(size_t)j].first / (z + 1e-20)).epsilon(1e-14));
      differs |= p.expert[(size_t)(n * K + j)] != allowed[(size_t)j].second;
    }
    limited += differs;
  }
  MESSAGE(limited << " of " << N << " tokens routed otherwise than by the plain top-" << K);
  CHECK(limited > 0);  // the limit bites on this batch
}

TEST_CASE("moe router: Megatron's --moe-layer-freq patterns, and their refusals") {
  using P = std::vector<uint8_t>;
  CHECK(loom::layer_pattern("1", 3, "k") == P{1, 1, 1});
  CHECK(loom::layer_pattern("2", 5, "k") == P{1, 0, 1, 0, 1});
  CHECK(loom::layer_pattern("[0]*3+[1]*2", 5, "k") == P{0, 0, 0, 1, 1});
  CHECK(loom::layer_pattern("([1]*2+[0]) * 2", 6, "k") == P{1, 1, 0, 1, 1, 0});
  CHECK(loom::layer_pattern(" [0, 1,1] ", 3, "k") == P{0, 1, 1});
  CHECK(loom::layer_pattern_text({0, 0, 0, 1, 1}) == "[0]*3+[1]*2");
  CHECK(loom::layer_pattern_text({1, 1}) == "1");
  for (const std::vector<uint8_t>& v : {P{0, 1, 0, 0}, P{1, 0, 1, 1}})
    CHECK(loom::layer_pattern(loom::layer_pattern_text(v), 4, "k") == v);
  CHECK_THROWS_WITH(loom::layer_pattern("[0]*3+[1]*2", 6, "model/gpt: moe_layer_freq"),
                    doctest::Contains("gives 5 layers; the model has n_layer = 6"));
  CHECK_THROWS_WITH(loom::layer_pattern("[0,2]", 2, "k"), doctest::Contains("0 (dense) or 1"));
  CHECK_THROWS_WITH(loom::layer_pattern("[1]*", 2, "k"), doctest::Contains("expected a number"));
  CHECK_THROWS_WITH(loom::layer_pattern("0", 2, "k"), doctest::Contains("every N-th layer"));
  CHECK_THROWS_WITH(loom::layer_pattern("[1]*2)", 2, "k"), doctest::Contains("unexpected text"));
}

TEST_CASE("moe router: the balancing and z losses equal Megatron's formulas") {
  const int64_t N = 8, E = 4, K = 2;
  const Vec logits = random_vec((size_t)(N * E), 7);
  RouterConfig cfg;
  cfg.experts = E;
  cfg.topk = K;
  // the Switch form, recomputed: softmax scores, counts of the top-2 of each token
  Vec P(E, 0.0), f(E, 0.0);
  double z = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double* l = logits.data() + n * E;
    double mx = l[0], sum = 0;
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    for (int64_t e = 0; e < E; ++e) sum += std::exp(l[e] - mx);
    const double lse = mx + std::log(sum);
    z += lse * lse;
    int64_t best = 0, second = -1;
    for (int64_t e = 1; e < E; ++e)
      if (l[e] > l[best]) best = e;
    for (int64_t e = 0; e < E; ++e)
      if (e != best && (second < 0 || l[e] > l[second])) second = e;
    f[best] += 1;
    f[second] += 1;
    for (int64_t e = 0; e < E; ++e) P[e] += std::exp(l[e] - lse);
  }
  double want = 0;
  for (int64_t e = 0; e < E; ++e) want += P[e] * f[e];
  want *= 0.01 * E / (K * (double)N * N);
  std::vector<int64_t> counts;
  CHECK(loom::layers::aux_loss(cfg, logits.data(), N, 0.01, 0, 0, nullptr, &counts) ==
        doctest::Approx(want).epsilon(1e-14));
  for (int64_t e = 0; e < E; ++e) CHECK(counts[(size_t)e] == (int64_t)f[e]);
  CHECK(loom::layers::z_loss(logits.data(), N, E, 0.001, 0, nullptr) ==
        doctest::Approx(0.001 * z / N).epsilon(1e-14));
}

TEST_CASE("moe router: capacity keeps the likeliest or the first tokens of a full expert") {
  // 4 tokens, 2 experts, top-1: every token prefers expert 0, with weights rising with n
  // under pre-softmax; capacity = ceil(4 * 1 / 2 * 0.5) = 1 token per expert
  const Vec logits = {1.0, 0.0, 1.5, 0.0, 2.0, 0.0, 2.5, 0.0};
  RouterConfig cfg;
  cfg.experts = 2;
  cfg.topk = 1;
  cfg.pre_softmax = true;
  cfg.capacity_factor = 0.5;
  for (const char* policy : {"probs", "position"}) {
    CAPTURE(policy);
    cfg.drop_policy = policy;
    const Routing r = loom::layers::route(cfg, logits.data(), 4);
    CHECK(r.capacity == 1);
    const int64_t keep = std::string(policy) == "probs" ? 3 : 0;  // the likeliest, or the first
    for (int64_t n = 0; n < 4; ++n) {
      CHECK(r.expert[(size_t)n] == 0);
      CHECK(r.kept[(size_t)n] == (n == keep ? 1 : 0));
      CHECK((r.prob[(size_t)n] > 0) == (n == keep));
    }
    CHECK(r.tokens_per_expert == std::vector<int64_t>{1, 0});
  }
}

TEST_CASE("moe router: the expert bias chooses the experts, the scores weigh them") {
  const Vec logits = {2.0, 1.0, 0.0, -1.0};  // one token, 4 experts
  RouterConfig cfg;
  cfg.experts = 4;
  cfg.topk = 2;
  cfg.score = "sigmoid";
  const Vec bias = {0.0, 0.0, 5.0, 0.0};  // expert 2 forced in
  const Routing r = loom::layers::route(cfg, logits.data(), 1, bias.data());
  CHECK(r.expert == std::vector<int32_t>{2, 0});
  const double s2 = 1 / (1 + std::exp(-0.0)), s0 = 1 / (1 + std::exp(-2.0));
  CHECK(r.prob[0] == doctest::Approx(s2 / (s2 + s0)).epsilon(1e-15));
  CHECK(r.prob[1] == doctest::Approx(s0 / (s2 + s0)).epsilon(1e-15));
  // the update moves each bias a step towards the mean load
  Vec b = {0.0, 0.0, 0.0};
  loom::layers::update_expert_bias({5, 1, 3}, 0.001, b.data());
  CHECK(b == Vec{-0.001, 0.001, 0.0});
}

TEST_CASE("moe router: a bad configuration is refused by name") {
  RouterConfig cfg;
  cfg.experts = 2;
  cfg.topk = 3;
  const Vec logits(4, 0.0);
  CHECK_THROWS_WITH(loom::layers::route(cfg, logits.data(), 2),
                    doctest::Contains("topk (3) must be in [1, experts = 2]"));
  cfg.topk = 1;
  cfg.score = "relu";
  CHECK_THROWS_WITH(loom::layers::route(cfg, logits.data(), 2),
                    doctest::Contains("neither softmax nor sigmoid"));
  cfg.score = "sigmoid";
  cfg.num_groups = 3;  // 2 experts in 3 groups
  cfg.group_topk = 1;
  CHECK_THROWS_WITH(loom::layers::route(cfg, logits.data(), 2),
                    doctest::Contains("3 groups with the best 1 of them do not route 1 of 2"));
}

// The capacity rule recomputed here for whole micro-batches of random logits: per expert, the
// choices routed to it ordered by weight (ties to the lower token) or by token, the first
// ceil(N k / E * factor) kept; everything else dropped with weight 0.
TEST_CASE("moe router: dropping equals a recomputation of the capacity rule (64 tokens)") {
  const int64_t N = 64, E = 8, K = 2;
  for (double factor : {0.5, 1.0, 1.25}) {
    for (const char* policy : {"probs", "position"}) {
      CAPTURE(factor);
      CAPTURE(policy);
      RouterConfig cfg;
      cfg.experts = E;
      cfg.topk = K;
      cfg.capacity_factor = factor;
      cfg.drop_policy = policy;
      const Vec logits = random_vec((size_t)(N * E), 42);
      RouterConfig dropless = cfg;
      dropless.capacity_factor = 0;
      const Routing all = loom::layers::route(dropless, logits.data(), N);
      const Routing r = loom::layers::route(cfg, logits.data(), N);
      const int64_t cap = (int64_t)std::ceil((double)(N * K) / E * factor);
      CHECK(r.capacity == cap);
      std::vector<uint8_t> want((size_t)(N * K), 0);
      for (int64_t e = 0; e < E; ++e) {
        std::vector<int64_t> chosen;  // flat choices n * K + j routed to e
        for (int64_t i = 0; i < N * K; ++i)
          if (all.expert[(size_t)i] == e) chosen.push_back(i);
        if (std::string(policy) == "probs")
          std::stable_sort(chosen.begin(), chosen.end(), [&](int64_t a, int64_t b) {
            return all.prob[(size_t)a] > all.prob[(size_t)b];
          });
        for (size_t j = 0; j < chosen.size() && (int64_t)j < cap; ++j) want[(size_t)chosen[j]] = 1;
      }
      int64_t dropped = 0;
      for (int64_t i = 0; i < N * K; ++i) {
        CHECK(r.expert[(size_t)i] == all.expert[(size_t)i]);  // dropping never reroutes
        CHECK(r.kept[(size_t)i] == want[(size_t)i]);
        CHECK(r.prob[(size_t)i] == (want[(size_t)i] ? all.prob[(size_t)i] : 0.0));
        dropped += 1 - want[(size_t)i];
      }
      for (int64_t e = 0; e < E; ++e) CHECK(r.tokens_per_expert[(size_t)e] <= cap);
      if (factor < 1.0) CHECK(dropped > 0);  // half the capacity must drop
    }
  }
}
