// The pipeline's point-to-point messages: buffers pooled by shape, sends that do not wait for
// the peer to take them, blocking receives into pooled buffers.
//
// A message is sent started (ABI 2.20's LOOM_COMM_CALL_SEND; comm/mpi: MPI_Isend): a blocking
// send above MPI's eager limit held the rank until the peer reached its recv, idle while the
// peer computed. What goes out are copies, since the model's tensors may change at its next
// stage call; they return to the pool once sent. A comm that refuses a started send (one
// built for 2.12 to 2.19) gets blocking sends. Calls run on the backend's stream, after the
// model's ops that made the tensors; with a NULL stream (backend/cpu) a call's tensors are
// ready when it returns.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"

namespace loom::pipeline {

using Specs = std::vector<std::pair<DLDataType, std::vector<int64_t>>>;  // dtypes and shapes

class Messages {
 public:
  Messages(const loom_host* host, const loom::Backend& be) : host_(host), be_(be) {}
  ~Messages() { abandon(); }
  void set_comm(loom_comm_ref comm, loom_comm_group* group) {
    comm_ = comm;
    group_ = group;
  }

  std::vector<loom::Tensor> take(const Specs& specs) {
    std::vector<loom::Tensor> r;
    for (const auto& [dt, shape] : specs) {
      auto& list = pool_[key(dt, shape)];
      if (list.empty()) {
        r.emplace_back(be_, dt, shape);
        continue;
      }
      r.push_back(std::move(list.back()));
      list.pop_back();
    }
    return r;
  }
  void give_back(std::vector<loom::Tensor>& ts) {
    for (loom::Tensor& t : ts)
      pool_[key(t.get()->dtype, shape_of(t.get()))].push_back(std::move(t));
    ts.clear();
  }

  void send(const std::vector<DLTensor*>& ts, int peer, int tag) {
    void* stream = be_.stream();
    if (!started_) {
      for (const DLTensor* t : ts)
        loom::check(host_, loom::comm_send(comm_, group_, t, peer, tag, stream));
      return;
    }
    Specs specs;
    for (const DLTensor* t : ts) specs.emplace_back(t->dtype, shape_of(t));
    InFlight m{take(specs), {}};
    for (size_t i = 0; i < ts.size(); ++i) {
      be_.call(&loom_ops::copy, m.copies[i].get(), static_cast<const DLTensor*>(ts[i]));
      loom_comm_request* r = nullptr;
      loom_error* e =
          loom::comm_start_send(comm_, group_, m.copies[i].get(), peer, tag, stream, &r);
      if (e != nullptr && !went_ && i == 0) {  // refused: send blocking from now on
        host_->error_free(e);
        give_back(m.copies);
        started_ = false;
        return send(ts, peer, tag);
      }
      loom::check(host_, e);
      went_ = true;
      m.reqs.push_back(r);
    }
    sending_.push_back(std::move(m));
    reap(false);
  }
  void recv(std::vector<loom::Tensor>& ts, int peer, int tag) {
    void* stream = be_.stream();
    for (loom::Tensor& t : ts)
      loom::check(host_, loom::comm_recv(comm_, group_, t.get(), peer, tag, stream));
  }
  // The messages taken by now (all: every one, waiting for it), their copies back to the pool.
  void reap(bool all) {
    for (auto it = sending_.begin(); it != sending_.end();) {
      bool done = true;
      for (loom_comm_request* r : it->reqs) {
        int d = 1;
        if (!all) loom::check(host_, loom::comm_test(comm_, r, &d));
        done = done && d != 0;
      }
      if (!done) {
        ++it;
        continue;
      }
      for (loom_comm_request* r : it->reqs) loom::check(host_, loom::comm_wait(comm_, r));
      give_back(it->copies);
      it = sending_.erase(it);
    }
  }
  // A run that failed may leave messages in flight, whose copies the comm can still read:
  // they stay allocated (the job is ending), never freed under it.
  void abandon() {
    for (InFlight& m : sending_) new std::vector<loom::Tensor>(std::move(m.copies));
    sending_.clear();
  }

 private:
  struct InFlight {  // a message sent, not yet known to be taken
    std::vector<loom::Tensor> copies;
    std::vector<loom_comm_request*> reqs;
  };
  static std::vector<int64_t> shape_of(const DLTensor* t) {
    return std::vector<int64_t>(t->shape, t->shape + t->ndim);
  }
  static std::string key(DLDataType dt, const std::vector<int64_t>& shape) {
    std::string k = std::to_string(dt.code);
    k += ':';
    k += std::to_string(dt.bits);
    for (int64_t d : shape) {
      k += ',';  // (appending "," + to_string trips GCC 12's -Wrestrict false positive)
      k += std::to_string(d);
    }
    return k;
  }

  const loom_host* host_;
  const loom::Backend& be_;
  loom_comm_ref comm_{nullptr, nullptr};
  loom_comm_group* group_ = nullptr;                       // host-owned
  std::map<std::string, std::vector<loom::Tensor>> pool_;  // free buffers by dtype and shape
  std::vector<InFlight> sending_;
  bool started_ = true;  // false once the comm refused a started send
  bool went_ = false;    // a started send has gone through
};

}  // namespace loom::pipeline
