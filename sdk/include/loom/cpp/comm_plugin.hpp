// Loom SDK C++ helpers for comm plugins: the ABI table's call slots built from plain
// functions. A plugin writes one function per call with positional arguments and lists them
// in a constexpr loom::CommCalls; loom::CommSlots<calls> unpacks each loom_comm_args into
// them, after the checks every comm makes, in one wording:
//  - args usable (loom::ops_args_refusal: NULL, older than ABI 2.0, an unknown required
//    extension);
//  - a stream only for a plugin that can enqueue on one (`enqueues`); one that works on host
//    memory completes every call before it returns, and refuses a stream by saying so;
//  - all_reduce and broadcast in place: `in` NULL (or `out`);
//  - group_create: colors and out given, this rank's colour >= 0; the group's name (if any)
//    in every message;
//  - start (ABI 2.12): a known loom_comm_call, out given, and that call's own checks. A
//    plugin with no way to run a call in the background leaves `start` NULL: the call then
//    runs to completion inside start (on the given stream, if any), and wait and test find
//    it done. Requests are loom_comm_request objects (below) or the plugin's own types
//    derived from it; wait frees them, whatever happens.
// See comm/mpi for a plugin written this way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/comm.h"
#include "loom/cpp/plugin.hpp"

// A request of a plugin written with loom::CommSlots (comm.h leaves the type opaque): a
// plugin that starts calls in the background derives its own from it.
struct loom_comm_request {
  virtual ~loom_comm_request() = default;
  bool done = false;  // completed already (a call finished inside start)
};

