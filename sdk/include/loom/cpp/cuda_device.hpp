// For CUDA plugins only (it includes cuda_runtime.h): why this process cannot use a CUDA
// device, in the words every CUDA plugin refuses with, so that users and tools/gpu-check
// read one phrase whichever plugin was asked first; and the backend's CUDA stream, which a
// plugin with its own kernels enqueues on.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

#include "loom/cpp/tensor.hpp"

namespace loom {

// "" when at least one CUDA device is usable; otherwise "no CUDA device (why)", where why
// names a missing driver (libcuda.so.1) apart from a driver that sees no device.
inline std::string cuda_unavailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return "";
  (void)cudaGetLastError();  // clear the sticky error for whoever asks next
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr)
    return "no CUDA device (no CUDA driver: libcuda.so.1 not found)";
  else
    dlclose(driver);
  if (e != cudaSuccess)
    return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e) + ")";
  return "no CUDA device (cudaGetDeviceCount found 0)";
}

// The active backend's stream and device (loom.device-stream/1), made current; a refusal
// naming `who` when the backend is not on a CUDA GPU.
struct CudaStream {
  cudaStream_t stream = nullptr;
  int device = -1;
};
inline CudaStream backend_cuda_stream(const loom_host* host, const std::string& who) {
  const loom_device_stream& ds = Backend(host).device_stream(who);
  require(ds.device.device_type == kDLCUDA,
          who +
              ": the backend's device is not a CUDA GPU; choose backend.plugin = \"cuda\" "
              "or another plugin",
          LOOM_ERR_UNIMPLEMENTED);
  const cudaError_t e = cudaSetDevice(ds.device.device_id);
  require(e == cudaSuccess, who + ": cudaSetDevice: " + cudaGetErrorString(e), LOOM_ERR_INTERNAL);
  return CudaStream{static_cast<cudaStream_t>(ds.stream), ds.device.device_id};
}

}  // namespace loom
