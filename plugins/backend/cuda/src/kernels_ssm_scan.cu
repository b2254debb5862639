// Mamba-2's selective scan (backend.h, ABI 2.22). H heads of P channels, G groups of H/G heads
// sharing B and C, a state of N per channel:
//   dt_t = softplus(dt + dt_bias[h]), A = -exp(A_log[h]), a_t = exp(dt_t A)
//   S_t (P,N) = a_t S_{t-1} + dt_t x_t B_t^T,   y_t = S_t C_t + D[h] x_t
//   ssm_scan_forward:  y(B,T,H,P); chunk_states (B,chunks,H,P,N) the state before each chunk;
//                      state (B,H,P,N) S_{-1} on entry, S_{T-1} on return
//   ssm_scan_backward: dx, ddt, dB, dC =; dA_log, dD, ddt_bias (H) += (from S_{-1} = 0)
// dtypes: x, y, dt, B, C and their gradients one of f32/bf16/f16 (T); A_log, D, dt_bias and
// their gradients T or f32 (kernels_ssm.cuh); chunk_states and state f32 (backend/cuda has no
// f64). Arithmetic in f32, the state included (backend/cpu: double).
//
// Every element S[p, n] is its own scalar recurrence; only the sums over p or n couple them.
// So a warp owns a line of elements, 32 lanes each holding J = 1, 2, 4 or 8 of them in
// registers (dimensions up to 256), and the line's sums are warp_sum's butterflies: fixed
// order, no atomics anywhere, the same bits on every run.
// - forward: a warp per (b, h, p), lanes over n; y[t, p] = warp_sum over n.
// - backward, rows: a warp per (b, h, p), lanes over n: dx[t, p] (a sum over n) and, per
//   (b, t, h, p), the two sums over n that ddt needs (sum dS S_{t-1}, x_p sum dS B), to f32
//   scratch; then a thread per (b, t, h) adds them over p in order and writes ddt.
// - backward, columns: a warp per (b, g, n), lanes over p, walking the group's heads in order:
//   dB[t, n] and dC[t, n] (sums over p and over the heads) added up in f32 by that warp alone.
// - dA_log, dD, ddt_bias: a block per head sums its (b, t) terms (block_sum: fixed order).
// Both backward walks recompute the states as backend/cpu does, from the forward's
// chunk_states: chunks from the last, and inside a chunk tiles of kTile steps from the last,
// each tile's states recomputed from its chunk's start (at most chunk / kTile extra forward
// steps per step: correctness first; a faster design keeps the tile starts).
#include "kernels_ssm.cuh"
#include "loom/cpp/ssm_args.hpp"
#include "ops.hpp"

namespace loom_cuda {
namespace {

using loom::SsmScanDims;
constexpr int kWarps = 4;  // warps per block of the warp-per-line kernels
constexpr int kTile = 32;  // backward: steps whose states are held at once

// One head's step scalars: dt_t = softplus(z), a_t = exp(dt_t A), softplus'(z) = sigmoid(z).
struct StepScalars {
  float dt, a, dsp;
};
__device__ __forceinline__ StepScalars step_scalars(float z, float A) {
  const float sp = fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z)));
  return {sp, expf(sp * A), ssm_sigmoid(z)};
}

template <class T>
struct ScanIn {
  const T *x, *dt, *B, *C, *dy;  // dy: backward only
  ParamRef<T> A_log, D, dt_bias;
  SsmScanDims d;
};

// Offsets of time step t of (b, h) (group g).
__device__ __forceinline__ int64_t x_at(const SsmScanDims& d, int64_t b, int64_t t, int64_t h) {
  return ((b * d.T + t) * d.H + h) * d.P;  // x, y, dy (P)
}
__device__ __forceinline__ int64_t dt_at(const SsmScanDims& d, int64_t b, int64_t t, int64_t h) {
  return (b * d.T + t) * d.H + h;  // dt, ddt (1)
}
__device__ __forceinline__ int64_t bc_at(const SsmScanDims& d, int64_t b, int64_t t, int64_t g) {
  return ((b * d.T + t) * d.G + g) * d.N;  // B, C (N)
}
__device__ __forceinline__ int64_t chunk_at(const SsmScanDims& d, int64_t b, int64_t c, int64_t h) {
  return ((b * d.chunks + c) * d.H + h) * d.P * d.N;  // chunk_states (P,N)
}

