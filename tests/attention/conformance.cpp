// The attention conformance suite: an attention plugin on its backend against
// attention/reference on backend/cpu. out, lse, dq, dk, dv for head dims 64 and 128, causal
// and not, T < S (queries are the last T of S), GQA and MQA, odd T and S (partial tiles), one
// query, in f32 (tol 1e-4), bf16 and f16 (2e-2), tolerances relative to the reference's
// largest magnitude. Both sides read the same numbers: inputs are rounded to the tested
// dtype, then the reference computes in f32. The backward uses the plugin's own forward out
// and lse, as a training step would.
//
// LOOM_ATTN_TEST=BACKEND/ATTENTION names the plugin under test (default cuda/flash-cuda):
//   cuda/flash-cuda, cuda/cudnn (label gpu), cpu/flash-cpu, and cpu/reference (the harness
//   checking itself on a machine without a GPU; LOOM_ATTN_TEST_DEVICE=cpu says the same).
// A plugin may refuse a case it does not implement, with LOOM_ERR_UNIMPLEMENTED and a message
// that names it: never a silent fallback. Only plugins listed in may_refuse() below may refuse
// at all, and each must still run at least one case per dtype it supports. Sliding-window
// cases (loom.attention-window/1, a required extension), packed-document cases
// (loom.attention-seqlens/1) and score-bias cases (loom.attention-bias/1, T5's relative
// position bias: its gradient dbias is compared too) must be refused by name by every plugin
// that does not list the capability, and computed by every plugin that does. A plugin that
// lists loom.attention-partial/1 also computes the keys in two calls, merges them and runs
// each call's backward with the merged out and lse, against one call (run_partial).
// Without the plugins or a CUDA device: "SKIPPED: <reason>", exit 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <utility>
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

// The plugin under test: {backend, attention}.
std::pair<std::string, std::string> under_test() {
  const char* d = std::getenv("LOOM_ATTN_TEST_DEVICE");
  if (d && std::string(d) == "cpu") return {"cpu", "reference"};
  const char* e = std::getenv("LOOM_ATTN_TEST");
  const std::string s = e && *e ? e : "cuda/flash-cuda";
  const size_t slash = s.find('/');
  return {s.substr(0, slash), slash == std::string::npos ? "" : s.substr(slash + 1)};
}
// cuDNN's SDPA graphs refuse causal with T != S (its mask is top-left aligned), f32, windows and
// packed documents.
bool may_refuse() { return under_test().second == "cudnn"; }
int g_compared = 0, g_refused = 0;  // cases per dtype (run_all resets them)

struct Case {
  int64_t B, T, S, Hq, Hkv, D;
  bool causal;
  int64_t window = 0;  // > 0: sliding window, through the args' ext chain
  int64_t docs = 0;    // > 0: each row packs documents of this many tokens (the last shorter)
  bool bias = false;   // an additive score bias (Hq, T, S) and its gradient
};

// The plugin under test lists capability `id`.
bool lists(const char* id) {
  const loom_plugin_descriptor* d = loomtest::load_descriptor("attention", under_test().second);
  for (size_t i = 0; d->capabilities && d->capabilities[i]; ++i)
    if (std::string(d->capabilities[i]) == id) return true;
  return false;
}
// The required extensions case c carries.
std::vector<const char*> required_exts(const Case& c) {
  std::vector<const char*> out;
  if (c.docs > 0) out.push_back(LOOM_EXT_ATTENTION_SEQLENS);
  if (c.window > 0) out.push_back(LOOM_EXT_ATTENTION_WINDOW);
  if (c.bias) out.push_back(LOOM_EXT_ATTENTION_BIAS);
  return out;
}

struct Io {
  DLTensor *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
  DLTensor *bias = nullptr, *dbias = nullptr;
};

