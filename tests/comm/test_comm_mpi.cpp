// comm/mpi under mpirun (and as an MPI singleton): every collective on every rank against
// values computed here in float64 from the rank-determined inputs, on the world and on the
// groups split by rank parity; point-to-point over a ring; and the errors a caller can
// cause. Every rank checks its own results, so a wrong value on any rank fails mpirun.
//
// MPI can be initialised once per process, so one comm instance (and its MPI) serves every
// test case and is destroyed, finalising MPI, when the program exits. Argument errors are
// provoked identically on every rank, so no rank is left alone inside a collective.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

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
void ok(loom_error* e) { world().host.check(e); }

bool has(const ptest::Outcome& o, const std::string& s) {
  return o.message.find(s) != std::string::npos;
}

// A process group as the test sees it: its members' world ranks in group-rank order.
struct Group {
  loom_comm_group* g = nullptr;  // NULL: the world
  std::vector<int> members;
  int rank = 0;  // this rank's place in `members`
  int size() const { return static_cast<int>(members.size()); }
};

Group world_group() {
  Group G;
  for (int r = 0; r < world().size; ++r) G.members.push_back(r);
  G.rank = world().rank;
  return G;
}

// colors = rank % 2: the even ranks and the odd ranks, each in world order.
Group parity_group() {
  Group G;
  std::vector<int> colors;
  for (int r = 0; r < world().size; ++r) colors.push_back(r % 2);
  ok(api().group_create(self(), colors.data(), &G.g));
  for (int r = 0; r < world().size; ++r)
    if (r % 2 == world().rank % 2) {
      if (r == world().rank) G.rank = G.size();
      G.members.push_back(r);
    }
  return G;
}

// The value world rank r holds at element i: exact in f32 and i32, different per rank.
double value(int r, int64_t i) {
  return 0.5 * r + 0.25 * static_cast<double>(i % 7) - 3.0 * (r == 1);
}
double ivalue(int r, int64_t i) { return 10 * r - static_cast<double>(i % 5) + (r == 2 ? 7 : 0); }

template <class T>
void fill(HostTensor<T>& t, int r, bool integer) {
  for (size_t i = 0; i < t.data.size(); ++i)
    t.data[i] = static_cast<T>(integer ? ivalue(r, static_cast<int64_t>(i))
                                       : value(r, static_cast<int64_t>(i)));
}

// The reduction over the group of element i of every member's input.
double reduce(const Group& G, int64_t i, loom_reduce_op op, bool integer) {
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
void check_values(const std::vector<T>& got, const std::vector<double>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(static_cast<double>(got[i]) - want[i]) > 1e-6 * (1 + std::fabs(want[i]))) {
      if (++bad <= 3)
        FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", expected " << want[i]);
    }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " wrong elements");
}

template <class T>
void all_reduce_case(const Group& G, DLDataType dt, bool integer) {
  for (loom_reduce_op op : {LOOM_REDUCE_SUM, LOOM_REDUCE_MAX, LOOM_REDUCE_MIN, LOOM_REDUCE_AVG}) {
    CAPTURE(op);
    HostTensor<T> t({3, 5}, dt);
    fill(t, world().rank, integer);
    ok(api().all_reduce(self(), G.g, t.get(), op));
    std::vector<double> want;
    for (int64_t i = 0; i < 15; ++i) want.push_back(reduce(G, i, op, integer));
    check_values(t.data, want, "all_reduce");
  }
}

