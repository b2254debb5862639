// comm/mpi under mpirun (and as an MPI singleton): the comm conformance suite
// (conformance.hpp: every collective on every rank against float64 values, on the world and
// the parity groups; point-to-point over a ring), then what is comm/mpi's own: the errors a
// caller can cause and MPI's. Every rank checks its own results, so a wrong value on any rank
// fails mpirun.
//
// MPI can be initialised once per process, so one comm instance (and its MPI) serves every
// test case and is destroyed, finalising MPI, when the program exits. Argument errors are
// provoked identically on every rank, so no rank is left alone inside a collective.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "loom/cpp/comm.hpp"
#include "plugin_test_util.hpp"

using ptest::HostTensor;

namespace {

struct World {
  loomtest::TestHost host;
  loom_comm_ref ref;
  int rank = 0;
  int size = 1;
  World() : ref(host.load_comm("mpi")) {
    rank = ref.api->world_rank(ref.self);
    size = ref.api->world_size(ref.self);
  }
};

World& world() {
  static World w;
  return w;
}

const loom_comm_api& api() { return *world().ref.api; }
loom_comm* self() { return world().ref.self; }
const loom_comm_ref& ref() { return world().ref; }
void ok(loom_error* e) { world().host.check(e); }

bool has(const ptest::Outcome& o, const std::string& s) {
  return o.message.find(s) != std::string::npos;
}

commconf::Suite<HostTensor>& suite() {
  static commconf::Suite<HostTensor> s(
      commconf::Target{&api(), self(), world().rank, world().size, &ok, true, true, false,
                       [](loom_error* e) { return ptest::outcome(e).message; }});
  return s;
}

using commconf::Group;

#define RANK_INFO INFO("world rank " << world().rank << " of " << world().size)

}  // namespace

// The conformance suite (tests/comm/conformance.hpp), as every comm plugin runs it.
TEST_CASE("comm/mpi: world and parity groups have the expected ranks and sizes") {
  RANK_INFO;
  suite().groups();
}
TEST_CASE("comm/mpi: NULL, old or unknown-required args and a stream are refused") {
  RANK_INFO;
  suite().args();
}
TEST_CASE("comm/mpi: all_reduce SUM, MAX, MIN, AVG in f32, f64 and i32") {
  RANK_INFO;
  suite().all_reduce();
}
TEST_CASE("comm/mpi: reduce_scatter then all_gather is an all_reduce") {
  RANK_INFO;
  suite().scatter_gather();
}
TEST_CASE("comm/mpi: in and out sharing memory are read before they are written") {
  RANK_INFO;
  suite().shared_memory();
}
TEST_CASE("comm/mpi: all_to_all sends chunk j to rank j") {
  RANK_INFO;
  suite().all_to_all();
}
TEST_CASE("comm/mpi: all_to_all_v sends uneven chunks") {
  RANK_INFO;
  suite().all_to_all_v();
}
TEST_CASE("comm/mpi: broadcast from a non-zero root") {
  RANK_INFO;
  suite().broadcast();
}
TEST_CASE("comm/mpi: send and recv around a ring, in the world and in a group") {
  RANK_INFO;
  suite().ring();
}
TEST_CASE("comm/mpi: started calls (MPI_I*) complete out of order, equal to the blocking ones") {
  RANK_INFO;
  suite().nonblocking();
}
TEST_CASE("comm/mpi: the contract tags hold (a collective takes only its group's ranks)") {
  RANK_INFO;
  suite().contract();
}