// One forward and one backward of case c on `io`, its masks on their ext chains. Holds
// pointers into itself: not copyable.
struct Calls {
  loom_attention_window w{
      {sizeof(loom_attention_window), LOOM_EXT_ATTENTION_WINDOW, LOOM_EXT_REQUIRED, nullptr}, 0};
  std::vector<int32_t> cu;
  loom_attention_seqlens docs{
      {sizeof(loom_attention_seqlens), LOOM_EXT_ATTENTION_SEQLENS, LOOM_EXT_REQUIRED, nullptr},
      0,
      nullptr,
      nullptr,
      nullptr,
      nullptr};
  loom_attention_bias bias{
      {sizeof(loom_attention_bias), LOOM_EXT_ATTENTION_BIAS, LOOM_EXT_REQUIRED, nullptr},
      nullptr,
      nullptr};
  loom_attention_fwd_args f{};
  loom_attention_bwd_args b{};
  Calls(const Io& io, const Case& c, double scale) {
    w.window = c.window;
    for (int64_t r = 0; c.docs > 0 && r < c.B; ++r)
      for (int64_t t = 0; t < c.T; t += c.docs) cu.push_back((int32_t)(r * c.T + t));
    cu.push_back((int32_t)(c.B * c.T));
    docs.num_seqs = (int64_t)cu.size() - 1;
    docs.cu_seqlens_q = docs.cu_seqlens_k = cu.data();
    const loom_ext* ext = c.docs > 0 ? &docs.base : c.window > 0 ? &w.base : nullptr;
    if (c.bias) {
      bias.bias = io.bias, bias.dbias = io.dbias;
      bias.base.next = ext;
      ext = &bias.base;
    }
    f = {LOOM_ATTENTION_FWD_ARGS_SIZE_V2, io.q, io.k, io.v, io.out, io.lse, scale, c.causal, ext};
    b = {LOOM_ATTENTION_BWD_ARGS_SIZE_V2,
         io.dout,
         io.q,
         io.k,
         io.v,
         io.out,
         io.lse,
         io.dq,
         io.dk,
         io.dv,
         scale,
         c.causal,
         ext};
  }
  Calls(const Calls&) = delete;
  Calls& operator=(const Calls&) = delete;
};

void check(loomtest::TestHost& h, loom_error* e) { h.check(e); }

// A call of the plugin under test: false when it ran; true when it refused the case, which
// only a plugin that may refuse may do, by name (LOOM_ERR_UNIMPLEMENTED).
bool refused(loom_error* e, const Case& c) {
  const char* ext = nullptr;  // the first of the case's masks the plugin does not list
  for (const char* x : required_exts(c))
    if (!ext && !lists(x)) ext = x;
  if (e == nullptr) {
    // A plugin that does not list a mask's extension must not compute with it.
    REQUIRE(ext == nullptr);
    return false;
  }
  const loom_host* h = g_dev->host.host();
  const std::string msg = h->error_message(e);
  const loom_status code = h->error_code(e);
  h->error_free(e);
  const std::string name = "attention/" + under_test().second + ":";
  INFO("the plugin said (code " << int(code) << "): " << msg);
  const bool mask_refused = ext != nullptr;
  REQUIRE((may_refuse() || mask_refused));
  REQUIRE(code == LOOM_ERR_UNIMPLEMENTED);
  REQUIRE(msg.find(name) != std::string::npos);
  if (mask_refused) {  // naming one of the masks it lacks
    bool named = false;
    for (const char* x : required_exts(c))
      named = named || (!lists(x) && msg.find(x) != std::string::npos);
    REQUIRE(named);
  }
  MESSAGE("refused: " << msg);
  ++g_refused;
  return true;
}

// n values uniform in [-amp, amp), as the tested dtype holds them.
Vec random_values(std::mt19937& rng, DLDataType dt, size_t n, float amp) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Vec v(n);
  for (float& x : v) x = amp * u(rng);
  return rounded(dt, v);
}

// The bias (Hq, T, S) in `dt` and its gradient (f32, from 0) on `be`, kept in `keep` and put on
// `io`: nothing when `bias` is empty.
void attach_bias(const loom::Backend& be, DLDataType dt, const Case& c, const Vec& bias, Io& io,
                 std::vector<loom::Tensor>& keep) {
  if (bias.empty()) return;
  const std::vector<int64_t> bs{c.Hq, c.T, c.S};
  keep.reserve(2);
  keep.emplace_back(be, dt, bs);
  upload(keep.back(), bias);
  keep.emplace_back(be, loom_f32(), bs);
  keep.back().upload(Vec(bias.size(), 0.0f));
  io.bias = keep[0].get(), io.dbias = keep[1].get();
}

