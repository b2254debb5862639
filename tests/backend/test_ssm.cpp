// Mamba-2's selective scan (ABI 2.22): forward against a sequential float64 recurrence written
// here (no chunks), in f32 and f64 and for chunk lengths 1, 3, T and more than T, with the
// chunk states it saves; generation (the whole sequence == two pieces with the state
// carried); the backward against central finite differences in f64 for every input; bf16
// against f32; and the refusals of the Mamba-2 ops (shapes, an older backend) by name.
// The convolution and the gated RMSNorm are test_ssm_conv.cpp's.
#include <cstddef>

#include "ops_support.hpp"

using namespace opstest;

namespace {

// B = 2 sequences of T = 11 steps, H = 4 heads of P = 3 channels in G = 2 groups, N = 5.
struct Dims {
  int64_t b = 2, T = 11, H = 4, G = 2, P = 3, N = 5;
  int64_t chunks(int64_t chunk) const { return (T + chunk - 1) / chunk; }
};

struct ScanInputs {
  Vec x, dt, A_log, B, C, D, dt_bias;
};
ScanInputs random_inputs(const Dims& d, uint64_t seed) {
  return {
      random_vec(d.b * d.T * d.H * d.P, seed),     random_vec(d.b * d.T * d.H, seed + 1, -2.0, 1.0),
      random_vec(d.H, seed + 2, -1.0, 1.0),        random_vec(d.b * d.T * d.G * d.N, seed + 3),
      random_vec(d.b * d.T * d.G * d.N, seed + 4), random_vec(d.H, seed + 5),
      random_vec(d.H, seed + 6, -0.5, 0.5)};
}

// y (B,T,H,P) and every state S_t (B,T,H,P,N) of the recurrence, step by step from S_{-1} =
// s0 (B,H,P,N; zeros when NULL); `last` is S_{T-1}.
struct ScanRef {
  Vec y, states, last;
};
ScanRef naive_scan(const ScanInputs& in, const Dims& d, const Vec* s0 = nullptr) {
  const int64_t PN = d.P * d.N;
  ScanRef r{Vec(in.x.size()), Vec(d.b * d.T * d.H * PN), Vec(d.b * d.H * PN)};
  for (int64_t b = 0; b < d.b; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t g = h / (d.H / d.G);
      const double A = -std::exp(in.A_log[h]);
      Vec S(PN, 0.0);
      if (s0) S.assign(s0->begin() + (b * d.H + h) * PN, s0->begin() + (b * d.H + h + 1) * PN);
      for (int64_t t = 0; t < d.T; ++t) {
        const double dtv = std::log1p(std::exp(in.dt[(b * d.T + t) * d.H + h] + in.dt_bias[h]));
        const double a = std::exp(dtv * A);
        const double* x = &in.x[((b * d.T + t) * d.H + h) * d.P];
        const double* Bt = &in.B[((b * d.T + t) * d.G + g) * d.N];
        const double* Ct = &in.C[((b * d.T + t) * d.G + g) * d.N];
        for (int64_t p = 0; p < d.P; ++p)
          for (int64_t n = 0; n < d.N; ++n)
            S[p * d.N + n] = a * S[p * d.N + n] + dtv * x[p] * Bt[n];
        for (int64_t p = 0; p < d.P; ++p) {
          double y = in.D[h] * x[p];
          for (int64_t n = 0; n < d.N; ++n) y += S[p * d.N + n] * Ct[n];
          r.y[((b * d.T + t) * d.H + h) * d.P + p] = y;
        }
        std::copy(S.begin(), S.end(), r.states.begin() + ((b * d.T + t) * d.H + h) * PN);
      }
      std::copy(S.begin(), S.end(), r.last.begin() + (b * d.H + h) * PN);
    }
  return r;
}

// The inputs as tensors of dtype dt.
struct ScanTensors {
  loom::Tensor x, dt, A_log, B, C, D, dt_bias;
  ScanTensors(DLDataType t, const ScanInputs& in, const Dims& d)
      : x(make(t, {d.b, d.T, d.H, d.P}, in.x)),
        dt(make(t, {d.b, d.T, d.H}, in.dt)),
        A_log(make(t, {d.H}, in.A_log)),
        B(make(t, {d.b, d.T, d.G, d.N}, in.B)),
        C(make(t, {d.b, d.T, d.G, d.N}, in.C)),
        D(make(t, {d.H}, in.D)),
        dt_bias(make(t, {d.H}, in.dt_bias)) {}
};

// The forward in dtype t; chunk_states (saved in t) through `cs` when given.
Vec run_scan(DLDataType t, const ScanInputs& in, const Dims& d, int64_t chunk, Vec* cs = nullptr,
             DLTensor* state = nullptr) {
  ScanTensors s(t, in, d);
  loom::Tensor y(B(), t, {d.b, d.T, d.H, d.P}),
      states(B(), t, {d.b, d.chunks(chunk), d.H, d.P, d.N});
  loom::ssm_scan_forward(B(), y, s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, chunk,
                         cs ? states.get() : nullptr, state);
  if (cs) *cs = get(states);
  return get(y);
}

// Steps [t0, t1) of a (B,T,inner) tensor's values.
Vec slice_t(const Vec& v, const Dims& d, int64_t inner, int64_t t0, int64_t t1) {
  Vec out;
  for (int64_t b = 0; b < d.b; ++b)
    out.insert(out.end(), v.begin() + (b * d.T + t0) * inner, v.begin() + (b * d.T + t1) * inner);
  return out;
}

}  // namespace

