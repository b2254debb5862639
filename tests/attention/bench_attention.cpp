// loom-bench-attention: forward and backward time of attention plugins on one backend, and
// their TFLOP/s, one line per plugin, then the ratio of the first plugin to the second.
//
//   loom-bench-attention [--backend cuda] [--attention flash-cuda,cudnn] [--dtype bf16]
//                        [--batch 1] [--heads 16] [--kv-heads H] [--seq 4096] [--keys S]
//                        [--head-dim 128] [--causal 1] [--reps 10]
//
// The defaults are docs/kernels.md's comparison point (H16, T = S = 4096, D = 128, causal).
// FLOPs count the matmuls over the (query, key) pairs the mask lets through: forward
// 2 x 2·D per pair (QKᵀ and PV), backward 2.5 times that (dV, dP, dQ, dK and the recomputed
// QKᵀ), as FlashAttention's papers count them. Times are medians of --reps runs after one
// warm-up, each ended by the backend's synchronize; inputs are uniform random (never zeros,
// which can run faster than real data). A plugin that cannot run says why on its line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/cpp/half.hpp"
#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace {

struct Options {
  std::string backend = "cuda";
  std::vector<std::string> attention{"flash-cuda", "cudnn"};
  std::string dtype = "bf16";
  int64_t B = 1, H = 16, Hkv = 0, T = 4096, S = 0, D = 128;
  bool causal = true;
  int reps = 10;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (a == "--backend")
      o.backend = v;
    else if (a == "--attention")
      o.attention = split_commas(v);
    else if (a == "--dtype")
      o.dtype = v;
    else if (a == "--batch")
      o.B = std::stoll(v);
    else if (a == "--heads")
      o.H = std::stoll(v);
    else if (a == "--kv-heads")
      o.Hkv = std::stoll(v);
    else if (a == "--seq")
      o.T = std::stoll(v);
    else if (a == "--keys")
      o.S = std::stoll(v);
    else if (a == "--head-dim")
      o.D = std::stoll(v);
    else if (a == "--causal")
      o.causal = v != "0";
    else if (a == "--reps")
      o.reps = std::max(1, std::stoi(v));
    else
      return false;
  }
  if (o.Hkv == 0) o.Hkv = o.H;
  if (o.S == 0) o.S = o.T;
  return o.B > 0 && o.H > 0 && o.Hkv > 0 && o.H % o.Hkv == 0 && o.T > 0 && o.S >= o.T && o.D > 0 &&
         !o.attention.empty() && (o.dtype == "bf16" || o.dtype == "f16" || o.dtype == "f32");
}

// (query, key) pairs the mask lets through, per batch row and head: query t (the last T of
// S positions) sees keys s <= t + S - T under the causal mask.
double visible_pairs(const Options& o) {
  if (!o.causal) return double(o.T) * double(o.S);
  double n = 0;
  for (int64_t t = 0; t < o.T; ++t) n += double(std::min(o.S, t + o.S - o.T + 1));
  return n;
}

// A tensor of uniform random values in [-amp, amp] in the benchmark's dtype.
loom::Tensor random_tensor(const loom::Backend& be, DLDataType dt, std::vector<int64_t> shape,
                           std::mt19937& rng, float amp) {
  loom::Tensor t(be, dt, shape);
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (float& x : v) x = u(rng);
  if (dt.bits == 32) {
    t.upload(v);
  } else {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      h[i] = dt.code == kDLBfloat ? loom::f32_to_bf16(v[i]) : loom::f32_to_f16(v[i]);
    t.upload(h);
  }
  return t;
}

