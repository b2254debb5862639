// Loom SDK C++ helper for backends whose work is done when a call returns (backend/cpu,
// backend/meta): their loom.device-stream/1 table. The device is the CPU, there is no stream,
// and so nothing to record or wait for: event_record gives a NULL event, waiting on one
// returns at once. One table serves every instance; get_ext below hands it out.
#pragma once

#include <cstring>

#include "loom/backend.h"

namespace loom::host_stream {

inline loom_error* event_record(loom_backend*, void** event) noexcept {
  if (event) *event = nullptr;
  return nullptr;
}
inline loom_error* event_noop(loom_backend*, void*) noexcept { return nullptr; }
inline void event_free(loom_backend*, void*) noexcept {}

inline const loom_device_stream kTable = {
    {sizeof(loom_device_stream), LOOM_EXT_DEVICE_STREAM, 0, nullptr},
    DLDevice{kDLCPU, 0},
    nullptr,
    event_record,
    event_noop,
    event_noop,
    event_free};

// The backend table's get_ext: this table for LOOM_EXT_DEVICE_STREAM, NULL for any other id.
inline const loom_ext* get_ext(loom_backend*, const char* id) noexcept {
  return id && std::strcmp(id, LOOM_EXT_DEVICE_STREAM) == 0 ? &kTable.base : nullptr;
}

}  // namespace loom::host_stream
