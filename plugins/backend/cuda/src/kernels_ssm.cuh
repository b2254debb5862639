// backend/cuda: what Mamba-2's two kernel files (kernels_ssm_conv.cu, kernels_ssm_scan.cu)
// share. Their small per-channel tensors (the convolution's weight and bias, the scan's A_log,
// D, dt_bias and all their gradients) may be stored in the activations' dtype or in f32 (mixed
// precision keeps parameters and main gradients in f32): a ParamRef reads and adds through
// either at run time, so each kernel is instantiated once per activation dtype instead of once
// per combination. These tensors are tiny; the branch is uniform across a warp.
#pragma once

#include <string>

#include "kernels_common.cuh"

namespace loom_cuda {

template <class T>
struct ParamRef {
  void* p = nullptr;  // NULL: the tensor is absent (a convolution without bias)
  bool f32 = false;   // stored as f32, else as T

  __device__ __forceinline__ float load(int64_t i) const {
    return f32 ? static_cast<const float*>(p)[i] : to_f32(static_cast<const T*>(p)[i]);
  }
  // p[i] += v, rounded once into the storage dtype.
  __device__ __forceinline__ void add(int64_t i, float v) const {
    if (f32) {
      static_cast<float*>(p)[i] += v;
    } else {
      T* q = static_cast<T*>(p) + i;
      *q = from_f32<T>(to_f32(*q) + v);
    }
  }
};

// The ParamRef of `t` (NULL gives an absent one) after checking its device, layout, element
// count and dtype (T, the activations', or f32), as dispatch_param words its refusal.
template <class T>
ParamRef<T> param_ref(const loom_backend& b, const char* op, const char* name, const DLTensor* t,
                      int64_t count) {
  if (t == nullptr) return {};
  const bool f32 = is_f32(t->dtype);
  if (!f32 && !loom_dtype_eq(t->dtype, dtype_of<T>()))
    fail(op, std::string(name) + " is " + dtype_str(t->dtype) + "; expected " +
                 dtype_str(dtype_of<T>()) + " (the activations' dtype) or f32");
  return {device_ptr(b, t, op, name, count), f32};
}

__device__ __forceinline__ float ssm_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

}  // namespace loom_cuda