// Case c on attention/reference on backend/cpu in f32: want = out, lse, dq, dk, dv and, with a
// bias, dbias.
void reference(const Case& c, const Vec& q, const Vec& k, const Vec& v, const Vec& dout,
               const Vec& bias, double scale, Vec want[6]) {
  const std::vector<int64_t> qs{c.B, c.T, c.Hq, c.D}, ks{c.B, c.S, c.Hkv, c.D}, ls{c.B, c.Hq, c.T};
  const loom::Backend& be = g_cpu->be;
  loom::Tensor tq(be, loom_f32(), qs), tk(be, loom_f32(), ks), tv(be, loom_f32(), ks),
      tdo(be, loom_f32(), qs);
  tq.upload(q), tk.upload(k), tv.upload(v), tdo.upload(dout);
  loom::Tensor to = poisoned(be, loom_f32(), qs), tl = poisoned(be, loom_f32(), ls),
               tdq = poisoned(be, loom_f32(), qs), tdk = poisoned(be, loom_f32(), ks),
               tdv = poisoned(be, loom_f32(), ks);
  Io io{tq.get(), tk.get(),  tv.get(),  tdo.get(), to.get(),
        tl.get(), tdq.get(), tdk.get(), tdv.get()};
  std::vector<loom::Tensor> keep;
  attach_bias(be, loom_f32(), c, bias, io, keep);
  Calls x(io, c, scale);
  check(g_cpu->host, g_cpu->att.api->forward(g_cpu->att.self, &x.f));
  check(g_cpu->host, g_cpu->att.api->backward(g_cpu->att.self, &x.b));
  want[0] = to.download<float>(), want[1] = tl.download<float>();
  want[2] = tdq.download<float>(), want[3] = tdk.download<float>(), want[4] = tdv.download<float>();
  if (!bias.empty()) want[5] = keep[1].download<float>();
}

void run_case(DLDataType dt, const Case& c) {
  // attention/reference computes a bias gradient in f32 and f64 only (and says so): the
  // harness checking itself runs the bias cases in f32.
  if (c.bias && under_test().second == "reference" && !loom_dtype_eq(dt, loom_f32())) return;
  const std::vector<int64_t> qs{c.B, c.T, c.Hq, c.D}, ks{c.B, c.S, c.Hkv, c.D}, ls{c.B, c.Hq, c.T};
  const size_t nq = c.B * c.T * c.Hq * c.D, nk = c.B * c.S * c.Hkv * c.D;
  std::mt19937 rng(
      static_cast<unsigned>(c.T * 131 + c.S * 7 + c.D + c.causal + c.window + c.docs + c.bias));
  auto rnd = [&](size_t n, float amp) { return random_values(rng, dt, n, amp); };
  // q scaled up so the softmax is far from uniform (a flat one hides indexing bugs).
  const Vec q = rnd(nq, 3.0f), k = rnd(nk, 1.0f), v = rnd(nk, 1.0f), dout = rnd(nq, 1.0f);
  const double scale = 1.0 / std::sqrt(double(c.D));
  // The bias (Hq, T, S), of the order of the scaled scores; its gradient accumulates from 0.
  const Vec bias = c.bias ? rnd(size_t(c.Hq * c.T * c.S), 2.0f) : Vec{};

  Vec want[6];  // out, lse, dq, dk, dv, dbias
  reference(c, q, k, v, dout, bias, scale, want);
  Vec got[6];
  {
    const loom::Backend& be = g_dev->be;
    loom::Tensor tq(be, dt, qs), tk(be, dt, ks), tv(be, dt, ks), tdo(be, dt, qs);
    upload(tq, q), upload(tk, k), upload(tv, v), upload(tdo, dout);
    loom::Tensor to = poisoned(be, dt, qs), tl = poisoned(be, loom_f32(), ls),
                 tdq = poisoned(be, dt, qs), tdk = poisoned(be, dt, ks), tdv = poisoned(be, dt, ks);
    Io io{tq.get(), tk.get(),  tv.get(),  tdo.get(), to.get(),
          tl.get(), tdq.get(), tdk.get(), tdv.get()};
    std::vector<loom::Tensor> keep;
    attach_bias(be, dt, c, bias, io, keep);
    Calls x(io, c, scale);
    if (refused(g_dev->att.api->forward(g_dev->att.self, &x.f), c)) return;
    if (refused(g_dev->att.api->backward(g_dev->att.self, &x.b), c)) return;
    be.api()->synchronize(be.self());
    got[0] = download(to), got[1] = tl.download<float>();
    got[2] = download(tdq), got[3] = download(tdk), got[4] = download(tdv);
    if (c.bias) got[5] = keep[1].download<float>();
  }
  const double tol = loom_dtype_eq(dt, loom_f32()) ? 1e-4 : 2e-2;
  const char* names[6] = {"out", "lse", "dq", "dk", "dv", "dbias"};
  for (int i = 0; i < (c.bias ? 6 : 5); ++i) expect_close(got[i], want[i], tol, names[i]);
  ++g_compared;
}

