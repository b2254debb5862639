// comm/single: the world of one process. world_rank 0, world_size 1, and every group has
// one member, so each collective is the identity on this rank's data:
//  - all_reduce (SUM, MAX, MIN, AVG over one rank) and broadcast leave the tensor as it
//    is and never touch its memory, so they accept a tensor on any device: a one-GPU run
//    can use ddp over comm/single;
//  - reduce_scatter, all_gather, all_to_all and all_to_all_v copy `in` to `out` (equal element
//  counts
//    and dtypes, since a group of 1 has one chunk); copying needs CPU memory (kDLCPU or
//    kDLCUDAHost) unless `in` and `out` are the same buffer;
//  - send/recv to peer 0 (this rank) go through an in-process FIFO per tag: the send
//    copies the data and returns, a later recv with the same tag takes it. A recv with
//    nothing queued is an error rather than a deadlock. Any other peer is an error.
// A NULL group means the world. A stream (loom_comm_args.stream) is accepted and left alone:
// every call is complete when it returns, identities having nothing to enqueue.
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm_args.hpp"
#include "loom/cpp/comm_plugin.hpp"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/plugin.hpp"

struct loom_comm_group {
  int color;
};

namespace {

using loom::shape_str;

// The op arrives from C, where any int fits in the enum; read its bytes as an int so an
// out-of-range value is reported instead of being undefined behaviour in C++.
std::string at(const char* fn) { return std::string("comm/single: ") + fn; }

void check_op(int32_t op, const char* fn) { loom::comm_reduce_op(at(fn), op); }

void check_tensor(const DLTensor* t, const char* fn, const char* what) {
  loom::comm_tensor(at(fn), what, t);
}

char* bytes_of(const DLTensor* t) { return static_cast<char*>(t->data) + t->byte_offset; }
size_t nbytes(const DLTensor* t) {
  return static_cast<size_t>(loom_tensor_numel(t)) * loom_dtype_bytes(t->dtype);
}

// The memory must be readable by memcpy (compactness is check_tensor's).
void check_host_memory(const DLTensor* t, const char* fn, const char* what) {
  const int dev = t->device.device_type;
  loom::require(dev == kDLCPU || dev == kDLCUDAHost,
                at(fn) + ": " + what + " is on device type " + std::to_string(dev) +
                    "; comm/single copies CPU memory only (use comm \"nccl\" for GPU tensors)");
}

// in -> out for a group of one: same dtype, same element count.
void copy_through(const DLTensor* in, DLTensor* out, const char* fn) {
  check_tensor(in, fn, "in");
  check_tensor(out, fn, "out");
  loom::comm_same_dtype(at(fn), in, out);
  loom::require(loom_tensor_numel(in) == loom_tensor_numel(out),
                std::string("comm/single: ") + fn + ": in " + shape_str(in) + " and out " +
                    shape_str(out) + " must have equal element counts in a group of 1");
  if (bytes_of(in) == bytes_of(out) && in->device.device_type == out->device.device_type &&
      in->device.device_id == out->device.device_id)
    return;  // in place
  check_host_memory(in, fn, "in");
  check_host_memory(out, fn, "out");
  if (nbytes(in) > 0) std::memmove(bytes_of(out), bytes_of(in), nbytes(in));
}

struct Message {
  DLDataType dtype;
  int64_t numel;
  std::vector<char> data;
};

void check_peer(int peer) {
  loom::require(peer == 0, "comm/single: no peer " + std::to_string(peer) + " in a world of 1");
}

class SingleComm {
 public:
  explicit SingleComm(const loom_host* host) : host_(host) {}
  const loom_host* host() const { return host_; }

  void send(const DLTensor* t, int peer, int tag) {
    check_peer(peer);
    check_tensor(t, "send", "tensor");
    check_host_memory(t, "send", "tensor");
    Message m{t->dtype, loom_tensor_numel(t),
              std::vector<char>(bytes_of(t), bytes_of(t) + nbytes(t))};
    std::lock_guard<std::mutex> lock(mu_);
    queues_[tag].push_back(std::move(m));
  }

  void recv(DLTensor* t, int peer, int tag) {
    check_peer(peer);
    check_tensor(t, "recv", "tensor");
    check_host_memory(t, "recv", "tensor");
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queues_.find(tag);
    loom::require(it != queues_.end() && !it->second.empty(),
                  "comm/single: recv from self with tag " + std::to_string(tag) +
                      " has no earlier send to match (it would never complete)");
    Message& m = it->second.front();
    loom::require(loom_dtype_eq(m.dtype, t->dtype) && m.numel == loom_tensor_numel(t),
                  "comm/single: recv with tag " + std::to_string(tag) + " expects " +
                      std::to_string(loom_tensor_numel(t)) + " elements but the send had " +
                      std::to_string(m.numel) + " (or another dtype)");
    if (!m.data.empty()) std::memcpy(bytes_of(t), m.data.data(), m.data.size());
    it->second.pop_front();
    if (it->second.empty()) queues_.erase(it);
  }

