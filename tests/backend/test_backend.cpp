// backend/cpu as a plugin: descriptor and schema, get_info, allocation (alignment, zero fill,
// memory accounting), host copies, tensor checks, a second instance with its own thread count
// and the GEMM measurement, and thread-count-independent reductions.
#include <algorithm>
#include <cstring>

#include "ops_support.hpp"

using namespace opstest;

TEST_CASE("descriptor: kind, name and the schema keys") {
  const loom_plugin_descriptor* d = loomtest::load_descriptor("backend", "cpu");
  CHECK(d->kind == LOOM_KIND_BACKEND);
  CHECK(std::string(d->name) == "cpu");
  CHECK(d->abi_major == LOOM_ABI_MAJOR);
  REQUIRE(d->num_params == 4);
  CHECK(std::string(d->params[0].name) == "threads");
  CHECK(std::string(d->params[1].name) == "blas_coretype");
  CHECK(std::string(d->params[2].name) == "measure_gemm");
  CHECK(std::string(d->params[3].name) == "norm_residual");
  auto* api = static_cast<const loom_backend_api*>(d->api);
  CHECK(api->struct_size >= LOOM_BACKEND_API_SIZE_V2);
  CHECK(api->ops->struct_size >= LOOM_OPS_SIZE_V2);
  CHECK((api->ops->vocab_ce_stats != nullptr));
  CHECK((api->ops->vocab_ce_backward != nullptr));
}

TEST_CASE("loom.device-stream/1: listed, a NULL stream on the CPU, events that are no-ops") {
  // Plugins with their own kernels (optimizers, attention) enqueue on the backend's stream
  // through this table; on the CPU it must exist too, so they keep one code path.
  CHECK(loomtest::lists_capability("backend", "cpu", LOOM_EXT_DEVICE_STREAM));
  CHECK(B().api()->get_ext(B().self(), "loom.no-such-thing/1") == nullptr);
  const loom_device_stream& ds = B().device_stream("test");
  CHECK(std::string(ds.base.id) == LOOM_EXT_DEVICE_STREAM);
  CHECK(ds.base.struct_size >= LOOM_DEVICE_STREAM_SIZE_V1);
  CHECK(ds.device.device_type == kDLCPU);
  CHECK(ds.stream == nullptr);
  void* event = reinterpret_cast<void*>(1);
  loom::check(B().host(), ds.event_record(B().self(), &event));
  CHECK(event == nullptr);  // everything enqueued so far is already done
  loom::check(B().host(), ds.event_wait(B().self(), event));
  loom::check(B().host(), ds.event_sync(B().self(), event));
  ds.event_free(B().self(), event);
}

TEST_CASE("loom.device-stream/1's reads (ABI 2.27): the values at read_start, whatever follows") {
  const loom_device_stream& ds = B().device_stream("test");
  REQUIRE(ds.base.struct_size >= LOOM_DEVICE_STREAM_SIZE_V2_27);
  loom::Tensor t(B(), loom_f64(), {3});
  t.upload(std::vector<double>{1.5, -2.0, 1e300});
  void* read = nullptr;
  loom::check(B().host(), ds.read_start(B().self(), t.get(), &read));
  REQUIRE(read != nullptr);
  B().call(&loom_ops::fill, t.get(), 7.0);  // work after the read does not reach it
  double got[3] = {0, 0, 0};
  loom::check(B().host(), ds.read_finish(B().self(), read, got, sizeof got));
  CHECK(got[0] == 1.5);
  CHECK(got[1] == -2.0);
  CHECK(got[2] == 1e300);
}

TEST_CASE("get_info: device name names the CPU features and the BLAS core") {
  loom_backend_info info{};
  info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
  loom::check(B().host(), B().api()->get_info(B().self(), &info));
  REQUIRE(info.device_name != nullptr);
  std::string name = info.device_name;
  MESSAGE("device: " << name);
  CHECK(name.rfind("cpu: ", 0) == 0);
  CHECK(name.find("OpenBLAS ") != std::string::npos);
  CHECK(name.find(" threads") != std::string::npos);
  CHECK(info.device.device_type == kDLCPU);
  CHECK(info.peak_gflops == 0.0);  // measure_gemm=false
}

TEST_CASE("alloc_tensor: 64-byte aligned, zero-filled, accounted in mem_in_use/mem_peak") {
  auto read = [] {
    loom_backend_info i{};
    i.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
    loom::check(B().host(), B().api()->get_info(B().self(), &i));
    return i;
  };
  size_t before = read().mem_in_use;
  {
    loom::Tensor t(B(), loom_f32(), {1000, 3});
    CHECK(reinterpret_cast<uintptr_t>(t.get()->data) % 64 == 0);
    auto v = t.download<float>();
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    loom_backend_info mid = read();
    CHECK(mid.mem_in_use >= before + 12000);
    CHECK(mid.mem_peak >= mid.mem_in_use);
    loom::Tensor e(B(), loom_f64(), {0, 5});  // empty tensors are fine
    CHECK(e.numel() == 0);
  }
  loom_backend_info after = read();
  CHECK(after.mem_in_use == before);
  CHECK(after.mem_peak >= before + 12000);
}