TEST_CASE("comm/mpi: argument errors are named, identically on every rank") {
  RANK_INFO;
  const int n = world().size;
  {
    // bf16/f16 are supported (mixed precision; tests/model/test_gpt_mixed_tp.cpp)
    HostTensor<uint8_t> h({4}, loom_dtype(kDLUInt, 8));
    ptest::Outcome o =
        ptest::outcome(loom::comm_all_reduce(ref(), nullptr, h.get(), LOOM_REDUCE_SUM));
    CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
    CHECK(has(o, "u8"));
    HostTensor<int64_t> b({4}, loom_dtype(kDLInt, 64));
    o = ptest::outcome(loom::comm_broadcast(ref(), nullptr, b.get(), 0));
    CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
    CHECK(has(o, "i64"));
  }
  {
    HostTensor<float> t({4}, loom_f32());
    ptest::Outcome o = ptest::outcome(
        loom::comm_all_reduce(ref(), nullptr, t.get(), static_cast<loom_reduce_op>(9)));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(has(o, "unknown reduce op 9"));
    CHECK_FALSE(
        ptest::outcome(loom::comm_all_reduce(ref(), nullptr, nullptr, LOOM_REDUCE_SUM)).ok());
    t.t.device = DLDevice{kDLCUDA, 0};
    o = ptest::outcome(loom::comm_all_reduce(ref(), nullptr, t.get(), LOOM_REDUCE_SUM));
    CHECK(has(o, "CPU memory only"));
  }
  {
    HostTensor<float> t({2, 3}, loom_f32());
    int64_t strides[2] = {1, 2};  // column-major: not compact
    t.t.strides = strides;
    ptest::Outcome o = ptest::outcome(loom::comm_broadcast(ref(), nullptr, t.get(), 0));
    CHECK(has(o, "not compact"));
  }
  {
    HostTensor<float> in({n * 2 + 1}, loom_f32());
    HostTensor<float> out({2}, loom_f32());
    ptest::Outcome o = ptest::outcome(
        loom::comm_reduce_scatter(ref(), nullptr, in.get(), out.get(), LOOM_REDUCE_SUM));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(has(o, "times out's 2 elements"));
    HostTensor<double> dout({2}, loom_f64());
    HostTensor<float> in2({n * 2}, loom_f32());
    o = ptest::outcome(
        loom::comm_reduce_scatter(ref(), nullptr, in2.get(), dout.get(), LOOM_REDUCE_SUM));
    CHECK(has(o, "in is f32 but out is f64"));
    HostTensor<float> gathered({n * 2 + 1}, loom_f32());
    o = ptest::outcome(loom::comm_all_gather(ref(), nullptr, out.get(), gathered.get()));
    CHECK(has(o, "times in's 2 elements"));
  }
  {
    HostTensor<float> in({n + 1, 2}, loom_f32());  // n+1 rows: never n equal chunks (n > 1)
    HostTensor<float> out({n + 1, 2}, loom_f32());
    if (n > 1) {
      ptest::Outcome o = ptest::outcome(loom::comm_all_to_all(ref(), nullptr, in.get(), out.get()));
      CHECK(has(o, "equal chunks along dim 0"));
    }
    HostTensor<float> a({n, 2}, loom_f32());
    HostTensor<float> b({n, 3}, loom_f32());
    ptest::Outcome o = ptest::outcome(loom::comm_all_to_all(ref(), nullptr, a.get(), b.get()));
    CHECK(has(o, "equal element counts"));
  }
  {
    HostTensor<float> t({3}, loom_f32());
    ptest::Outcome o = ptest::outcome(loom::comm_broadcast(ref(), nullptr, t.get(), n));
    CHECK(has(o, "root " + std::to_string(n) + " is not a rank"));
  }
}

TEST_CASE("comm/mpi: MPI's own errors come back with MPI's text") {
  RANK_INFO;
  const int n = world().size;
  HostTensor<float> t({3}, loom_f32());
  ptest::Outcome o =
      ptest::outcome(loom::comm_send(ref(), nullptr, t.get(), n, 0));  // no such rank
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "MPI_Send failed"));
  CHECK(has(o, "rank"));
  o = ptest::outcome(loom::comm_send(ref(), nullptr, t.get(), 0, -5));  // tags are >= 0
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "MPI_Send failed"));
  CHECK(has(o, "tag"));
}

TEST_CASE("comm/mpi: recv of a message of another length fails on the receiver") {
  RANK_INFO;
  Group W = suite().world_group();
  const int n = W.size();
  const int next = (W.rank + 1) % n;
  const int prev = (W.rank + n - 1) % n;
  for (int sent : {2, 6}) {  // shorter than the receive buffer, then longer
    CAPTURE(sent);
    HostTensor<float> out({sent}, loom_f32());
    HostTensor<float> in({4}, loom_f32());
    ptest::Outcome o;
    if (W.rank % 2 == 0) {
      ok(loom::comm_send(ref(), nullptr, out.get(), next, 7));
      o = ptest::outcome(loom::comm_recv(ref(), nullptr, in.get(), prev, 7));
    } else {
      o = ptest::outcome(loom::comm_recv(ref(), nullptr, in.get(), prev, 7));
      ok(loom::comm_send(ref(), nullptr, out.get(), next, 7));
    }
    CHECK_FALSE(o.ok());
    if (sent < 4)
      CHECK(has(o, "expected 4 elements but got 2"));
    else
      CHECK(has(o, "MPI_Recv failed"));
  }
  ok(loom::comm_barrier(ref(), nullptr));
}
