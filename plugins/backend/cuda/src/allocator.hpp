// backend/cuda: the caching device allocator behind alloc_tensor/free_tensor.
//
// cudaMalloc/cudaFree synchronise the device and cost tens of microseconds, and a training
// step frees and re-allocates the same activation sizes every iteration. Blocks are therefore
// rounded up to a size class (512 B steps below 1 MiB, 2 MiB steps above), a freed block
// goes back to its class's free list, and cudaMalloc is called only when that list is
// empty. Every op of an instance runs on its one stream, so a block freed after queuing
// work that reads it may be handed out again at once: the next user's work is queued behind
// it (stream order), no event is needed.
//
// A CUDA graph (loom.graph/1, graph.cpp) replays the addresses its capture used. Blocks freed
// while a capture runs therefore go to that capture's pool, not to the shared lists: the
// capture reuses them (its own work, in stream order), nothing outside it can, and they join
// the shared lists when the graph is freed (release_pool). Until then they count as in use.
//
// Thread contract: the one thread that drives the instance (backend.h); no locking.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace loom_cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator();  // returns every block, live or cached, to the driver
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (256-byte aligned, as cudaMalloc gives); throws loom::Error
  // (OUT_OF_MEMORY naming the size and the bytes in use) when the device is full even after
  // the cache was emptied. `bytes` 0 still gets a unique block.
  void* allocate(size_t bytes);
  // Back to its class's free list; false when ptr was not allocated here (or freed already).
  bool release(void* ptr) noexcept;
  // cudaFree of every cached (free) block; live blocks and pools' blocks stay.
  void empty_cache() noexcept;

  // Graph capture: from begin_pool to end_pool, releases go to a new pool (its id returned)
  // and allocations take from it first; release_pool hands its blocks to the shared lists.
  uint64_t begin_pool();
  void end_pool() noexcept { capturing_ = nullptr; }
  void release_pool(uint64_t id) noexcept;

  static size_t round_size(size_t bytes);  // the size class a request is served from

  size_t in_use() const { return in_use_; }  // bytes of live blocks (rounded sizes)
  size_t peak() const { return peak_; }
  size_t cached() const { return cached_; }           // bytes of free blocks held for reuse
  size_t device_mallocs() const { return mallocs_; }  // cudaMalloc calls so far
  size_t live_blocks() const { return live_.size(); }

 private:
  using FreeLists = std::unordered_map<size_t, std::vector<void*>>;  // size class -> blocks
  // A cudaMalloc, allowed while the thread's stream is being captured.
  cudaError_t malloc_block(void** p, size_t size);

  int device_;
  FreeLists free_;
  std::unordered_map<void*, size_t> live_;  // block -> its size class
  std::unordered_map<uint64_t, FreeLists> pools_;
  FreeLists* capturing_ = nullptr;  // the pool of the capture under way
  uint64_t next_pool_ = 1;
  size_t in_use_ = 0, peak_ = 0, cached_ = 0, mallocs_ = 0;
};

// ---- scratch -------------------------------------------------------------------------------
// Device memory for one op's intermediates, from the instance's caching allocator and back to
// it when the object dies (so an exception between launches cannot leak it). Handing it back
// before the kernels queued on it have run is safe for the reason the allocator's reuse is:
// every op of the instance runs on its one stream (allocator.hpp). It was cudaMallocAsync /
// cudaFreeAsync, which asked the driver again every step (27 times per gpt2-124m step in the
// step profile, H200, 2026-11-26); the cache serves the same sizes from the second step on.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, CachingAllocator& alloc)
      : alloc_(alloc), ptr_(alloc_.allocate(bytes < 16 ? 16 : bytes)) {}
  ~StreamScratch() { alloc_.release(ptr_); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  // The part at byte `offset`; callers keep offsets multiples of 256.
  template <class T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + offset);
  }

 private:
  CachingAllocator& alloc_;
  void* ptr_ = nullptr;
};

}  // namespace loom_cuda
