// comm/single: the comm conformance suite in a world of one, then what is its own: every
// collective as an identity or a copy, shape/dtype/device errors, and send/recv to self
// through the per-tag loopback queue.
#include <cstring>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "loom/cpp/comm.hpp"
#include "plugin_test_util.hpp"

using ptest::HostTensor;

namespace {

struct Comm {
  loomtest::TestHost host;
  loom_comm_ref ref;
  loom_comm_group* group = nullptr;
  Comm() : ref(host.load_comm("single")) {
    int colors[1] = {0};
    host.check(loom::comm_group_create(ref, colors, "test", &group));
  }
  ~Comm() { api().group_destroy(ref.self, group); }
  const loom_comm_api& api() const { return *ref.api; }
  loom_comm* self() const { return ref.self; }
};

bool has(const ptest::Outcome& o, const std::string& s) {
  return o.message.find(s) != std::string::npos;
}

Comm& shared() {
  static Comm c;
  return c;
}
void shared_ok(loom_error* e) { shared().host.check(e); }

}  // namespace

// The comm conformance suite (tests/comm/conformance.hpp), as every comm plugin runs it.
TEST_CASE("comm/single: the conformance suite in a world of one") {
  Comm& c = shared();
  commconf::Suite<HostTensor> s(
      commconf::Target{&c.api(), c.self(), 0, 1, &shared_ok, true, true, true,
                       [](loom_error* e) { return ptest::outcome(e).message; }});
  s.groups();
  s.args();
  s.all_reduce();
  s.scatter_gather();
  s.shared_memory();
  s.all_to_all();
  s.all_to_all_v();
  s.broadcast();
  s.ring();
  s.contract();
  s.nonblocking();
}

TEST_CASE("comm/single: a world of one, groups of one") {
  Comm c;
  CHECK(c.api().world_rank(c.self()) == 0);
  CHECK(c.api().world_size(c.self()) == 1);
  CHECK(c.api().group_rank(c.self(), c.group) == 0);
  CHECK(c.api().group_size(c.self(), c.group) == 1);
  int colors[1] = {5};
  loom_comm_group* g2 = nullptr;
  c.host.check(loom::comm_group_create(c.ref, colors, nullptr, &g2));
  CHECK(g2 != nullptr);
  CHECK(c.api().group_size(c.self(), g2) == 1);
  c.api().group_destroy(c.self(), g2);
  c.api().group_destroy(c.self(), nullptr);
  CHECK(ptest::outcome(loom::comm_barrier(c.ref, c.group)).ok());
}

TEST_CASE("comm/single: all_reduce is the identity for SUM, MAX, MIN and AVG") {
  Comm c;
  for (loom_reduce_op op : {LOOM_REDUCE_SUM, LOOM_REDUCE_MAX, LOOM_REDUCE_MIN, LOOM_REDUCE_AVG}) {
    HostTensor<float> f({3, 4}, loom_f32());
    ptest::fill_iota(f, -2.5f, 0.75f);
    const std::vector<float> before = f.data;
    c.host.check(loom::comm_all_reduce(c.ref, c.group, f.get(), op));
    CHECK(f.data == before);  // AVG over one rank divides by 1: bitwise unchanged
    HostTensor<int32_t> i({5}, loom_i32());
    ptest::fill_iota(i, 7, 3);
    const std::vector<int32_t> ibefore = i.data;
    c.host.check(loom::comm_all_reduce(c.ref, c.group, i.get(), op));
    CHECK(i.data == ibefore);
  }
  HostTensor<float> f({2}, loom_f32());
  ptest::Outcome o = ptest::outcome(
      loom::comm_all_reduce(c.ref, c.group, f.get(), static_cast<loom_reduce_op>(9)));
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "unknown reduce op 9"));
  CHECK_FALSE(ptest::outcome(loom::comm_all_reduce(c.ref, c.group, nullptr, LOOM_REDUCE_SUM)).ok());
}

TEST_CASE("comm/single: reduce_scatter, all_gather and all_to_all copy in to out") {
  Comm c;
  HostTensor<float> in({4, 3}, loom_f32());
  ptest::fill_iota(in, 1.0f, 1.0f);
  {
    HostTensor<float> out({4, 3}, loom_f32());
    c.host.check(loom::comm_reduce_scatter(c.ref, c.group, in.get(), out.get(), LOOM_REDUCE_AVG));
    CHECK(out.data == in.data);
  }
  {
    HostTensor<float> out({12}, loom_f32());  // same element count, other shape: fine
    c.host.check(loom::comm_all_gather(c.ref, c.group, in.get(), out.get()));
    CHECK(out.data == in.data);
  }
  {
    HostTensor<float> out({4, 3}, loom_f32());
    c.host.check(loom::comm_all_to_all(c.ref, c.group, in.get(), out.get()));
    CHECK(out.data == in.data);
  }
  {
    // in place (in and out are the same buffer)
    const std::vector<float> before = in.data;
    c.host.check(loom::comm_all_gather(c.ref, c.group, in.get(), in.get()));
    CHECK(in.data == before);
  }
  {
    // byte_offset is honoured on both sides
    HostTensor<float> big({8}, loom_f32());
    ptest::fill_iota(big, 0.0f, 1.0f);
    DLTensor src = *big.get();
    int64_t three = 3;
    src.shape = &three;
    src.byte_offset = 4 * sizeof(float);
    HostTensor<float> out({3}, loom_f32());
    c.host.check(loom::comm_all_to_all(c.ref, c.group, &src, out.get()));
    CHECK(out.data == std::vector<float>{4, 5, 6});
  }
}