// reduce_scatter of a (size*2, 3) tensor, then all_gather of the chunks: the round trip
// equals the all_reduce of the whole tensor.
void scatter_gather_case(const Group& G, loom_reduce_op op) {
  CAPTURE(op);
  const int n = G.size();
  HostTensor<double> in({2 * n, 3}, loom_f64());
  fill(in, world().rank, false);
  HostTensor<double> chunk({2, 3}, loom_f64());
  ok(api().reduce_scatter(self(), G.g, in.get(), chunk.get(), op));
  std::vector<double> mine;
  for (int64_t i = 0; i < 6; ++i) mine.push_back(reduce(G, 6 * G.rank + i, op, false));
  check_values(chunk.data, mine, "reduce_scatter");
  HostTensor<double> all({2 * n, 3}, loom_f64());
  ok(api().all_gather(self(), G.g, chunk.get(), all.get()));
  std::vector<double> want;
  for (int64_t i = 0; i < 6 * n; ++i) want.push_back(reduce(G, i, op, false));
  check_values(all.data, want, "all_gather of reduce_scatter");
}

// Chunk j of rank r's input is the message for group rank j: (r, j, i) encoded in a float.
double a2a(int r, int j, int i) { return 100.0 * r + 10.0 * j + i; }

void all_to_all_case(const Group& G) {
  const int n = G.size();
  HostTensor<float> in({2 * n, 2}, loom_f32());
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < 4; ++i) in.data[4 * j + i] = static_cast<float>(a2a(G.rank, j, i));
  HostTensor<float> out({2 * n, 2}, loom_f32());
  ok(api().all_to_all(self(), G.g, in.get(), out.get()));
  std::vector<double> want;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < 4; ++i) want.push_back(a2a(j, G.rank, i));
  check_values(out.data, want, "all_to_all");
}

// Every rank sends to the next group rank and receives from the previous one; even ranks
// send first and odd ranks receive first, so blocking calls cannot all wait at once.
void ring_case(const Group& G, int tag) {
  const int n = G.size();
  const int next = (G.rank + 1) % n;
  const int prev = (G.rank + n - 1) % n;
  HostTensor<int32_t> out({4}, loom_i32());
  for (int i = 0; i < 4; ++i) out.data[i] = 1000 * G.rank + tag + i;
  HostTensor<int32_t> in({2, 2}, loom_i32());
  if (G.rank % 2 == 0) {
    ok(api().send(self(), G.g, out.get(), next, tag));
    ok(api().recv(self(), G.g, in.get(), prev, tag));
  } else {
    ok(api().recv(self(), G.g, in.get(), prev, tag));
    ok(api().send(self(), G.g, out.get(), next, tag));
  }
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) want.push_back(1000 * prev + tag + i);
  check_values(in.data, want, "recv from the previous rank");
}

void broadcast_case(const Group& G) {
  const int root = G.size() - 1;  // the last rank: not 0 whenever the group has two
  HostTensor<double> t({7}, loom_f64());
  fill(t, G.members[G.rank], false);
  ok(api().broadcast(self(), G.g, t.get(), root));
  std::vector<double> want;
  for (int64_t i = 0; i < 7; ++i) want.push_back(value(G.members[root], i));
  check_values(t.data, want, "broadcast");
}

#define RANK_INFO INFO("world rank " << world().rank << " of " << world().size)

}  // namespace

TEST_CASE("comm/mpi: world and parity groups have the expected ranks and sizes") {
  RANK_INFO;
  CHECK(world().rank >= 0);
  CHECK(world().rank < world().size);
  CHECK(api().group_rank(self(), nullptr) == world().rank);
  CHECK(api().group_size(self(), nullptr) == world().size);
  Group P = parity_group();
  CHECK(api().group_rank(self(), P.g) == P.rank);
  CHECK(api().group_size(self(), P.g) == P.size());
  ok(api().barrier(self(), P.g));
  ok(api().barrier(self(), nullptr));
  api().group_destroy(self(), P.g);
  api().group_destroy(self(), nullptr);
  // The world gathers its ranks in order.
  HostTensor<int32_t> mine({1}, loom_i32());
  mine.data[0] = world().rank;
  HostTensor<int32_t> all({world().size}, loom_i32());
  ok(api().all_gather(self(), nullptr, mine.get(), all.get()));
  for (int r = 0; r < world().size; ++r) CHECK(all.data[r] == r);
}

