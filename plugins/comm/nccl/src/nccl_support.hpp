// comm/nccl support: errors from CUDA and NCCL turned into loom errors that name the
// function and the failing call; the device guard and device buffer the communicator uses;
// the names of dtypes, devices and shapes in messages, and the ABI's op and dtype mapped to
// NCCL's. Included by comm/nccl's own files only.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "loom/comm.h"
#include "loom/cpp/comm_args.hpp"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/plugin.hpp"

namespace comm_nccl {

using loom::device_str;
using loom::dtype_str;
using loom::shape_str;

inline constexpr const char* kPrefix = "comm/nccl: ";

[[noreturn]] inline void fail(loom_status code, const char* fn, const std::string& what) {
  throw loom::Error(code, std::string(kPrefix) + fn + ": " + what);
}

inline std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

inline void cuda_check(cudaError_t e, const char* fn, const char* call) {
  if (e == cudaSuccess) return;
  fail(e == cudaErrorMemoryAllocation ? LOOM_ERR_OUT_OF_MEMORY : LOOM_ERR_INTERNAL, fn,
       std::string(call) + " failed: " + cuda_text(e));
}

// NCCL's error name plus its last message, which says what was wrong in detail.
inline void nccl_check(ncclResult_t r, const char* fn, const char* call,
                       ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  std::string text = std::string(call) + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  if (r == ncclSystemError || r == ncclRemoteError || r == ncclInternalError)
    text += "; NCCL_DEBUG=WARN prints NCCL's own diagnosis";
  const bool caller = r == ncclInvalidArgument || r == ncclInvalidUsage;
  fail(caller ? LOOM_ERR_INVALID_ARGUMENT : LOOM_ERR_INTERNAL, fn, text);
}

// Makes `device` current for the life of the object, then restores the caller's device.
// `strict` = false (destructors) ignores a failure to switch instead of throwing.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device, bool strict = true) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ == device) return;
    const cudaError_t e = cudaSetDevice(device);
    if (strict) cuda_check(e, "device", "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = -1;
    if (prev_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// Device memory freed with the object: scratch copies and the barrier's one integer.
class DeviceBuffer {
 public:
  // With `ordered`, allocated and freed in that stream's order (cudaMallocAsync,
  // cudaFreeAsync): no synchronisation, and the memory lives until the stream's work before
  // the free is done.
  DeviceBuffer(size_t bytes, const char* fn, cudaStream_t ordered = nullptr) : ordered_(ordered) {
    if (bytes == 0) return;
    if (ordered_ != nullptr)
      cuda_check(cudaMallocAsync(&ptr_, bytes, ordered_), fn, "cudaMallocAsync");
    else
      cuda_check(cudaMalloc(&ptr_, bytes), fn, "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (ptr_ == nullptr) return;
    if (ordered_ != nullptr)
      cudaFreeAsync(ptr_, ordered_);
    else
      cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t ordered_ = nullptr;
};

// The ABI's op (checked by the SDK: it arrives from C, where any int fits) as NCCL's.
inline ncclRedOp_t nccl_op(int32_t op, const char* fn) {
  switch (loom::comm_reduce_op(std::string(kPrefix) + fn, op)) {
    case LOOM_REDUCE_SUM:
      return ncclSum;
    case LOOM_REDUCE_MAX:
      return ncclMax;
    case LOOM_REDUCE_MIN:
      return ncclMin;
    case LOOM_REDUCE_AVG:
      return ncclAvg;
  }
  fail(LOOM_ERR_INTERNAL, fn, "reduce op out of range after the check");
}

// The NCCL type NCCL reduces `d` as; moving data only needs bytes (ncclUint8).
inline ncclDataType_t reduce_type(DLDataType d, const char* fn) {
  if (d.lanes == 1) {
    if (d.code == kDLFloat && d.bits == 16) return ncclFloat16;
    if (d.code == kDLFloat && d.bits == 32) return ncclFloat32;
    if (d.code == kDLFloat && d.bits == 64) return ncclFloat64;
    if (d.code == kDLBfloat && d.bits == 16) return ncclBfloat16;
    if (d.code == kDLInt && d.bits == 8) return ncclInt8;
    if (d.code == kDLInt && d.bits == 32) return ncclInt32;
    if (d.code == kDLInt && d.bits == 64) return ncclInt64;
    if (d.code == kDLUInt && d.bits == 8) return ncclUint8;
    if (d.code == kDLUInt && d.bits == 32) return ncclUint32;
    if (d.code == kDLUInt && d.bits == 64) return ncclUint64;
  }
  fail(LOOM_ERR_UNIMPLEMENTED, fn,
       "dtype " + dtype_str(d) +
           " cannot be reduced (f16, bf16, f32, f64, i8, i32, i64, u8, u32, u64 can)");
}

}  // namespace comm_nccl