TEST_CASE("ssm_scan_forward matches a sequential float64 recurrence, for any chunk") {
  const Dims d;
  const ScanInputs in = random_inputs(d, 100);
  const ScanRef ref = naive_scan(in, d);
  for (int64_t chunk : {int64_t{1}, int64_t{3}, d.T, d.T + 5}) {
    CAPTURE(chunk);
    for (DLDataType t : {loom_f64(), loom_f32()}) {
      const double tol = t.bits == 64 ? 1e-12 : 1e-5;
      Vec cs;
      check_close(run_scan(t, in, d, chunk, &cs), ref.y, tol, tol, "scan y");
      // chunk c's saved state is S before its first step: zeros, then S_{c*chunk - 1}.
      Vec want;
      for (int64_t b = 0; b < d.b; ++b)
        for (int64_t c = 0; c < d.chunks(chunk); ++c)
          for (int64_t h = 0; h < d.H; ++h) {
            const int64_t PN = d.P * d.N, t1 = c * chunk - 1;
            if (t1 < 0)
              want.insert(want.end(), PN, 0.0);
            else
              want.insert(want.end(), ref.states.begin() + ((b * d.T + t1) * d.H + h) * PN,
                          ref.states.begin() + ((b * d.T + t1) * d.H + h + 1) * PN);
          }
      check_close(cs, want, tol, tol, "scan chunk_states");
    }
  }
}

TEST_CASE("ssm_scan_forward: generation, the state carried over two pieces == the whole") {
  const Dims d;
  const ScanInputs in = random_inputs(d, 200);
  const ScanRef ref = naive_scan(in, d);
  const int64_t cut = 4;
  for (DLDataType t : {loom_f64(), loom_f32()}) {
    const double tol = t.bits == 64 ? 1e-12 : 1e-5;
    loom::Tensor whole(B(), t, {d.b, d.H, d.P, d.N});
    const Vec y = run_scan(t, in, d, 3, nullptr, whole);
    check_close(y, ref.y, tol, tol, "scan y with a state");
    check_close(get(whole), ref.last, tol, tol, "final state, whole sequence");

    loom::Tensor state(B(), t, {d.b, d.H, d.P, d.N});
    Vec pieces[2];
    const int64_t bounds[3] = {0, cut, d.T};
    for (int k = 0; k < 2; ++k) {
      Dims p = d;
      p.T = bounds[k + 1] - bounds[k];
      const ScanInputs part{slice_t(in.x, d, d.H * d.P, bounds[k], bounds[k + 1]),
                            slice_t(in.dt, d, d.H, bounds[k], bounds[k + 1]),
                            in.A_log,
                            slice_t(in.B, d, d.G * d.N, bounds[k], bounds[k + 1]),
                            slice_t(in.C, d, d.G * d.N, bounds[k], bounds[k + 1]),
                            in.D,
                            in.dt_bias};
      pieces[k] = run_scan(t, part, p, 2, nullptr, state);
    }
    check_close(pieces[0], slice_t(ref.y, d, d.H * d.P, 0, cut), tol, tol, "first piece");
    check_close(pieces[1], slice_t(ref.y, d, d.H * d.P, cut, d.T), tol, tol, "second piece");
    check_close(get(state), ref.last, tol, tol, "final state after two pieces");
  }
}