const Case kCases[] = {
    // B, T, S, Hq, Hkv, D, causal
    {1, 64, 64, 2, 2, 64, false},   // one full tile
    {2, 77, 77, 2, 2, 64, true},    // odd length: partial tiles, causal diagonal
    {1, 50, 131, 4, 2, 128, true},  // T < S (last T of S), GQA 2:1, D 128
    {1, 33, 97, 4, 1, 128, false},  // MQA, non-causal T < S
    {2, 129, 129, 3, 1, 64, true},  // GQA 3:1, three query tiles
    {1, 1, 45, 2, 1, 128, true},    // one query (generation)
    // Sliding windows: shorter than a tile, across tiles, and T < S with GQA.
    {2, 77, 77, 2, 2, 64, true, 5},
    {2, 129, 129, 3, 1, 64, true, 40},
    {1, 50, 131, 4, 2, 128, true, 70},
    {1, 1, 45, 2, 1, 128, true, 16},  // one query sees its last 16 keys
    // Packed documents (loom.attention-seqlens/1): of 30 in rows of 77, of 50 in rows of 129.
    {2, 77, 77, 2, 2, 64, true, 0, 30},
    {2, 129, 129, 4, 2, 128, true, 0, 50},
    // A score bias (loom.attention-bias/1, T5's relative position bias): T5's encoder (not
    // causal), causal with GQA over three query tiles, and packed documents, each of which
    // reads the bias's top-left corner (its gradient summed over the documents and rows).
    {2, 77, 77, 2, 2, 64, false, 0, 0, true},
    {2, 129, 129, 4, 2, 128, true, 0, 0, true},
    {2, 77, 77, 2, 2, 64, true, 0, 30, true},
};

void run_all(DLDataType dt, const char* name) {
  g_compared = g_refused = 0;
  for (const Case& c : kCases) {
    INFO(name << " B=" << c.B << " T=" << c.T << " S=" << c.S << " Hq=" << c.Hq << " Hkv=" << c.Hkv
              << " D=" << c.D << " causal=" << c.causal << " window=" << c.window
              << " docs=" << c.docs << " bias=" << c.bias);
    run_case(dt, c);
  }
  MESSAGE(std::string(name) << ": " << g_compared << " cases compared, " << g_refused
                            << " refused by name");
  // Only a dtype a plugin refuses whole (cudnn: f32) may compare nothing; any other must
  // compare at least the two plain MHA cases, so a plugin that fails every case cannot pass
  // by refusing them.
  const bool dtype_refused = under_test().second == "cudnn" && loom_dtype_eq(dt, loom_f32());
  if (!dtype_refused) CHECK(g_compared >= 2);
}

TEST_CASE("f32 matches the reference") { run_all(loom_f32(), "f32"); }
TEST_CASE("bf16 matches the reference") { run_all(loom_bf16(), "bf16"); }
TEST_CASE("f16 matches the reference") { run_all(loom_f16(), "f16"); }