double median_ms(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: plans, workspaces and module loads stay out of the numbers
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Result {
  bool ran = false;
  double fwd_ms = 0, bwd_ms = 0;
};

Result bench_one(const Options& o, const std::string& name) {
  loomtest::TestHost host;
  host.load_backend(o.backend);
  loom::Backend be(host.host());
  loom_attention_ref att = host.load_attention(name);
  const DLDataType dt = o.dtype == "bf16"  ? loom_bf16()
                        : o.dtype == "f16" ? loom_f16()
                                           : loom_f32();
  std::mt19937 rng(1234);
  const std::vector<int64_t> qs{o.B, o.T, o.H, o.D}, ks{o.B, o.S, o.Hkv, o.D};
  // q scaled up so the softmax is far from uniform, as in the correctness tests.
  loom::Tensor q = random_tensor(be, dt, qs, rng, 3.0f), k = random_tensor(be, dt, ks, rng, 1.0f),
               v = random_tensor(be, dt, ks, rng, 1.0f),
               dout = random_tensor(be, dt, qs, rng, 1.0f);
  loom::Tensor out(be, dt, qs), lse(be, loom_f32(), {o.B, o.H, o.T}), dq(be, dt, qs),
      dk(be, dt, ks), dv(be, dt, ks);
  const double scale = 1.0 / std::sqrt(double(o.D));
  const loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2,
                                  q.get(),
                                  k.get(),
                                  v.get(),
                                  out.get(),
                                  lse.get(),
                                  scale,
                                  o.causal,
                                  nullptr};
  const loom_attention_bwd_args b{LOOM_ATTENTION_BWD_ARGS_SIZE_V2,
                                  dout.get(),
                                  q.get(),
                                  k.get(),
                                  v.get(),
                                  out.get(),
                                  lse.get(),
                                  dq.get(),
                                  dk.get(),
                                  dv.get(),
                                  scale,
                                  o.causal,
                                  nullptr};
  auto sync = [&] { loom::check(host.host(), be.api()->synchronize(be.self())); };
  Result r;
  r.fwd_ms =
      median_ms([&] { loom::check(host.host(), att.api->forward(att.self, &f)), sync(); }, o.reps);
  r.bwd_ms =
      median_ms([&] { loom::check(host.host(), att.api->backward(att.self, &b)), sync(); }, o.reps);
  // A benchmark of wrong numbers is worthless: the log-sum-exp must be finite everywhere.
  for (float x : lse.download<float>())
    loom::require(std::isfinite(x), name + " wrote a non-finite log-sum-exp");
  r.ran = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool parsed = false;
  try {
    parsed = parse(argc, argv, o);
  } catch (const std::exception&) {  // a number that does not parse
  }
  if (!parsed) {
    std::fprintf(
        stderr,
        "usage: loom-bench-attention [--backend cuda] [--attention a,b] [--dtype bf16|f16|f32]"
        " [--batch B] [--heads H] [--kv-heads Hkv] [--seq T] [--keys S >= T]"
        " [--head-dim D] [--causal 0|1] [--reps R]\n");
    return 2;
  }
  const double fwd_flop = 4.0 * double(o.D) * visible_pairs(o) * double(o.B * o.H);
  const double bwd_flop = 2.5 * fwd_flop;
  std::printf(
      "attention on backend/%s, %s, B %lld, H %lld/%lld, T %lld, S %lld, D %lld, %s: "
      "%.3g forward FLOP\n",
      o.backend.c_str(), o.dtype.c_str(), (long long)o.B, (long long)o.H, (long long)o.Hkv,
      (long long)o.T, (long long)o.S, (long long)o.D, o.causal ? "causal" : "not causal", fwd_flop);
  std::vector<Result> results;
  int failed = 0;
  for (const std::string& name : o.attention) {
    Result r;
    try {
      r = bench_one(o, name);
    } catch (const std::exception& e) {
      std::printf("attention/%s: did not run: %s\n", name.c_str(), e.what());
      ++failed;
    }
    if (r.ran)
      std::printf(
          "attention/%s: forward %.3f ms (%.3g TFLOP/s), backward %.3f ms (%.3g TFLOP/s),"
          " forward+backward %.3g TFLOP/s\n",
          name.c_str(), r.fwd_ms, fwd_flop / r.fwd_ms * 1e-9, r.bwd_ms, bwd_flop / r.bwd_ms * 1e-9,
          (fwd_flop + bwd_flop) / (r.fwd_ms + r.bwd_ms) * 1e-9);
    results.push_back(r);
  }
  if (results.size() >= 2 && results[0].ran && results[1].ran)
    std::printf("%s / %s forward+backward: %.3f\n", o.attention[0].c_str(), o.attention[1].c_str(),
                (results[1].fwd_ms + results[1].bwd_ms) / (results[0].fwd_ms + results[0].bwd_ms));
  return failed == 0 ? 0 : 1;
}