// The line of elements one warp owns, in head h of batch item b: kRows = row p (lane j holds
// n = lane + 32 j), else column n (lane j holds p = lane + 32 j). Elements past the dimension
// read 0 and are never written.
template <class T, int J, bool kRows>
struct Line {
  const ScanIn<T>& in;
  int64_t b, h, g, fixed;  // fixed: p for a row, n for a column
  int lane;
  float A, bias;

  __device__ Line(const ScanIn<T>& in_, int64_t b_, int64_t h_, int64_t fixed_)
      : in(in_),
        b(b_),
        h(h_),
        g(h_ / (in_.d.H / in_.d.G)),
        fixed(fixed_),
        lane(static_cast<int>(threadIdx.x & 31)),
        A(-expf(in_.A_log.load(h_))),
        bias(in_.dt_bias.load(h_)) {}

  __device__ int64_t p(int j) const { return kRows ? fixed : lane + 32 * j; }
  __device__ int64_t n(int j) const { return kRows ? lane + 32 * j : fixed; }
  __device__ bool valid(int j) const { return p(j) < in.d.P && n(j) < in.d.N; }
  __device__ StepScalars step(int64_t t) const {
    return step_scalars(to_f32(in.dt[dt_at(in.d, b, t, h)]) + bias, A);
  }
  // The per-element inputs of step t: x_p, dy_p, B_n, C_n (0 past the dimension).
  __device__ float x(int64_t t, int j) const {
    return valid(j) ? to_f32(in.x[x_at(in.d, b, t, h) + p(j)]) : 0.0f;
  }
  __device__ float dy(int64_t t, int j) const {
    return valid(j) ? to_f32(in.dy[x_at(in.d, b, t, h) + p(j)]) : 0.0f;
  }
  __device__ float Bn(int64_t t, int j) const {
    return valid(j) ? to_f32(in.B[bc_at(in.d, b, t, g) + n(j)]) : 0.0f;
  }
  __device__ float Cn(int64_t t, int j) const {
    return valid(j) ? to_f32(in.C[bc_at(in.d, b, t, g) + n(j)]) : 0.0f;
  }
  // Offset of this element in a (P,N) state block.
  __device__ int64_t pn(int j) const { return p(j) * in.d.N + n(j); }
  // S <- a S + dt x B^T at step t: (dt x) B, the cpu's order.
  __device__ void advance(float (&S)[J], int64_t t) const {
    const StepScalars st = step(t);
#pragma unroll
    for (int j = 0; j < J; ++j) S[j] = st.a * S[j] + st.dt * x(t, j) * Bn(t, j);
  }
};

// ---- forward -----------------------------------------------------------------------------------

template <class T, int J>
__global__ void scan_forward_kernel(T* y, float* chunk_states, float* state, ScanIn<T> in) {
  const SsmScanDims& d = in.d;
  const int64_t lines = d.batch * d.H * d.P;
  for (int64_t w = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5); w < lines;
       w += int64_t{gridDim.x} * kWarps) {
    const int64_t p = w % d.P, h = (w / d.P) % d.H, b = w / (d.P * d.H);
    const Line<T, J, true> ln(in, b, h, p);
    const int64_t s0 = (b * d.H + h) * d.P * d.N;  // this head's block of state
    float S[J];
#pragma unroll
    for (int j = 0; j < J; ++j) S[j] = state && ln.valid(j) ? state[s0 + ln.pn(j)] : 0.0f;
    const float Dh = in.D.load(h);
    for (int64_t t = 0; t < d.T; ++t) {
      if (chunk_states != nullptr && t % d.chunk == 0) {
        float* cs = chunk_states + chunk_at(d, b, t / d.chunk, h);
#pragma unroll
        for (int j = 0; j < J; ++j)
          if (ln.valid(j)) cs[ln.pn(j)] = S[j];
      }
      ln.advance(S, t);
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j) acc += S[j] * ln.Cn(t, j);
      acc = warp_sum(acc);
      if (ln.lane == 0) {
        const int64_t at = x_at(d, b, t, h) + p;
        y[at] = from_f32<T>(Dh * to_f32(in.x[at]) + acc);
      }
    }
    if (state != nullptr) {
#pragma unroll
      for (int j = 0; j < J; ++j)
        if (ln.valid(j)) state[s0 + ln.pn(j)] = S[j];
    }
  }
}

