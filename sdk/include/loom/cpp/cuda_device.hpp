// For CUDA plugins only (it includes cuda_runtime.h): why this process cannot use a CUDA
// device, in the words every CUDA plugin refuses with, so that users and tools/gpu-check
// read one phrase whichever plugin was asked first.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

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

}  // namespace loom
