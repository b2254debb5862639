// attention/cudnn, run as `loom-test-attention-cudnn no-device|gpu`:
//  - no-device: create fails with a loom_error saying there is no CUDA device (no crash);
//    skipped (exit 77) where a device exists.
//  - gpu: on backend/cuda against attention/reference on backend/cpu: out, lse, dq, dk, dv
//    in bf16 and f16 (tol 2e-2 relative to the reference's largest magnitude), causal and
//    not, T < S without causal, odd lengths, grouped-query (4:1, 3:1) and multi-query; and the
//    refusals (heads not a multiple, causal with T != S, f32) carry a clear message. Both sides
//    read the same numbers: inputs are rounded to the device dtype, the cpu computes in f32. The
//    device backward uses the device forward's own out and lse, as a training step would. Without
//    plugins or a device: exit 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "attention_compare.hpp"
#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace {

using attntest::download;
using attntest::expect_close;
using attntest::poisoned;
using attntest::rounded;
using attntest::Side;
using attntest::upload;
using attntest::Vec;

Side* g_cpu = nullptr;
Side* g_dev = nullptr;

struct Case {
  int64_t B, T, S, Hq, Hkv, D;
  bool causal;
};

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

  Vec want[5], got[5];  // out, lse, dq, dk, dv
  for (Side* side : {g_cpu, g_dev}) {
    const bool dev = side == g_dev;
    const DLDataType io = dev ? dt : loom_f32();
    const loom::Backend& be = side->be;
    loom::Tensor tq(be, io, qs), tk(be, io, ks), tv(be, io, ks), tdo(be, io, qs);
    upload(tq, q), upload(tk, k), upload(tv, v), upload(tdo, dout);
    loom::Tensor to = poisoned(be, io, qs), tl = poisoned(be, loom_f32(), ls),
                 tdq = poisoned(be, io, qs), tdk = poisoned(be, io, ks), tdv = poisoned(be, io, ks);
    loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2,
                              tq.get(),
                              tk.get(),
                              tv.get(),
                              to.get(),
                              tl.get(),
                              scale,
                              c.causal,
                              nullptr};
    side->host.check(side->att.api->forward(side->att.self, &f));
    loom_attention_bwd_args b{LOOM_ATTENTION_BWD_ARGS_SIZE_V2,
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
                              c.causal,
                              nullptr};
    side->host.check(side->att.api->backward(side->att.self, &b));
    be.api()->synchronize(be.self());
    Vec* r = dev ? got : want;
    r[0] = download(to), r[1] = tl.download<float>();
    r[2] = download(tdq), r[3] = download(tdk), r[4] = download(tdv);
  }
  const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; ++i) expect_close(got[i], want[i], 2e-2, names[i]);
}

const Case kCases[] = {
    // B, T, S, Hq, Hkv, D, causal
    {1, 64, 64, 2, 2, 64, false},    // one full tile
    {2, 77, 77, 2, 2, 64, true},     // odd length: partial tiles, causal diagonal
    {1, 50, 131, 4, 4, 128, false},  // T < S without mask, D 128
    {2, 129, 129, 3, 3, 128, true},  // several query tiles, causal
    {2, 128, 128, 8, 2, 64, true},   // grouped-query 4:1 (llama's shape of group), causal
    {1, 77, 77, 6, 2, 128, true},    // grouped-query 3:1, odd length
    {1, 33, 97, 4, 1, 64, false},    // multi-query, T < S without mask
};

void run_all(DLDataType dt, const char* name) {
  for (const Case& c : kCases) {
    INFO(name << " B=" << c.B << " T=" << c.T << " S=" << c.S << " Hq=" << c.Hq << " Hkv=" << c.Hkv
              << " D=" << c.D << " causal=" << c.causal);
    run_case(dt, c);
  }
}