// ---- backward: the walk both line kinds share
// ----------------------------------------------------

// Runs body(t, st, S_t, S_{t-1}, dS) for t = T-1 down to 0, dS holding dy_t C_t^T + a_{t+1}
// dS_{t+1} (the body adds nothing to it; the walk adds dy_t C_t^T before the call and scales by
// a_t after). States come from chunk_states, recomputed per tile of kTile steps.
template <class T, int J, bool kRows, class Body>
__device__ void backward_walk(const Line<T, J, kRows>& ln, const float* chunk_states, Body&& body) {
  const SsmScanDims& d = ln.in.d;
  float dS[J];
#pragma unroll
  for (int j = 0; j < J; ++j) dS[j] = 0.0f;
  float S[kTile + 1][J];  // S[0] = S_{s0-1}, S[k + 1] = S_{s0+k}
  for (int64_t c = d.chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * d.chunk, t1 = t0 + d.chunk < d.T ? t0 + d.chunk : d.T;
    const float* start = chunk_states + chunk_at(d, ln.b, c, ln.h);
    for (int64_t s1 = t1; s1 > t0;) {
      const int64_t s0 = s1 - kTile > t0 ? s1 - kTile : t0;
#pragma unroll
      for (int j = 0; j < J; ++j) S[0][j] = ln.valid(j) ? start[ln.pn(j)] : 0.0f;
      for (int64_t t = t0; t < s0; ++t) ln.advance(S[0], t);
      for (int64_t k = 0; k < s1 - s0; ++k) {
#pragma unroll
        for (int j = 0; j < J; ++j) S[k + 1][j] = S[k][j];
        ln.advance(S[k + 1], s0 + k);
      }
      for (int64_t t = s1 - 1; t >= s0; --t) {
        const StepScalars st = ln.step(t);
#pragma unroll
        for (int j = 0; j < J; ++j) dS[j] += ln.dy(t, j) * ln.Cn(t, j);
        body(t, st, S[t - s0 + 1], S[t - s0], dS);
#pragma unroll
        for (int j = 0; j < J; ++j) dS[j] *= st.a;  // a_t dS_t, for step t - 1
      }
      s1 = s0;
    }
  }
}

// Rows: dx[t, p] = D dy_p + dt_t sum_n dS B_n, and per (b, t, h, p) into q (2 floats): sum_n
// dS S_{t-1} and x_p sum_n dS B_n, ddt's two terms before the sum over p.
template <class T, int J>
__global__ void scan_backward_rows_kernel(T* dx, float* q, const float* chunk_states,
                                          ScanIn<T> in) {
  const SsmScanDims& d = in.d;
  const int64_t lines = d.batch * d.H * d.P;
  for (int64_t w = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5); w < lines;
       w += int64_t{gridDim.x} * kWarps) {
    const int64_t p = w % d.P, h = (w / d.P) % d.H, b = w / (d.P * d.H);
    const Line<T, J, true> ln(in, b, h, p);
    const float Dh = in.D.load(h);
    backward_walk(ln, chunk_states,
                  [&](int64_t t, const StepScalars& st, const float(&St)[J], const float(&Sp)[J],
                      const float(&dS)[J]) {
                    (void)St;
                    float sb = 0.0f, da = 0.0f;
#pragma unroll
                    for (int j = 0; j < J; ++j) {
                      sb += dS[j] * ln.Bn(t, j);
                      da += dS[j] * Sp[j];
                    }
                    sb = warp_sum(sb);
                    da = warp_sum(da);
                    if (ln.lane == 0) {
                      const int64_t at = x_at(d, b, t, h) + p;
                      const float xp = to_f32(in.x[at]);
                      dx[at] = from_f32<T>(Dh * to_f32(in.dy[at]) + st.dt * sb);
                      float* qq = q + 2 * at;
                      qq[0] = da;
                      qq[1] = xp * sb;
                    }
                  });
  }
}