namespace loom {

struct CommCalls {
  const char* name; /* "comm/mpi" */
  bool enqueues;    /* takes loom_comm_args.stream (a device stream) */
  const loom_host* (*host)(loom_comm* c);
  int (*world_rank)(loom_comm* c);
  // This rank's group; colors, out and this rank's colour (>= 0) are checked already, and
  // `name` is never NULL ("" when the caller gave none).
  loom_error* (*group_create)(loom_comm* c, const int* colors, const char* name,
                              loom_comm_group** out);
  loom_error* (*all_reduce)(loom_comm* c, loom_comm_group* g, DLTensor* t, int32_t op,
                            void* stream);
  loom_error* (*reduce_scatter)(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                                int32_t op, void* stream);
  loom_error* (*all_gather)(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                            void* stream);
  loom_error* (*broadcast)(loom_comm* c, loom_comm_group* g, DLTensor* t, int root, void* stream);
  loom_error* (*all_to_all)(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                            void* stream);
  loom_error* (*barrier)(loom_comm* c, loom_comm_group* g, void* stream);
  loom_error* (*send)(loom_comm* c, loom_comm_group* g, const DLTensor* t, int peer, int tag,
                      void* stream);
  loom_error* (*recv)(loom_comm* c, loom_comm_group* g, DLTensor* t, int peer, int tag,
                      void* stream);
  // ABI 2.5: counts checked (group_size entries, >= 0, summing to in's and out's rows).
  loom_error* (*all_to_all_v)(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                              const int64_t* send_counts, const int64_t* recv_counts, void* stream);
  int (*group_size)(loom_comm* c, loom_comm_group* g);
  // ABI 2.12 (NULL: every call runs to completion inside start). start: the call is one of
  // the three collectives of loom_comm_call, its args passed that call's checks, out is given.
  // wait: completes a request that is not done (CommSlots frees it). test: sets *done.
  loom_error* (*start)(loom_comm* c, int32_t call, const loom_comm_args* a,
                       loom_comm_request** out);
  loom_error* (*wait)(loom_comm* c, loom_comm_request* r);
  loom_error* (*test)(loom_comm* c, loom_comm_request* r, int* done);
  // ABI 2.14 (NULL: the host ends a failing rank alone): ends the whole job, never returns.
  void (*abort)(loom_comm* c, int code);
  // ABI 2.20 (NULL: a started send runs to completion inside start): LOOM_COMM_CALL_SEND put
  // in flight; its args passed send's checks, out is given. wait and test complete it.
  loom_error* (*start_send)(loom_comm* c, const loom_comm_args* a, loom_comm_request** out);
};

// "start(all_reduce)" for a started loom_comm_call: how messages name it (the call is one of
// the four, checked by CommSlots::start).
inline const char* start_what(int32_t call) {
  return call == LOOM_COMM_CALL_ALL_REDUCE       ? "start(all_reduce)"
         : call == LOOM_COMM_CALL_REDUCE_SCATTER ? "start(reduce_scatter)"
         : call == LOOM_COMM_CALL_SEND           ? "start(send)"
                                                 : "start(all_gather)";
}

// "group_create(tensor)", or "group_create" for a group without a name: how messages name
// the call.
inline std::string group_create_what(const char* name) {
  return name && *name ? std::string("group_create(") + name + ")" : std::string("group_create");
}

template <const CommCalls& K>
struct CommSlots {
  template <class Fn>
  static loom_error* call(loom_comm* c, const char* fn, const loom_comm_args* a, bool in_place,
                          Fn&& run) {
    const loom_host* host = K.host(c);
    return guard(host, [&] {
      const std::string where = std::string(K.name) + ": " + fn;
      const std::string why = ops_args_refusal(a, LOOM_COMM_ARGS_SIZE_V2);
      require(why.empty(), where + ": " + why);
      require(K.enqueues || a->stream == nullptr,
              where + ": given a device stream, but " + K.name +
                  " works on host memory and completes every call before it returns (with a "
                  "GPU backend use comm \"nccl\"; backend/cpu's stream is NULL)");
      require(!in_place || a->in == nullptr || a->in == a->out,
              where + ": works in place on out; in must be NULL");
      check(host, run());
    });
  }
  static loom_error* group_create(loom_comm* c, const loom_group_create_args* a,
                                  loom_comm_group** out) {
    const loom_host* host = K.host(c);
    return guard(host, [&] {
      const std::string name = a && a->struct_size >= LOOM_GROUP_CREATE_ARGS_SIZE_V2 && a->name
                                   ? std::string(a->name)
                                   : std::string();
      const std::string where = std::string(K.name) + ": " + group_create_what(name.c_str());
      const std::string why = ops_args_refusal(a, LOOM_GROUP_CREATE_ARGS_SIZE_V2);
      require(why.empty(), where + ": " + why);
      require(a->colors != nullptr, where + ": colors is NULL");
      require(out != nullptr, where + ": out is NULL");
      const int rank = K.world_rank(c);
      require(a->colors[rank] >= 0, where + ": rank " + std::to_string(rank) + " has color " +
                                        std::to_string(a->colors[rank]) +
                                        "; colors must be >= 0 (every rank joins a group)");
      check(host, K.group_create(c, a->colors, name.c_str(), out));
    });
  }
  static loom_error* all_reduce(loom_comm* c, const loom_comm_args* a) {
    return call(c, "all_reduce", a, true,
                [&] { return K.all_reduce(c, a->group, a->out, a->op, a->stream); });
  }
  static loom_error* reduce_scatter(loom_comm* c, const loom_comm_args* a) {
    return call(c, "reduce_scatter", a, false,
                [&] { return K.reduce_scatter(c, a->group, a->in, a->out, a->op, a->stream); });
  }
  static loom_error* all_gather(loom_comm* c, const loom_comm_args* a) {
    return call(c, "all_gather", a, false,
                [&] { return K.all_gather(c, a->group, a->in, a->out, a->stream); });
  }
  static loom_error* broadcast(loom_comm* c, const loom_comm_args* a) {
    return call(c, "broadcast", a, true,
                [&] { return K.broadcast(c, a->group, a->out, a->peer, a->stream); });
  }
  static loom_error* all_to_all(loom_comm* c, const loom_comm_args* a) {
    return call(c, "all_to_all", a, false,
                [&] { return K.all_to_all(c, a->group, a->in, a->out, a->stream); });
  }
  // Uneven chunks: the counts must cover in's and out's rows exactly, and the rows must be
  // of one size.
  static loom_error* all_to_all_v(loom_comm* c, const loom_comm_args* a, const int64_t* send,
                                  const int64_t* recv) {
    return call(c, "all_to_all_v", a, false, [&]() -> loom_error* {
      const std::string where = std::string(K.name) + ": all_to_all_v: ";
      require(send != nullptr && recv != nullptr, where + "send_counts and recv_counts are needed");
      require(a->in != nullptr && a->out != nullptr && a->in->ndim >= 1 && a->out->ndim >= 1,
              where + "in and out must be tensors of at least one dimension");
      int64_t row_in = 1, row_out = 1;
      for (int32_t d = 1; d < a->in->ndim; ++d) row_in *= a->in->shape[d];
      for (int32_t d = 1; d < a->out->ndim; ++d) row_out *= a->out->shape[d];
      require(row_in == row_out, where + "in's rows hold " + std::to_string(row_in) +
                                     " elements and out's " + std::to_string(row_out));
      const int n = K.group_size(c, a->group);
      int64_t ns = 0, nr = 0;
      for (int j = 0; j < n; ++j) {
        require(send[j] >= 0 && recv[j] >= 0,
                where + "negative count for rank " + std::to_string(j));
        ns += send[j];
        nr += recv[j];
      }
      require(ns == a->in->shape[0] && nr == a->out->shape[0],
              where + "the counts sum to " + std::to_string(ns) + " rows sent and " +
                  std::to_string(nr) + " received; in has " + std::to_string(a->in->shape[0]) +
                  " rows and out " + std::to_string(a->out->shape[0]));
      return K.all_to_all_v(c, a->group, a->in, a->out, send, recv, a->stream);
    });
  }
  // ABI 2.12. The args checks common to every call here; a plugin's own `start` makes the
  // call's tensor checks before it puts anything in flight, as its blocking slot does.
  static loom_error* start(loom_comm* c, int32_t call, const loom_comm_args* a,
                           loom_comm_request** out) {
    const loom_host* host = K.host(c);
    return guard(host, [&] {
      const std::string where = std::string(K.name) + ": start";
      require(out != nullptr, where + ": out is NULL");
      *out = nullptr;
      require(call == LOOM_COMM_CALL_ALL_REDUCE || call == LOOM_COMM_CALL_REDUCE_SCATTER ||
                  call == LOOM_COMM_CALL_ALL_GATHER || call == LOOM_COMM_CALL_SEND,
              where + ": call " + std::to_string(call) +
                  " is not one of all_reduce (0), reduce_scatter (1), all_gather (2), send (3)");
      const char* fn = start_what(call);
      if (call == LOOM_COMM_CALL_SEND) return start_send(c, a, out);
      const bool in_place = call == LOOM_COMM_CALL_ALL_REDUCE;
      if (K.start == nullptr) {  // finish it now: a request that is done
        check(host, CommSlots::call(c, fn, a, in_place, [&] {
                if (call == LOOM_COMM_CALL_ALL_REDUCE)
                  return K.all_reduce(c, a->group, a->out, a->op, a->stream);
                if (call == LOOM_COMM_CALL_REDUCE_SCATTER)
                  return K.reduce_scatter(c, a->group, a->in, a->out, a->op, a->stream);
                return K.all_gather(c, a->group, a->in, a->out, a->stream);
              }));
        *out = finished();
        return;
      }
      check(host, CommSlots::call(c, fn, a, in_place, [&] { return K.start(c, call, a, out); }));
    });
  }
  // A started send: in flight where the plugin can (K.start_send), else sent now.
  static void start_send(loom_comm* c, const loom_comm_args* a, loom_comm_request** out) {
    const loom_host* host = K.host(c);
    if (K.start_send != nullptr) {
      check(host, call(c, "start(send)", a, false, [&] { return K.start_send(c, a, out); }));
      return;
    }
    check(host, send(c, a));
    *out = finished();
  }
  // The request of a call that completed inside start.
  static loom_comm_request* finished() {
    auto r = std::make_unique<loom_comm_request>();
    r->done = true;
    return r.release();
  }
  static loom_error* wait(loom_comm* c, loom_comm_request* r) {
    const loom_host* host = K.host(c);
    return guard(host, [&] {
      require(r != nullptr, std::string(K.name) + ": wait: the request is NULL");
      std::unique_ptr<loom_comm_request> own(r);  // freed whatever happens
      if (!r->done) check(host, K.wait(c, r));
    });
  }
  static loom_error* test(loom_comm* c, loom_comm_request* r, int* done) {
    const loom_host* host = K.host(c);
    return guard(host, [&] {
      require(r != nullptr && done != nullptr,
              std::string(K.name) + ": test: the request or done is NULL");
      *done = 1;
      if (!r->done) check(host, K.test(c, r, done));
    });
  }
  static loom_error* barrier(loom_comm* c, const loom_comm_args* a) {
    return call(c, "barrier", a, false, [&] { return K.barrier(c, a->group, a->stream); });
  }
  static loom_error* send(loom_comm* c, const loom_comm_args* a) {
    return call(c, "send", a, false,
                [&] { return K.send(c, a->group, a->in, a->peer, a->tag, a->stream); });
  }
  // The whole table: the plugin's own instance and group slots, then group_create, the
  // calls and the non-blocking slots built here.
  static constexpr loom_comm_api api(decltype(loom_comm_api::create) create,
                                     decltype(loom_comm_api::destroy) destroy,
                                     decltype(loom_comm_api::world_size) world_size,
                                     decltype(loom_comm_api::group_destroy) group_destroy,
                                     decltype(loom_comm_api::group_rank) group_rank) {
    return loom_comm_api{LOOM_COMM_API_SIZE_V2_14,
                         create,
                         destroy,
                         K.world_rank,
                         world_size,
                         group_create,
                         group_destroy,
                         group_rank,
                         K.group_size,
                         all_reduce,
                         reduce_scatter,
                         all_gather,
                         broadcast,
                         all_to_all,
                         barrier,
                         send,
                         recv,
                         all_to_all_v,
                         start,
                         wait,
                         test,
                         K.abort};
  }
  static loom_error* recv(loom_comm* c, const loom_comm_args* a) {
    return call(c, "recv", a, false,
                [&] { return K.recv(c, a->group, a->out, a->peer, a->tag, a->stream); });
  }
};

}  // namespace loom
