// The pinned staging ring of from_host (staging.hpp).
#include "staging.hpp"

#include <cstring>

#include "cuda_backend.hpp"

namespace loom_cuda {

Staging::~Staging() {
  auto release = [](Slot& s) {
    if (s.read) (void)cudaEventDestroy(s.read);
    if (s.host) (void)cudaFreeHost(s.host);
  };
  for (Slot& s : slots_) release(s);
  for (Slot* s : all_reads_) {
    release(*s);
    delete s;
  }
}

void Staging::ensure(Slot& s, size_t bytes, const char* op) {
  if (s.read == nullptr)
    LOOM_CUDA_CHECK(op, cudaEventCreateWithFlags(&s.read, cudaEventDisableTiming));
  if (s.capacity >= bytes) return;
  if (s.host) LOOM_CUDA_CHECK(op, cudaFreeHost(s.host));
  s.host = nullptr, s.capacity = 0;
  const size_t cap = bytes < (size_t{64} << 10) ? size_t{64} << 10 : bytes;
  LOOM_CUDA_CHECK(op, cudaMallocHost(&s.host, cap));
  s.capacity = cap;
}

void* Staging::start_read(const void* src, size_t bytes, cudaStream_t stream) {
  if (free_reads_.empty()) {  // a few at most are in flight: each is finished within a step
    all_reads_.push_back(new Slot());
    free_reads_.push_back(all_reads_.back());
  }
  Slot* s = free_reads_.back();
  ensure(*s, bytes, "read_start");
  free_reads_.pop_back();
  const cudaError_t rc = cudaMemcpyAsync(s->host, src, bytes, cudaMemcpyDeviceToHost, stream);
  const cudaError_t ev = rc == cudaSuccess ? cudaEventRecord(s->read, stream) : rc;
  if (ev != cudaSuccess) free_reads_.push_back(s);
  LOOM_CUDA_CHECK("read_start", ev);
  return s;
}

void Staging::finish_read(void* read, void* dst, size_t bytes) {
  Slot* s = static_cast<Slot*>(read);
  free_reads_.push_back(s);  // whatever happens below, the slot is idle again
  const cudaError_t ready = cudaEventQuery(s->read);
  LOOM_CUDA_CHECK("read_finish", ready == cudaErrorNotReady ? event_sync(s->read) : ready);
  if (bytes > s->capacity) fail("read_finish", "more bytes asked for than were read");
  std::memcpy(dst, s->host, bytes);
}

void Staging::copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  Slot& s = slots_[next_++ % slots_.size()];
  // The slot's last copy was queued three copies ago: almost always done. Wait (counted as a
  // host synchronisation) only when it is not.
  if (s.read) {
    const cudaError_t ready = cudaEventQuery(s.read);
    LOOM_CUDA_CHECK("from_host", ready == cudaErrorNotReady ? event_sync(s.read) : ready);
  }
  ensure(s, bytes, "from_host");
  std::memcpy(s.host, src, bytes);
  LOOM_CUDA_CHECK("from_host", cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK("from_host", cudaEventRecord(s.read, stream));
}

}  // namespace loom_cuda
