// CommWatch (comm_watch.hpp): the comm table plugins are handed in a multi-rank job with
// comm.timeout_s > 0, and the thread that ends the job when one blocking call waits too long.
#include "session/comm_watch.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "session/host.hpp"
#include "session/step_timer.hpp"

namespace loom::engine {
namespace {

std::atomic<int64_t> g_iteration{-1};
std::atomic<int64_t> g_waited_ns{0};

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CommWatch& watch_of(loom_comm* c) { return *reinterpret_cast<CommWatch*>(c); }

std::string bytes_str(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, unit[u]);
  return buf;
}

// A blocking slot: the call noted for the watchdog, then the plugin's own.
template <auto Slot, class... Rest>
loom_error* watched(const char* name, loom_comm* c, const loom_comm_args* a, Rest... rest) {
  CommWatch& w = watch_of(c);
  const CommWatch::Call call = CommWatch::call_of(name, a);
  const StepTimer::Scope timed(TimeKind::comm, Work{0, call.bytes > 0 ? (double)call.bytes : 0});
  CommWatch::Wait wait(w, call);
  return (w.inner.api->*Slot)(w.inner.self, a, rest...);
}

}  // namespace

void CommWatch::set_iteration(int64_t iter) { g_iteration.store(iter); }
double CommWatch::waited_s() { return 1e-9 * (double)g_waited_ns.load(); }

CommWatch::Call CommWatch::call_of(const char* name, const loom_comm_args* a) {
  Call c;
  c.name = name;
  if (a == nullptr) return c;
  c.group = a->group;
  c.peer = a->peer, c.tag = a->tag;
  const DLTensor* t = a->out ? a->out : a->in;
  if (t) c.bytes = loom_tensor_numel(t) * (int64_t)loom_dtype_bytes(t->dtype);
  return c;
}

CommWatch::Wait::Wait(CommWatch& w, const Call& c) : w_(w) {
  std::lock_guard<std::mutex> lock(w_.mu_);
  w_.current_ = c;
  w_.entered_ = steady_s();
}
CommWatch::Wait::~Wait() {
  std::lock_guard<std::mutex> lock(w_.mu_);
  g_waited_ns += (int64_t)(1e9 * (steady_s() - w_.entered_));
  w_.entered_ = 0;
}

void CommWatch::name_group(loom_comm_group* g, const char* name) {
  const int n = inner.api->group_size(inner.self, g);
  std::lock_guard<std::mutex> lock(mu_);
  groups_[g] = {name && *name ? name : "unnamed", n};
}

std::string CommWatch::describe(const Call& c) const {
  const std::string name = c.name;
  if (c.group_name) return "group_create of the " + std::string(c.group_name) + " group";
  std::string group = "world";
  int n = world_;
  auto it = groups_.find(c.group);
  if (c.group && it != groups_.end()) group = it->second.first, n = it->second.second;
  std::string s =
      c.prefix + name + " over the " + group + " group (" + std::to_string(n) + " ranks)";
  if (name == "send" || name == "recv")
    s += std::string(name == "send" ? ", to" : ", from") + " group rank " + std::to_string(c.peer) +
         " (tag " + std::to_string(c.tag) + ")";
  if (name == "broadcast") s += ", root " + std::to_string(c.peer);
  if (c.bytes >= 0) s += ", " + bytes_str((double)c.bytes);
  return s;
}

void CommWatch::note_request(loom_comm_request* r, const Call& c) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_[r] = c;
}
CommWatch::Call CommWatch::take_request(loom_comm_request* r) {
  std::lock_guard<std::mutex> lock(mu_);
  Call c;
  c.name = "a started call";
  auto it = requests_.find(r);
  if (it == requests_.end()) return c;
  c = it->second;
  c.prefix = "wait for the started ";
  requests_.erase(it);
  return c;
}

