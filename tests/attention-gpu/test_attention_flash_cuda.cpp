// attention/flash-cuda on backend/cuda against attention/reference on backend/cpu: out, lse,
// dq, dk, dv for head dims 64 and 128, causal and not, T < S (queries are the last T of S),
// GQA, odd T and S (partial tiles), in f32 (tol 1e-4), bf16 and f16 (2e-2), tolerances
// relative to the reference's largest magnitude. Both sides read the same numbers: inputs are
// rounded to the device dtype, then the cpu side computes in f32. The device backward uses
// the device forward's own out and lse, as a training step would.
// Without the plugins or a CUDA device: "SKIPPED: <reason>", exit 77.
// LOOM_ATTN_TEST_DEVICE=cpu puts attention/reference on a second backend/cpu in the device's
// place: a check of the harness itself (dtypes, layouts, tolerances) on a machine without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace {

struct Side {
  loomtest::TestHost host;
  loom::Backend be;
  loom_attention_ref att{};
};
Side* g_cpu = nullptr;
Side* g_dev = nullptr;

using Vec = std::vector<float>;

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u = std::bit_cast<uint32_t>(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }
uint16_t to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
float from_f16(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

Vec rounded(DLDataType dt, Vec v) {
  for (float& x : v) {
    if (loom_dtype_eq(dt, loom_bf16())) x = from_bf16(to_bf16(x));
    if (loom_dtype_eq(dt, loom_f16())) x = from_f16(to_f16(x));
  }
  return v;
}

void upload(loom::Tensor& t, const Vec& v) {
  const DLDataType dt = t.get()->dtype;
  if (loom_dtype_eq(dt, loom_f32())) return t.upload(v);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = loom_dtype_eq(dt, loom_bf16()) ? to_bf16(v[i]) : to_f16(v[i]);
  t.upload(h);
}

Vec download(const loom::Tensor& t) {
  const DLDataType dt = t.get()->dtype;
  if (loom_dtype_eq(dt, loom_f32())) return t.download<float>();
  auto h = t.download<uint16_t>();
  Vec v(h.size());
  for (size_t i = 0; i < h.size(); ++i)
    v[i] = loom_dtype_eq(dt, loom_bf16()) ? from_bf16(h[i]) : from_f16(h[i]);
  return v;
}

// NaN everywhere: anything the plugin fails to write shows up as a mismatch.
loom::Tensor poisoned(const loom::Backend& be, DLDataType dt, const std::vector<int64_t>& shape) {
  loom::Tensor t(be, dt, shape);
  upload(t, Vec(static_cast<size_t>(t.numel()), NAN));
  return t;
}

void expect_close(const Vec& got, const Vec& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double scale = 0, worst = 0;
  size_t at = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::fabs(double(got[i]) - want[i]) : INFINITY;
    if (!(e <= worst)) worst = e, at = i;
  }
  INFO(what << ": worst |err| " << worst << " at " << at << " (got " << got[at] << ", want "
            << want[at] << "), max |ref| " << scale << ", tol " << tol);
  CHECK(worst <= tol * std::max(scale, 1e-30));
}

bool harness_mode() {
  const char* e = std::getenv("LOOM_ATTN_TEST_DEVICE");
  return e && std::string(e) == "cpu";
}

struct Case {
  int64_t B, T, S, Hq, Hkv, D;
  bool causal;
};

void check(loomtest::TestHost& h, loom_error* e) { h.check(e); }

