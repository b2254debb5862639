// The step profile (train.timers, Megatron's --timing-log-level as one recipe key).
//
// While it is on, the engine hands every plugin a backend table whose ops are timed
// (timed_backend.cpp), and times the attention calls (capability_gate.cpp), the blocking comm
// calls (comm_watch.cpp), the data feed, the gradient norm and the optimizer step (train.cpp).
// Each call made during a step gets two timing marks on the backend's stream
// (loom.device-stream/1's timer_record, ABI 2.16): device time on a GPU, the host clock on
// the CPU, whose work is done when a call returns. Only the outermost call is timed: the
// GEMMs inside attention/reference count as attention. Marks are read once, at the end of
// the step, which already waits for the device, so timing adds no synchronisation of its own.
//
// Times are summed by kind (GEMM forward, dgrad and wgrad, attention, norm, ...) and by the
// layer the model announced last (the residency unit, ABI 2.13), beside each kind's floor:
// the FLOPs and bytes the calls must do and move, over the GEMM rate and copy bandwidth the
// timer measures on the same device when it starts. The gap is the step's wall time that no
// timed call covers: launch gaps and host work. Off, nothing here runs: the plugins get the
// backend's own table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom::engine {

enum class TimeKind : int {
  gemm_fwd,
  gemm_dgrad,
  gemm_wgrad,
  attn_fwd,
  attn_bwd,
  ssm,  // Mamba-2's convolution and selective scan (ABI 2.22)
  norm,
  activation,
  bias,
  rope,
  softmax,
  loss,
  embedding,
  elementwise,
  transfer,
  grad_norm,
  optimizer,
  comm,
  data,
  count
};
constexpr int kTimeKinds = (int)TimeKind::count;
const char* time_kind_name(TimeKind k);  // "gemm_fwd", ... (metrics keys)

// What a call must do at least: FLOPs on the matrix units and bytes through device memory.
struct Work {
  double flops = 0;
  double bytes = 0;
};
// The bytes of a tensor (0 for NULL), what a Work counts per operand read or written.
inline double tensor_bytes(const DLTensor* t) {
  return t ? (double)loom_tensor_numel(t) * (double)loom_dtype_bytes(t->dtype) : 0.0;
}

// Per-kind and per-layer sums since the last report, per step.
struct TimerReport {
  int64_t steps = 0;
  double step_ms = 0;  // wall time per step
  std::array<double, kTimeKinds> ms{}, calls{}, flops{}, bytes{};
  std::vector<double> unit_ms;  // [unit]: 0 the embedding and head, 1 + l layer l
  double outside_ms = 0;        // calls outside the model's layers (unit -1)
  double launches = 0, host_syncs = 0, mallocs = 0;  // per step (backend counters)
  uint64_t mallocs_after_step2 = 0;                  // device allocations since step 2 ended
  double gemm_tflops = 0, copy_gbps = 0;             // the measured ceilings
  double gap_ms() const;
  double floor_ms(int kind) const;  // max(FLOPs / GEMM rate, bytes / bandwidth) per step
};

class StepTimer {
 public:
  // Measures the ceilings on `be` (a raw table, never the timed one) in `dtype`, the
  // compute dtype of the run's matrix products.
  StepTimer(loom_backend_ref be, DLDataType dtype);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  // The run's profiler while one exists, else nullptr (one run per process at a time).
  static StepTimer* active();

  // One timed call: outermost calls inside a step are recorded, nested ones belong to it.
  class Scope {
   public:
    Scope(TimeKind kind, const Work& work = {});
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepTimer* t_ = nullptr;
    size_t index_ = 0;
  };

  // The backend table the plugins are given while the profile is on (timed_backend.cpp).
  loom_backend_ref timed_backend() const;
  const loom_backend_api* raw_api() const { return be_.api; }

  // The model announced this layer; -1: the calls that follow are outside the model (the data
  // feed, the gradient reduction and norm, the optimizer).
  void set_unit(int32_t unit) { unit_ = unit; }
  void begin_step();
  // Reads the step's marks (the device is done with them: the step synchronised) and adds
  // them to the report; step_s is the step's wall time.
  void end_step(double step_s);
  // The sums since the last take, per step, and a fresh start.
  TimerReport take();

 private:
  struct Call {
    TimeKind kind;
    int32_t unit;
    Work work;
    void* start = nullptr;
    void* end = nullptr;
  };
  void* mark();
  void calibrate(DLDataType dtype);
  void counters(uint64_t out[3]) const;

  loom_backend_ref be_;
  const loom_device_stream* ds_ = nullptr;
  bool recording_ = false;
  int32_t unit_ = 0;
  int64_t steps_done_ = 0;
  uint64_t step_counters_[3] = {0, 0, 0};
  uint64_t mallocs_at_step2_ = 0;
  std::vector<Call> calls_;
  TimerReport sums_;
};

// The profile table at a log line: per kind ms per step, share, calls, the floor and how far
// from it; per layer; the counters.
std::string format_report(const TimerReport& r);

}  // namespace loom::engine
