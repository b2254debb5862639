// Loom SDK C++ helpers for callers of a comm plugin: each call with positional arguments,
// over loom_comm_args (loom/comm.h). `c` is a loom_comm_ref (or anything with its api and
// self). `stream`: NULL, the call blocks; the backend's (loom::Backend::stream()), the call is
// enqueued on it and later work on that stream sees the result. backend/cpu's stream is NULL,
// so passing the backend's stream is right for every backend and comm pairing that works at
// all. Each returns the plugin's error (NULL on success) for the caller to check with its own
// context.
#pragma once

#include "loom/comm.h"

namespace loom {

// This rank's group of `colors` (world_size entries, every rank passes the same); `name`
// ("tensor") appears in the plugin's messages. COLLECTIVE over the world.
template <class Ref>
loom_error* comm_group_create(const Ref& c, const int* colors, const char* name,
                              loom_comm_group** out) {
  const loom_group_create_args a{LOOM_GROUP_CREATE_ARGS_SIZE_V2, colors, name, nullptr};
  return c.api->group_create(c.self, &a, out);
}
template <class Ref>
loom_error* comm_all_reduce(const Ref& c, loom_comm_group* g, DLTensor* t,
                            loom_reduce_op op = LOOM_REDUCE_SUM, void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, nullptr, t, op, 0, 0, stream, nullptr};
  return c.api->all_reduce(c.self, &a);
}
template <class Ref>
loom_error* comm_reduce_scatter(const Ref& c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                                loom_reduce_op op = LOOM_REDUCE_SUM, void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, in, out, op, 0, 0, stream, nullptr};
  return c.api->reduce_scatter(c.self, &a);
}
template <class Ref>
loom_error* comm_all_gather(const Ref& c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                            void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, in, out, 0, 0, 0, stream, nullptr};
  return c.api->all_gather(c.self, &a);
}
template <class Ref>
loom_error* comm_broadcast(const Ref& c, loom_comm_group* g, DLTensor* t, int root,
                           void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, nullptr, t, 0, root, 0, stream, nullptr};
  return c.api->broadcast(c.self, &a);
}
template <class Ref>
loom_error* comm_all_to_all(const Ref& c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                            void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, in, out, 0, 0, 0, stream, nullptr};
  return c.api->all_to_all(c.self, &a);
}
// ABI 2.5: rows of in by send_counts[j] to rank j, out by recv_counts[j] from rank j (host
// arrays of group_size entries).
template <class Ref>
loom_error* comm_all_to_all_v(const Ref& c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                              const int64_t* send_counts, const int64_t* recv_counts,
                              void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, in, out, 0, 0, 0, stream, nullptr};
  return c.api->all_to_all_v(c.self, &a, send_counts, recv_counts);
}
template <class Ref>
loom_error* comm_barrier(const Ref& c, loom_comm_group* g, void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, nullptr, nullptr, 0, 0, 0, stream, nullptr};
  return c.api->barrier(c.self, &a);
}
template <class Ref>
loom_error* comm_send(const Ref& c, loom_comm_group* g, const DLTensor* t, int peer, int tag,
                      void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, t, nullptr, 0, peer, tag, stream, nullptr};
  return c.api->send(c.self, &a);
}
template <class Ref>
loom_error* comm_recv(const Ref& c, loom_comm_group* g, DLTensor* t, int peer, int tag,
                      void* stream = nullptr) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, nullptr, t, 0, peer, tag, stream, nullptr};
  return c.api->recv(c.self, &a);
}

// ABI 2.12: `call` (a loom_comm_call) started, completed by comm_wait. `in` is NULL for
// all_reduce (in place on out). A comm older than 2.12 runs the call to completion here and
// *req is NULL, which comm_wait and comm_test accept: callers need no second path.
template <class Ref>
loom_error* comm_start(const Ref& c, loom_comm_call call, loom_comm_group* g, const DLTensor* in,
                       DLTensor* out, loom_reduce_op op, void* stream, loom_comm_request** req) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, in, out, op, 0, 0, stream, nullptr};
  *req = nullptr;
  if (c.api->struct_size >= LOOM_COMM_API_SIZE_V2_12) return c.api->start(c.self, call, &a, req);
  if (call == LOOM_COMM_CALL_ALL_REDUCE) return c.api->all_reduce(c.self, &a);
  if (call == LOOM_COMM_CALL_REDUCE_SCATTER) return c.api->reduce_scatter(c.self, &a);
  return c.api->all_gather(c.self, &a);
}
// ABI 2.20: a send started (completed by comm_wait), or, with a comm older than 2.12, sent
// now (*req NULL). A comm of 2.12 to 2.19 refuses the call: the caller sends blocking then.
template <class Ref>
loom_error* comm_start_send(const Ref& c, loom_comm_group* g, const DLTensor* t, int peer, int tag,
                            void* stream, loom_comm_request** req) {
  const loom_comm_args a{LOOM_COMM_ARGS_SIZE_V2, g, t, nullptr, 0, peer, tag, stream, nullptr};
  *req = nullptr;
  if (c.api->struct_size >= LOOM_COMM_API_SIZE_V2_12)
    return c.api->start(c.self, LOOM_COMM_CALL_SEND, &a, req);
  return c.api->send(c.self, &a);
}
template <class Ref>
loom_error* comm_wait(const Ref& c, loom_comm_request* req) {
  return req ? c.api->wait(c.self, req) : nullptr;
}
template <class Ref>
loom_error* comm_test(const Ref& c, loom_comm_request* req, int* done) {
  *done = 1;
  return req ? c.api->test(c.self, req, done) : nullptr;
}

}  // namespace loom