void run_case(DLDataType dt, const Case& c) {
  const std::vector<int64_t> qs{c.B, c.T, c.Hq, c.D}, ks{c.B, c.S, c.Hkv, c.D}, ls{c.B, c.Hq, c.T};
  const size_t nq = c.B * c.T * c.Hq * c.D, nk = c.B * c.S * c.Hkv * c.D;
  std::mt19937 rng(static_cast<unsigned>(c.T * 131 + c.S * 7 + c.D + c.causal));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto rnd = [&](size_t n, float amp) {
    Vec v(n);
    for (float& x : v) x = amp * u(rng);
    return rounded(dt, v);
  };
  // q scaled up so the softmax is far from uniform (a flat one hides indexing bugs).
  const Vec q = rnd(nq, 3.0f), k = rnd(nk, 1.0f), v = rnd(nk, 1.0f), dout = rnd(nq, 1.0f);
  const double scale = 1.0 / std::sqrt(double(c.D));

  // Reference: f32 on the cpu.
  Vec want[5];  // out, lse, dq, dk, dv
  {
    const loom::Backend& be = g_cpu->be;
    loom::Tensor tq(be, loom_f32(), qs), tk(be, loom_f32(), ks), tv(be, loom_f32(), ks),
        tdo(be, loom_f32(), qs);
    tq.upload(q), tk.upload(k), tv.upload(v), tdo.upload(dout);
    loom::Tensor to = poisoned(be, loom_f32(), qs), tl = poisoned(be, loom_f32(), ls),
                 tdq = poisoned(be, loom_f32(), qs), tdk = poisoned(be, loom_f32(), ks),
                 tdv = poisoned(be, loom_f32(), ks);
    loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V1,
                              tq.get(),
                              tk.get(),
                              tv.get(),
                              to.get(),
                              tl.get(),
                              scale,
                              c.causal};
    check(g_cpu->host, g_cpu->att.api->forward(g_cpu->att.self, &f));
    loom_attention_bwd_args b{LOOM_ATTENTION_BWD_ARGS_SIZE_V1,
                              tdo.get(),
                              tq.get(),
                              tk.get(),
                              tv.get(),
                              to.get(),
                              tl.get(),
                              tdq.get(),
                              tdk.get(),
                              tdv.get(),
                              scale,
                              c.causal};
    check(g_cpu->host, g_cpu->att.api->backward(g_cpu->att.self, &b));
    want[0] = to.download<float>(), want[1] = tl.download<float>();
    want[2] = tdq.download<float>(), want[3] = tdk.download<float>(),
    want[4] = tdv.download<float>();
  }
  Vec got[5];
  {
    const loom::Backend& be = g_dev->be;
    loom::Tensor tq(be, dt, qs), tk(be, dt, ks), tv(be, dt, ks), tdo(be, dt, qs);
    upload(tq, q), upload(tk, k), upload(tv, v), upload(tdo, dout);
    loom::Tensor to = poisoned(be, dt, qs), tl = poisoned(be, loom_f32(), ls),
                 tdq = poisoned(be, dt, qs), tdk = poisoned(be, dt, ks), tdv = poisoned(be, dt, ks);
    loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V1,
                              tq.get(),
                              tk.get(),
                              tv.get(),
                              to.get(),
                              tl.get(),
                              scale,
                              c.causal};
    check(g_dev->host, g_dev->att.api->forward(g_dev->att.self, &f));
    loom_attention_bwd_args b{LOOM_ATTENTION_BWD_ARGS_SIZE_V1,
                              tdo.get(),
                              tq.get(),
                              tk.get(),
                              tv.get(),
                              to.get(),
                              tl.get(),
                              tdq.get(),
                              tdk.get(),
                              tdv.get(),
                              scale,
                              c.causal};
    check(g_dev->host, g_dev->att.api->backward(g_dev->att.self, &b));
    be.api()->synchronize(be.self());
    got[0] = download(to), got[1] = tl.download<float>();
    got[2] = download(tdq), got[3] = download(tdk), got[4] = download(tdv);
  }
  const double tol = loom_dtype_eq(dt, loom_f32()) ? 1e-4 : 2e-2;
  const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; ++i) expect_close(got[i], want[i], tol, names[i]);
}

const Case kCases[] = {
    // B, T, S, Hq, Hkv, D, causal
    {1, 64, 64, 2, 2, 64, false},   // one full tile
    {2, 77, 77, 2, 2, 64, true},    // odd length: partial tiles, causal diagonal
    {1, 50, 131, 4, 2, 128, true},  // T < S (last T of S), GQA 2:1, D 128
    {1, 33, 97, 4, 1, 128, false},  // MQA, non-causal T < S
    {2, 129, 129, 3, 1, 64, true},  // GQA 3:1, three query tiles
    {1, 1, 45, 2, 1, 128, true},    // one query (generation)
};

void run_all(DLDataType dt, const char* name) {
  for (const Case& c : kCases) {
    INFO(name << " B=" << c.B << " T=" << c.T << " S=" << c.S << " Hq=" << c.Hq << " Hkv=" << c.Hkv
              << " D=" << c.D << " causal=" << c.causal);
    run_case(dt, c);
  }
}

TEST_CASE("flash-cuda f32 matches the reference") { run_all(loom_f32(), "f32"); }
TEST_CASE("flash-cuda bf16 matches the reference") { run_all(loom_bf16(), "bf16"); }
TEST_CASE("flash-cuda f16 matches the reference") { run_all(loom_f16(), "f16"); }

TEST_CASE("flash-cuda refuses unsupported head dims" * doctest::skip(harness_mode())) {
  const loom::Backend& be = g_dev->be;
  loom::Tensor q(be, loom_bf16(), {1, 8, 1, 96}), out(be, loom_bf16(), {1, 8, 1, 96});
  loom_attention_fwd_args f{
      LOOM_ATTENTION_FWD_ARGS_SIZE_V1, q.get(), q.get(), q.get(), out.get(), nullptr, 0.1, 0};
  CHECK_THROWS_WITH_AS(check(g_dev->host, g_dev->att.api->forward(g_dev->att.self, &f)),
                       doctest::Contains("head dim 96"), std::runtime_error);
}

int skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  return 77;
}

}  // namespace

int main(int argc, char** argv) {
  const bool harness = harness_mode();
  for (const char* p :
       {"backend:cpu", "attention:reference", "backend:cuda", "attention:flash-cuda"}) {
    const std::string s(p), kind = s.substr(0, s.find(':')), name = s.substr(s.find(':') + 1);
    if (harness && name != "cpu" && name != "reference") continue;
    if (!std::filesystem::exists(loomtest::plugin_path(kind, name)))
      return skip(kind + "/" + name + " was not built (no CUDA toolkit?)");
  }
  g_dev = new Side;  // both sides live to process exit, like the plugins' libraries
  try {
    if (harness)
      g_dev->host.load_backend("cpu", {{"measure_gemm", "false"}});
    else
      g_dev->host.load_backend("cuda");
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("no CUDA device") != std::string::npos) return skip(e.what());
    std::fprintf(stderr, "backend/cuda failed to start: %s\n", e.what());
    return 1;
  }
  g_dev->be = loom::Backend(g_dev->host.host());
  g_dev->att = g_dev->host.load_attention(harness ? "reference" : "flash-cuda");
  g_cpu = new Side;
  g_cpu->host.load_backend("cpu", {{"measure_gemm", "false"}});
  g_cpu->be = loom::Backend(g_cpu->host.host());
  g_cpu->att = g_cpu->host.load_attention("reference");
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