 private:
  const loom_host* host_;
  std::mutex mu_;
  std::map<int, std::deque<Message>> queues_;  // self-sends not yet received, per tag
};

SingleComm* cast(loom_comm* c) { return reinterpret_cast<SingleComm*>(c); }

loom_error* create(const loom_host* host, const loom_config*, loom_comm** out) {
  return loom::guard(host, [&] { *out = reinterpret_cast<loom_comm*>(new SingleComm(host)); });
}
void destroy(loom_comm* c) { delete cast(c); }
int world_rank(loom_comm*) { return 0; }
int world_size(loom_comm*) { return 1; }

loom_error* group_create(loom_comm* c, const int* colors, const char*, loom_comm_group** out) {
  return loom::guard(cast(c)->host(), [&] { *out = new loom_comm_group{colors[0]}; });
}
void group_destroy(loom_comm*, loom_comm_group* g) { delete g; }
int group_rank(loom_comm*, loom_comm_group*) { return 0; }
int group_size(loom_comm*, loom_comm_group*) { return 1; }

const loom_host* host_of(loom_comm* c) { return cast(c)->host(); }

loom_error* all_reduce(loom_comm* c, loom_comm_group*, DLTensor* t, int32_t op, void*) {
  return loom::guard(cast(c)->host(), [&] {
    check_op(op, "all_reduce");
    check_tensor(t, "all_reduce", "tensor");
    // The reduction of one rank's tensor is that tensor, for every op (AVG divides by 1).
  });
}
loom_error* reduce_scatter(loom_comm* c, loom_comm_group*, const DLTensor* in, DLTensor* out,
                           int32_t op, void*) {
  return loom::guard(cast(c)->host(), [&] {
    check_op(op, "reduce_scatter");
    copy_through(in, out, "reduce_scatter");
  });
}
loom_error* all_gather(loom_comm* c, loom_comm_group*, const DLTensor* in, DLTensor* out, void*) {
  return loom::guard(cast(c)->host(), [&] { copy_through(in, out, "all_gather"); });
}
loom_error* broadcast(loom_comm* c, loom_comm_group*, DLTensor* t, int root, void*) {
  return loom::guard(cast(c)->host(), [&] {
    loom::comm_rank(at("broadcast"), "root", root, 1);
    check_tensor(t, "broadcast", "tensor");
  });
}
loom_error* all_to_all(loom_comm* c, loom_comm_group*, const DLTensor* in, DLTensor* out, void*) {
  return loom::guard(cast(c)->host(), [&] { copy_through(in, out, "all_to_all"); });
}
loom_error* barrier(loom_comm*, loom_comm_group*, void*) { return nullptr; }
loom_error* send(loom_comm* c, loom_comm_group*, const DLTensor* t, int peer, int tag, void*) {
  return loom::guard(cast(c)->host(), [&] { cast(c)->send(t, peer, tag); });
}
loom_error* recv(loom_comm* c, loom_comm_group*, DLTensor* t, int peer, int tag, void*) {
  return loom::guard(cast(c)->host(), [&] { cast(c)->recv(t, peer, tag); });
}

// A group of 1 sends its one chunk to itself: out = in.
loom_error* all_to_all_v(loom_comm* c, loom_comm_group*, const DLTensor* in, DLTensor* out,
                         const int64_t*, const int64_t*, void*) {
  return loom::guard(cast(c)->host(), [&] { copy_through(in, out, "all_to_all_v"); });
}

constexpr loom::CommCalls kCalls{"comm/single",  true,         host_of,
                                 world_rank,     group_create, all_reduce,
                                 reduce_scatter, all_gather,   broadcast,
                                 all_to_all,     barrier,      send,
                                 recv,           all_to_all_v, group_size,
                                 nullptr,        nullptr,      nullptr,
                                 nullptr,        nullptr};  // start: done inside it; abort:
                                                            // one rank, nothing to end
constexpr loom_comm_api kApi =
    loom::CommSlots<kCalls>::api(create, destroy, world_size, group_destroy, group_rank);

}  // namespace

LOOM_PLUGIN(
        .description =
            "one process, no communication: collectives are identities, send/recv to self queue",
        .api = &kApi)