TEST_CASE("comm/mpi: all_reduce SUM, MAX, MIN, AVG in f32, f64 and i32") {
  RANK_INFO;
  Group W = world_group();
  Group P = parity_group();
  for (const Group* G : {&W, &P}) {
    CAPTURE(G->size());
    all_reduce_case<float>(*G, loom_f32(), false);
    all_reduce_case<double>(*G, loom_f64(), false);
    all_reduce_case<int32_t>(*G, loom_i32(), true);
  }
  api().group_destroy(self(), P.g);
}

TEST_CASE("comm/mpi: reduce_scatter then all_gather is an all_reduce") {
  RANK_INFO;
  Group W = world_group();
  Group P = parity_group();
  for (const Group* G : {&W, &P}) {
    CAPTURE(G->size());
    scatter_gather_case(*G, LOOM_REDUCE_SUM);
    scatter_gather_case(*G, LOOM_REDUCE_AVG);
    scatter_gather_case(*G, LOOM_REDUCE_MAX);
  }
  api().group_destroy(self(), P.g);
}

TEST_CASE("comm/mpi: in and out sharing memory are read before they are written") {
  RANK_INFO;
  const int n = world().size;
  HostTensor<float> buf({2 * n}, loom_f32());
  fill(buf, world().rank, false);
  DLTensor in = *buf.get();
  DLTensor out = *buf.get();
  int64_t chunk_shape[1] = {2};
  out.shape = chunk_shape;  // this rank's chunk lands at the front of the same buffer
  ok(api().reduce_scatter(self(), nullptr, &in, &out, LOOM_REDUCE_SUM));
  Group W = world_group();
  for (int i = 0; i < 2; ++i)
    CHECK(buf.data[i] == doctest::Approx(reduce(W, 2 * world().rank + i, LOOM_REDUCE_SUM, false)));
}

TEST_CASE("comm/mpi: all_to_all sends chunk j to rank j") {
  RANK_INFO;
  Group W = world_group();
  Group P = parity_group();
  all_to_all_case(W);
  all_to_all_case(P);
  api().group_destroy(self(), P.g);
}

TEST_CASE("comm/mpi: broadcast from a non-zero root") {
  RANK_INFO;
  Group W = world_group();
  Group P = parity_group();
  broadcast_case(W);
  broadcast_case(P);
  api().group_destroy(self(), P.g);
}

TEST_CASE("comm/mpi: send and recv around a ring, in the world and in a group") {
  RANK_INFO;
  Group W = world_group();
  Group P = parity_group();
  ring_case(W, 3);
  ring_case(P, 11);
  api().group_destroy(self(), P.g);
}

