// Loom SDK C++ helper for backends whose work is done when a call returns (backend/cpu,
// backend/meta): their loom.device-stream/1 table. The device is the CPU, there is no stream,
// and so nothing to record or wait for: event_record gives a NULL event, waiting on one
// returns at once. A timing mark (ABI 2.16) is the host clock at the call, which is when the
// work before it was done. A read (ABI 2.27) copies at once into a heap buffer that
// read_finish hands over and frees; a tensor with no memory (backend/meta's) reads as zeros.
// One table serves every instance; get_ext below hands it out. Inside a graph's body
// (loom.graph/1, graph.hpp's host_graph) the calls that wait or read are refused.
#pragma once

#include <chrono>
#include <cstring>
#include <new>
#include <vector>

#include "loom/backend.h"
#include "loom/cpp/graph.hpp"

namespace loom::host_stream {

inline loom_error* event_record(loom_backend*, void** event) noexcept {
  if (event) *event = nullptr;
  return nullptr;
}
inline loom_error* event_noop(loom_backend*, void*) noexcept { return nullptr; }
inline loom_error* event_sync(loom_backend* be, void*) noexcept {
  return host_graph::refusal(be, "event_sync");
}
inline void event_free(loom_backend*, void*) noexcept {}

// A mark is a heap-held steady-clock reading in nanoseconds.
inline loom_error* timer_record(loom_backend* be, void** mark) noexcept {
  if (loom_error* e = host_graph::refusal(be, "timer_record")) return e;
  if (mark == nullptr) return nullptr;
  *mark = new (std::nothrow) long long(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now().time_since_epoch())
                                           .count());
  return nullptr;
}
inline loom_error* timer_elapsed(loom_backend* be, void* start, void* end, double* ms) noexcept {
  if (loom_error* e = host_graph::refusal(be, "timer_elapsed")) return e;
  if (ms == nullptr) return nullptr;
  *ms = start && end
            ? 1e-6 * (double)(*static_cast<long long*>(end) - *static_cast<long long*>(start))
            : 0.0;
  return nullptr;
}
inline void timer_free(loom_backend*, void* mark) noexcept { delete static_cast<long long*>(mark); }

inline loom_error* read_start(loom_backend* be, const DLTensor* src, void** read) noexcept {
  if (loom_error* e = host_graph::refusal(be, "read_start")) return e;
  if (read == nullptr) return nullptr;
  auto* bytes = new (std::nothrow) std::vector<char>();
  if (bytes && src) {
    const size_t n = (size_t)loom_tensor_numel(src) * loom_dtype_bytes(src->dtype);
    bytes->assign(n, 0);
    if (src->data)
      std::memcpy(bytes->data(), static_cast<const char*>(src->data) + src->byte_offset, n);
  }
  *read = bytes;
  return nullptr;
}
inline loom_error* read_finish(loom_backend* be, void* read, void* dst, size_t bytes) noexcept {
  if (loom_error* e = host_graph::refusal(be, "read_finish")) return e;
  auto* held = static_cast<std::vector<char>*>(read);
  if (dst && bytes > 0) {
    std::memset(dst, 0, bytes);
    if (held) std::memcpy(dst, held->data(), bytes < held->size() ? bytes : held->size());
  }
  delete held;
  return nullptr;
}

inline const loom_device_stream kTable = {
    {sizeof(loom_device_stream), LOOM_EXT_DEVICE_STREAM, 0, nullptr},
    DLDevice{kDLCPU, 0},
    nullptr,
    event_record,
    event_noop,
    event_sync,
    event_free,
    timer_record,
    timer_elapsed,
    timer_free,
    read_start,
    read_finish};

// The backend table's get_ext: this table for LOOM_EXT_DEVICE_STREAM, NULL for any other id.
inline const loom_ext* get_ext(loom_backend*, const char* id) noexcept {
  return id && std::strcmp(id, LOOM_EXT_DEVICE_STREAM) == 0 ? &kTable.base : nullptr;
}

}  // namespace loom::host_stream