// Forward of an (q shape, kv shape, dtype, causal) the plugin must refuse, with `says` in it.
void expect_refused(std::vector<int64_t> qs, std::vector<int64_t> ks, DLDataType dt, int causal,
                    const char* says) {
  const loom::Backend& be = g_dev->be;
  loom::Tensor q(be, dt, qs), k(be, dt, ks), v(be, dt, ks), out(be, dt, qs);
  loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2,
                            q.get(),
                            k.get(),
                            v.get(),
                            out.get(),
                            nullptr,
                            0.125,
                            causal,
                            nullptr};
  CHECK_THROWS_WITH_AS(g_dev->host.check(g_dev->att.api->forward(g_dev->att.self, &f)),
                       doctest::Contains(says), std::runtime_error);
}

TEST_CASE("gpu: cudnn bf16 matches the reference") { run_all(loom_bf16(), "bf16"); }
TEST_CASE("gpu: cudnn f16 matches the reference") { run_all(loom_f16(), "f16"); }
TEST_CASE("gpu: cudnn refuses what it does not support, saying why") {
  expect_refused({1, 16, 4, 64}, {1, 16, 3, 64}, loom_bf16(), 0, "must be a multiple of K/V");
  expect_refused({1, 8, 2, 64}, {1, 16, 2, 64}, loom_bf16(), 1, "causal attention with T (8)");
  expect_refused({1, 16, 2, 64}, {1, 16, 2, 64}, loom_f32(), 0, "bf16 or fp16");
}

int skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  return 77;
}

// create on a machine without a device: a loom_error naming the reason, not a crash.
int no_device() {
  if (!std::filesystem::exists(loomtest::plugin_path("attention", "cudnn")))
    return skip("attention/cudnn was not built");
  const loom_plugin_descriptor* d = loomtest::load_descriptor("attention", "cudnn");
  if (d->kind != LOOM_KIND_ATTENTION || std::strcmp(d->name, "cudnn") != 0) {
    std::fprintf(stderr, "FAIL: descriptor is not attention/cudnn\n");
    return 1;
  }
  loomtest::TestHost host;
  const auto* api = static_cast<const loom_attention_api*>(d->api);
  loom_config cfg = loomtest::TestHost::config(d);
  loom_attention* att = nullptr;
  loom_error* e = api->create(host.host(), &cfg, &att);
  if (!e) {
    api->destroy(att);
    return skip("a CUDA device exists: the no-device path cannot be exercised here");
  }
  const std::string msg = host.host()->error_message(e);
  const loom_status code = host.host()->error_code(e);
  host.host()->error_free(e);
  std::printf("create failed as expected: %s\n", msg.c_str());
  if (msg.find("attention/cudnn: no CUDA device") == std::string::npos ||
      code != LOOM_ERR_UNIMPLEMENTED) {
    std::fprintf(stderr, "FAIL: unexpected error (code %d): %s\n", int(code), msg.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "no-device") return no_device();
  if (mode != "gpu") {
    std::fprintf(stderr, "usage: %s no-device|gpu [doctest options]\n", argv[0]);
    return 2;
  }
  for (const char* p : {"attention:cudnn", "backend:cuda", "backend:cpu", "attention:reference"}) {
    const std::string s(p), kind = s.substr(0, s.find(':')), name = s.substr(s.find(':') + 1);
    if (!std::filesystem::exists(loomtest::plugin_path(kind, name)))
      return skip(kind + "/" + name + " was not built (no CUDA toolkit or cuDNN?)");
  }
  g_dev = new Side;  // lives to process exit, like the plugins' libraries
  try {
    g_dev->host.load_backend("cuda");
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("no CUDA device") != std::string::npos) return skip(e.what());
    std::fprintf(stderr, "backend/cuda failed to start: %s\n", e.what());
    return 1;
  }
  g_dev->be = loom::Backend(g_dev->host.host());
  g_dev->att = g_dev->host.load_attention("cudnn");
  g_cpu = new Side;
  g_cpu->host.load_backend("cpu", {{"measure_gemm", "false"}});
  g_cpu->be = loom::Backend(g_cpu->host.host());
  g_cpu->att = g_cpu->host.load_attention("reference");
  doctest::Context ctx(argc - 1, argv + 1);
  return ctx.run();
}
