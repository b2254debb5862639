// comm/nccl, in two suites run as separate ctest entries:
//  - "no-device": on a machine without a usable CUDA device, create fails with a loom_error
//    saying so (no crash, no hang); skipped where a device exists.
//  - "gpu" (ctest label gpu): every collective on GPU tensors, on the world and on the
//    groups split by rank parity, against values computed here in float64 from the
//    rank-determined inputs; point-to-point over a ring when the world has two ranks or
//    more; the errors a caller can cause. Runs as one process (world size 1, which never
//    loads MPI) and under mpirun (the MPI bootstrap); skipped where there is no device, or
//    fewer devices than ranks on this node.
// A skipped suite prints a line starting "SKIPPED:", which ctest reports as Skipped.
//
// MPI can be initialised once per process, so one comm instance serves every GPU test case
// and is destroyed (finalising MPI under mpirun) when the program exits. Argument errors are
// provoked identically on every rank, so no rank is left alone inside a collective.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "loom/cpp/comm.hpp"
#include "plugin_test_util.hpp"

namespace {

// Why the GPU suite cannot run here ("" when it can): asked of the CUDA runtime directly,
// before the plugin is loaded.
std::string gpu_unavailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e) + ")";
  if (count == 0) return "no CUDA device (cudaGetDeviceCount found 0)";
  int local = 1;  // ranks mpirun started on this node
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(var)) local = std::max(local, std::atoi(v));
  if (local > count)
    return std::to_string(local) + " ranks on this node but only " + std::to_string(count) +
           " CUDA device(s); NCCL needs one GPU per rank";
  return "";
}

// Prints the skip line once per process and tells the caller to return.
bool skip_gpu() {
  static const std::string reason = gpu_unavailable();
  static bool said = false;
  if (reason.empty()) return false;
  if (!said) std::printf("SKIPPED: comm/nccl GPU tests: %s\n", reason.c_str());
  said = true;
  return true;
}

bool has(const ptest::Outcome& o, const std::string& s) {
  return o.message.find(s) != std::string::npos;
}

