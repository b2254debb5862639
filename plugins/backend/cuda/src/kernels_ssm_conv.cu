// Mamba-2's causal depthwise convolution (backend.h, ABI 2.22), each channel its own K taps:
//   ssm_conv_forward:  out(B,T,C) = [silu](bias(C) + sum_k weight(C,K)[c,k] x[b, t-(K-1)+k, c]);
//                      state (B,K-1,C) read as the inputs before t = 0, then set to the last
//                      K-1 inputs
//   ssm_conv_backward: dx(B,T,C) =; dweight(C,K) +=; dbias(C) += (from zero history)
// dtypes: x, out, state, dout, dx one of f32/bf16/f16 (T); weight, bias, dweight, dbias T or f32
// (kernels_ssm.cuh). Arithmetic in f32 (backend/cpu sums in double: the GPU test's f32 bound
// is relative to the largest value, 1e-5).
//
// Forward: a thread per output element. The state update is a second launch, one thread per
// (b, c) walking the K-1 slots in order: slot j reads slot j + T of the old state, which that
// thread has not overwritten yet, and the forward's reads of the state are done (stream order).
// Backward, three launches: g = dout * silu'(pre) into f32 scratch (pre recomputed from x);
// the parameter gradients as row-chunk partial sums and column_sum_finish (fixed order, no
// atomics, as the norms' parameter gradients); dx from g alone. dout and x are read only by
// the first two, so dx may alias either (as backend/cpu allows).
#include <algorithm>

#include "kernels_ssm.cuh"
#include "ops.hpp"

namespace loom_cuda {
namespace {

struct ConvDims {
  int64_t B, T, C, K;
};

// x[b, s, c] for s >= 0; before t = 0, state[b, K-1 + s, c] (0 without a state).
template <class T>
__device__ __forceinline__ float conv_in(const T* x, const T* state, const ConvDims& d, int64_t b,
                                         int64_t s, int64_t c) {
  if (s >= 0) return to_f32(x[(b * d.T + s) * d.C + c]);
  return state != nullptr ? to_f32(state[(b * (d.K - 1) + d.K - 1 + s) * d.C + c]) : 0.0f;
}

// The pre-activation of (b, t, c): the bias first, then the taps in order (as the cpu).
template <class T>
__device__ __forceinline__ float conv_pre(const T* x, const T* state, ParamRef<T> w,
                                          ParamRef<T> bias, const ConvDims& d, int64_t b, int64_t t,
                                          int64_t c) {
  float acc = bias.p != nullptr ? bias.load(c) : 0.0f;
  for (int64_t k = 0; k < d.K; ++k)
    acc += w.load(c * d.K + k) * conv_in(x, state, d, b, t - d.K + 1 + k, c);
  return acc;
}

template <class T>
__global__ void conv_forward_kernel(T* out, const T* x, const T* state, ParamRef<T> w,
                                    ParamRef<T> bias, ConvDims d, bool silu) {
  const int64_t n = d.B * d.T * d.C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % d.C, t = (i / d.C) % d.T, b = i / (d.C * d.T);
    const float pre = conv_pre(x, state, w, bias, d, b, t, c);
    out[i] = from_f32<T>(silu ? pre * ssm_sigmoid(pre) : pre);
  }
}

// state (B,K-1,C) <- the last K-1 inputs of [state, x]; one thread per (b, c), slots in order.
template <class T>
__global__ void conv_state_kernel(T* state, const T* x, ConvDims d) {
  const int64_t n = d.B * d.C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % d.C, b = i / d.C;
    for (int64_t j = 0; j < d.K - 1; ++j)
      state[(b * (d.K - 1) + j) * d.C + c] =
          from_f32<T>(conv_in(x, state, d, b, d.T - d.K + 1 + j, c));
  }
}

// g(B*T, C) f32 = dout * d out / d pre: silu'(z) = sigmoid(z) (1 + z (1 - sigmoid(z))).
template <class T>
__global__ void conv_grad_pre_kernel(float* g, const T* dout, const T* x, ParamRef<T> w,
                                     ParamRef<T> bias, ConvDims d, bool silu) {
  const int64_t n = d.B * d.T * d.C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float gr = to_f32(dout[i]);
    if (silu) {
      const int64_t c = i % d.C, t = (i / d.C) % d.T, b = i / (d.C * d.T);
      const float pre = conv_pre(x, static_cast<const T*>(nullptr), w, bias, d, b, t, c);
      const float s = ssm_sigmoid(pre);
      gr *= s * (1.0f + pre * (1.0f - s));
    }
    g[i] = gr;
  }
}