// Columns: dC[t, n] = sum over the group's heads and p of S_t dy_p; dB[t, n] = sum over heads of
// dt_t sum_p dS x_p. The first head writes acc (B,T,G,N,2 f32), the middle ones add, the last
// rounds into dB and dC; a group of one head writes them at once (acc unused).
template <class T, int J>
__global__ void scan_backward_cols_kernel(T* dB, T* dC, float* acc, const float* chunk_states,
                                          ScanIn<T> in) {
  const SsmScanDims& d = in.d;
  const int64_t hpg = d.H / d.G, lines = d.batch * d.G * d.N;
  for (int64_t w = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5); w < lines;
       w += int64_t{gridDim.x} * kWarps) {
    const int64_t n = w % d.N, g = (w / d.N) % d.G, b = w / (d.N * d.G);
    for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      const Line<T, J, false> ln(in, b, h, n);
      const bool first = h == g * hpg, last = h == (g + 1) * hpg - 1;
      backward_walk(ln, chunk_states,
                    [&](int64_t t, const StepScalars& st, const float(&St)[J], const float(&Sp)[J],
                        const float(&dS)[J]) {
                      (void)Sp;
                      float sc = 0.0f, sx = 0.0f;
#pragma unroll
                      for (int j = 0; j < J; ++j) {
                        sc += St[j] * ln.dy(t, j);
                        sx += dS[j] * ln.x(t, j);
                      }
                      sc = warp_sum(sc);
                      sx = st.dt * warp_sum(sx);
                      if (ln.lane != 0) return;
                      const int64_t at = bc_at(d, b, t, g) + n;
                      float* a2 = acc + 2 * at;
                      if (!first) sx += a2[0], sc += a2[1];
                      if (last) {
                        dB[at] = from_f32<T>(sx);
                        dC[at] = from_f32<T>(sc);
                      } else {
                        a2[0] = sx;
                        a2[1] = sc;
                      }
                    });
    }
  }
}

// A thread per (b, t, h): ddt = (sum_p q0 a_t A + sum_p q1) softplus', and the (b, t) terms of
// the head's parameter gradients into r (B*T*H, 3): dA's da a_t dt_t, ddt, and sum_p dy x.
template <class T>
__global__ void scan_backward_ddt_kernel(T* ddt, float* r, const float* q, ScanIn<T> in) {
  const SsmScanDims& d = in.d;
  const int64_t n = d.batch * d.T * d.H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t h = i % d.H;
    const float A = -expf(in.A_log.load(h));
    const StepScalars st = step_scalars(to_f32(in.dt[i]) + in.dt_bias.load(h), A);
    float da = 0.0f, xsb = 0.0f, dD = 0.0f;
    for (int64_t p = 0; p < d.P; ++p) {
      da += q[2 * (i * d.P + p)];
      xsb += q[2 * (i * d.P + p) + 1];
      dD += to_f32(in.dy[i * d.P + p]) * to_f32(in.x[i * d.P + p]);
    }
    const float g = (da * st.a * A + xsb) * st.dsp;
    ddt[i] = from_f32<T>(g);
    r[3 * i] = da * st.a * st.dt;
    r[3 * i + 1] = g;
    r[3 * i + 2] = dD;
  }
}

// A block per head: dA_log[h] += A sum dA terms (A = -exp(A_log): dA/dA_log = A), ddt_bias[h]
// += sum ddt, dD[h] += sum dy x, over every (b, t), in block_sum's fixed order.
template <class T>
__global__ void scan_backward_params_kernel(ParamRef<T> dA_log, ParamRef<T> dD,
                                            ParamRef<T> ddt_bias, const float* r, ScanIn<T> in) {
  const SsmScanDims& d = in.d;
  const int64_t h = blockIdx.x, bt = d.batch * d.T;
  float s[3] = {0.0f, 0.0f, 0.0f};
  for (int64_t i = threadIdx.x; i < bt; i += blockDim.x)
    for (int k = 0; k < 3; ++k) s[k] += r[3 * (i * d.H + h) + k];
  for (int k = 0; k < 3; ++k) s[k] = block_sum(s[k]);
  if (threadIdx.x == 0) {
    dA_log.add(h, -expf(in.A_log.load(h)) * s[0]);
    ddt_bias.add(h, s[1]);
    dD.add(h, s[2]);
  }
}

// ---- host side ---------------------------------------------------------------------------------