struct World {
  loomtest::TestHost host;
  loom_comm_ref ref;
  int rank = 0;
  int size = 1;
  int device = 0;  // the device create made current: the one the plugin chose
  World() : ref(host.load_comm("nccl")) {
    rank = ref.api->world_rank(ref.self);
    size = ref.api->world_size(ref.self);
    REQUIRE(cudaGetDevice(&device) == cudaSuccess);
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

// A compact tensor in this rank's GPU memory, filled from and read back to the host.
template <class T>
class DeviceTensor {
 public:
  DeviceTensor(std::vector<int64_t> shape, DLDataType dtype) : shape_(std::move(shape)) {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    n_ = static_cast<size_t>(n);
    REQUIRE(cudaMalloc(&ptr_, std::max<size_t>(n_, 1) * sizeof(T)) == cudaSuccess);
    t_.data = ptr_;
    t_.device = DLDevice{kDLCUDA, world().device};
    t_.ndim = static_cast<int>(shape_.size());
    t_.dtype = dtype;
    t_.shape = shape_.data();
  }
  ~DeviceTensor() { cudaFree(ptr_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  DLTensor* get() { return &t_; }
  void upload(const std::vector<T>& v) {
    REQUIRE(v.size() == n_);
    REQUIRE(cudaMemcpy(ptr_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    REQUIRE(cudaMemcpy(v.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }

 private:
  std::vector<int64_t> shape_;
  size_t n_ = 0;
  void* ptr_ = nullptr;
  DLTensor t_{};
};

commconf::Suite<DeviceTensor>& suite() {
  // NCCL has no integer average (refused by name: see the error test), and its blocking
  // send to itself would never complete.
  static commconf::Suite<DeviceTensor> s(
      commconf::Target{&api(), self(), world().rank, world().size, &ok, false, false, true,
                       [](loom_error* e) { return ptest::outcome(e).message; }});
  return s;
}

using commconf::check_values;
using commconf::Group;
using commconf::inputs;
using commconf::reduce;

#define GPU_TEST_START    \
  if (skip_gpu()) return; \
  INFO("world rank " << world().rank << " of " << world().size)

}  // namespace

TEST_SUITE("no-device") {
  TEST_CASE("comm/nccl: create without a CUDA device fails with a clear error") {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
      std::printf("SKIPPED: comm/nccl no-device test: this machine has %d CUDA device(s)\n", count);
      return;
    }
    const loom_plugin_descriptor* d = loomtest::load_descriptor("comm", "nccl");
    CHECK(std::string(d->name) == "nccl");
    CHECK(d->kind == LOOM_KIND_COMM);
    auto* a = static_cast<const loom_comm_api*>(d->api);
    CHECK(a->struct_size >= LOOM_COMM_API_SIZE_V2);
    loomtest::TestHost host;
    loom_config cfg = loomtest::TestHost::config(d);
    loom_comm* c = nullptr;
    ptest::Outcome o = ptest::outcome(a->create(host.host(), &cfg, &c));
    MESSAGE("create said: " << o.message);
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(has(o, "comm/nccl: create: no CUDA device"));
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);  // asked independently
    CHECK(has(o,
              driver == nullptr ? "no CUDA driver: libcuda.so.1 not found" : "cudaGetDeviceCount"));
    if (driver != nullptr) dlclose(driver);
    CHECK(c == nullptr);
    a->destroy(nullptr);  // accepted, like every destroy
  }

  // The bootstrap is chosen before the device is asked for, so its refusals show here too.
  TEST_CASE("comm/nccl: the bootstrap is chosen by the launcher, and refused by name") {
    // Started without a launcher, comm/nccl never loads MPI: the copy below has no
    // nccl-bootstrap/ folder beside it, and create still gets as far as the device.
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("loom-nccl-alone-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::filesystem::path copy = dir / "loom-comm-nccl.so";
    std::filesystem::copy_file(loomtest::plugin_path("comm", "nccl"), copy,
                               std::filesystem::copy_options::overwrite_existing);
    void* h = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(h != nullptr, dlerror());
    auto entry = (loom_plugin_entry_fn)dlsym(h, LOOM_PLUGIN_ENTRY_NAME);
    REQUIRE(static_cast<bool>(entry));
    auto* a = static_cast<const loom_comm_api*>(entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR)->api);
    loomtest::TestHost host;
    loom_config cfg;
    auto create = [&](const char* launcher_var, const char* forced) {
      if (launcher_var != nullptr) setenv(launcher_var, "1", 1);
      if (forced != nullptr) setenv("LOOM_NCCL_BOOTSTRAP", forced, 1);
      loom_comm* c = nullptr;
      ptest::Outcome o = ptest::outcome(a->create(host.host(), &cfg, &c));
      if (launcher_var != nullptr) unsetenv(launcher_var);
      unsetenv("LOOM_NCCL_BOOTSTRAP");
      MESSAGE("create said: " << o.message);
      CHECK(c == nullptr);
      return o;
    };
    ptest::Outcome alone = create(nullptr, nullptr);
    CHECK(has(alone, "comm/nccl: create: no CUDA device"));
    ptest::Outcome single = create("OMPI_COMM_WORLD_SIZE", "single");
    CHECK(has(single, "comm/nccl: create: no CUDA device"));
    ptest::Outcome launched = create("OMPI_COMM_WORLD_SIZE", nullptr);
    CHECK(launched.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(has(launched, "needs MPI to start its ranks (OMPI_COMM_WORLD_SIZE is set"));
    CHECK(has(launched, "nccl-bootstrap/libloom-nccl-mpi.so"));
    CHECK(has(launched, "LOOM_NCCL_BOOTSTRAP=single"));
    ptest::Outcome bad = create(nullptr, "tcp");
    CHECK(has(bad, "LOOM_NCCL_BOOTSTRAP is 'tcp'; it takes mpi or single"));
    std::filesystem::remove_all(dir);
  }
}

TEST_SUITE("gpu") {
  // The conformance suite (tests/comm/conformance.hpp), as every comm plugin runs it.
  TEST_CASE("comm/nccl: world and parity groups have the expected ranks and sizes") {
    GPU_TEST_START;
    suite().groups();
  }
  TEST_CASE("comm/nccl: NULL, old or unknown-required args are refused") {
    GPU_TEST_START;
    suite().args();
  }
  TEST_CASE("comm/nccl: all_reduce SUM, MAX, MIN, AVG in f32, f64 and i32") {
    GPU_TEST_START;
    suite().all_reduce();
  }
  TEST_CASE("comm/nccl: reduce_scatter then all_gather is an all_reduce") {
    GPU_TEST_START;
    suite().scatter_gather();
  }

  TEST_CASE("comm/nccl: in and out sharing memory are read before they are written") {
    GPU_TEST_START;
    const int n = world().size;
    const int r = world().rank;
    Group W = suite().world_group();
    std::vector<double> sums;
    for (int i = 0; i < 2 * n; ++i) sums.push_back(reduce(W, i, LOOM_REDUCE_SUM, false));
    int64_t chunk_shape[1] = {2};
    {  // this rank's chunk lands at the front of the same buffer (a scratch copy on rank > 0)
      DeviceTensor<float> buf({2 * n}, loom_f32());
      buf.upload(inputs<float>(r, 2 * n, false));
      DLTensor out = *buf.get();
      out.shape = chunk_shape;
      ok(loom::comm_reduce_scatter(ref(), nullptr, buf.get(), &out, LOOM_REDUCE_SUM));
      std::vector<float> got = buf.download();
      check_values(std::vector<float>(got.begin(), got.begin() + 2), {sums[2 * r], sums[2 * r + 1]},
                   "reduce_scatter into the front of in");
    }
    {  // NCCL's in-place layouts: out is in's chunk at this rank, and back again
      DeviceTensor<float> buf({2 * n}, loom_f32());
      buf.upload(inputs<float>(r, 2 * n, false));
      DLTensor chunk = *buf.get();
      chunk.shape = chunk_shape;
      chunk.byte_offset = 2 * sizeof(float) * r;
      ok(loom::comm_reduce_scatter(ref(), nullptr, buf.get(), &chunk, LOOM_REDUCE_SUM));
      ok(loom::comm_all_gather(ref(), nullptr, &chunk, buf.get()));
      check_values(buf.download(), sums, "in-place reduce_scatter then all_gather");
    }
  }

  TEST_CASE("comm/nccl: on a caller's stream, calls are enqueued behind its work and return") {
    GPU_TEST_START;
    // The caller's stream is busy with a copy into `t` when the all-reduce is enqueued
    // behind it: the reduction must see the copied values (stream order), and the values
    // are read only after the stream is synchronised (the host does not wait in the call).
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    const int64_t n = 1 << 16;
    DeviceTensor<float> src({n}, loom_f32()), t({n}, loom_f32());
    src.upload(inputs<float>(world().rank, static_cast<size_t>(n), false));
    t.upload(std::vector<float>(static_cast<size_t>(n), -1.0f));
    REQUIRE(cudaMemcpyAsync(t.get()->data, src.get()->data, n * sizeof(float),
                            cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    ok(loom::comm_all_reduce(ref(), nullptr, t.get(), LOOM_REDUCE_SUM, s));
    // A reduce_scatter whose out is the front of its in: the copy aside is stream-ordered.
    const int w = world().size;
    DeviceTensor<float> buf({2 * w}, loom_f32());
    buf.upload(inputs<float>(world().rank, static_cast<size_t>(2 * w), false));
    DLTensor front = *buf.get();
    int64_t two = 2;
    front.shape = &two;
    front.ndim = 1;
    ok(loom::comm_reduce_scatter(ref(), nullptr, buf.get(), &front, LOOM_REDUCE_SUM, s));
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    Group W;
    for (int r = 0; r < w; ++r) W.members.push_back(r);
    W.rank = world().rank;
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i) want.push_back(reduce(W, i, LOOM_REDUCE_SUM, false));
    check_values(t.download(), want, "all_reduce on the caller's stream");
    std::vector<double> mine;
    for (int64_t i = 0; i < 2; ++i)
      mine.push_back(reduce(W, 2 * W.rank + i, LOOM_REDUCE_SUM, false));
    std::vector<float> got = buf.download();
    got.resize(2);
    check_values(got, mine, "reduce_scatter into its own input, on the caller's stream");
    cudaStreamDestroy(s);
  }
  TEST_CASE("comm/nccl: started calls complete out of order, equal to the blocking ones") {
    GPU_TEST_START;
    suite().nonblocking();
  }
  TEST_CASE(
      "comm/nccl: a call started on a caller's stream runs behind its work and hands the "
      "result back to it at wait") {
    GPU_TEST_START;
    // The caller's stream copies src into t, the all-reduce of t is started behind that copy
    // (on comm/nccl's side stream), wait hands it back, and a second copy on the caller's
    // stream reads the result into `after`: stream order must hold at both ends, with no host
    // wait until the final synchronise.
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    const int64_t n = 1 << 20;
    DeviceTensor<float> src({n}, loom_f32()), t({n}, loom_f32()), after({n}, loom_f32());
    src.upload(inputs<float>(world().rank, static_cast<size_t>(n), false));
    t.upload(std::vector<float>(static_cast<size_t>(n), -1.0f));
    after.upload(std::vector<float>(static_cast<size_t>(n), -2.0f));
    REQUIRE(cudaMemcpyAsync(t.get()->data, src.get()->data, n * sizeof(float),
                            cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    loom_comm_request* req = nullptr;
    ok(loom::comm_start(ref(), LOOM_COMM_CALL_ALL_REDUCE, nullptr, nullptr, t.get(),
                        LOOM_REDUCE_SUM, s, &req));
    ok(loom::comm_wait(ref(), req));
    REQUIRE(cudaMemcpyAsync(after.get()->data, t.get()->data, n * sizeof(float),
                            cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    Group W;
    for (int r = 0; r < world().size; ++r) W.members.push_back(r);
    W.rank = world().rank;
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i) want.push_back(reduce(W, i, LOOM_REDUCE_SUM, false));
    check_values(after.download(), want, "started all_reduce, read behind wait on the stream");
    cudaStreamDestroy(s);
  }
  TEST_CASE("comm/nccl: all_to_all sends chunk j to rank j") {
    GPU_TEST_START;
    suite().all_to_all();
  }
  TEST_CASE("comm/nccl: all_to_all_v sends uneven chunks") {
    GPU_TEST_START;
    suite().all_to_all_v();
  }
  TEST_CASE("comm/nccl: broadcast from a non-zero root") {
    GPU_TEST_START;
    suite().broadcast();
  }
  TEST_CASE("comm/nccl: send and recv around a ring, in the world and in a group") {
    GPU_TEST_START;
    suite().ring();
  }
  TEST_CASE("comm/nccl: the contract tags hold (a collective takes only its group's ranks)") {
    GPU_TEST_START;
    suite().contract();
  }

  TEST_CASE("comm/nccl: a recv of another size or tag fails on the receiver only") {
    GPU_TEST_START;
    if (world().size == 1) return;
    Group W = suite().world_group();
    const int n = W.size();
    const int next = (W.rank + 1) % n;
    const int prev = (W.rank + n - 1) % n;
    for (int sent : {2, 6, 4}) {  // shorter, longer, then the right size with another tag
      CAPTURE(sent);
      DeviceTensor<float> out({sent}, loom_f32());
      DeviceTensor<float> in({4}, loom_f32());
      const int tag = sent == 4 ? 8 : 7;
      ptest::Outcome o;
      if (W.rank % 2 == 0) {
        ok(loom::comm_send(ref(), nullptr, out.get(), next, tag));
        o = ptest::outcome(loom::comm_recv(ref(), nullptr, in.get(), prev, 7));
      } else {
        o = ptest::outcome(loom::comm_recv(ref(), nullptr, in.get(), prev, 7));
        ok(loom::comm_send(ref(), nullptr, out.get(), next, tag));
      }
      CHECK_FALSE(o.ok());
      CHECK(has(o, "expected 16 bytes but the next message has " + std::to_string(4 * sent) +
                       " bytes and tag " + std::to_string(tag)));
    }
    ok(loom::comm_barrier(ref(), nullptr));  // the communicator still works
  }

  TEST_CASE("comm/nccl: argument errors are named, identically on every rank") {
    GPU_TEST_START;
    const int n = world().size;
    const int dev = world().device;
    {
      ptest::HostTensor<float> h({4}, loom_f32());
      ptest::Outcome o =
          ptest::outcome(loom::comm_all_reduce(ref(), nullptr, h.get(), LOOM_REDUCE_SUM));
      CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
      CHECK(has(o, "comm/nccl: all_reduce: tensor is on cpu; comm/nccl reaches GPU memory only"));
      h.t.device = DLDevice{kDLCUDA, dev};  // a host pointer labelled as GPU memory
      o = ptest::outcome(loom::comm_all_reduce(ref(), nullptr, h.get(), LOOM_REDUCE_SUM));
      CHECK(has(o, "its data is not GPU memory"));
    }
    {
      DeviceTensor<float> t({4}, loom_f32());
      DLTensor other = *t.get();
      other.device.device_id = dev + 1;
      ptest::Outcome o = ptest::outcome(loom::comm_broadcast(ref(), nullptr, &other, 0));
      CHECK(has(o, "is on cuda:" + std::to_string(dev + 1) +
                       " but this rank's communicator uses cuda:" + std::to_string(dev)));
      o = ptest::outcome(
          loom::comm_all_reduce(ref(), nullptr, t.get(), static_cast<loom_reduce_op>(9)));
      CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
      CHECK(has(o, "unknown reduce op 9"));
      CHECK_FALSE(
          ptest::outcome(loom::comm_all_reduce(ref(), nullptr, nullptr, LOOM_REDUCE_SUM)).ok());
      o = ptest::outcome(loom::comm_broadcast(ref(), nullptr, t.get(), n));
      CHECK(has(o, "root " + std::to_string(n) + " is not a rank"));
      o = ptest::outcome(loom::comm_send(ref(), nullptr, t.get(), world().rank, 0));
      CHECK(has(o, "is this rank"));
      o = ptest::outcome(loom::comm_recv(ref(), nullptr, t.get(), n, 0));
      CHECK(has(o, "peer " + std::to_string(n) + " is not a rank"));
    }
    {
      DeviceTensor<int32_t> t({4}, loom_i32());
      ptest::Outcome o =
          ptest::outcome(loom::comm_all_reduce(ref(), nullptr, t.get(), LOOM_REDUCE_AVG));
      CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
      CHECK(has(o, "AVG of i32 is not supported"));
      DeviceTensor<uint16_t> u({4}, loom_dtype(kDLUInt, 16));
      o = ptest::outcome(loom::comm_all_reduce(ref(), nullptr, u.get(), LOOM_REDUCE_SUM));
      CHECK(o.code == LOOM_ERR_UNIMPLEMENTED);
      CHECK(has(o, "dtype u16 cannot be reduced"));
    }
    {
      DeviceTensor<float> t({2, 3}, loom_f32());
      int64_t strides[2] = {1, 2};  // column-major: not compact
      t.get()->strides = strides;
      ptest::Outcome o = ptest::outcome(loom::comm_broadcast(ref(), nullptr, t.get(), 0));
      CHECK(has(o, "not compact"));
    }
    {
      DeviceTensor<float> in({n * 2 + 1}, loom_f32());
      DeviceTensor<float> out({2}, loom_f32());
      ptest::Outcome o = ptest::outcome(
          loom::comm_reduce_scatter(ref(), nullptr, in.get(), out.get(), LOOM_REDUCE_SUM));
      CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
      CHECK(has(o, "times out's 2 elements"));
      DeviceTensor<double> dout({2}, loom_f64());
      DeviceTensor<float> in2({n * 2}, loom_f32());
      o = ptest::outcome(
          loom::comm_reduce_scatter(ref(), nullptr, in2.get(), dout.get(), LOOM_REDUCE_SUM));
      CHECK(has(o, "in is f32 but out is f64"));
      DeviceTensor<float> gathered({n * 2 + 1}, loom_f32());
      o = ptest::outcome(loom::comm_all_gather(ref(), nullptr, out.get(), gathered.get()));
      CHECK(has(o, "times in's 2 elements"));
    }
    {
      DeviceTensor<float> a({n, 2}, loom_f32());
      DeviceTensor<float> b({n, 3}, loom_f32());
      ptest::Outcome o = ptest::outcome(loom::comm_all_to_all(ref(), nullptr, a.get(), b.get()));
      CHECK(has(o, "equal element counts"));
      if (n > 1) {
        DeviceTensor<float> c({n + 1, 2}, loom_f32());  // never n equal chunks (n > 1)
        o = ptest::outcome(loom::comm_all_to_all(ref(), nullptr, c.get(), c.get()));
        CHECK(has(o, "equal chunks along dim 0"));
      }
    }
    ok(loom::comm_barrier(ref(), nullptr));  // nothing above reached NCCL: it still works
  }
}
