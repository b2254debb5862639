// StepTimer (step_timer.hpp): the marks of one step's calls, their sums by kind and layer,
// the device's measured ceilings, and the table a log line prints.
#include "session/step_timer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "base/errors.hpp"

namespace loom::engine {
namespace {

StepTimer* g_active = nullptr;
std::thread::id g_thread;      // the training loop's: other threads' calls are not timed
thread_local int t_depth = 0;  // timed calls open on this thread

constexpr const char* kNames[kTimeKinds] = {
    "gemm_fwd",   "gemm_dgrad", "gemm_wgrad", "attn_fwd", "attn_bwd", "ssm",       "norm",
    "activation", "bias",       "rope",       "softmax",  "loss",     "embedding", "elementwise",
    "transfer",   "grad_norm",  "optimizer",  "comm",     "data"};

// A backend tensor of n elements for the calibration, freed with it.
struct Buf {
  Buf(loom_backend_ref b, DLDataType dtype, int64_t n) : be(b) {
    check(be.api->alloc_tensor(be.self, dtype, 1, &n, &t), "train.timers: calibration tensor");
  }
  ~Buf() { be.api->free_tensor(be.self, t); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  DLTensor* get() const { return t; }
  loom_backend_ref be;
  DLTensor* t = nullptr;
};

// A tensor of `n` elements of `dtype` holding uniform values in [-1, 1) (matrix units run
// faster on zeros, so the ceiling is measured on random data), through an f32 staging tensor
// that copy converts from.
std::unique_ptr<Buf> random_tensor(loom_backend_ref be, DLDataType dtype, int64_t n,
                                   uint32_t seed) {
  std::vector<float> host((size_t)n);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : host) x = u(gen);
  auto staged = std::make_unique<Buf>(be, loom_f32(), n);
  check(be.api->from_host(be.self, staged->get(), host.data(), host.size() * sizeof(float)),
        "train.timers: staging calibration data");
  if (loom_dtype_eq(dtype, loom_f32())) return staged;
  auto t = std::make_unique<Buf>(be, dtype, n);
  check(be.api->ops->copy(be.self, t->get(), staged->get()),
        "train.timers: casting calibration data");
  return t;
}

}  // namespace

const char* time_kind_name(TimeKind k) { return kNames[(int)k]; }

double TimerReport::gap_ms() const {
  double covered = 0;
  for (double m : ms) covered += m;
  return step_ms - covered;
}

double TimerReport::floor_ms(int k) const {
  const double f = gemm_tflops > 0 ? flops[(size_t)k] / (gemm_tflops * 1e9) : 0;
  const double b = copy_gbps > 0 ? bytes[(size_t)k] / (copy_gbps * 1e6) : 0;
  return std::max(f, b);
}

StepTimer::StepTimer(loom_backend_ref be, DLDataType dtype) : be_(be) {
  const loom_ext* ext =
      be.api->get_ext ? be.api->get_ext(be.self, LOOM_EXT_DEVICE_STREAM) : nullptr;
  ds_ = reinterpret_cast<const loom_device_stream*>(ext);
  if (ds_ == nullptr || ds_->base.struct_size < LOOM_DEVICE_STREAM_SIZE_V2_16 ||
      !ds_->timer_record || !ds_->timer_elapsed || !ds_->timer_free)
    throw UsageError(
        "train.timers = true needs the backend's timing marks (loom.device-stream/1's "
        "timer_record, ABI 2.16); this backend has none");
  if (g_active != nullptr) throw RunError("train.timers: a step profile is already running");
  calibrate(dtype);
  g_active = this;
}

StepTimer::~StepTimer() {
  for (Call& c : calls_) ds_->timer_free(be_.self, c.start), ds_->timer_free(be_.self, c.end);
  if (g_active == this) g_active = nullptr;
}

StepTimer* StepTimer::active() { return g_active; }

void* StepTimer::mark() {
  void* m = nullptr;
  check(ds_->timer_record(be_.self, &m), "train.timers: recording a timing mark");
  return m;
}

// The copy bandwidth (bytes read plus written) and the GEMM rate in the run's compute dtype,
// each the best of a few repeats after a warm-up, timed with the same marks as the calls.
void StepTimer::calibrate(DLDataType dtype) {
  const bool cpu = ds_->device.device_type == kDLCPU;
  auto timed = [&](int reps, auto&& fn) {
    fn();  // warm-up: plans, caches, first-touch pages
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      void* a = mark();
      for (int i = 0; i < reps; ++i) fn();
      void* b = mark();
      double ms = 0;
      check(ds_->timer_elapsed(be_.self, a, b, &ms), "train.timers: reading a timing mark");
      ds_->timer_free(be_.self, a), ds_->timer_free(be_.self, b);
      best = std::min(best, ms / reps);
    }
    return std::max(best, 1e-6);
  };
  const int64_t n = cpu ? (int64_t)8 << 20 : (int64_t)64 << 20;  // f32 elements: 32 / 256 MiB
  {
    const auto src = random_tensor(be_, loom_f32(), n, 1);
    const Buf dst(be_, loom_f32(), n);
    const double copy_ms = timed(cpu ? 2 : 10, [&] {
      check(be_.api->ops->copy(be_.self, dst.get(), src->get()),
            "train.timers: measuring bandwidth");
    });
    sums_.copy_gbps = 2.0 * (double)n * 4 / (copy_ms * 1e6);
  }
  const int64_t m = cpu ? 1024 : 8192;
  const auto a = random_tensor(be_, dtype, m * m, 2), b = random_tensor(be_, dtype, m * m, 3);
  const Buf c(be_, dtype, m * m);
  const loom_gemm_args g{LOOM_GEMM_ARGS_SIZE_V2,
                         0,
                         1,
                         m,
                         m,
                         m,
                         1.0,
                         0.0,
                         a->get(),
                         m,
                         0,
                         0,
                         b->get(),
                         m,
                         0,
                         0,
                         c.get(),
                         m,
                         0,
                         0,
                         1,
                         nullptr};
  const double gemm_ms = timed(cpu ? 1 : 10, [&] {
    check(be_.api->ops->gemm(be_.self, &g), "train.timers: measuring the GEMM rate");
  });
  sums_.gemm_tflops = 2.0 * (double)m * m * m / (gemm_ms * 1e9);
  check(be_.api->synchronize(be_.self), "train.timers: synchronize");
}