TEST_CASE("ssm_scan_backward against finite differences in f64 (every input, any chunk)") {
  const Dims d;
  ScanInputs in = random_inputs(d, 300);
  const Vec dy = random_vec(in.x.size(), 307);
  auto L = [&] { return dot(naive_scan(in, d).y, dy); };
  const Vec fd_x = fd_grad(in.x, L), fd_dt = fd_grad(in.dt, L), fd_A = fd_grad(in.A_log, L);
  const Vec fd_B = fd_grad(in.B, L), fd_C = fd_grad(in.C, L), fd_D = fd_grad(in.D, L);
  const Vec fd_dtb = fd_grad(in.dt_bias, L);

  for (int64_t chunk : {int64_t{1}, int64_t{3}, d.T, d.T + 5}) {
    CAPTURE(chunk);
    const DLDataType t = loom_f64();
    ScanTensors s(t, in, d);
    loom::Tensor y(B(), t, {d.b, d.T, d.H, d.P}), cs(B(), t, {d.b, d.chunks(chunk), d.H, d.P, d.N});
    loom::ssm_scan_forward(B(), y, s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, chunk, cs,
                           nullptr);
    // Activation gradients start as garbage (=), parameter gradients as nonzero (+=).
    auto dX = make(t, {d.b, d.T, d.H, d.P}, Vec(in.x.size(), 7.0));
    auto dDt = make(t, {d.b, d.T, d.H}, Vec(in.dt.size(), 7.0));
    auto dB = make(t, {d.b, d.T, d.G, d.N}, Vec(in.B.size(), 7.0));
    auto dC = make(t, {d.b, d.T, d.G, d.N}, Vec(in.C.size(), 7.0));
    const Vec h0 = random_vec(d.H, 308), h1 = random_vec(d.H, 309), h2 = random_vec(d.H, 310);
    auto dA = make(t, {d.H}, h0), dD = make(t, {d.H}, h1), dDtb = make(t, {d.H}, h2);
    loom::ssm_scan_backward(B(), dX, dDt, dA, dB, dC, dD, dDtb, make(t, {d.b, d.T, d.H, d.P}, dy),
                            s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, chunk, cs);
    auto minus = [](Vec v, const Vec& v0) {
      for (size_t i = 0; i < v.size(); ++i) v[i] -= v0[i];
      return v;
    };
    check_close(get(dX), fd_x, kFdRtol, kFdAtol, "scan dx vs FD");
    check_close(get(dDt), fd_dt, kFdRtol, kFdAtol, "scan ddt vs FD");
    check_close(get(dB), fd_B, kFdRtol, kFdAtol, "scan dB vs FD");
    check_close(get(dC), fd_C, kFdRtol, kFdAtol, "scan dC vs FD");
    check_close(minus(get(dA), h0), fd_A, kFdRtol, kFdAtol, "scan dA_log vs FD");
    check_close(minus(get(dD), h1), fd_D, kFdRtol, kFdAtol, "scan dD vs FD");
    check_close(minus(get(dDtb), h2), fd_dtb, kFdRtol, kFdAtol, "scan ddt_bias vs FD");
  }
}

TEST_CASE(
    "ssm_scan past the parallel threshold: forward == the recurrence, any chunk's gradients") {
  const Dims d{2, 64, 8, 2, 16, 16};  // B T H P N = 262144 >= backend/cpu's kParallelMin
  const ScanInputs in = random_inputs(d, 600);
  check_close(run_scan(loom_f64(), in, d, 16), naive_scan(in, d).y, 1e-12, 1e-12, "scan y");
  const Vec dy = random_vec(in.x.size(), 601);
  Vec grads[2];
  const int64_t chunks[2] = {7, 64};
  for (int k = 0; k < 2; ++k) {
    const DLDataType t = loom_f64();
    ScanTensors s(t, in, d);
    loom::Tensor y(B(), t, {d.b, d.T, d.H, d.P}),
        cs(B(), t, {d.b, d.chunks(chunks[k]), d.H, d.P, d.N});
    loom::ssm_scan_forward(B(), y, s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, chunks[k], cs,
                           nullptr);
    loom::Tensor dX(B(), t, {d.b, d.T, d.H, d.P}), dDt(B(), t, {d.b, d.T, d.H});
    loom::Tensor dB(B(), t, {d.b, d.T, d.G, d.N}), dC(B(), t, {d.b, d.T, d.G, d.N});
    loom::Tensor dA(B(), t, {d.H}), dD(B(), t, {d.H}), dDtb(B(), t, {d.H});
    loom::ssm_scan_backward(B(), dX, dDt, dA, dB, dC, dD, dDtb, make(t, {d.b, d.T, d.H, d.P}, dy),
                            s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, chunks[k], cs);
    for (const loom::Tensor* g : {&dX, &dDt, &dB, &dC, &dA, &dD, &dDtb}) {
      const Vec v = get(*g);
      grads[k].insert(grads[k].end(), v.begin(), v.end());
    }
  }
  check_close(grads[0], grads[1], 1e-10, 1e-10, "scan gradients, chunk 7 vs 64");
}

