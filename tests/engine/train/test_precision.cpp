// MainParams (engine/src/train/precision.cpp): the f32 main copies of bf16 values, one allocation
// and one cast per run of adjacent values, on backend/cpu through the ABI. What a cast over a
// run must never do: write into a gap between two values, where something that is not a
// parameter may live (a model's buffers).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "test_host.hpp"
#include "train/precision.hpp"

using loom::engine::MainParams;

namespace {

uint16_t bf16_bits(float f) {  // exact for the values used here (few mantissa bits)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Views {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLTensor> views;
};

}  // namespace

TEST_CASE("main parameters: one f32 run per run of adjacent values; gaps are never written") {
  loomtest::TestHost host;
  const loom_backend_ref be = host.load_backend("cpu", {{"measure_gemm", "false"}});
  auto alloc = [&](DLDataType dt, int64_t n) {
    DLTensor* t = nullptr;
    REQUIRE(be.api->alloc_tensor(be.self, dt, 1, &n, &t) == nullptr);
    return t;
  };
  // One bf16 buffer of 24: a (2,4) at 0, b (8) at 8 right after it, a gap [16, 20) holding
  // something else, c (4) at 20. Then e (3), bf16 in an allocation of its own, and d (5) f32.
  DLTensor* flat = alloc(loom_bf16(), 24);
  DLTensor* e_alloc = alloc(loom_bf16(), 3);
  DLTensor* d = alloc(loom_f32(), 5);
  std::vector<uint16_t> init(24);
  for (int i = 0; i < 24; ++i) init[i] = bf16_bits(0.5f * (float)(i + 1));
  REQUIRE(be.api->from_host(be.self, flat, init.data(), init.size() * 2) == nullptr);
  const std::vector<uint16_t> e_init = {bf16_bits(-1.f), bf16_bits(-2.f), bf16_bits(-3.f)};
  REQUIRE(be.api->from_host(be.self, e_alloc, e_init.data(), 6) == nullptr);

  Views v;
  v.shapes = {{4}, {2, 4}, {8}};
  v.views.resize(3, *flat);
  const int64_t offsets[3] = {20, 0, 8};  // c, a, b: not in address order
  for (int i = 0; i < 3; ++i) {
    v.views[i].ndim = (int32_t)v.shapes[i].size();
    v.views[i].shape = v.shapes[i].data();
    v.views[i].byte_offset = flat->byte_offset + (uint64_t)offsets[i] * 2;
  }
  std::vector<DLTensor*> values = {&v.views[0], &v.views[1], d, e_alloc, &v.views[2]};
  MainParams main(be, values);

  CHECK(main.mixed());
  CHECK(main.runs() == 3);   // {a, b}, {c}, {e}
  CHECK(main.main(2) == d);  // f32 already: its own main tensor
  CHECK(main.bytes() == doctest::Approx(4.0 * (16 + 4 + 3)));
  CHECK(main.main(1)->data == main.main(4)->data);  // a and b share one allocation,
  CHECK(main.main(4)->byte_offset == main.main(1)->byte_offset + 8 * 4);  // b right after a
  CHECK(main.main(0)->data != main.main(1)->data);  // c, after a gap: a run of its own

  auto read = [&](const DLTensor* t) {
    std::vector<float> out((size_t)loom_tensor_numel(t));
    REQUIRE(be.api->to_host(be.self, t, out.data(), out.size() * 4) == nullptr);
    return out;
  };
  main.from_model();
  for (size_t i : {0u, 1u, 4u}) {
    const int64_t off = offsets[i == 4 ? 2 : i];
    const std::vector<float> m = read(main.main(i));
    for (size_t k = 0; k < m.size(); ++k) CHECK(m[k] == from_bf16(init[(size_t)off + k]));
  }
  CHECK(read(main.main(3)) == std::vector<float>{-1.f, -2.f, -3.f});

  // A step: new main values (exact in bf16), cast into the model.
  for (size_t i : {0u, 1u, 3u, 4u}) {
    std::vector<float> nv((size_t)loom_tensor_numel(main.main(i)));
    for (size_t k = 0; k < nv.size(); ++k) nv[k] = 8.f * (float)(i + 1) + 0.25f * (float)k;
    REQUIRE(be.api->from_host(be.self, main.main(i), nv.data(), nv.size() * 4) == nullptr);
  }
  main.to_model();
  std::vector<uint16_t> after(24), e_after(3);
  REQUIRE(be.api->to_host(be.self, flat, after.data(), 48) == nullptr);
  REQUIRE(be.api->to_host(be.self, e_alloc, e_after.data(), 6) == nullptr);
  for (int k = 0; k < 8; ++k) CHECK(from_bf16(after[k]) == 16.f + 0.25f * (float)k);      // a
  for (int k = 0; k < 8; ++k) CHECK(from_bf16(after[8 + k]) == 40.f + 0.25f * (float)k);  // b
  for (int k = 16; k < 20; ++k) CHECK(after[k] == init[k]);                               // the gap
  for (int k = 0; k < 4; ++k) CHECK(from_bf16(after[20 + k]) == 8.f + 0.25f * (float)k);  // c
  for (int k = 0; k < 3; ++k) CHECK(from_bf16(e_after[k]) == 32.f + 0.25f * (float)k);    // e

  for (DLTensor* t : {flat, e_alloc, d}) be.api->free_tensor(be.self, t);
}