void StepTimer::counters(uint64_t out[3]) const {
  loom_backend_info info{};
  info.struct_size = sizeof info;
  check(be_.api->get_info(be_.self, &info), "train.timers: backend info");
  const bool has = info.struct_size >= LOOM_BACKEND_INFO_SIZE_V2_16;
  out[0] = has ? info.kernel_launches : 0;
  out[1] = has ? info.host_syncs : 0;
  out[2] = has ? info.device_mallocs : 0;
}

StepTimer::Scope::Scope(TimeKind kind, const Work& work) {
  StepTimer* t = g_active;
  if (t == nullptr || !t->recording_ || std::this_thread::get_id() != g_thread) return;
  if (t_depth > 0) {  // inside a timed call: it is part of that one
    t_ = t, index_ = SIZE_MAX, ++t_depth;
    return;
  }
  void* start = t->mark();  // may throw: then nothing is open and the destructor never runs
  t->calls_.push_back({kind, t->unit_, work, start, nullptr});
  t_ = t, index_ = t->calls_.size() - 1, ++t_depth;
}

StepTimer::Scope::~Scope() {
  if (t_ == nullptr) return;
  --t_depth;
  if (index_ == SIZE_MAX) return;
  void* m = nullptr;
  // A destructor cannot throw: a failed mark leaves the call untimed (end NULL, 0 ms).
  if (loom_error* err = t_->ds_->timer_record(t_->be_.self, &m))
    free_error(err);
  else
    t_->calls_[index_].end = m;
}

void StepTimer::begin_step() {
  g_thread = std::this_thread::get_id();
  unit_ = -1;
  counters(step_counters_);
  recording_ = true;
}

