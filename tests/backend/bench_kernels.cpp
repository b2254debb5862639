// loom-bench-kernels: time backend/cpu's non-GEMM kernels at the shapes of one GPT-2 124M
// training step (micro-batch 4 x sequence 64 = 256 tokens, C = 768, 12 layers, 12 heads,
// vocabulary 50257), to see what the elementwise passes cost next to the GEMMs.
//
//   loom-bench-kernels [--threads T] [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace {

double median_seconds(const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string threads = "0";
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: loom-bench-kernels [--threads T] [--reps R]\n");
      return 2;
    }
  }
  try {
    loomtest::TestHost host;
    host.load_backend("cpu", {{"threads", threads}, {"measure_gemm", "false"}});
    loom::Backend be(host.host());
    loom_backend_info info{};
    info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
    loom::check(host.host(), be.api()->get_info(be.self(), &info));
    std::printf("device: %s\n", info.device_name);

    const int64_t N = 256, C = 768, H = 12, T = 64, Bsz = 4, V = 50257, L = 12;
    const int64_t P = 124439808;  // GPT-2 124M parameter count
    auto f32 = loom_f32();
    loom::Tensor x(be, f32, {N, C}), y(be, f32, {N, C}), w(be, f32, {C}), b(be, f32, {C});
    loom::Tensor mean(be, f32, {N}), rstd(be, f32, {N}), dw(be, f32, {C}), db(be, f32, {C});
    loom::Tensor h(be, f32, {N, 4 * C}), dh(be, f32, {N, 4 * C}), b4(be, f32, {4 * C});
    loom::Tensor att(be, f32, {Bsz * H, T, T}), lse(be, f32, {Bsz * H, T});
    loom::Tensor logits(be, f32, {N, V}), losses(be, f32, {N}), tg(be, loom_i32(), {N});
    loom::Tensor q(be, f32, {Bsz, T, H, C / H});
    loom::Tensor wte(be, f32, {V, C}), ids(be, loom_i32(), {N});
    loom::Tensor grad(be, f32, {P});  // (the AdamW step is optimizer/adamw's: loom-bench-gpt)
    be.call(&loom_ops::fill, w.get(), 1.0);
    be.call(&loom_ops::fill, x.get(), 0.5);
    be.call(&loom_ops::fill, h.get(), 0.3);
    be.call(&loom_ops::fill, logits.get(), 0.1);
    be.call(&loom_ops::fill, grad.get(), 1e-3);

    struct Row {
      const char* name;
      int count;  // calls per training step
      std::function<void()> fn;
    };
    double ss = 0;
    std::vector<Row> rows = {
        {"layernorm_forward (256x768)", 2 * (int)L + 1,
         [&] {
           loom::layernorm_forward(be, y.get(), mean.get(), rstd.get(), x.get(), w.get(), b.get(),
                                   1e-5);
         }},
        {"layernorm_backward", 2 * (int)L + 1,
         [&] {
           loom::layernorm_backward(be, y.get(), dw.get(), db.get(), x.get(), x.get(), w.get(),
                                    mean.get(), rstd.get());
         }},
        {"add residual (256x768)", 2 * (int)L,
         [&] { be.call(&loom_ops::add, y.get(), x.get(), y.get()); }},
        {"bias_add (256x3072)", (int)L, [&] { loom::bias_add(be, h.get(), b4.get()); }},
        {"bias_backward (256x768)", 4 * (int)L,
         [&] { loom::bias_backward(be, dw.get(), x.get()); }},
        {"gelu_forward (256x3072)", (int)L,
         [&] { loom::act_forward(be, LOOM_ACT_GELU_TANH, dh.get(), h.get()); }},
        {"gelu_backward (256x3072)", (int)L,
         [&] { loom::act_backward(be, LOOM_ACT_GELU_TANH, dh.get(), h.get(), dh.get()); }},
        {"softmax_forward (48x64x64 causal)", (int)L,
         [&] { loom::softmax_forward(be, att.get(), lse.get(), 0.125, 1); }},
        {"softmax_backward (48x64x64)", (int)L,
         [&] { loom::softmax_backward(be, att.get(), att.get(), att.get(), 0.125); }},
        {"rope_forward (4x64x12x64)", 2 * (int)L,
         [&] { loom::rope_forward(be, q.get(), int64_t{0}, 10000.0); }},
        {"embedding_forward (256 of 50257x768)", 1,
         [&] { loom::embedding_forward(be, y.get(), ids.get(), wte.get(), 0); }},
        {"embedding_backward", 1,
         [&] { loom::embedding_backward(be, wte.get(), ids.get(), y.get()); }},
        {"softmax_cross_entropy (256x50257, in place)", 1,
         [&] {
           be.call(&loom_ops::fill, logits.get(), 0.1);
           loom::softmax_cross_entropy(be, losses.get(), logits.get(), logits.get(), tg.get(),
                                       1.0 / N);
         }},
        {"fill (zero 124M grads)", 1, [&] { be.call(&loom_ops::fill, grad.get(), 0.0); }},
        {"sum_squares (124M grads)", 1, [&] { ss = loom::sum_squares(be, grad.get()); }},
    };
    double total = 0;
    for (const Row& r : rows) {
      double s = median_seconds(r.fn, reps);
      std::printf("  %-44s %9.3f ms  x%-2d = %8.2f ms\n", r.name, s * 1e3, r.count,
                  s * r.count * 1e3);
      total += s * r.count;
    }
    std::printf("non-GEMM kernels of one GPT-2 124M step (B=4, T=64): %.0f ms\n", total * 1e3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench-kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