TEST_CASE("comm/single: shape, dtype, layout and device errors") {
  Comm c;
  HostTensor<float> in({4, 3}, loom_f32());
  HostTensor<float> small({2, 3}, loom_f32());
  ptest::Outcome o = ptest::outcome(loom::comm_all_gather(c.ref, c.group, in.get(), small.get()));
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "all_gather"));
  CHECK(has(o, "(4,3)"));
  CHECK(has(o, "(2,3)"));
  CHECK(has(o, "equal element counts"));
  o = ptest::outcome(
      loom::comm_reduce_scatter(c.ref, c.group, in.get(), small.get(), LOOM_REDUCE_SUM));
  CHECK(has(o, "reduce_scatter"));
  o = ptest::outcome(loom::comm_all_to_all(c.ref, c.group, small.get(), in.get()));
  CHECK(has(o, "all_to_all"));

  HostTensor<int32_t> ints({4, 3}, loom_i32());
  o = ptest::outcome(loom::comm_all_gather(c.ref, c.group, in.get(), ints.get()));
  CHECK(has(o, "comm/single: all_gather: in is f32 but out is i32"));

  // a transposed (non-compact) view cannot be copied with memcpy
  HostTensor<float> out({3, 4}, loom_f32());
  DLTensor transposed = *in.get();
  int64_t tshape[2] = {3, 4}, tstrides[2] = {1, 3};
  transposed.shape = tshape;
  transposed.strides = tstrides;
  o = ptest::outcome(loom::comm_all_gather(c.ref, c.group, &transposed, out.get()));
  CHECK(has(o, "not compact"));

  // a GPU tensor: the identity collectives accept it without touching its memory, the
  // copying ones refuse it with a reason
  float* fake_device_ptr = reinterpret_cast<float*>(static_cast<uintptr_t>(0x1000));
  DLTensor gpu = *in.get();
  gpu.data = fake_device_ptr;
  gpu.device = DLDevice{kDLCUDA, 0};
  CHECK(ptest::outcome(loom::comm_all_reduce(c.ref, c.group, &gpu, LOOM_REDUCE_AVG)).ok());
  CHECK(ptest::outcome(loom::comm_broadcast(c.ref, c.group, &gpu, 0)).ok());
  o = ptest::outcome(loom::comm_all_gather(c.ref, c.group, &gpu, in.get()));
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "CPU memory only"));
  o = ptest::outcome(loom::comm_send(c.ref, c.group, &gpu, 0, 0));
  CHECK(has(o, "CPU memory only"));
}

TEST_CASE("comm/single: broadcast from root 0 is a no-op; other roots are errors") {
  Comm c;
  HostTensor<float> t({6}, loom_f32());
  ptest::fill_iota(t, 3.0f, -1.0f);
  const std::vector<float> before = t.data;
  c.host.check(loom::comm_broadcast(c.ref, c.group, t.get(), 0));
  CHECK(t.data == before);
  ptest::Outcome o = ptest::outcome(loom::comm_broadcast(c.ref, c.group, t.get(), 1));
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "root 1"));
}

TEST_CASE("comm/single: send then recv to self, FIFO per tag") {
  Comm c;
  HostTensor<float> a({3}, loom_f32()), b({3}, loom_f32()), z({2, 2}, loom_f32());
  ptest::fill_iota(a, 1.0f, 1.0f);
  ptest::fill_iota(b, 10.0f, 1.0f);
  ptest::fill_iota(z, -1.0f, -1.0f);
  c.host.check(loom::comm_send(c.ref, c.group, a.get(), 0, 7));
  c.host.check(loom::comm_send(c.ref, c.group, b.get(), 0, 7));
  c.host.check(loom::comm_send(c.ref, c.group, z.get(), 0, 9));
  a.data.assign(3, 0.0f);  // the send copied its data: changing the source is safe

  HostTensor<float> r({3}, loom_f32()), rz({4}, loom_f32());
  c.host.check(loom::comm_recv(c.ref, c.group, rz.get(), 0, 9));
  CHECK(rz.data == std::vector<float>{-1, -2, -3, -4});
  c.host.check(loom::comm_recv(c.ref, c.group, r.get(), 0, 7));
  CHECK(r.data == std::vector<float>{1, 2, 3});
  c.host.check(loom::comm_recv(c.ref, c.group, r.get(), 0, 7));
  CHECK(r.data == std::vector<float>{10, 11, 12});

  ptest::Outcome o = ptest::outcome(loom::comm_recv(c.ref, c.group, r.get(), 0, 7));
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(has(o, "tag 7"));

  c.host.check(loom::comm_send(c.ref, c.group, a.get(), 0, 1));
  o = ptest::outcome(loom::comm_recv(c.ref, c.group, rz.get(), 0, 1));  // 4 != 3 elements
  CHECK(has(o, "expects 4 elements"));
}

TEST_CASE("comm/single: send/recv to any other peer is an error") {
  Comm c;
  HostTensor<float> t({2}, loom_f32());
  ptest::Outcome o = ptest::outcome(loom::comm_send(c.ref, c.group, t.get(), 1, 0));
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(o.message == "comm/single: no peer 1 in a world of 1");
  o = ptest::outcome(loom::comm_recv(c.ref, c.group, t.get(), 3, 0));
  CHECK(o.message == "comm/single: no peer 3 in a world of 1");
  o = ptest::outcome(loom::comm_send(c.ref, c.group, t.get(), -1, 0));
  CHECK(o.message == "comm/single: no peer -1 in a world of 1");
}