TEST_CASE("ssm_scan: bf16 activations and parameters with f32 states and gradients == f32") {
  const Dims d;
  const ScanInputs in = random_inputs(d, 400);
  const Vec dy = random_vec(in.x.size(), 401);
  const int64_t chunk = 4;
  // Both runs see the bf16-rounded inputs: cast each through a bf16 tensor.
  auto bf16 = [&](const loom::Tensor& f) {
    const DLTensor* ft = f.get();
    loom::Tensor h(B(), loom_bf16(), std::vector<int64_t>(ft->shape, ft->shape + ft->ndim));
    B().call(&loom_ops::copy, h.get(), ft);
    return h;
  };
  auto f32 = [&](const loom::Tensor& h) {
    const DLTensor* ht = h.get();
    loom::Tensor f(B(), loom_f32(), std::vector<int64_t>(ht->shape, ht->shape + ht->ndim));
    B().call(&loom_ops::copy, f.get(), ht);
    return f;
  };
  ScanTensors s(loom_f32(), in, d);
  loom::Tensor* ins[] = {&s.x, &s.dt, &s.A_log, &s.B, &s.C, &s.D, &s.dt_bias};
  std::vector<loom::Tensor> h;
  for (loom::Tensor* t : ins) h.push_back(bf16(*t));
  for (size_t i = 0; i < h.size(); ++i) *ins[i] = f32(h[i]);
  loom::Tensor dyh = bf16(make(loom_f32(), {d.b, d.T, d.H, d.P}, dy)), dyf = f32(dyh);

  Vec out[2], grads[2];
  for (int k = 0; k < 2; ++k) {
    const bool half = k == 0;
    const DLDataType at = half ? loom_bf16() : loom_f32();
    auto in_t = [&](size_t i) -> const DLTensor* { return half ? h[i].get() : ins[i]->get(); };
    loom::Tensor y(B(), at, {d.b, d.T, d.H, d.P});
    loom::Tensor cs(B(), loom_f32(), {d.b, d.chunks(chunk), d.H, d.P, d.N});
    loom::ssm_scan_forward(B(), y, in_t(0), in_t(1), in_t(2), in_t(3), in_t(4), in_t(5), in_t(6),
                           chunk, cs, nullptr);
    loom::Tensor dx(B(), at, {d.b, d.T, d.H, d.P}), ddt(B(), at, {d.b, d.T, d.H});
    loom::Tensor dB(B(), at, {d.b, d.T, d.G, d.N}), dC(B(), at, {d.b, d.T, d.G, d.N});
    loom::Tensor dA(B(), loom_f32(), {d.H}), dD(B(), loom_f32(), {d.H}),
        ddtb(B(), loom_f32(), {d.H});
    loom::ssm_scan_backward(B(), dx, ddt, dA, dB, dC, dD, ddtb, half ? dyh.get() : dyf.get(),
                            in_t(0), in_t(1), in_t(2), in_t(3), in_t(4), in_t(5), in_t(6), chunk,
                            cs);
    out[k] = get(f32(y));
    for (const loom::Tensor* g : {&dx, &ddt, &dB, &dC, &dA, &dD, &ddtb}) {
      const Vec v = get(f32(*g));
      grads[k].insert(grads[k].end(), v.begin(), v.end());
    }
  }
  check_rel(out[0], out[1], 1e-2, "bf16 scan y vs f32");
  check_rel(grads[0], grads[1], 1e-2, "bf16 scan gradients vs f32");
}

