// The comm conformance suite: the properties every comm plugin has, written once and run
// against comm/single, comm/mpi (as a singleton and under mpirun -np 2 and 3) and comm/nccl
// (on GPUs). Each rank checks its own results against float64 values computed here from
// rank-determined inputs, on the world and on the groups split by rank parity.
//
// A plugin's test supplies the comm (Target) and a tensor type that lives where the plugin
// reaches, host memory or this rank's GPU:
//   template <class T> struct Tensor {
//     Tensor(std::vector<int64_t> shape, DLDataType dtype);
//     DLTensor* get();
//     void upload(const std::vector<T>&);
//     std::vector<T> download();
//   };
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "contract_tags.hpp"
#include "loom/comm.h"
#include "loom/cpp/comm.hpp"

namespace commconf {

struct Target {
  const loom_comm_api* api = nullptr;
  loom_comm* self = nullptr;
  int rank = 0, size = 1;
  void (*ok)(loom_error*) = nullptr;  // fails the test on an error
  bool integer_avg = true;            // AVG of integers (truncated); comm/nccl refuses it by name
  bool self_p2p = true;   // a rank may send to itself (comm/nccl's blocking calls cannot)
  bool enqueues = false;  // takes loom_comm_args.stream (comm/nccl, comm/single)
  // The message of an error, freed; "" for NULL (success).
  std::string (*message_of)(loom_error*) = nullptr;
};

// A process group as the test sees it: its members' world ranks in group-rank order.
struct Group {
  loom_comm_group* g = nullptr;  // NULL: the world
  std::vector<int> members;
  int rank = 0;  // this rank's place in `members`
  int size() const { return static_cast<int>(members.size()); }
};

// The value world rank r holds at element i: exact in f32 and i32, different per rank.
inline double value(int r, int64_t i) {
  return 0.5 * r + 0.25 * static_cast<double>(i % 7) - 3.0 * (r == 1);
}
inline double ivalue(int r, int64_t i) {
  return 10 * r - static_cast<double>(i % 5) + (r == 2 ? 7 : 0);
}

template <class T>
std::vector<T> inputs(int r, size_t n, bool integer) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(integer ? ivalue(r, static_cast<int64_t>(i))
                                  : value(r, static_cast<int64_t>(i)));
  return v;
}

// The reduction over the group of element i of every member's input.
inline double reduce(const Group& G, int64_t i, loom_reduce_op op, bool integer) {
  double acc = 0;
  for (int k = 0; k < G.size(); ++k) {
    const double v = integer ? ivalue(G.members[k], i) : value(G.members[k], i);
    if (k == 0)
      acc = v;
    else if (op == LOOM_REDUCE_MAX)
      acc = std::max(acc, v);
    else if (op == LOOM_REDUCE_MIN)
      acc = std::min(acc, v);
    else
      acc += v;
  }
  if (op == LOOM_REDUCE_AVG) acc = integer ? std::trunc(acc / G.size()) : acc / G.size();
  return acc;
}

template <class T>
void check_values(const std::vector<T>& got, const std::vector<double>& want, const char* what_c) {
  const std::string what = what_c;  // (doctest prints a const char* as its address)
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(static_cast<double>(got[i]) - want[i]) > 1e-6 * (1 + std::fabs(want[i]))) {
      if (++bad <= 3)
        FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", expected " << want[i]);
    }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " wrong elements");
}

// Chunk j of rank r's input is the message for group rank j: (r, j, i) encoded in a float.
inline double a2a(int r, int j, int i) { return 100.0 * r + 10.0 * j + i; }

template <template <class> class Tensor>
class Suite {
 public:
  explicit Suite(const Target& t) : t_(t) {}

  Group world_group() const {
    Group G;
    for (int r = 0; r < t_.size; ++r) G.members.push_back(r);
    G.rank = t_.rank;
    return G;
  }