// Rows [s0, s1) of each batch item of x (B, S, row) as a (B, s1 - s0, row) block.
Vec rows_of(const Vec& x, int64_t B, int64_t S, int64_t row, int64_t s0, int64_t s1) {
  Vec out;
  for (int64_t b = 0; b < B; ++b)
    out.insert(out.end(), x.begin() + (b * S + s0) * row, x.begin() + (b * S + s1) * row);
  return out;
}

// loom.attention-partial/1, ring context parallelism's way: the keys split in two calls, each
// a forward of its own (out, lse), `merge` folding the second into the first, then each
// call's backward with the merged out and lse (the extension on its chain): the merged out and
// lse, the sum of the two dq and the two halves of dk and dv equal one call over all the keys.
// Runs for every plugin that lists the extension (attention/reference checks the harness).
void run_partial(DLDataType dt) {
  const int64_t B = 2, T = 45, S = 77, S1 = 30, Hq = 4, Hkv = 2, D = 64;
  const int64_t qrow = Hq * D, krow = Hkv * D;
  std::mt19937 rng(4242);
  auto rnd = [&](int64_t n, float amp) { return random_values(rng, dt, size_t(n), amp); };
  const Vec q = rnd(B * T * qrow, 3.0f), k = rnd(B * S * krow, 1.0f), v = rnd(B * S * krow, 1.0f),
            dout = rnd(B * T * qrow, 1.0f);
  const double scale = 1.0 / std::sqrt(double(D));
  const std::vector<int64_t> qs{B, T, Hq, D}, ls{B, Hq, T};
  Vec want[6];  // one call over all keys, on the cpu in f32
  reference(Case{B, T, S, Hq, Hkv, D, false}, q, k, v, dout, Vec{}, scale, want);
  const loom::Backend& be = g_dev->be;
  const loom_attention_api* api = g_dev->att.api;
  REQUIRE(api->struct_size >= LOOM_ATTENTION_API_SIZE_V2_7);
  REQUIRE((api->merge != nullptr));
  loom::Tensor tq(be, dt, qs), tdo(be, dt, qs);
  upload(tq, q), upload(tdo, dout);
  struct Half {
    loom::Tensor k, v, out, lse, dq, dk, dv;
  };
  std::vector<Half> h;
  for (auto [s0, s1] : {std::pair<int64_t, int64_t>{0, S1}, {S1, S}}) {
    const std::vector<int64_t> ks{B, s1 - s0, Hkv, D};
    h.push_back({loom::Tensor(be, dt, ks), loom::Tensor(be, dt, ks), poisoned(be, dt, qs),
                 poisoned(be, loom_f32(), ls), poisoned(be, dt, qs), poisoned(be, dt, ks),
                 poisoned(be, dt, ks)});
    upload(h.back().k, rows_of(k, B, S, krow, s0, s1));
    upload(h.back().v, rows_of(v, B, S, krow, s0, s1));
  }
  for (Half& x : h) {
    loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2,
                              tq.get(),
                              x.k.get(),
                              x.v.get(),
                              x.out.get(),
                              x.lse.get(),
                              scale,
                              0,
                              nullptr};
    check(g_dev->host, api->forward(g_dev->att.self, &f));
  }
  loom_attention_merge_args m{LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7,
                              h[0].out.get(),
                              h[0].lse.get(),
                              h[1].out.get(),
                              h[1].lse.get(),
                              0,
                              nullptr};
  check(g_dev->host, api->merge(g_dev->att.self, &m));
  loom_attention_partial partial{
      {sizeof(loom_attention_partial), LOOM_EXT_ATTENTION_PARTIAL, LOOM_EXT_REQUIRED, nullptr}};
  for (Half& x : h) {
    loom_attention_bwd_args b{LOOM_ATTENTION_BWD_ARGS_SIZE_V2,
                              tdo.get(),
                              tq.get(),
                              x.k.get(),
                              x.v.get(),
                              h[0].out.get(),
                              h[0].lse.get(),
                              x.dq.get(),
                              x.dk.get(),
                              x.dv.get(),
                              scale,
                              0,
                              &partial.base};
    check(g_dev->host, api->backward(g_dev->att.self, &b));
  }
  be.api()->synchronize(be.self());
  Vec dq = download(h[0].dq);
  const Vec dq1 = download(h[1].dq);
  for (size_t i = 0; i < dq.size(); ++i) dq[i] += dq1[i];
  Vec dk, dv;  // the halves back in (B, S, Hkv, D) order
  const Vec dk0 = download(h[0].dk), dk1 = download(h[1].dk), dv0 = download(h[0].dv),
            dv1 = download(h[1].dv);
  for (int64_t b = 0; b < B; ++b) {
    auto take = [&](Vec& into, const Vec& from, int64_t rows) {
      into.insert(into.end(), from.begin() + b * rows * krow, from.begin() + (b + 1) * rows * krow);
    };
    take(dk, dk0, S1), take(dk, dk1, S - S1), take(dv, dv0, S1), take(dv, dv1, S - S1);
  }
  const double tol = loom_dtype_eq(dt, loom_f32()) ? 1e-4 : 2e-2;
  expect_close(download(h[0].out), want[0], tol, "merged out");
  expect_close(h[0].lse.download<float>(), want[1], tol, "merged lse");
  expect_close(dq, want[2], tol, "dq summed");
  expect_close(dk, want[3], tol, "dk");
  expect_close(dv, want[4], tol, "dv");
}

