// loom-bench-gpt: GPT-2 124M training-step throughput on backend/cpu through the plugin ABI.
// micro-batch 4 x seq 64, f32, AdamW, random tokens; 2 warm-up + 5 timed steps of
// zero_grad + forward and backward (one stage) + optimizer step. Prints tokens/s and model GFLOP/s
// (flops_per_token x tokens/s).
//
//   loom-bench-gpt [--batch=4] [--seq=64] [--warmup=2] [--steps=5] [--threads=0]
//                  [--n_layer=12] [--n_embd=768] [--n_head=12] [--vocab=50304] [--profile=1]
//                  [--norm_residual=1]
//
// --profile=1: the engine's step profile (train.timers, step_timer.hpp) over the timed steps:
// time per kind of call and per layer beside each kind's floor, printed after the last step.
// The attention plugin is handed out without the engine's gate here, so attention/reference
// shows as the GEMMs and softmax it calls.
// --norm_residual=0: backend/cpu without loom.norm-residual/1 (the layer library's separate
// residual adds), to compare the two paths in one build.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "loom/cpp/model_step.hpp"
#include "session/step_timer.hpp"
#include "test_host.hpp"

namespace {

struct Args {
  std::map<std::string, std::string> kv;
  int64_t get(const std::string& k, int64_t def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : std::stoll(it->second);
  }
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) try {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "usage: %s [--key=value ...] (see the source header)\n", argv[0]);
      return 2;
    }
    args.kv[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  const int64_t B = args.get("batch", 4), T = args.get("seq", 64);
  const int64_t warmup = args.get("warmup", 2), steps = args.get("steps", 5);
  const int64_t V = args.get("vocab", 50304);

  loomtest::TestHost host;
  loom_backend_ref be = host.load_backend(
      "cpu", {{"measure_gemm", "false"},
              {"threads", std::to_string(args.get("threads", 0))},
              {"norm_residual", args.get("norm_residual", 1) ? "true" : "false"}});
  // The profile hands the plugins made from here on the timed backend table, as `loom run`.
  using loom::engine::StepTimer;
  std::unique_ptr<StepTimer> timer;
  if (args.get("profile", 0)) {
    timer = std::make_unique<StepTimer>(be, loom_f32());
    host.use_backend(timer->timed_backend());
  }
  host.load_attention("reference");
  loom_backend_info info{};
  info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
  host.check(be.api->get_info(be.self, &info));

  auto* md = loomtest::load_descriptor("model", "gpt");
  auto* mapi = static_cast<const loom_model_api*>(md->api);
  loom_config mcfg =
      loomtest::TestHost::config(md, {{"n_layer", std::to_string(args.get("n_layer", 12))},
                                      {"n_embd", std::to_string(args.get("n_embd", 768))},
                                      {"n_head", std::to_string(args.get("n_head", 12))}});
  loom_model_create_args ca{LOOM_MODEL_CREATE_ARGS_SIZE_V2,
                            V,
                            T,
                            B,
                            loom_f32(),
                            0,
                            1,
                            0,
                            0,
                            0,
                            0,
                            nullptr,
                            nullptr,
                            0,
                            nullptr,
                            nullptr,
                            nullptr,
                            nullptr};
  if (timer) {  // per-layer times: the model announces each layer (residency NOTIFY)
    ca.struct_size = LOOM_MODEL_CREATE_ARGS_SIZE_V2_13;
    ca.recompute_num_layers = 1;  // the recipe's default (no recompute: granularity none)
    ca.residency = LOOM_RESIDENCY_NOTIFY;
    ca.unit_needed = [](void* t, int32_t unit, int32_t) -> loom_error* {
      static_cast<StepTimer*>(t)->set_unit(unit);
      return nullptr;
    };
    ca.residency_user = timer.get();
  }
  loom_model* model = nullptr;
  host.check(mapi->create(host.host(), &mcfg, &ca, &model));
  host.check(mapi->init_params(model, 1337));

  std::vector<loom_model_param> params(mapi->num_params(model));
  std::vector<loom_opt_param> oparams;
  int64_t nparams = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].struct_size = LOOM_MODEL_PARAM_SIZE_V2;
    host.check(mapi->get_param(model, i, &params[i]));
    nparams += loom_tensor_numel(params[i].value);
    oparams.push_back({LOOM_OPT_PARAM_SIZE_V2, params[i].name, params[i].value, params[i].grad,
                       params[i].weight_decay});
  }
  auto* od = loomtest::load_descriptor("optimizer", "adamw");
  auto* oapi = static_cast<const loom_optimizer_api*>(od->api);
  loom_config ocfg = loomtest::TestHost::config(od);
  loom_optimizer* opt = nullptr;
  const loom_opt_create_args oargs{LOOM_OPT_CREATE_ARGS_SIZE_V2, oparams.data(), oparams.size(),
                                   nullptr};
  host.check(oapi->create(host.host(), &ocfg, &oargs, &opt));

  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tokdist(0, (int32_t)(V - 1));
  std::vector<int32_t> tokens(B * T), targets(B * T);
  const double fpt = mapi->flops_per_token(model);
  std::printf("device: %s\nmodel: GPT-2, %lld parameters (vocab %lld), %.3f GFLOP/token\n",
              info.device_name, (long long)nparams, (long long)V, fpt / 1e9);
  std::printf("batch %lld x seq %lld, f32, AdamW, %lld warm-up + %lld timed steps\n", (long long)B,
              (long long)T, (long long)warmup, (long long)steps);

  double t_fb = 0, t_opt = 0, best = 1e30;
  for (int64_t s = 1; s <= warmup + steps; ++s) {
    for (auto& t : tokens) t = tokdist(rng);
    for (auto& t : targets) t = tokdist(rng);
    loom::HostBatch mb(B, T);
    mb.tokens_targets(tokens.data(), targets.data());
    double t0 = now(), loss = 0, n = 0;
    if (timer) timer->begin_step();
    host.check(mapi->zero_grad(model));
    host.check(loom::model_step(mapi, model, mb.get(), 1.0 / (double)(B * T), true, &loss, &n));
    double t1 = now();
    loom_opt_step_args sa{LOOM_OPT_STEP_ARGS_SIZE_V2, 3e-4, s, 1.0, nullptr};
    {
      if (timer) timer->set_unit(-1);
      const StepTimer::Scope timed(loom::engine::TimeKind::optimizer);
      host.check(oapi->step(opt, &sa));
    }
    host.check(be.api->synchronize(be.self));
    double t2 = now();
    if (timer) {
      timer->end_step(t2 - t0);
      if (s == warmup) timer->take();  // the profile covers the timed steps only
    }
    std::printf("step %2lld  loss %.4f  fwd+bwd %.3f s  adamw %.3f s%s\n", (long long)s,
                loss / (double)n, t1 - t0, t2 - t1, s <= warmup ? "  (warm-up)" : "");
    if (s > warmup) {
      t_fb += t1 - t0;
      t_opt += t2 - t1;
      best = std::min(best, t2 - t0);
    }
  }
  const double tokps = (double)(B * T * steps) / (t_fb + t_opt);
  std::printf("tokens/s: %.1f   model GFLOP/s: %.1f   (fwd+bwd %.3f s, adamw %.3f s per step)\n",
              tokps, fpt * tokps / 1e9, t_fb / (double)steps, t_opt / (double)steps);
  // On shared machines one slow step skews the mean; the best step shows the code's speed.
  std::printf("best step: %.3f s = %.1f tokens/s, %.1f GFLOP/s\n", best, (double)(B * T) / best,
              fpt * (double)(B * T) / best / 1e9);
  if (timer) std::printf("%s\n", loom::engine::format_report(timer->take()).c_str());
  oapi->destroy(opt);
  mapi->destroy(model);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "loom-bench-gpt: %s\n", e.what());
  return 1;
}
