// The watchdog over a multi-rank job's blocking communication (comm.timeout_s, issue 17).
//
// A rank that dies or stalls leaves the others blocked in a collective forever: MPI has no
// timeout of its own. The engine hands every plugin a comm table of its own (CommWatch) whose
// blocking slots note what this rank is waiting in (the call, the group, the peer, the bytes)
// and forward to the comm plugin. A thread checks that note; when one call has waited longer
// than the timeout it prints, on this rank, what it was waiting in and at which iteration, and
// ends the whole job through the comm's abort (exit code 1). The rank that stalled is not in a
// collective; the ranks waiting for it fire, and the launcher ends it with them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "loom/loom.h"

namespace loom::engine {

class CommWatch {
 public:
  // Watches `inner` (the comm plugin's instance); a call blocked for `timeout_s` ends the job.
  CommWatch(loom_comm_ref inner, double timeout_s);
  ~CommWatch();
  CommWatch(const CommWatch&) = delete;
  CommWatch& operator=(const CommWatch&) = delete;

  // What plugins and the engine are given instead of `inner`.
  loom_comm_ref ref() { return {&table_, reinterpret_cast<loom_comm*>(this)}; }

  // The iteration the training loop is in (-1: setting up), for the watchdog's message.
  static void set_iteration(int64_t iter);
  // Seconds this process has spent blocked in watched comm calls (0 without a watch).
  static double waited_s();

  // One blocking call, as noted (described only when the watchdog fires).
  struct Call {
    const char* name = "";    // the slot: "all_reduce", ...
    const char* prefix = "";  // "start of ", "wait for the started "
    loom_comm_group* group = nullptr;
    const char* group_name = nullptr;  // group_create: the group being made
    int32_t peer = -1, tag = 0;
    int64_t bytes = -1;
  };
  static Call call_of(const char* name, const loom_comm_args* a);

  // RAII: this rank is in the blocking call `c` until the Wait is destroyed.
  class Wait {
   public:
    Wait(CommWatch& w, const Call& c);
    ~Wait();

   private:
    CommWatch& w_;
  };
  void name_group(loom_comm_group* g, const char* name);
  void note_request(loom_comm_request* r, const Call& c);
  Call take_request(loom_comm_request* r);

  const loom_comm_ref inner;

 private:
  void watch();
  // "all_reduce over the tensor group (2 ranks), 4.0 KiB" (under mu_)
  std::string describe(const Call& c) const;
  [[noreturn]] void fire(double waited, const std::string& what);

  loom_comm_api table_;
  const double timeout_s_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  double entered_ = 0;  // steady seconds when the current call began; 0 = in no call
  Call current_;
  int world_ = 1, rank_ = 0;
  std::map<loom_comm_group*, std::pair<std::string, int>> groups_;  // name, size
  std::map<loom_comm_request*, Call> requests_;
  std::thread thread_;
};

}  // namespace loom::engine