  // colors = rank % 2: the even ranks and the odd ranks, each in world order.
  Group parity_group() const {
    Group G;
    std::vector<int> colors;
    for (int r = 0; r < t_.size; ++r) colors.push_back(r % 2);
    t_.ok(loom::comm_group_create(t_, colors.data(), "parity", &G.g));
    for (int r = 0; r < t_.size; ++r)
      if (r % 2 == t_.rank % 2) {
        if (r == t_.rank) G.rank = G.size();
        G.members.push_back(r);
      }
    return G;
  }

  // Ranks and sizes of the world and the parity groups; barriers; the world gathers its
  // ranks in order.
  void groups() const {
    CHECK(t_.rank >= 0);
    CHECK(t_.rank < t_.size);
    CHECK(t_.api->group_rank(t_.self, nullptr) == t_.rank);
    CHECK(t_.api->group_size(t_.self, nullptr) == t_.size);
    Group P = parity_group();
    CHECK(t_.api->group_rank(t_.self, P.g) == P.rank);
    CHECK(t_.api->group_size(t_.self, P.g) == P.size());
    t_.ok(loom::comm_barrier(t_, P.g));
    t_.ok(loom::comm_barrier(t_, nullptr));
    t_.api->group_destroy(t_.self, P.g);
    t_.api->group_destroy(t_.self, nullptr);  // accepted, and the world stays
    Tensor<int32_t> mine({1}, loom_i32());
    mine.upload({t_.rank});
    Tensor<int32_t> all({t_.size}, loom_i32());
    t_.ok(loom::comm_all_gather(t_, nullptr, mine.get(), all.get()));
    std::vector<int32_t> got = all.download();
    for (int r = 0; r < t_.size; ++r) CHECK(got[r] == r);
  }

  // ABI 2's rule for loom_comm_args, the same on every rank (so no rank enters a collective
  // the others skipped): NULL args, args older than ABI 2.0 and a required extension the
  // plugin does not know are refused naming the call; an extension that is not required is
  // ignored; all_reduce is in place; a plugin on host memory refuses a stream.
  void args() const {
    Tensor<float> t({4}, loom_f32());
    t.upload({1, 2, 3, 4});
    auto refused = [&](loom_error* e, const std::string& needle) {
      const std::string m = t_.message_of(e);
      CHECK_MESSAGE(m.find(needle) != std::string::npos,
                    "message \"" << m << "\" lacks \"" << needle << "\"");
    };
    refused(t_.api->all_reduce(t_.self, nullptr), "all_reduce: args NULL");
    loom_comm_args a{
        LOOM_COMM_ARGS_SIZE_V2, nullptr, nullptr, t.get(), LOOM_REDUCE_SUM, 0, 0, nullptr, nullptr};
    loom_comm_args old = a;
    old.struct_size = offsetof(loom_comm_args, ext);
    refused(t_.api->barrier(t_.self, &old), "barrier: args older than ABI 2.0");
    const loom_ext future{sizeof(loom_ext), "loom.comm-future/1", LOOM_EXT_REQUIRED, nullptr};
    const loom_ext hint{sizeof(loom_ext), "loom.comm-hint/1", 0, nullptr};
    loom_comm_args req = a;
    req.ext = &future;
    refused(t_.api->all_reduce(t_.self, &req),
            "all_reduce: unknown required extension "
            "loom.comm-future/1");
    loom_comm_args both = a;
    both.in = t.get();
    both.out = nullptr;
    refused(t_.api->all_reduce(t_.self, &both), "all_reduce: works in place on out");
    if (!t_.enqueues) {
      loom_comm_args on_stream = a;
      on_stream.stream = &on_stream;  // any non-NULL stream: refused before it is used
      refused(t_.api->all_reduce(t_.self, &on_stream), "all_reduce: given a device stream");
    }
    // group_create, refused identically on every rank (so no rank enters the collective):
    // NULL args, and a partition in which no rank has a group; the group's name is in the
    // message.
    loom_comm_group* none = nullptr;
    refused(t_.api->group_create(t_.self, nullptr, &none), "group_create: args NULL");
    const std::vector<int> lost(static_cast<size_t>(t_.size), -1);
    refused(loom::comm_group_create(t_, lost.data(), "orphans", &none),
            "group_create(orphans): rank " + std::to_string(t_.rank) + " has color -1");
    CHECK(none == nullptr);
    loom_comm_args hinted = a;
    hinted.ext = &hint;
    t_.ok(t_.api->all_reduce(t_.self, &hinted));  // not required: ignored, and it runs
    std::vector<double> want;
    for (int i = 0; i < 4; ++i) want.push_back((i + 1.0) * t_.size);
    check_values(t.download(), want, "all_reduce with an ignorable extension");
  }