// (Asked at run time, not in a skip decorator: main() first checks that the plugin exists.)
TEST_CASE("partial attention: two halves of the keys, merged, equal one call") {
  if (!lists(LOOM_EXT_ATTENTION_PARTIAL)) {
    MESSAGE("attention/" << under_test().second << " does not list " LOOM_EXT_ATTENTION_PARTIAL);
    return;
  }
  run_partial(loom_f32());
  if (under_test().second != "reference") run_partial(loom_bf16());
}

TEST_CASE("flash-cuda refuses unsupported head dims" *
          doctest::skip(under_test().second != "flash-cuda")) {
  const loom::Backend& be = g_dev->be;
  loom::Tensor q(be, loom_bf16(), {1, 8, 1, 96}), out(be, loom_bf16(), {1, 8, 1, 96});
  loom_attention_fwd_args f{LOOM_ATTENTION_FWD_ARGS_SIZE_V2,
                            q.get(),
                            q.get(),
                            q.get(),
                            out.get(),
                            nullptr,
                            0.1,
                            0,
                            nullptr};
  CHECK_THROWS_WITH_AS(check(g_dev->host, g_dev->att.api->forward(g_dev->att.self, &f)),
                       doctest::Contains("head dim 96"), std::runtime_error);
}

int skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  return 77;
}

}  // namespace

int main(int argc, char** argv) {
  const auto [backend, attention] = under_test();
  for (const auto& [kind, name] : {std::pair<std::string, std::string>{"backend", "cpu"},
                                   {"attention", "reference"},
                                   {"backend", backend},
                                   {"attention", attention}})
    if (!std::filesystem::exists(loomtest::plugin_path(kind, name)))
      return skip(kind + "/" + name + " was not built (no CUDA toolkit?)");
  g_dev = new Side;  // both sides live to process exit, like the plugins' libraries
  try {
    if (backend == "cpu")
      g_dev->host.load_backend("cpu", {{"measure_gemm", "false"}});
    else
      g_dev->host.load_backend(backend);
    g_dev->be = loom::Backend(g_dev->host.host());
    // LOOM_ATTN_TEST_SET=KEY=VALUE: one key of the plugin under test (a deterministic graph)
    std::map<std::string, std::string> keys;
    if (const char* kv = std::getenv("LOOM_ATTN_TEST_SET"); kv && std::strchr(kv, '='))
      keys[std::string(kv, std::strchr(kv, '='))] = std::strchr(kv, '=') + 1;
    g_dev->att = g_dev->host.load_attention(attention, keys);
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("no CUDA device") != std::string::npos) return skip(e.what());
    std::fprintf(stderr, "%s/%s failed to start: %s\n", backend.c_str(), attention.c_str(),
                 e.what());
    return 1;
  }
  g_cpu = new Side;
  g_cpu->host.load_backend("cpu", {{"measure_gemm", "false"}});
  g_cpu->be = loom::Backend(g_cpu->host.host());
  g_cpu->att = g_cpu->host.load_attention("reference");
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
