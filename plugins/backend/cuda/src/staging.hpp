// Host-to-device copies that do not wait for the device: from_host's contract is only that
// the caller may reuse its memory on return (backend.h), and a stream sync there drained the
// GPU twice per micro-batch (tokens, then targets in the middle of the forward), leaving it
// idle while the host launched the next kernels. A small copy goes through a pinned staging
// buffer instead: the host copies into it, the device copy is queued on the stream, and the
// buffer is reused only after its event says the device has read it.
//
// The other way (ABI 2.27's read_start/read_finish, loom.device-stream/1): a small read is
// queued into a pinned buffer with an event after it, and the host waits for that event
// alone, not for the work queued behind it (the update after the gradient norm).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <vector>

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

  // Queues pinned <- src (device memory, `bytes`) on `stream`; the handle goes to finish_read.
  void* start_read(const void* src, size_t bytes, cudaStream_t stream);
  // Waits for that copy alone (counted as a host synchronisation when it has not landed),
  // copies it to dst and takes the buffer back.
  void finish_read(void* read, void* dst, size_t bytes);

 private:
  struct Slot {
    void* host = nullptr;  // pinned
    size_t capacity = 0;
    cudaEvent_t read = nullptr;  // recorded after the copy that read (or wrote) `host`
  };
  // A slot of at least `bytes` (64 KiB at least), its event created.
  static void ensure(Slot& s, size_t bytes, const char* op);
  std::array<Slot, 4> slots_{};
  size_t next_ = 0;
  std::vector<Slot*> free_reads_, all_reads_;  // reads' slots: idle ones, and every one
};

}  // namespace loom_cuda