TEST_CASE("comm/mpi: argument errors are named, identically on every rank") {
  RANK_INFO;
  const int n = world().size;
  {
    // bf16/f16 are supported (mixed precision; tests/model/test_gpt_mixed_tp.cpp)
    HostTensor<uint8_t> h({4}, loom_dtype(kDLUInt, 8));
    ptest::Outcome o = ptest::outcome(api().all_reduce(self(), nullptr, h.get(), LOOM_REDUCE_SUM));
    CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
    CHECK(has(o, "u8"));
    HostTensor<int64_t> b({4}, loom_dtype(kDLInt, 64));
    o = ptest::outcome(api().broadcast(self(), nullptr, b.get(), 0));
    CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
    CHECK(has(o, "i64"));
  }
  {
    HostTensor<float> t({4}, loom_f32());
    ptest::Outcome o =
        ptest::outcome(api().all_reduce(self(), nullptr, t.get(), static_cast<loom_reduce_op>(9)));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(has(o, "unknown reduce op 9"));
    CHECK_FALSE(ptest::outcome(api().all_reduce(self(), nullptr, nullptr, LOOM_REDUCE_SUM)).ok());
    t.t.device = DLDevice{kDLCUDA, 0};
    o = ptest::outcome(api().all_reduce(self(), nullptr, t.get(), LOOM_REDUCE_SUM));
    CHECK(has(o, "CPU memory only"));
  }
  {
    HostTensor<float> t({2, 3}, loom_f32());
    int64_t strides[2] = {1, 2};  // column-major: not compact
    t.t.strides = strides;
    ptest::Outcome o = ptest::outcome(api().broadcast(self(), nullptr, t.get(), 0));
    CHECK(has(o, "not compact"));
  }
  {
    HostTensor<float> in({n * 2 + 1}, loom_f32());
    HostTensor<float> out({2}, loom_f32());
    ptest::Outcome o =
        ptest::outcome(api().reduce_scatter(self(), nullptr, in.get(), out.get(), LOOM_REDUCE_SUM));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(has(o, "times out's 2 elements"));
    HostTensor<double> dout({2}, loom_f64());
    HostTensor<float> in2({n * 2}, loom_f32());
    o = ptest::outcome(
        api().reduce_scatter(self(), nullptr, in2.get(), dout.get(), LOOM_REDUCE_SUM));
    CHECK(has(o, "in is f32 but out is f64"));
    HostTensor<float> gathered({n * 2 + 1}, loom_f32());
    o = ptest::outcome(api().all_gather(self(), nullptr, out.get(), gathered.get()));
    CHECK(has(o, "times in's 2 elements"));
  }
  {
    HostTensor<float> in({n + 1, 2}, loom_f32());  // n+1 rows: never n equal chunks (n > 1)
    HostTensor<float> out({n + 1, 2}, loom_f32());
    if (n > 1) {
      ptest::Outcome o = ptest::outcome(api().all_to_all(self(), nullptr, in.get(), out.get()));
      CHECK(has(o, "equal chunks along dim 0"));
    }
    HostTensor<float> a({n, 2}, loom_f32());
    HostTensor<float> b({n, 3}, loom_f32());
    ptest::Outcome o = ptest::outcome(api().all_to_all(self(), nullptr, a.get(), b.get()));
    CHECK(has(o, "equal element counts"));
  }
  {
    HostTensor<float> t({3}, loom_f32());
    ptest::Outcome o = ptest::outcome(api().broadcast(self(), nullptr, t.get(), n));
    CHECK(has(o, "root " + std::to_string(n) + " is not a rank"));
  }
}

TEST_CASE("comm/mpi: MPI's own errors come back with MPI's text") {
  RANK_INFO;
  const int n = world().size;
  HostTensor<float> t({3}, loom_f32());
  ptest::Outcome o = ptest::outcome(api().send(self(), nullptr, t.get(), n, 0));  // no such rank
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "MPI_Send failed"));
  CHECK(has(o, "rank"));
  o = ptest::outcome(api().send(self(), nullptr, t.get(), 0, -5));  // tags are >= 0
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "MPI_Send failed"));
  CHECK(has(o, "tag"));
}

TEST_CASE("comm/mpi: recv of a message of another length fails on the receiver") {
  RANK_INFO;
  Group W = world_group();
  const int n = W.size();
  const int next = (W.rank + 1) % n;
  const int prev = (W.rank + n - 1) % n;
  for (int sent : {2, 6}) {  // shorter than the receive buffer, then longer
    CAPTURE(sent);
    HostTensor<float> out({sent}, loom_f32());
    HostTensor<float> in({4}, loom_f32());
    ptest::Outcome o;
    if (W.rank % 2 == 0) {
      ok(api().send(self(), nullptr, out.get(), next, 7));
      o = ptest::outcome(api().recv(self(), nullptr, in.get(), prev, 7));
    } else {
      o = ptest::outcome(api().recv(self(), nullptr, in.get(), prev, 7));
      ok(api().send(self(), nullptr, out.get(), next, 7));
    }
    CHECK_FALSE(o.ok());
    if (sent < 4)
      CHECK(has(o, "expected 4 elements but got 2"));
    else
      CHECK(has(o, "MPI_Recv failed"));
  }
  ok(api().barrier(self(), nullptr));
}