void StepTimer::end_step(double step_s) {
  recording_ = false;
  for (Call& c : calls_) {
    double ms = 0;
    if (c.start && c.end)
      check(ds_->timer_elapsed(be_.self, c.start, c.end, &ms), "train.timers: reading a mark");
    ds_->timer_free(be_.self, c.start), ds_->timer_free(be_.self, c.end);
    const size_t k = (size_t)c.kind;
    sums_.ms[k] += ms, sums_.calls[k] += 1;
    sums_.flops[k] += c.work.flops, sums_.bytes[k] += c.work.bytes;
    if (c.unit >= 0) {
      if (sums_.unit_ms.size() <= (size_t)c.unit) sums_.unit_ms.resize((size_t)c.unit + 1, 0.0);
      sums_.unit_ms[(size_t)c.unit] += ms;
    } else {
      sums_.outside_ms += ms;
    }
  }
  calls_.clear();
  uint64_t now[3];
  counters(now);
  sums_.launches += (double)(now[0] - step_counters_[0]);
  sums_.host_syncs += (double)(now[1] - step_counters_[1]);
  sums_.mallocs += (double)(now[2] - step_counters_[2]);
  if (++steps_done_ == 2) mallocs_at_step2_ = now[2];
  sums_.mallocs_after_step2 = steps_done_ >= 2 ? now[2] - mallocs_at_step2_ : 0;
  sums_.step_ms += 1e3 * step_s;
  ++sums_.steps;
}

TimerReport StepTimer::take() {
  TimerReport r = sums_;
  const double n = (double)std::max<int64_t>(r.steps, 1);
  for (int k = 0; k < kTimeKinds; ++k) {
    r.ms[(size_t)k] /= n, r.calls[(size_t)k] /= n;
    r.flops[(size_t)k] /= n, r.bytes[(size_t)k] /= n;
  }
  for (double& u : r.unit_ms) u /= n;
  r.outside_ms /= n;
  r.step_ms /= n, r.launches /= n, r.host_syncs /= n, r.mallocs /= n;
  const TimerReport fresh = [&] {
    TimerReport f;
    f.gemm_tflops = sums_.gemm_tflops, f.copy_gbps = sums_.copy_gbps;
    f.mallocs_after_step2 = sums_.mallocs_after_step2;
    return f;
  }();
  sums_ = fresh;
  return r;
}

std::string format_report(const TimerReport& r) {
  std::string out = fmt::format(
      "step profile, mean of {} step(s): {:.2f} ms per step; measured ceilings: GEMM {:.1f} "
      "TFLOP/s, copy {:.0f} GB/s\n"
      "  {:<12} {:>9} {:>7} {:>7} {:>9} {:>8}  {}\n",
      r.steps, r.step_ms, r.gemm_tflops, r.copy_gbps, "kind", "ms/step", "share", "calls",
      "floor ms", "of floor", "bound by");
  for (int k = 0; k < kTimeKinds; ++k) {
    const size_t i = (size_t)k;
    if (r.calls[i] == 0) continue;
    const double floor = r.floor_ms(k);
    const bool flops = r.gemm_tflops > 0 && r.flops[i] / (r.gemm_tflops * 1e9) >= floor * 0.999;
    out += fmt::format("  {:<12} {:>9.3f} {:>6.1f}% {:>7.0f} {:>9.3f} {:>7.1f}%  {}\n", kNames[k],
                       r.ms[i], 100 * r.ms[i] / std::max(r.step_ms, 1e-12), r.calls[i], floor,
                       100 * floor / std::max(r.ms[i], 1e-12),
                       floor == 0 ? "-"
                       : flops    ? "matrix rate"
                                  : "memory bandwidth");
  }
  out += fmt::format("  {:<12} {:>9.3f} {:>6.1f}%   (wall time no timed call covers)\n", "gap",
                     r.gap_ms(), 100 * r.gap_ms() / std::max(r.step_ms, 1e-12));
  if (!r.unit_ms.empty()) {
    out += "  by layer (ms/step):";
    for (size_t u = 0; u < r.unit_ms.size(); ++u)
      out += u == 0 ? fmt::format(" embed+head={:.3f}", r.unit_ms[u])
                    : fmt::format(" h{}={:.3f}", u - 1, r.unit_ms[u]);
    out += fmt::format(" outside the layers={:.3f}\n", r.outside_ms);
  }
  out += fmt::format(
      "  per step: {:.0f} kernel launches, {:.0f} host synchronisations, {:.1f} device "
      "allocations; {} device allocations since step 2",
      r.launches, r.host_syncs, r.mallocs, r.mallocs_after_step2);
  return out;
}

}  // namespace loom::engine