// J for a line of `len` elements: 32 J >= len, J in {1, 2, 4, 8}; calls fn(integral_constant<J>).
template <class Fn>
void with_lanes(const char* op, const char* what, int64_t len, Fn&& fn) {
  if (len <= 32)
    fn(std::integral_constant<int, 1>{});
  else if (len <= 64)
    fn(std::integral_constant<int, 2>{});
  else if (len <= 128)
    fn(std::integral_constant<int, 4>{});
  else if (len <= 256)
    fn(std::integral_constant<int, 8>{});
  else
    fail(op,
         std::string(what) + " = " + std::to_string(len) +
             " is over 256, the most a warp's line holds",
         LOOM_ERR_UNIMPLEMENTED);
}

unsigned warp_grid(int64_t lines) { return grid_for(lines, kWarps); }

// The inputs both directions read, checked: x's dtype T for the activations, T or f32 for the
// per-head parameters.
template <class T>
ScanIn<T> scan_inputs(const loom_backend& b, const char* op, const DLTensor* x, const DLTensor* dt,
                      const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                      const DLTensor* D, const DLTensor* dt_bias, const DLTensor* dy,
                      int64_t chunk) {
  const SsmScanDims d = loom::ssm_scan_dims(x, B, chunk);  // shapes checked by the SDK slot
  for (const auto& [name, t] : {std::pair{"dt", dt}, std::pair{"B", B}, std::pair{"C", C}})
    need_same_dtype(op, name, t, "x", x);
  if (dy != nullptr) need_same_dtype(op, "dy", dy, "x", x);
  const int64_t nx = d.batch * d.T * d.H * d.P, nbc = d.batch * d.T * d.G * d.N;
  return {static_cast<const T*>(device_ptr(b, x, op, "x", nx)),
          static_cast<const T*>(device_ptr(b, dt, op, "dt", d.batch * d.T * d.H)),
          static_cast<const T*>(device_ptr(b, B, op, "B", nbc)),
          static_cast<const T*>(device_ptr(b, C, op, "C", nbc)),
          dy ? static_cast<const T*>(device_ptr(b, dy, op, "dy", nx)) : nullptr,
          param_ref<T>(b, op, "A_log", A_log, d.H),
          param_ref<T>(b, op, "D", D, d.H),
          param_ref<T>(b, op, "dt_bias", dt_bias, d.H),
          d};
}

float* state_ptr(const loom_backend& b, const char* op, const char* name, const DLTensor* t,
                 int64_t count) {
  if (t == nullptr) return nullptr;
  if (!is_f32(t->dtype))
    fail(op, std::string(name) + " is " + dtype_str(t->dtype) +
                 ", expected f32 (scan states are f32 on backend/cuda, which has no f64)");
  return static_cast<float*>(device_ptr(b, t, op, name, count));
}

}  // namespace

loom_error* ssm_scan_forward(loom_backend* be, DLTensor* y, const DLTensor* x, const DLTensor* dt,
                             const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                             const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                             DLTensor* chunk_states, DLTensor* state) noexcept {
  return run_op(be, "ssm_scan_forward", [&](loom_backend& b) {
    const char* op = "ssm_scan_forward";
    need_float(op, "x", x);
    need_same_dtype(op, "y", y, "x", x);
    const SsmScanDims d = loom::ssm_scan_dims(x, B, chunk);
    float* cs =
        state_ptr(b, op, "chunk_states", chunk_states, d.batch * d.chunks * d.H * d.P * d.N);
    float* st = state_ptr(b, op, "state", state, d.batch * d.H * d.P * d.N);
    void* py = device_ptr(b, y, op, "y", d.batch * d.T * d.H * d.P);
    dispatch_float(op, "x", x, [&](auto tt) {
      using T = typename decltype(tt)::type;
      const ScanIn<T> in = scan_inputs<T>(b, op, x, dt, A_log, B, C, D, dt_bias, nullptr, chunk);
      const int64_t lines = d.batch * d.H * d.P;
      if (lines == 0) return;
      with_lanes(op, "N (the state size)", d.N, [&](auto jj) {
        constexpr int J = decltype(jj)::value;
        scan_forward_kernel<T, J>
            <<<warp_grid(lines), 32 * kWarps, 0, b.stream>>>(static_cast<T*>(py), cs, st, in);
        LOOM_CUDA_LAUNCHED(op);
      });
    });
  });
}