CommWatch::CommWatch(loom_comm_ref in, double timeout_s)
    : inner(in),
      table_(*in.api),
      timeout_s_(timeout_s),
      world_(in.api->world_size(in.self)),
      rank_(in.api->world_rank(in.self)) {
  using Api = loom_comm_api;
  loom_comm_api& t = table_;
  t.destroy = [](loom_comm* c) { watch_of(c).inner.api->destroy(watch_of(c).inner.self); };
  t.world_rank = [](loom_comm* c) {
    return watch_of(c).inner.api->world_rank(watch_of(c).inner.self);
  };
  t.world_size = [](loom_comm* c) {
    return watch_of(c).inner.api->world_size(watch_of(c).inner.self);
  };
  t.group_create = [](loom_comm* c, const loom_group_create_args* a, loom_comm_group** out) {
    CommWatch& w = watch_of(c);
    Call call;
    call.name = "group_create";
    call.group_name = a && a->name ? a->name : "unnamed";
    loom_error* err = nullptr;
    {
      Wait wait(w, call);
      err = w.inner.api->group_create(w.inner.self, a, out);
    }
    if (!err && out && *out) w.name_group(*out, a ? a->name : nullptr);
    return err;
  };
  t.group_destroy = [](loom_comm* c, loom_comm_group* g) {
    watch_of(c).inner.api->group_destroy(watch_of(c).inner.self, g);
  };
  t.group_rank = [](loom_comm* c, loom_comm_group* g) {
    return watch_of(c).inner.api->group_rank(watch_of(c).inner.self, g);
  };
  t.group_size = [](loom_comm* c, loom_comm_group* g) {
    return watch_of(c).inner.api->group_size(watch_of(c).inner.self, g);
  };
  t.all_reduce = [](loom_comm* c, const loom_comm_args* a) {
    return watched<&Api::all_reduce>("all_reduce", c, a);
  };
  t.reduce_scatter = [](loom_comm* c, const loom_comm_args* a) {
    return watched<&Api::reduce_scatter>("reduce_scatter", c, a);
  };
  t.all_gather = [](loom_comm* c, const loom_comm_args* a) {
    return watched<&Api::all_gather>("all_gather", c, a);
  };
  t.broadcast = [](loom_comm* c, const loom_comm_args* a) {
    return watched<&Api::broadcast>("broadcast", c, a);
  };
  t.all_to_all = [](loom_comm* c, const loom_comm_args* a) {
    return watched<&Api::all_to_all>("all_to_all", c, a);
  };
  t.barrier = [](loom_comm* c, const loom_comm_args* a) {
    return watched<&Api::barrier>("barrier", c, a);
  };
  t.send = [](loom_comm* c, const loom_comm_args* a) { return watched<&Api::send>("send", c, a); };
  t.recv = [](loom_comm* c, const loom_comm_args* a) { return watched<&Api::recv>("recv", c, a); };
  // Slots past ABI 2.0 only where the plugin's table has them (struct_size stays the plugin's).
  if (in.api->struct_size >= LOOM_COMM_API_SIZE_V2_5 && in.api->all_to_all_v)
    t.all_to_all_v = [](loom_comm* c, const loom_comm_args* a, const int64_t* sc,
                        const int64_t* rc) {
      return watched<&Api::all_to_all_v>("all_to_all_v", c, a, sc, rc);
    };
  if (in.api->struct_size >= LOOM_COMM_API_SIZE_V2_12 && in.api->start) {
    t.start = [](loom_comm* c, int32_t call, const loom_comm_args* a, loom_comm_request** out) {
      CommWatch& w = watch_of(c);
      Call noted = call_of(call == LOOM_COMM_CALL_ALL_REDUCE       ? "all_reduce"
                           : call == LOOM_COMM_CALL_REDUCE_SCATTER ? "reduce_scatter"
                                                                   : "all_gather",
                           a);
      loom_error* err = nullptr;
      {
        Call starting = noted;
        starting.prefix = "start of ";  // a plugin may finish the call inside start
        Wait wait(w, starting);
        err = w.inner.api->start(w.inner.self, call, a, out);
      }
      if (!err && out && *out) w.note_request(*out, noted);
      return err;
    };
    t.wait = [](loom_comm* c, loom_comm_request* r) {
      CommWatch& w = watch_of(c);
      Wait wait(w, w.take_request(r));
      return w.inner.api->wait(w.inner.self, r);
    };
    t.test = [](loom_comm* c, loom_comm_request* r, int* done) {
      return watch_of(c).inner.api->test(watch_of(c).inner.self, r, done);
    };
  }
  if (in.api->struct_size >= LOOM_COMM_API_SIZE_V2_14 && in.api->abort)
    t.abort = [](loom_comm* c, int code) {
      watch_of(c).inner.api->abort(watch_of(c).inner.self, code);
    };
  thread_ = std::thread([this] { watch(); });
}

CommWatch::~CommWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommWatch::watch() {
  // Looks a few times per timeout, at least once a second: a stall is reported within
  // timeout_s plus that period.
  const auto period = std::chrono::duration<double>(std::min(1.0, timeout_s_ / 4));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    if (entered_ == 0) continue;
    const double waited = steady_s() - entered_;
    if (waited < timeout_s_) continue;
    const std::string what = describe(current_);
    lock.unlock();
    fire(waited, what);
  }
}

void CommWatch::fire(double waited, const std::string& what) {
  const int64_t iter = g_iteration.load();
  const std::string when =
      iter < 0 ? "before the first iteration" : "in iteration " + std::to_string(iter);
  // stderr directly, flushed before the abort: every rank's line reaches the launcher's log.
  std::fprintf(stderr,
               "rank %d: comm watchdog: no progress for %.1f s (comm.timeout_s = %g) in %s, %s; "
               "a rank may have died or stalled: ending the job\n",
               rank_, waited, timeout_s_, what.c_str(), when.c_str());
  std::fflush(stderr);
  if (inner.api->struct_size >= LOOM_COMM_API_SIZE_V2_14 && inner.api->abort)
    inner.api->abort(inner.self, 1);
  std::_Exit(1);
}

}  // namespace loom::engine