// Partial parameter gradients over a chunk of rows (rows = (b, t), blockIdx.y the chunk).
// Block (32, 8): x a channel of a 32-channel slice, y a row stripe; blockIdx.z = k < K a tap
// (part_w(chunks, C*K) at c*K + k, dweight's layout) or k = K the bias (part_b(chunks, C)).
// The stripes are summed in y order: the result depends on the shape only.
template <class T>
__global__ void conv_dparams_partial_kernel(float* part_w, float* part_b, const float* g,
                                            const T* x, ConvDims d, int64_t rows_per_chunk) {
  __shared__ float sh[8][32];
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x, k = blockIdx.z;
  const int64_t rows = d.B * d.T, r0 = int64_t{blockIdx.y} * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  if (c < d.C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
      const float in =
          k < d.K ? conv_in(x, static_cast<const T*>(nullptr), d, r / d.T, r % d.T - d.K + 1 + k, c)
                  : 1.0f;
      acc += g[r * d.C + c] * in;
    }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < d.C) {
    float s = 0.0f;
    for (unsigned j = 0; j < blockDim.y; ++j) s += sh[j][threadIdx.x];
    if (k < d.K)
      part_w[int64_t{blockIdx.y} * d.C * d.K + c * d.K + k] = s;
    else
      part_b[int64_t{blockIdx.y} * d.C + c] = s;
  }
}

// dx[b, s, c] = sum_k weight[c, k] g[b, s + K-1 - k, c]: the outputs that read x[b, s, c].
template <class T>
__global__ void conv_dx_kernel(T* dx, const float* g, ParamRef<T> w, ConvDims d) {
  const int64_t n = d.B * d.T * d.C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % d.C, s = (i / d.C) % d.T, b = i / (d.C * d.T);
    float acc = 0.0f;
    for (int64_t k = 0; k < d.K; ++k) {
      const int64_t t = s + d.K - 1 - k;
      if (t < d.T) acc += w.load(c * d.K + k) * g[(b * d.T + t) * d.C + c];
    }
    dx[i] = from_f32<T>(acc);
  }
}

// out(C) += part(K, C) summed over K in column_sum_finish's fixed order, out T or f32.
template <class T>
void finish_columns(loom_backend& b, const char* op, ParamRef<T> out, const float* part, int64_t K,
                    int64_t C) {
  if (out.f32)
    column_sum_finish<float><<<column_sum_grid(C, 1), dim3(32, kColLanes), 0, b.stream>>>(
        static_cast<float*>(out.p), part, nullptr, nullptr, K, C);
  else
    column_sum_finish<T><<<column_sum_grid(C, 1), dim3(32, kColLanes), 0, b.stream>>>(
        static_cast<T*>(out.p), part, nullptr, nullptr, K, C);
  LOOM_CUDA_LAUNCHED(op);
}

ConvDims conv_dims(const DLTensor* x, const DLTensor* weight) {
  return {x->shape[0], x->shape[1], x->shape[2], weight->shape[1]};
}

}  // namespace

loom_error* ssm_conv_forward(loom_backend* be, DLTensor* out, const DLTensor* x,
                             const DLTensor* weight, const DLTensor* bias, int silu,
                             DLTensor* state) noexcept {
  return run_op(be, "ssm_conv_forward", [&](loom_backend& b) {
    const char* op = "ssm_conv_forward";
    const ConvDims d = conv_dims(x, weight);  // shapes checked by the SDK slot (ssm_args.hpp)
    need_float(op, "x", x);
    need_same_dtype(op, "out", out, "x", x);
    if (state != nullptr) need_same_dtype(op, "state", state, "x", x);
    const int64_t n = d.B * d.T * d.C;
    const void* px = device_ptr(b, x, op, "x", n);
    void* py = device_ptr(b, out, op, "out", n);
    void* ps = state ? device_ptr(b, state, op, "state", d.B * (d.K - 1) * d.C) : nullptr;
    dispatch_float(op, "x", x, [&](auto tt) {
      using T = typename decltype(tt)::type;
      const ParamRef<T> w = param_ref<T>(b, op, "weight", weight, d.C * d.K);
      const ParamRef<T> bs = param_ref<T>(b, op, "bias", bias, d.C);
      if (n > 0) {
        conv_forward_kernel<T><<<grid_for(n), kThreads, 0, b.stream>>>(
            static_cast<T*>(py), static_cast<const T*>(px), static_cast<const T*>(ps), w, bs, d,
            silu != 0);
        LOOM_CUDA_LAUNCHED(op);
      }
      if (ps != nullptr && d.K > 1 && d.B * d.C > 0) {
        conv_state_kernel<T><<<grid_for(d.B * d.C), kThreads, 0, b.stream>>>(
            static_cast<T*>(ps), static_cast<const T*>(px), d);
        LOOM_CUDA_LAUNCHED(op);
      }
    });
  });
}