TEST_CASE("ssm ops: shape errors name the tensor and the shapes; older backends are refused") {
  const Dims d;
  const ScanInputs in = random_inputs(d, 500);
  ScanTensors s(loom_f32(), in, d);
  loom::Tensor y(B(), loom_f32(), {d.b, d.T, d.H, d.P});
  loom::Tensor dt_bad(B(), loom_f32(), {d.b, d.T, d.H - 1});
  expect_error(
      [&] {
        loom::ssm_scan_forward(B(), y, s.x, dt_bad, s.A_log, s.B, s.C, s.D, s.dt_bias, 3, nullptr,
                               nullptr);
      },
      LOOM_ERR_INVALID_ARGUMENT,
      "ssm_scan_forward: dt has shape (2,11,3), expected (B,T,H) = (2,11,4)");
  loom::Tensor cs_bad(B(), loom_f32(), {d.b, 3, d.H, d.P, d.N});  // ceil(11 / 3) = 4 chunks
  expect_error(
      [&] {
        loom::ssm_scan_forward(B(), y, s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, 3, cs_bad,
                               nullptr);
      },
      LOOM_ERR_INVALID_ARGUMENT,
      "ssm_scan_forward: chunk_states has shape (2,3,4,3,5), expected (B,ceil(T/chunk),H,P,N) = "
      "(2,4,4,3,5)");
  loom::Tensor B3(B(), loom_f32(), {d.b, d.T, 3, d.N});  // 3 groups do not divide 4 heads
  expect_error(
      [&] {
        loom::ssm_scan_forward(B(), y, s.x, s.dt, s.A_log, B3, B3, s.D, s.dt_bias, 3, nullptr,
                               nullptr);
      },
      LOOM_ERR_INVALID_ARGUMENT, "G dividing H = 4");
  expect_error(
      [&] {
        loom::ssm_scan_forward(B(), y, s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, 0, nullptr,
                               nullptr);
      },
      LOOM_ERR_INVALID_ARGUMENT, "ssm_scan_forward: chunk = 0 must be > 0");
  loom::Tensor y64(B(), loom_f64(), {d.b, d.T, d.H, d.P});
  expect_error(
      [&] {
        loom::ssm_scan_forward(B(), y64, s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, 3, nullptr,
                               nullptr);
      },
      LOOM_ERR_INVALID_ARGUMENT, "ssm_scan_forward: y is f64, expected f32 (the dtype of x)");
  loom::Tensor dy(B(), loom_f32(), {d.b, d.T, d.H, d.P});
  loom::Tensor g(B(), loom_f32(), {d.H});
  expect_error(
      [&] {
        loom::ssm_scan_backward(B(), y, s.dt, g, s.B, s.C, g, g, dy, s.x, s.dt, s.A_log, s.B, s.C,
                                s.D, s.dt_bias, 3, nullptr);
      },
      LOOM_ERR_INVALID_ARGUMENT, "ssm_scan_backward: chunk_states is NULL");

  // A backend built before ABI 2.22: its table ends at copy_strided.
  loom_ops shorter = B().ops();
  shorter.struct_size = LOOM_OPS_SIZE_V2_21;
  loom_backend_api api = *B().api();
  api.ops = &shorter;
  const loom::Backend old(B().host(), {&api, B().self()});
  expect_error(
      [&] {
        loom::ssm_scan_forward(old, y, s.x, s.dt, s.A_log, s.B, s.C, s.D, s.dt_bias, 3, nullptr,
                               nullptr);
      },
      LOOM_ERR_UNIMPLEMENTED,
      "ssm_scan_forward: the backend lacks this op (its op table predates ABI 2.22");
  loom::Tensor x3(B(), loom_f32(), {1, 4, 8}), w3(B(), loom_f32(), {8, 4}),
      r3(B(), loom_f32(), {4});
  expect_error([&] { loom::gated_rmsnorm_forward(old, x3, r3, x3, x3, w3, 1e-5, 8); },
               LOOM_ERR_UNIMPLEMENTED, "gated_rmsnorm_forward: the backend lacks this op");
  expect_error([&] { loom::ssm_conv_forward(old, x3, x3, w3, nullptr, true, nullptr); },
               LOOM_ERR_UNIMPLEMENTED, "ABI 2.22");
}
