// Host-to-device copies that do not wait for the device: from_host's contract is only that
// the caller may reuse its memory on return (backend.h), and a stream sync there drained the
// GPU twice per micro-batch (tokens, then targets in the middle of the forward), leaving it
// idle while the host launched the next kernels. A small copy goes through a pinned staging
// buffer instead: the host copies into it, the device copy is queued on the stream, and the
// buffer is reused only after its event says the device has read it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>

namespace loom_cuda {

class Staging {
 public:
  // Copies larger than this keep the synchronous path (checkpoint loads: a pinned copy of
  // them would cost more than it saves).
  static constexpr size_t kMaxBytes = size_t{8} << 20;

  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging();  // after the stream is synchronised

  // Queues dst <- src (bytes <= kMaxBytes) on `stream`; src is reusable on return.
  void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

 private:
  struct Slot {
    void* host = nullptr;  // pinned
    size_t capacity = 0;
    cudaEvent_t read = nullptr;  // recorded after the copy that read `host`
  };
  std::array<Slot, 4> slots_{};
  size_t next_ = 0;
};

}  // namespace loom_cuda