  // SUM, MAX, MIN, AVG in f32, f64 and i32, on the world and the parity groups.
  void all_reduce() const {
    for_groups([&](const Group& G) {
      all_reduce_case<float>(G, loom_f32(), false);
      all_reduce_case<double>(G, loom_f64(), false);
      all_reduce_case<int32_t>(G, loom_i32(), true);
    });
  }

  // reduce_scatter of a (size*2, 3) tensor, then all_gather of the chunks: the round trip
  // equals the all_reduce of the whole tensor.
  void scatter_gather() const {
    for_groups([&](const Group& G) {
      for (loom_reduce_op op : {LOOM_REDUCE_SUM, LOOM_REDUCE_AVG, LOOM_REDUCE_MAX}) {
        CAPTURE(op);
        const int n = G.size();
        Tensor<double> in({2 * n, 3}, loom_f64());
        in.upload(inputs<double>(t_.rank, 6 * n, false));
        Tensor<double> chunk({2, 3}, loom_f64());
        t_.ok(loom::comm_reduce_scatter(t_, G.g, in.get(), chunk.get(), op));
        std::vector<double> mine;
        for (int64_t i = 0; i < 6; ++i) mine.push_back(reduce(G, 6 * G.rank + i, op, false));
        check_values(chunk.download(), mine, "reduce_scatter");
        Tensor<double> all({2 * n, 3}, loom_f64());
        t_.ok(loom::comm_all_gather(t_, G.g, chunk.get(), all.get()));
        std::vector<double> want;
        for (int64_t i = 0; i < 6 * n; ++i) want.push_back(reduce(G, i, op, false));
        check_values(all.download(), want, "all_gather of reduce_scatter");
      }
    });
  }

