// backend/cuda: the caching device allocator (see allocator.hpp for the policy).
#include "allocator.hpp"

#include <cuda_runtime.h>

#include <string>

#include "cuda_backend.hpp"
#include "loom/cpp/plugin.hpp"

namespace loom_cuda {

namespace {
constexpr size_t kSmallStep = 512;          // class step below kLarge
constexpr size_t kLarge = size_t(1) << 20;  // 1 MiB: from here on, 2 MiB steps
constexpr size_t kLargeStep = size_t(2) << 20;
}  // namespace

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kSmallStep;
  if (bytes < kLarge) return (bytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  if (size < bytes)  // rounding overflowed: no device has that much memory
    throw loom::Error(LOOM_ERR_OUT_OF_MEMORY,
                      "backend/cuda: alloc_tensor: " + std::to_string(bytes) + " bytes requested");
  void* p = nullptr;
  auto take = [&](FreeLists& lists) {
    auto it = lists.find(size);
    if (it == lists.end() || it->second.empty()) return false;
    p = it->second.back();
    it->second.pop_back();
    return true;
  };
  if (capturing_ && take(*capturing_)) {
    // a block this capture freed: still counted in use (the pool's)
    live_.emplace(p, size);
    return p;
  }
  if (take(free_)) {
    cached_ -= size;
  } else {
    cudaError_t e = malloc_block(&p, size);
    if (e == cudaErrorMemoryAllocation && cached_ > 0) {
      // Blocks of other classes may be sitting idle: give them back and try once more.
      (void)cudaGetLastError();
      empty_cache();
      e = malloc_block(&p, size);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw loom::Error(e == cudaErrorMemoryAllocation ? LOOM_ERR_OUT_OF_MEMORY : LOOM_ERR_INTERNAL,
                        "backend/cuda: alloc_tensor: cudaMalloc(" + std::to_string(size) +
                            " bytes) failed: " + cudaGetErrorString(e) + " (" +
                            std::to_string(in_use_) + " bytes in use by this backend, " +
                            std::to_string(free_b) + " of " + std::to_string(total_b) +
                            " free on device " + std::to_string(device_) + ")");
    }
    ++mallocs_;
  }
  live_.emplace(p, size);
  in_use_ += size;
  if (in_use_ > peak_) peak_ = in_use_;
  return p;
}

bool CachingAllocator::release(void* ptr) noexcept {
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const size_t size = it->second;
  live_.erase(it);
  if (capturing_) {  // the graph may write it at every replay: the pool's until release_pool
    (*capturing_)[size].push_back(ptr);
    return true;
  }
  in_use_ -= size;
  cached_ += size;
  free_[size].push_back(ptr);
  return true;
}

cudaError_t CachingAllocator::malloc_block(void** p, size_t size) {
  if (capturing_ == nullptr) return device_malloc(p, size);
  // cudaMalloc enqueues nothing, so a capture need not see it; the thread's capture mode
  // would refuse it as possibly unsafe. The block is the graph's from now on.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t e = device_malloc(p, size);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}

uint64_t CachingAllocator::begin_pool() {
  const uint64_t id = next_pool_++;
  capturing_ = &pools_[id];
  return id;
}

void CachingAllocator::release_pool(uint64_t id) noexcept {
  auto it = pools_.find(id);
  if (it == pools_.end()) return;
  if (capturing_ == &it->second) capturing_ = nullptr;
  for (auto& [size, blocks] : it->second)
    for (void* p : blocks) {
      in_use_ -= size;
      cached_ += size;
      free_[size].push_back(p);
    }
  pools_.erase(it);
}

void CachingAllocator::empty_cache() noexcept {
  if (cached_ == 0) return;
  // cudaFree synchronises the device first, so no queued kernel still uses these blocks.
  int prev = -1;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) (void)cudaFree(p);
  free_.clear();
  cached_ = 0;
  if (prev >= 0) (void)cudaSetDevice(prev);
}

CachingAllocator::~CachingAllocator() {
  while (!pools_.empty()) release_pool(pools_.begin()->first);  // graphs left unfreed
  empty_cache();
  for (auto& [p, size] : live_) (void)cudaFree(p);
  live_.clear();
}

}  // namespace loom_cuda