TEST_CASE("alloc/copy errors: negative dims, byte count mismatch, strided and foreign tensors") {
  DLTensor* t = nullptr;
  int64_t bad_shape[2] = {3, -1};
  loom_error* e = B().api()->alloc_tensor(B().self(), loom_f32(), 2, bad_shape, &t);
  REQUIRE(e != nullptr);
  CHECK(std::string(B().host()->error_message(e)).find("alloc_tensor: dimension 1 is negative") !=
        std::string::npos);
  B().host()->error_free(e);

  loom::Tensor x(B(), loom_f32(), {4});
  std::vector<float> host(3);
  expect_error(
      [&] { loom::check(B().host(), B().api()->to_host(B().self(), x.get(), host.data(), 12)); },
      LOOM_ERR_INVALID_ARGUMENT, "to_host: asked for 12 bytes, src (4) f32 holds 16");

  // A transposed (strided) view and a tensor claiming another device are refused by ops.
  loom::Tensor m(B(), loom_f64(), {2, 3});
  DLTensor view = *m.get();
  int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
  view.shape = shape;
  view.strides = strides;
  expect_error([&] { B().call(&loom_ops::fill, &view, 1.0); }, LOOM_ERR_INVALID_ARGUMENT,
               "fill: t is not compact row-major");
  DLTensor gpu = *m.get();
  gpu.device.device_type = kDLCUDA;
  expect_error([&] { B().call(&loom_ops::fill, &gpu, 1.0); }, LOOM_ERR_INVALID_ARGUMENT,
               "fill: t is on device type 2, expected kDLCPU");
  expect_error(
      [&] { loom::act_forward(B(), LOOM_ACT_GELU_TANH, x.get(), static_cast<DLTensor*>(nullptr)); },
      LOOM_ERR_INVALID_ARGUMENT, "gelu_forward: inp is NULL");
  // bf16/f16 are mixed precision (test_mixed.cpp); integers are no op's data dtype
  loom::Tensor h(B(), loom_i32(), {4});
  expect_error([&] { loom::act_forward(B(), LOOM_ACT_GELU_TANH, h.get(), h.get()); },
               LOOM_ERR_UNIMPLEMENTED, "gelu_forward: inp is i32");
}

TEST_CASE("views: ops honour byte_offset (loom::View slices rows)") {
  auto X = make64({4, 3}, Vec{0, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0});
  loom::View mid(X.get(), {2, 3}, 3);  // rows 1..2
  B().call(&loom_ops::fill, mid.get(), 9.0);
  Vec got = get(X);
  CHECK(got == Vec{0, 0, 0, 9, 9, 9, 9, 9, 9, 0, 0, 0});
}

TEST_CASE("a second instance: threads=1, measured GEMM rate, same reductions as threads=all") {
  const loom_plugin_descriptor* d = loomtest::load_descriptor("backend", "cpu");
  auto* api = static_cast<const loom_backend_api*>(d->api);
  loom_config cfg = loomtest::TestHost::config(d, {{"threads", "1"}, {"measure_gemm", "true"}});
  loom_backend* one = nullptr;
  loom::check(B().host(), api->create(B().host(), &cfg, &one));
  REQUIRE(one != nullptr);
  loom_backend_info info{};
  info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
  loom::check(B().host(), api->get_info(one, &info));
  MESSAGE("threads=1 instance: " << std::string(info.device_name) << ", sgemm 1024^3 "
                                 << info.peak_gflops << " GFLOP/s");
  CHECK(info.peak_gflops > 1.0);
  CHECK(std::string(info.device_name).find("1 threads") != std::string::npos);

  // sum_squares and the column-blocked parameter gradients do not depend on the thread count.
  const int64_t n = 300000, N = 200, C = 384;
  Vec v = random_vec(n, 50), d2 = random_vec(N * C, 51);
  auto X = make(loom_f32(), {n}, v);
  double all = loom::sum_squares(B(), X.get()), single = 0;
  const DLTensor* x = X.get();
  const loom_sum_squares_args ssq{LOOM_SUM_SQUARES_ARGS_SIZE_V2, &x, 1, &single, nullptr};
  loom::check(B().host(), api->ops->sum_squares(one, &ssq));
  CHECK(all == single);
  auto D = make(loom_f32(), {N, C}, d2);
  auto b1 = make(loom_f32(), {C}, Vec(C, 0.0));
  auto b2 = make(loom_f32(), {C}, Vec(C, 0.0));
  loom::bias_backward(B(), b1.get(), D.get());
  const loom_bias_bwd_args bb{LOOM_BIAS_BWD_ARGS_SIZE_V2, b2.get(), D.get(), nullptr};
  loom::check(B().host(), api->ops->bias_backward(one, &bb));
  CHECK(b1.download<float>() == b2.download<float>());
  // free_tensor ignores what this instance did not allocate (a view, another instance's
  // tensor); destroy frees what is still allocated (both log, which the test host prints).
  DLTensor* leak = nullptr;
  int64_t shape[1] = {16};
  loom::check(B().host(), api->alloc_tensor(one, loom_f32(), 1, shape, &leak));
  DLTensor view = *leak;
  api->free_tensor(one, &view);
  api->free_tensor(one, X.get());
  api->destroy(one);
  api->destroy(nullptr);  // accepted
}

TEST_CASE("create: a bad config value is refused with the key named") {
  const loom_plugin_descriptor* d = loomtest::load_descriptor("backend", "cpu");
  auto* api = static_cast<const loom_backend_api*>(d->api);
  loom_config cfg = loomtest::TestHost::config(d, {{"threads", "-2"}, {"measure_gemm", "false"}});
  loom_backend* be = nullptr;
  expect_error([&] { loom::check(B().host(), api->create(B().host(), &cfg, &be)); },
               LOOM_ERR_INVALID_ARGUMENT, "backend/cpu: threads = -2 must be >= 0");
  CHECK(be == nullptr);
}