  // ABI 2.12's start/wait/test: several calls in flight at once on two groups (all_reduce in
  // f32 and f64, reduce_scatter, all_gather of another buffer, and an f32 AVG), completed in
  // another order than started, each equal to the blocking call's float64 reference; test
  // reports done within a bounded number of polls; a bad call id or a NULL request is refused
  // by name, and bad args fail in start, with nothing left in flight.
  void nonblocking() const {
    REQUIRE(t_.api->struct_size >= LOOM_COMM_API_SIZE_V2_12);
    Group W = world_group(), P = parity_group();
    const int64_t N = 1000;  // past one MPI eager message
    Tensor<float> a({N}, loom_f32());
    a.upload(inputs<float>(t_.rank, N, false));
    Tensor<double> b({N}, loom_f64());
    b.upload(inputs<double>(t_.rank, N, false));
    const int n = P.size();
    Tensor<double> rs_in({2 * n, 3}, loom_f64()), rs_out({2, 3}, loom_f64());
    rs_in.upload(inputs<double>(t_.rank, 6 * n, false));
    Tensor<float> ag_in({3}, loom_f32()), ag_out({3 * t_.size}, loom_f32());
    ag_in.upload({float(t_.rank), float(t_.rank) + 0.5f, -float(t_.rank)});
    Tensor<float> avg({N}, loom_f32());
    avg.upload(inputs<float>(t_.rank, N, false));
    loom_comm_request* req[5] = {};
    t_.ok(loom::comm_start(t_, LOOM_COMM_CALL_ALL_REDUCE, W.g, nullptr, a.get(), LOOM_REDUCE_SUM,
                           nullptr, &req[0]));
    t_.ok(loom::comm_start(t_, LOOM_COMM_CALL_ALL_REDUCE, P.g, nullptr, b.get(), LOOM_REDUCE_MAX,
                           nullptr, &req[1]));
    t_.ok(loom::comm_start(t_, LOOM_COMM_CALL_REDUCE_SCATTER, P.g, rs_in.get(), rs_out.get(),
                           LOOM_REDUCE_SUM, nullptr, &req[2]));
    t_.ok(loom::comm_start(t_, LOOM_COMM_CALL_ALL_GATHER, W.g, ag_in.get(), ag_out.get(),
                           LOOM_REDUCE_SUM, nullptr, &req[3]));
    t_.ok(loom::comm_start(t_, LOOM_COMM_CALL_ALL_REDUCE, W.g, nullptr, avg.get(), LOOM_REDUCE_AVG,
                           nullptr, &req[4]));
    for (loom_comm_request* r : req) REQUIRE(r != nullptr);
    // Poll the last one until done (test drives MPI's progress), then wait out of order.
    int done = 0, polls = 0;
    while (!done && polls < 10000000) {
      t_.ok(t_.api->test(t_.self, req[4], &done));
      ++polls;
    }
    CHECK_MESSAGE(done == 1, "test never reported done after " << polls << " polls");
    for (int i : {2, 0, 4, 3, 1}) t_.ok(t_.api->wait(t_.self, req[i]));
    std::vector<double> wa, wb, wavg, wrs, wag;
    for (int64_t i = 0; i < N; ++i) {
      wa.push_back(reduce(W, i, LOOM_REDUCE_SUM, false));
      wb.push_back(reduce(P, i, LOOM_REDUCE_MAX, false));
      wavg.push_back(reduce(W, i, LOOM_REDUCE_AVG, false));
    }
    for (int64_t i = 0; i < 6; ++i)
      wrs.push_back(reduce(P, 6 * P.rank + i, LOOM_REDUCE_SUM, false));
    for (int r = 0; r < t_.size; ++r)
      for (double v : {double(r), r + 0.5, -double(r)}) wag.push_back(v);
    check_values(a.download(), wa, "started all_reduce SUM f32");
    check_values(b.download(), wb, "started all_reduce MAX f64 on the parity group");
    check_values(rs_out.download(), wrs, "started reduce_scatter");
    check_values(ag_out.download(), wag, "started all_gather");
    check_values(avg.download(), wavg, "started all_reduce AVG");
    if (P.g) t_.api->group_destroy(t_.self, P.g);

    // Refusals: a call start does not run, a NULL request, args wrong for the call.
    loom_comm_request* r = nullptr;
    const loom_comm_args args{
        LOOM_COMM_ARGS_SIZE_V2, nullptr, nullptr, a.get(), LOOM_REDUCE_SUM, 0, 0, nullptr, nullptr};
    std::string msg = t_.message_of(t_.api->start(t_.self, 7, &args, &r));
    CHECK_MESSAGE(msg.find("is not one of all_reduce") != std::string::npos, msg);
    CHECK(r == nullptr);
    msg = t_.message_of(t_.api->wait(t_.self, nullptr));
    CHECK_MESSAGE(msg.find("the request is NULL") != std::string::npos, msg);
    Tensor<float> odd({3 * t_.size + 1}, loom_f32());
    msg = t_.message_of(loom::comm_start(t_, LOOM_COMM_CALL_ALL_GATHER, nullptr, ag_in.get(),
                                         odd.get(), LOOM_REDUCE_SUM, nullptr, &r));
    CHECK_MESSAGE(msg.find("all_gather") != std::string::npos, msg);
    CHECK(r == nullptr);
  }

  // A reduce_scatter whose out is the front of its own in: in is read before out is written.
  void shared_memory() const {
    const int n = t_.size;
    Group W = world_group();
    Tensor<float> buf({2 * n}, loom_f32());
    buf.upload(inputs<float>(t_.rank, 2 * n, false));
    DLTensor out = *buf.get();
    int64_t chunk_shape[1] = {2};
    out.shape = chunk_shape;
    t_.ok(loom::comm_reduce_scatter(t_, nullptr, buf.get(), &out, LOOM_REDUCE_SUM));
    std::vector<float> got = buf.download();
    check_values(std::vector<float>(got.begin(), got.begin() + 2),
                 {reduce(W, 2 * t_.rank, LOOM_REDUCE_SUM, false),
                  reduce(W, 2 * t_.rank + 1, LOOM_REDUCE_SUM, false)},
                 "reduce_scatter into the front of in");
  }