loom_error* ssm_conv_backward(loom_backend* be, DLTensor* dx, DLTensor* dweight, DLTensor* dbias,
                              const DLTensor* dout, const DLTensor* x, const DLTensor* weight,
                              const DLTensor* bias, int silu) noexcept {
  return run_op(be, "ssm_conv_backward", [&](loom_backend& b) {
    const char* op = "ssm_conv_backward";
    const ConvDims d = conv_dims(x, weight);
    need_float(op, "x", x);
    need_same_dtype(op, "dx", dx, "x", x);
    need_same_dtype(op, "dout", dout, "x", x);
    const int64_t rows = d.B * d.T, n = rows * d.C;
    const void* px = device_ptr(b, x, op, "x", n);
    const void* pg = device_ptr(b, dout, op, "dout", n);
    void* pdx = device_ptr(b, dx, op, "dx", n);
    dispatch_float(op, "x", x, [&](auto tt) {
      using T = typename decltype(tt)::type;
      const ParamRef<T> w = param_ref<T>(b, op, "weight", weight, d.C * d.K);
      const ParamRef<T> bs = param_ref<T>(b, op, "bias", bias, d.C);
      const ParamRef<T> dw = param_ref<T>(b, op, "dweight", dweight, d.C * d.K);
      const ParamRef<T> db = param_ref<T>(b, op, "dbias", dbias, d.C);
      if (n == 0) return;  // nothing to write, nothing to add
      const RowChunks rc = row_chunks(rows);
      const int64_t chunks = rc.chunks, rows_per_chunk = rc.rows_per_chunk;
      const size_t g_bytes = round256(sizeof(float) * static_cast<size_t>(n));
      const size_t w_bytes = round256(sizeof(float) * static_cast<size_t>(chunks * d.C * d.K));
      const size_t b_bytes = round256(sizeof(float) * static_cast<size_t>(chunks * d.C));
      StreamScratch scratch(g_bytes + w_bytes + b_bytes, *b.alloc);
      float* g = scratch.at<float>(0);
      float* part_w = scratch.at<float>(g_bytes);
      float* part_b = scratch.at<float>(g_bytes + w_bytes);

      conv_grad_pre_kernel<T><<<grid_for(n), kThreads, 0, b.stream>>>(
          g, static_cast<const T*>(pg), static_cast<const T*>(px), w, bs, d, silu != 0);
      LOOM_CUDA_LAUNCHED(op);
      const dim3 grid(static_cast<unsigned>((d.C + 31) / 32), static_cast<unsigned>(chunks),
                      static_cast<unsigned>(db.p != nullptr ? d.K + 1 : d.K));
      conv_dparams_partial_kernel<T><<<grid, dim3(32, 8), 0, b.stream>>>(
          part_w, part_b, g, static_cast<const T*>(px), d, rows_per_chunk);
      LOOM_CUDA_LAUNCHED(op);
      finish_columns<T>(b, op, dw, part_w, chunks, d.C * d.K);
      if (db.p != nullptr) finish_columns<T>(b, op, db, part_b, chunks, d.C);
      // Last: dout and x are not read from here on, so dx may alias either.
      conv_dx_kernel<T><<<grid_for(n), kThreads, 0, b.stream>>>(static_cast<T*>(pdx), g, w, d);
      LOOM_CUDA_LAUNCHED(op);
    });
  });
}

}  // namespace loom_cuda