loom_error* ssm_scan_backward(loom_backend* be, DLTensor* dx, DLTensor* ddt, DLTensor* dA_log,
                              DLTensor* dB, DLTensor* dC, DLTensor* dD, DLTensor* ddt_bias,
                              const DLTensor* dy, const DLTensor* x, const DLTensor* dt,
                              const DLTensor* A_log, const DLTensor* B, const DLTensor* C,
                              const DLTensor* D, const DLTensor* dt_bias, int64_t chunk,
                              const DLTensor* chunk_states) noexcept {
  return run_op(be, "ssm_scan_backward", [&](loom_backend& b) {
    const char* op = "ssm_scan_backward";
    need_float(op, "x", x);
    for (const auto& [name, t] :
         {std::pair{"dx", dx}, std::pair{"ddt", ddt}, std::pair{"dB", dB}, std::pair{"dC", dC}})
      need_same_dtype(op, name, t, "x", x);
    const SsmScanDims d = loom::ssm_scan_dims(x, B, chunk);
    const float* cs =
        state_ptr(b, op, "chunk_states", chunk_states, d.batch * d.chunks * d.H * d.P * d.N);
    const int64_t nx = d.batch * d.T * d.H * d.P, nbc = d.batch * d.T * d.G * d.N;
    const int64_t nt = d.batch * d.T * d.H;
    void* pdx = device_ptr(b, dx, op, "dx", nx);
    void* pddt = device_ptr(b, ddt, op, "ddt", nt);
    void* pdB = device_ptr(b, dB, op, "dB", nbc);
    void* pdC = device_ptr(b, dC, op, "dC", nbc);
    dispatch_float(op, "x", x, [&](auto tt) {
      using T = typename decltype(tt)::type;
      const ScanIn<T> in = scan_inputs<T>(b, op, x, dt, A_log, B, C, D, dt_bias, dy, chunk);
      const ParamRef<T> gA = param_ref<T>(b, op, "dA_log", dA_log, d.H);
      const ParamRef<T> gD = param_ref<T>(b, op, "dD", dD, d.H);
      const ParamRef<T> gbias = param_ref<T>(b, op, "ddt_bias", ddt_bias, d.H);
      if (nt == 0) return;  // no step: the = outputs are empty, the += ones get 0
      const size_t q_bytes = round256(sizeof(float) * 2 * static_cast<size_t>(nx));
      const size_t r_bytes = round256(sizeof(float) * 3 * static_cast<size_t>(nt));
      const size_t acc_bytes = round256(sizeof(float) * 2 * static_cast<size_t>(nbc));
      StreamScratch scratch(q_bytes + r_bytes + acc_bytes, *b.alloc);
      float* q = scratch.at<float>(0);
      float* r = scratch.at<float>(q_bytes);
      float* acc = scratch.at<float>(q_bytes + r_bytes);
      if (nx > 0)  // else P == 0: q is empty, and ddt's sums over p are 0
        with_lanes(op, "N (the state size)", d.N, [&](auto jj) {
          constexpr int J = decltype(jj)::value;
          scan_backward_rows_kernel<T, J>
              <<<warp_grid(d.batch * d.H * d.P), 32 * kWarps, 0, b.stream>>>(static_cast<T*>(pdx),
                                                                             q, cs, in);
          LOOM_CUDA_LAUNCHED(op);
        });
      if (nbc > 0)
        with_lanes(op, "P (the head dimension)", d.P, [&](auto jj) {
          constexpr int J = decltype(jj)::value;
          scan_backward_cols_kernel<T, J>
              <<<warp_grid(d.batch * d.G * d.N), 32 * kWarps, 0, b.stream>>>(
                  static_cast<T*>(pdB), static_cast<T*>(pdC), acc, cs, in);
          LOOM_CUDA_LAUNCHED(op);
        });
      scan_backward_ddt_kernel<T>
          <<<grid_for(nt), kThreads, 0, b.stream>>>(static_cast<T*>(pddt), r, q, in);
      LOOM_CUDA_LAUNCHED(op);
      scan_backward_params_kernel<T>
          <<<static_cast<unsigned>(d.H), kThreads, 0, b.stream>>>(gA, gD, gbias, r, in);
      LOOM_CUDA_LAUNCHED(op);
    });
  });
}

}  // namespace loom_cuda
