// optimizer/adamw, optimizer/sgd and optimizer/lion against a float64 host implementation of
// their update rules (Lion's as lion-pytorch writes it), on
// parameters that share one flat buffer (the layout model/gpt hands out: adjacent views are
// stepped together) plus one separate tensor, with weight decay only where flagged.
#include <cmath>
#include <random>

#include "model_test_util.hpp"

using namespace modeltest;

namespace {

// Three parameters: views [0,6) (decay) and [6,10) (no decay) of one flat buffer, and a
// separate (3) tensor (decay). Gradients laid out the same way.
struct Params {
  DevTensor flat_p, flat_g, sep_p, sep_g;
  int64_t s0[2] = {2, 3}, s1[1] = {4};
  DLTensor p0, p1, g0, g1;
  std::vector<loom_opt_param> list;
  Params(Host& h)
      : flat_p(h.be, loom_f64(), {10}),
        flat_g(h.be, loom_f64(), {10}),
        sep_p(h.be, loom_f64(), {3}),
        sep_g(h.be, loom_f64(), {3}) {
    auto view = [](DLTensor* base, int64_t* shape, int nd, int64_t off) {
      DLTensor t = *base;
      t.ndim = nd;
      t.shape = shape;
      t.strides = nullptr;
      t.byte_offset = base->byte_offset + off * 8;
      return t;
    };
    p0 = view(flat_p, s0, 2, 0);
    p1 = view(flat_p, s1, 1, 6);
    g0 = view(flat_g, s0, 2, 0);
    g1 = view(flat_g, s1, 1, 6);
    list.push_back({LOOM_OPT_PARAM_SIZE_V2, "a.weight", &p0, &g0, 1});
    list.push_back({LOOM_OPT_PARAM_SIZE_V2, "a.bias", &p1, &g1, 0});
    list.push_back({LOOM_OPT_PARAM_SIZE_V2, "b.weight", sep_p.get(), sep_g.get(), 1});
  }
  // The 13 values of the three parameters (a's 10 in flat_p, b's 3 in sep_p), and likewise
  // of their gradients.
  void set_params(const std::vector<double>& v) {
    flat_p.set_host({v.begin(), v.begin() + 10});
    sep_p.set_host({v.begin() + 10, v.end()});
  }
  void set_grads(const std::vector<double>& v) {
    flat_g.set_host({v.begin(), v.begin() + 10});
    sep_g.set_host({v.begin() + 10, v.end()});
  }
  std::vector<double> params() const {
    auto got = flat_p.get_host(), sep = sep_p.get_host();
    got.insert(got.end(), sep.begin(), sep.end());
    return got;
  }
};

std::vector<double> randv(int n, std::mt19937& rng) {
  std::normal_distribution<double> nd;
  std::vector<double> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

loom_optimizer* make(Host& h, const std::string& name, const Overrides& o, Params& p,
                     const loom_optimizer_api** api, loom_config& cfg) {
  auto* d = loomtest::load_descriptor("optimizer", name);
  *api = static_cast<const loom_optimizer_api*>(d->api);
  cfg = loomtest::TestHost::config(d, o);
  loom_optimizer* opt = nullptr;
  const loom_opt_create_args args{LOOM_OPT_CREATE_ARGS_SIZE_V2, p.list.data(), p.list.size(),
                                  nullptr};
  h.th.check((*api)->create(h.th.host(), &cfg, &args, &opt));
  return opt;
}

}  // namespace

TEST_CASE("optimizer/adamw = host AdamW; decay only on flagged params; state names") {
  Host h;
  Params p(h);
  std::mt19937 rng(5);
  std::vector<double> P = randv(13, rng);  // flat 10 then separate 3
  p.set_params(P);
  const loom_optimizer_api* api;
  loom_config cfg;
  loom_optimizer* opt = make(h, "adamw", {{"weight_decay", "0.3"}}, p, &api, cfg);
  const double lr = 0.05, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.3, gs = 0.5;
  const int wdflag[13] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
  std::vector<double> m(13, 0.0), v(13, 0.0);
  for (int step = 1; step <= 3; ++step) {
    std::vector<double> G = randv(13, rng);
    p.set_grads(G);
    loom_opt_step_args a{LOOM_OPT_STEP_ARGS_SIZE_V2, lr, step, gs, nullptr};
    h.th.check(api->step(opt, &a));
    for (int i = 0; i < 13; ++i) {
      const double g = gs * G[i];
      P[i] *= 1 - lr * (wdflag[i] ? wd : 0.0);
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mh = m[i] / (1 - std::pow(b1, step)), vh = v[i] / (1 - std::pow(b2, step));
      P[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  const auto got = p.params();
  for (int i = 0; i < 13; ++i) CHECK(got[i] == doctest::Approx(P[i]).epsilon(1e-12));

  REQUIRE(api->num_state(opt) == 6);
  std::map<std::string, std::vector<double>> state;
  for (size_t i = 0; i < 6; ++i) {
    const char* name = nullptr;
    DLTensor* t = nullptr;
    h.th.check(api->get_state(opt, i, &name, &t));
    state[name] = download(h.be, t);
  }
  REQUIRE(state.count("exp_avg.a.weight"));
  REQUIRE(state.count("exp_avg_sq.a.bias"));
  REQUIRE(state.count("exp_avg.b.weight"));
  CHECK(state["exp_avg.a.bias"].size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(state["exp_avg.a.bias"][i] == doctest::Approx(m[6 + i]));
  for (int i = 0; i < 3; ++i) CHECK(state["exp_avg_sq.b.weight"][i] == doctest::Approx(v[10 + i]));
  api->destroy(opt);
}

TEST_CASE("optimizer/sgd = host SGD with and without momentum") {
  for (double mom : {0.0, 0.8}) {
    Host h;
    Params p(h);
    std::mt19937 rng(9);
    std::vector<double> P = randv(13, rng);
    p.set_params(P);
    const loom_optimizer_api* api;
    loom_config cfg;
    loom_optimizer* opt =
        make(h, "sgd", {{"momentum", std::to_string(mom)}, {"weight_decay", "0.1"}}, p, &api, cfg);
    CHECK(api->num_state(opt) == (mom == 0.0 ? 0u : 3u));
    const int wdflag[13] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
    std::vector<double> buf(13, 0.0);
    for (int step = 1; step <= 3; ++step) {
      std::vector<double> G = randv(13, rng);
      p.set_grads(G);
      loom_opt_step_args a{LOOM_OPT_STEP_ARGS_SIZE_V2, 0.1, step, 2.0, nullptr};
      h.th.check(api->step(opt, &a));
      for (int i = 0; i < 13; ++i) {
        buf[i] = mom * buf[i] + 2.0 * G[i] + (wdflag[i] ? 0.1 : 0.0) * P[i];  // torch.optim.SGD
        P[i] -= 0.1 * buf[i];
      }
    }
    const auto got = p.params();
    for (int i = 0; i < 13; ++i) CHECK(got[i] == doctest::Approx(P[i]).epsilon(1e-12));
    if (mom != 0.0) {
      const char* name = nullptr;
      DLTensor* t = nullptr;
      h.th.check(api->get_state(opt, 1, &name, &t));
      CHECK(std::string(name) == "momentum.a.bias");
    }
    api->destroy(opt);
  }
}

TEST_CASE("optimizer/lion = host Lion over 3 steps; decay only on flagged params; state") {
  Host h;
  Params p(h);
  std::mt19937 rng(13);
  std::vector<double> P = randv(13, rng);
  p.set_params(P);
  const loom_optimizer_api* api;
  loom_config cfg;
  const double lr = 0.01, b1 = 0.8, b2 = 0.95, wd = 0.5, gs = 0.25;
  loom_optimizer* opt =
      make(h, "lion", {{"beta1", "0.8"}, {"beta2", "0.95"}, {"weight_decay", "0.5"}}, p, &api, cfg);
  REQUIRE(api->num_state(opt) == 3);  // exp_avg only
  const int wdflag[13] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
  std::vector<double> m(13, 0.0);
  for (int step = 1; step <= 3; ++step) {
    std::vector<double> G = randv(13, rng);
    if (step == 1) G[4] = 0.0;  // sign(0) = 0: a zero gradient on a zero momentum moves nothing
    p.set_grads(G);
    loom_opt_step_args a{LOOM_OPT_STEP_ARGS_SIZE_V2, lr, step, gs, nullptr};
    h.th.check(api->step(opt, &a));
    for (int i = 0; i < 13; ++i) {
      const double g = gs * G[i];
      const double c = b1 * m[i] + (1 - b1) * g;
      P[i] = P[i] * (1 - lr * (wdflag[i] ? wd : 0.0)) - lr * ((c > 0) - (c < 0));
      m[i] = b2 * m[i] + (1 - b2) * g;
    }
  }
  const auto got = p.params();
  for (int i = 0; i < 13; ++i) CHECK(got[i] == doctest::Approx(P[i]).epsilon(1e-14));
  const char* name = nullptr;
  DLTensor* t = nullptr;
  h.th.check(api->get_state(opt, 2, &name, &t));
  CHECK(std::string(name) == "exp_avg.b.weight");
  auto state = download(h.be, t);
  for (int i = 0; i < 3; ++i) CHECK(state[i] == doctest::Approx(m[10 + i]).epsilon(1e-14));
  api->destroy(opt);
}

TEST_CASE("optimizers step f32 main parameters (f64 on the CPU): bf16 is refused by name") {
  // Mixed precision keeps f32 main parameters for the optimizer (Megatron's); a bf16 tensor
  // handed to one is a host bug, refused at create rather than stepped in the wrong dtype.
  Host h;
  DevTensor p(h.be, loom_bf16(), {8}), g(h.be, loom_bf16(), {8});
  const loom_opt_param prm{LOOM_OPT_PARAM_SIZE_V2, "w", p.get(), g.get(), 1};
  for (const char* name : {"adamw", "sgd", "lion"}) {
    CAPTURE(name);
    auto* d = loomtest::load_descriptor("optimizer", name);
    auto* api = static_cast<const loom_optimizer_api*>(d->api);
    loom_config cfg = loomtest::TestHost::config(d);
    loom_optimizer* opt = nullptr;
    const loom_opt_create_args args{LOOM_OPT_CREATE_ARGS_SIZE_V2, &prm, 1, nullptr};
    loom_error* e = api->create(h.th.host(), &cfg, &args, &opt);
    REQUIRE(e != nullptr);
    CHECK(e->code == LOOM_ERR_UNIMPLEMENTED);
    CHECK(std::string(e->message) ==
          std::string("optimizer/") + name + ": parameter w must be f32 (main parameters) or f64");
    delete e;
  }
}

namespace {
// One optimizer's parameters and state after 3 steps on fixed gradients, each step's
// multiplier given either as grad_scale or as loom.opt-clip/1 over `squares` (then
// grad_scale is 1), from the same start; the learning rate (lr0 / step) and the step count
// in the args, or with `schedule_ext` in loom.opt-schedule/1's values (the args then carry
// NaN and 0, which the update must not read).
std::vector<double> three_steps(Host& h, const char* name, const Overrides& o,
                                const std::vector<double>& squares, double loss_scale,
                                double max_norm, double grad_scale, bool clip_ext,
                                bool schedule_ext = false, double lr0 = 0.05) {
  Params p(h);
  std::mt19937 rng(11);
  p.set_params(randv(13, rng));
  const loom_optimizer_api* api;
  loom_config cfg;
  loom_optimizer* opt = make(h, name, o, p, &api, cfg);
  DevTensor sq(h.be, loom_f64(), {(int64_t)squares.size()});
  sq.set_host(squares);
  const loom_opt_clip clip{{sizeof(loom_opt_clip), LOOM_EXT_OPT_CLIP, LOOM_EXT_REQUIRED, nullptr},
                           sq.get(),
                           loss_scale,
                           max_norm};
  DevTensor values(h.be, loom_f64(), {2});
  const loom_opt_schedule schedule{{sizeof(loom_opt_schedule), LOOM_EXT_OPT_SCHEDULE,
                                    LOOM_EXT_REQUIRED, clip_ext ? &clip.base : nullptr},
                                   values.get()};
  for (int step = 1; step <= 3; ++step) {
    p.set_grads(randv(13, rng));
    const double lr = lr0 / step;
    loom_opt_step_args a{LOOM_OPT_STEP_ARGS_SIZE_V2, lr, step, clip_ext ? 1.0 : grad_scale,
                         clip_ext ? &clip.base : nullptr};
    if (schedule_ext) {
      values.set_host({lr, (double)step});
      a.lr = std::nan(""), a.step = 0, a.ext = &schedule.base;
    }
    h.th.check(api->step(opt, &a));
  }
  std::vector<double> got = p.params();
  for (size_t i = 0; i < api->num_state(opt); ++i) {
    const char* n = nullptr;
    DLTensor* t = nullptr;
    h.th.check(api->get_state(opt, i, &n, &t));
    const auto s = download(h.be, t);
    got.insert(got.end(), s.begin(), s.end());
  }
  api->destroy(opt);
  return got;
}
}  // namespace

TEST_CASE("loom.opt-clip/1: the clip decided from the squares = the host's grad_scale, bitwise") {
  Host h;
  const std::vector<std::pair<const char*, Overrides>> opts = {
      {"adamw", {{"weight_decay", "0.3"}}}, {"lion", {}}, {"sgd", {{"momentum", "0.9"}}}};
  for (const auto& [name, o] : opts) {
    CAPTURE(name);
    CHECK(loomtest::lists_capability("optimizer", name, LOOM_EXT_OPT_CLIP));
    // Squared norm 9 + 16 of gradients scaled by 8: norm 5 / 8 unscaled.
    const std::vector<double> squares = {9.0, 16.0};
    const double ls = 8.0, norm = std::sqrt(25.0) / ls;
    for (double max_norm : {0.0, 0.1, 10.0}) {  // off, clipping, above the norm
      CAPTURE(max_norm);
      const double gs =
          max_norm > 0 && norm > max_norm ? (1 / ls) * (max_norm / (norm + 1e-6)) : 1 / ls;
      const auto host = three_steps(h, name, o, squares, ls, max_norm, gs, false);
      const auto device = three_steps(h, name, o, squares, ls, max_norm, gs, true);
      CHECK(host == device);
    }
    // A norm that is not finite: nothing changes, parameters or state (zero at the start).
    for (double bad : {std::nan(""), HUGE_VAL}) {
      const auto none = three_steps(h, name, o, {bad, 1.0}, ls, 1.0, 0.0, true);
      std::mt19937 rng(11);
      std::vector<double> want = randv(13, rng);
      want.resize(none.size(), 0.0);
      CHECK(none == want);
    }
  }
}

namespace {
// optimizer/adamw on three zero parameters, for the refusals of a step's extensions.
struct RefusingAdamw {
  Host h;
  Params p{h};
  const loom_optimizer_api* api = nullptr;
  loom_config cfg{};
  loom_optimizer* opt = make(h, "adamw", {}, p, &api, cfg);
  ~RefusingAdamw() { api->destroy(opt); }
  // The message of a step with `ext` on its chain, which must be refused.
  std::string refusal(const loom_ext* ext) {
    loom_opt_step_args a{LOOM_OPT_STEP_ARGS_SIZE_V2, 0.05, 1, 1.0, ext};
    loom_error* e = api->step(opt, &a);
    REQUIRE(e != nullptr);
    const std::string why = e->message;
    delete e;
    return why;
  }
};
}  // namespace

TEST_CASE("loom.opt-clip/1: squares that are not a (k) f64 tensor are refused") {
  RefusingAdamw t;
  DevTensor sq(t.h.be, loom_f32(), {2});
  const loom_opt_clip clip{
      {sizeof(loom_opt_clip), LOOM_EXT_OPT_CLIP, LOOM_EXT_REQUIRED, nullptr}, sq.get(), 1.0, 1.0};
  CHECK(t.refusal(&clip.base) ==
        "optimizer/adamw: loom.opt-clip/1's squares must be a (k) f64 tensor on the "
        "parameters' device");
}

TEST_CASE("loom.opt-schedule/1: lr and step read from the values = from the args, bitwise") {
  Host h;
  const std::vector<std::pair<const char*, Overrides>> opts = {
      {"adamw", {{"weight_decay", "0.3"}}},
      {"lion", {{"weight_decay", "0.5"}}},
      {"sgd", {{"momentum", "0.9"}, {"weight_decay", "0.01"}}},
      {"sgd", {{"weight_decay", "0.01"}}}};
  for (const auto& [name, o] : opts) {
    CAPTURE(name);
    CHECK(loomtest::lists_capability("optimizer", name, LOOM_EXT_OPT_SCHEDULE));
    const std::vector<double> squares = {9.0, 16.0};
    for (bool clip : {false, true}) {  // alone, and after loom.opt-clip/1 on the chain
      CAPTURE(clip);
      const auto args = three_steps(h, name, o, squares, 8.0, 0.1, 0.25, clip);
      const auto values = three_steps(h, name, o, squares, 8.0, 0.1, 0.25, clip, true);
      CHECK(args == values);
      // and the values are what the update read: another lr there gives other numbers
      CHECK(args != three_steps(h, name, o, squares, 8.0, 0.1, 0.25, clip, true, 0.06));
    }
  }
}

TEST_CASE("loom.opt-schedule/1: values that are not a (2) f64 tensor, or not a step, are refused") {
  RefusingAdamw t;
  auto refusal = [&](const DevTensor& values) {
    const loom_opt_schedule sch{
        {sizeof(loom_opt_schedule), LOOM_EXT_OPT_SCHEDULE, LOOM_EXT_REQUIRED, nullptr},
        values.get()};
    return t.refusal(&sch.base);
  };
  const std::string shape =
      "optimizer/adamw: loom.opt-schedule/1's values must be a (2) f64 tensor on the "
      "parameters' device";
  CHECK(refusal(DevTensor(t.h.be, loom_f32(), {2})) == shape);
  CHECK(refusal(DevTensor(t.h.be, loom_f64(), {3})) == shape);
  DevTensor values(t.h.be, loom_f64(), {2});
  values.set_host({0.05, 2.5});
  CHECK(refusal(values) == "optimizer/adamw: step must be a whole number >= 1 (1-based), got 2.5");
  values.set_host({0.05, 0.0});
  CHECK(refusal(values) == "optimizer/adamw: step must be a whole number >= 1 (1-based), got 0");
  values.set_host({HUGE_VAL, 1.0});
  CHECK(refusal(values) == "optimizer/adamw: lr must be finite");
  CHECK(t.p.params() == std::vector<double>(13, 0.0));  // no refused step touched them
}