  // Chunk j goes to group rank j; also with out the same buffer as in.
  void all_to_all() const {
    for_groups([&](const Group& G) {
      for (bool same : {false, true}) {
        CAPTURE(same);
        const int n = G.size();
        Tensor<float> in({2 * n, 2}, loom_f32());
        std::vector<float> v(4 * n);
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < 4; ++i) v[4 * j + i] = static_cast<float>(a2a(G.rank, j, i));
        in.upload(v);
        Tensor<float> out({2 * n, 2}, loom_f32());
        Tensor<float>& dst = same ? in : out;
        t_.ok(loom::comm_all_to_all(t_, G.g, in.get(), dst.get()));
        std::vector<double> want;
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < 4; ++i) want.push_back(a2a(j, G.rank, i));
        check_values(dst.download(), want, "all_to_all");
      }
    });
  }

  // Uneven chunks (ABI 2.5): rank r sends rows(r, j) rows of 3 values to group rank j, some
  // of them none; every value names its sender, receiver and place. Then a count that does
  // not cover in is refused naming the counts, on every rank alike.
  void all_to_all_v() const {
    auto rows = [](int r, int j) { return static_cast<int64_t>((r + 2 * j) % 3); };
    auto val = [](int r, int j, int64_t i) { return 1000.0 * r + 100.0 * j + (double)i; };
    for_groups([&](const Group& G) {
      const int n = G.size(), me = G.rank;
      std::vector<int64_t> send(n), recv(n);
      int64_t ns = 0, nr = 0;
      for (int j = 0; j < n; ++j) {
        send[j] = rows(me, j);
        recv[j] = rows(j, me);
        ns += send[j];
        nr += recv[j];
      }
      Tensor<double> in({std::max<int64_t>(ns, 0), 3}, loom_f64());
      Tensor<double> out({std::max<int64_t>(nr, 0), 3}, loom_f64());
      std::vector<double> v, want;
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < 3 * send[j]; ++i) v.push_back(val(me, j, i));
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < 3 * recv[j]; ++i) want.push_back(val(j, me, i));
      in.upload(v);
      t_.ok(loom::comm_all_to_all_v(t_, G.g, in.get(), out.get(), send.data(), recv.data()));
      check_values(out.download(), want, "all_to_all_v");
      std::vector<int64_t> wrong = send;
      wrong[0] += 1;
      const std::string m = t_.message_of(
          loom::comm_all_to_all_v(t_, G.g, in.get(), out.get(), wrong.data(), recv.data()));
      CHECK_MESSAGE(m.find("all_to_all_v: the counts sum to") != std::string::npos, m);
    });
  }

  // From the last rank of the group, which is not 0 whenever the group has two.
  void broadcast() const {
    for_groups([&](const Group& G) {
      const int root = G.size() - 1;
      Tensor<double> t({7}, loom_f64());
      t.upload(inputs<double>(G.members[G.rank], 7, false));
      t_.ok(loom::comm_broadcast(t_, G.g, t.get(), root));
      std::vector<double> want;
      for (int64_t i = 0; i < 7; ++i) want.push_back(value(G.members[root], i));
      check_values(t.download(), want, "broadcast");
    });
  }

  // Every rank sends to the next group rank and receives from the previous one; even ranks
  // send first and odd ranks receive first, so blocking calls cannot all wait at once.
  void ring() const {
    Group W = world_group();
    Group P = parity_group();
    int tag = 3;
    for (const Group* G : {&W, &P}) {
      CAPTURE(G->size());
      if (G->size() > 1 || t_.self_p2p) ring_case(*G, tag);
      tag += 8;
    }
    t_.api->group_destroy(t_.self, P.g);
  }

  // comm.h's contract tags, observed. Every call tagged COLLECTIVE(args.group) takes only
  // its group's ranks: the even ranks run each of them on their parity group while the odd
  // ranks stay out, then the other way round (a plugin that synchronised the world would
  // hang here, or pair the wrong calls). Each result is read as soon as the call returns,
  // which is what `stream` promises when no stream is given.
  void contract() const {
    const loomtest::ContractTable tags = loomtest::contract_table(
        std::string(LOOM_SOURCE_DIR) + "/sdk/include/loom/comm.h", "loom_comm_api");
    std::vector<std::string> collectives;
    for (const auto& [slot, tag] : tags.tags) {
      if (tag.scope == "COLLECTIVE(args.group)") collectives.push_back(slot);
      if (tag.scope == "COLLECTIVE(args.group)" || tag.scope == "PAIR(args.group)")
        CHECK_MESSAGE(tag.progress == (slot == "start" ? "starts" : "stream"),
                      slot << ": the calls take args.stream (start returns with its call in "
                              "flight)");
    }
    // The suite knows how to run each of these; a new collective must be added below.
    CHECK(collectives == std::vector<std::string>{"all_gather", "all_reduce", "all_to_all",
                                                  "all_to_all_v", "barrier", "broadcast",
                                                  "reduce_scatter", "start"});
    Group P = parity_group();
    for (int turn = 0; turn < 2; ++turn) {
      if (t_.rank % 2 != turn) continue;
      for (const std::string& name : collectives) {
        CAPTURE(name);
        group_only(name, P);
      }
    }
    t_.ok(loom::comm_barrier(t_, nullptr));
    t_.api->group_destroy(t_.self, P.g);
  }

  // One collective on G with a result that depends on every member and on no one else.
  void group_only(const std::string& name, const Group& G) const {
    const int n = G.size();
    const double me = G.members[G.rank];
    std::vector<double> want;
    if (name == "all_reduce") {
      Tensor<double> t({1}, loom_f64());
      t.upload({me + 1});
      t_.ok(loom::comm_all_reduce(t_, G.g, t.get(), LOOM_REDUCE_SUM));
      double sum = 0;
      for (int m : G.members) sum += m + 1;
      check_values(t.download(), {sum}, "all_reduce on the group alone");
    } else if (name == "reduce_scatter") {
      Tensor<double> in({n}, loom_f64()), out({1}, loom_f64());
      in.upload(std::vector<double>(n, me));
      t_.ok(loom::comm_reduce_scatter(t_, G.g, in.get(), out.get(), LOOM_REDUCE_MAX));
      check_values(out.download(), {static_cast<double>(G.members.back())},
                   "reduce_scatter on the group alone");
    } else if (name == "all_gather") {
      Tensor<double> in({1}, loom_f64()), out({n}, loom_f64());
      in.upload({me});
      t_.ok(loom::comm_all_gather(t_, G.g, in.get(), out.get()));
      for (int m : G.members) want.push_back(m);
      check_values(out.download(), want, "all_gather on the group alone");
    } else if (name == "broadcast") {
      Tensor<double> t({1}, loom_f64());
      t.upload({me});
      t_.ok(loom::comm_broadcast(t_, G.g, t.get(), 0));
      check_values(t.download(), {static_cast<double>(G.members[0])},
                   "broadcast on the group alone");
    } else if (name == "all_to_all") {
      Tensor<double> in({n}, loom_f64()), out({n}, loom_f64());
      std::vector<double> v;
      for (int j = 0; j < n; ++j) v.push_back(100 * me + j);
      in.upload(v);
      t_.ok(loom::comm_all_to_all(t_, G.g, in.get(), out.get()));
      for (int m : G.members) want.push_back(100.0 * m + G.rank);
      check_values(out.download(), want, "all_to_all on the group alone");
    } else if (name == "all_to_all_v") {  // one value to each member
      Tensor<double> in({n}, loom_f64()), out({n}, loom_f64());
      std::vector<double> v;
      for (int j = 0; j < n; ++j) v.push_back(100 * me + j);
      in.upload(v);
      const std::vector<int64_t> ones(n, 1);
      t_.ok(loom::comm_all_to_all_v(t_, G.g, in.get(), out.get(), ones.data(), ones.data()));
      for (int m : G.members) want.push_back(100.0 * m + G.rank);
      check_values(out.download(), want, "all_to_all_v on the group alone");
    } else if (name == "barrier") {
      t_.ok(loom::comm_barrier(t_, G.g));
    } else if (name == "start") {  // a started all_reduce, waited
      Tensor<double> t({1}, loom_f64());
      t.upload({me + 1});
      loom_comm_request* r = nullptr;
      t_.ok(loom::comm_start(t_, LOOM_COMM_CALL_ALL_REDUCE, G.g, nullptr, t.get(), LOOM_REDUCE_SUM,
                             nullptr, &r));
      t_.ok(loom::comm_wait(t_, r));
      double sum = 0;
      for (int m : G.members) sum += m + 1;
      check_values(t.download(), {sum}, "started all_reduce on the group alone");
    } else {
      FAIL("no group-only check for " << name);
    }
  }

 private:
  // fn on the world, then on the parity groups (destroyed afterwards).
  template <class Fn>
  void for_groups(Fn&& fn) const {
    Group W = world_group();
    Group P = parity_group();
    for (const Group* G : {&W, &P}) {
      CAPTURE(G->size());
      fn(*G);
    }
    t_.api->group_destroy(t_.self, P.g);
  }

  template <class T>
  void all_reduce_case(const Group& G, DLDataType dt, bool integer) const {
    for (loom_reduce_op op : {LOOM_REDUCE_SUM, LOOM_REDUCE_MAX, LOOM_REDUCE_MIN, LOOM_REDUCE_AVG}) {
      if (integer && op == LOOM_REDUCE_AVG && !t_.integer_avg) continue;
      CAPTURE(op);
      Tensor<T> t({3, 5}, dt);
      t.upload(inputs<T>(t_.rank, 15, integer));
      t_.ok(loom::comm_all_reduce(t_, G.g, t.get(), op));
      std::vector<double> want;
      for (int64_t i = 0; i < 15; ++i) want.push_back(reduce(G, i, op, integer));
      check_values(t.download(), want, "all_reduce");
    }
  }

  void ring_case(const Group& G, int tag) const {
    const int n = G.size();
    const int next = (G.rank + 1) % n;
    const int prev = (G.rank + n - 1) % n;
    Tensor<int32_t> out({4}, loom_i32());
    out.upload({1000 * G.rank + tag, 1000 * G.rank + tag + 1, 1000 * G.rank + tag + 2,
                1000 * G.rank + tag + 3});
    Tensor<int32_t> in({2, 2}, loom_i32());
    if (G.rank % 2 == 0) {
      t_.ok(loom::comm_send(t_, G.g, out.get(), next, tag));
      t_.ok(loom::comm_recv(t_, G.g, in.get(), prev, tag));
    } else {
      t_.ok(loom::comm_recv(t_, G.g, in.get(), prev, tag));
      t_.ok(loom::comm_send(t_, G.g, out.get(), next, tag));
    }
    std::vector<double> want;
    for (int i = 0; i < 4; ++i) want.push_back(1000 * prev + tag + i);
    check_values(in.download(), want, "recv from the previous rank");
    // ABI 2.20: a started send needs no order: every rank sends first, then receives, and
    // the send completes at wait (a plugin without started sends sends inside start).
    Tensor<int32_t> again({2, 2}, loom_i32());
    loom_comm_request* req = nullptr;
    t_.ok(loom::comm_start_send(t_, G.g, out.get(), next, tag + 1, nullptr, &req));
    t_.ok(loom::comm_recv(t_, G.g, again.get(), prev, tag + 1));
    t_.ok(loom::comm_wait(t_, req));
    check_values(again.download(), want, "recv of a started send");
  }

  Target t_;
};

}  // namespace commconf
