// Loom SDK C++ helper for backends whose work is done when a call returns (backend/cpu,
// backend/meta): their loom.device-stream/1 table. The device is the CPU, there is no stream,
// and so nothing to record or wait for: event_record gives a NULL event, waiting on one
// returns at once. A timing mark (ABI 2.16) is the host clock at the call, which is when the
// work before it was done. One table serves every instance; get_ext below hands it out.
#pragma once

#include <chrono>
#include <cstring>
#include <new>

#include "loom/backend.h"

namespace loom::host_stream {

inline loom_error* event_record(loom_backend*, void** event) noexcept {
  if (event) *event = nullptr;
  return nullptr;
}
inline loom_error* event_noop(loom_backend*, void*) noexcept { return nullptr; }
inline void event_free(loom_backend*, void*) noexcept {}

// A mark is a heap-held steady-clock reading in nanoseconds.
inline loom_error* timer_record(loom_backend*, void** mark) noexcept {
  if (mark == nullptr) return nullptr;
  *mark = new (std::nothrow) long long(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now().time_since_epoch())
                                           .count());
  return nullptr;
}
inline loom_error* timer_elapsed(loom_backend*, void* start, void* end, double* ms) noexcept {
  if (ms == nullptr) return nullptr;
  *ms = start && end
            ? 1e-6 * (double)(*static_cast<long long*>(end) - *static_cast<long long*>(start))
            : 0.0;
  return nullptr;
}
inline void timer_free(loom_backend*, void* mark) noexcept { delete static_cast<long long*>(mark); }

inline const loom_device_stream kTable = {
    {sizeof(loom_device_stream), LOOM_EXT_DEVICE_STREAM, 0, nullptr},
    DLDevice{kDLCPU, 0},
    nullptr,
    event_record,
    event_noop,
    event_noop,
    event_free,
    timer_record,
    timer_elapsed,
    timer_free};

// The backend table's get_ext: this table for LOOM_EXT_DEVICE_STREAM, NULL for any other id.
inline const loom_ext* get_ext(loom_backend*, const char* id) noexcept {
  return id && std::strcmp(id, LOOM_EXT_DEVICE_STREAM) == 0 ? &kTable.base : nullptr;
}

}  // namespace loom::host_stream
