// The pinned staging ring of from_host (staging.hpp).
#include "staging.hpp"

#include <cstring>

#include "cuda_backend.hpp"

namespace loom_cuda {

Staging::~Staging() {
  for (Slot& s : slots_) {
    if (s.read) (void)cudaEventDestroy(s.read);
    if (s.host) (void)cudaFreeHost(s.host);
  }
}

void Staging::copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  Slot& s = slots_[next_++ % slots_.size()];
  if (s.read == nullptr)
    LOOM_CUDA_CHECK("from_host", cudaEventCreateWithFlags(&s.read, cudaEventDisableTiming));
  // The slot's last copy was queued three copies ago: almost always done. Wait (counted as a
  // host synchronisation) only when it is not.
  const cudaError_t ready = cudaEventQuery(s.read);
  LOOM_CUDA_CHECK("from_host", ready == cudaErrorNotReady ? event_sync(s.read) : ready);
  if (s.capacity < bytes) {
    if (s.host) LOOM_CUDA_CHECK("from_host", cudaFreeHost(s.host));
    s.host = nullptr, s.capacity = 0;
    const size_t cap = bytes < (size_t{64} << 10) ? size_t{64} << 10 : bytes;
    LOOM_CUDA_CHECK("from_host", cudaMallocHost(&s.host, cap));
    s.capacity = cap;
  }
  std::memcpy(s.host, src, bytes);
  LOOM_CUDA_CHECK("from_host", cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK("from_host", cudaEventRecord(s.read, stream));
}

}  // namespace loom_cuda
