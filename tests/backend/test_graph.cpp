// loom.graph/1 (graph.h, ABI 2.31) on the device backend: work recorded by capture and
// replayed by launches gives the numbers of the same calls made eagerly, to the bit on the same
// device and within f32's bound of backend/cpu; a capture computes nothing; each launch reads
// what was written before it; memory the body freed is not handed to anyone else while the
// graph lives; the calls the rules refuse are refused by name, and the instance works as before
// after a refusal. Run on backend/cuda by tools/gpu-check and on backend/cpu (which keeps the
// body and runs it at each launch) by gpu.ops_harness_cpu.
#include <cstring>
#include <string>

#include "gpu_pair.hpp"
#include "loom/cpp/graph.hpp"

using namespace gputest;

namespace {

const loom_graph_api& graph_api(const loom::Backend& B) {
  return lent(B, &loom::find_graph, LOOM_EXT_GRAPH);
}

// The calls a body may be asked to make although the rules refuse them.
enum class Extra { kNone, kToHost, kFromHost, kSync, kSumSquares, kReadStart, kEventSync, kTimer };

// One step of a toy model: h = x @ w (a library GEMM), y = 0.5 h + 0.9 y, out = y + h, with h
// allocated and freed inside the step.
struct Step {
  const loom::Backend* B = nullptr;
  DLTensor *x = nullptr, *w = nullptr, *y = nullptr, *out = nullptr;
  int64_t M = 0, K = 0, N = 0;
  Extra extra = Extra::kNone;
  bool fail = false;  // the body answers an error of its own
  int runs = 0;
};

void extra_call(const Step& s, const DLTensor* h) {
  const loom::Backend& B = *s.B;
  std::vector<float> host(static_cast<size_t>(s.M * s.N));
  const size_t bytes = host.size() * sizeof(float);
  const loom_device_stream& ds = B.device_stream("test_graph");
  void* mark = nullptr;
  switch (s.extra) {
    case Extra::kNone:
      return;
    case Extra::kToHost:
      return loom::check(B.host(), B.api()->to_host(B.self(), h, host.data(), bytes));
    case Extra::kFromHost:
      return loom::check(B.host(), B.api()->from_host(B.self(), s.out, host.data(), bytes));
    case Extra::kSync:
      return loom::check(B.host(), B.api()->synchronize(B.self()));
    case Extra::kSumSquares:
      (void)loom::sum_squares(B, h);
      return;
    case Extra::kReadStart:
      return loom::check(B.host(), ds.read_start(B.self(), h, &mark));
    case Extra::kEventSync:
      return loom::check(B.host(), ds.event_sync(B.self(), nullptr));
    case Extra::kTimer:
      loom::check(B.host(), ds.timer_record(B.self(), &mark));
      ds.timer_free(B.self(), mark);
      return;
  }
}

loom_error* step_body(void* user) {
  Step& s = *static_cast<Step*>(user);
  ++s.runs;
  return loom::guard(s.B->host(), [&] {
    const loom::Backend& B = *s.B;
    loom::Tensor h(B, loom_f32(), {s.M, s.N});
    loom::gemm(B, false, false, s.M, s.N, s.K, s.x, s.K, 0, s.w, s.N, 0, h.get(), s.N, 0, 0.0);
    B.call(&loom_ops::axpby, s.y, 0.5, static_cast<const DLTensor*>(h.get()), 0.9);
    B.call(&loom_ops::add, s.out, static_cast<const DLTensor*>(s.y),
           static_cast<const DLTensor*>(h.get()));
    extra_call(s, h.get());
    loom::require(!s.fail, "the body's own error");
  });
}

// The step's tensors on one backend.
struct State {
  loom::Tensor x, w, y, out;
  Step step;
  State(const loom::Backend& B, int64_t M, int64_t K, int64_t N)
      : x(B, loom_f32(), {M, K}),
        w(B, loom_f32(), {K, N}),
        y(B, loom_f32(), {M, N}),
        out(B, loom_f32(), {M, N}) {
    upload(w, random_vec(K * N, 11));
    upload(y, random_vec(M * N, 12));
    poison(out);
    step = Step{&B, x.get(), w.get(), y.get(), out.get(), M, K, N};
  }
};

std::string message_of(const loom::Backend& B, loom_error* e) {
  if (e == nullptr) return "";
  std::string m = B.host()->error_message(e);
  B.host()->error_free(e);
  return m;
}

// capture, then a launch when the capture passed: the first error's message, "" for none.
std::string capture_and_launch(const loom::Backend& B, Step& s, void** graph) {
  const loom_graph_api& g = graph_api(B);
  const loom_graph_capture_args a{LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31, step_body, &s, nullptr};
  *graph = nullptr;
  std::string m = message_of(B, g.capture(B.self(), &a, graph));
  if (m.empty()) m = message_of(B, g.launch(B.self(), *graph));
  return m;
}

}  // namespace

TEST_CASE("loom.graph/1: replays equal the eager calls, read fresh inputs, keep their memory") {
  const loom::Backend& D = dev();
  const loom_graph_api& g = graph_api(D);
  CHECK(g.base.struct_size >= LOOM_GRAPH_API_SIZE_V1);
  const int64_t M = 24, K = 40, N = 56;
  State replay(D, M, K, N), eager(D, M, K, N), ref(cpu(), M, K, N);
  const Vec y0 = download(replay.y);
  const Vec x0 = random_vec(M * K, 13);
  for (State* s : {&replay, &eager, &ref}) upload(s->x, x0);

  void* graph = nullptr;
  const loom_graph_capture_args a{LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31, step_body, &replay.step,
                                  nullptr};
  REQUIRE(message_of(D, g.capture(D.self(), &a, &graph)) == "");
  REQUIRE(graph != nullptr);
  CHECK(replay.step.runs <= 1);  // once (a real graph) or not yet (run by each launch)
  expect_same(download(replay.y), y0, "y after capture: the capture computed nothing");
  // A tensor allocated after the capture, while the graph holds what its body freed.
  loom::Tensor bystander(D, loom_f32(), {M, N});
  const Vec marks = random_vec(M * N, 14);
  upload(bystander, marks);

  for (int launch = 0; launch < 3; ++launch) {
    CAPTURE(launch);
    if (launch == 2) {  // new inputs, written before the launch
      const Vec x1 = random_vec(M * K, 15);
      for (State* s : {&replay, &eager, &ref}) upload(s->x, x1);
    }
    REQUIRE(message_of(D, g.launch(D.self(), graph)) == "");
    D.call(&loom_ops::fill, replay.out.get(), 0.0);  // after the launch: ordered behind it
    REQUIRE(message_of(D, step_body(&eager.step)) == "");
    D.call(&loom_ops::fill, eager.out.get(), 0.0);
    REQUIRE(message_of(cpu(), step_body(&ref.step)) == "");
    expect_same(download(replay.y), download(eager.y), "y: replay against eager, same device");
    expect_close(download(replay.y), download(ref.y), kTolF32, "y against backend/cpu");
  }
  // out was zeroed after each launch: the last replay's out, once more
  REQUIRE(message_of(D, g.launch(D.self(), graph)) == "");
  REQUIRE(message_of(D, step_body(&eager.step)) == "");
  expect_same(download(replay.out), download(eager.out), "out: replay against eager");
  expect_same(download(bystander), round_to(f32(), marks), "a tensor allocated beside the graph");
  g.graph_free(D.self(), graph);
  g.graph_free(D.self(), nullptr);  // accepted
}

TEST_CASE("loom.graph/1: the calls the rules refuse are refused by name; the instance goes on") {
  const loom::Backend& D = dev();
  const loom_graph_api& g = graph_api(D);
  const struct {
    Extra extra;
    const char* name;
  } cases[] = {{Extra::kToHost, "to_host"},       {Extra::kFromHost, "from_host"},
               {Extra::kSync, "synchronize"},     {Extra::kSumSquares, "sum_squares"},
               {Extra::kReadStart, "read_start"}, {Extra::kEventSync, "event_sync"},
               {Extra::kTimer, "timer_record"}};
  for (const auto& c : cases) {
    CAPTURE(c.name);
    State s(D, 8, 16, 8);
    upload(s.x, random_vec(8 * 16, 21));
    s.step.extra = c.extra;
    void* graph = nullptr;
    const std::string m = capture_and_launch(D, s.step, &graph);
    CHECK(m.find(c.name) != std::string::npos);
    CHECK(m.find(LOOM_EXT_GRAPH) != std::string::npos);
    g.graph_free(D.self(), graph);
    // The instance is out of capture: the refused calls work again, and a good step replays.
    std::vector<float> host(8 * 8);
    loom::check(D.host(), D.api()->synchronize(D.self()));
    loom::check(D.host(), D.api()->to_host(D.self(), s.y.get(), host.data(), host.size() * 4));
    s.step.extra = Extra::kNone;
    CHECK(capture_and_launch(D, s.step, &graph) == "");
    g.graph_free(D.self(), graph);
  }
}

TEST_CASE("loom.graph/1: the body's own error, nesting and bad arguments") {
  const loom::Backend& D = dev();
  const loom_graph_api& g = graph_api(D);
  State s(D, 8, 8, 8);
  upload(s.x, random_vec(64, 31));
  s.step.fail = true;
  void* graph = nullptr;
  CHECK(capture_and_launch(D, s.step, &graph).find("the body's own error") != std::string::npos);
  g.graph_free(D.self(), graph);

  // A capture inside a body.
  struct Nest {
    const loom::Backend* B;
    std::string inner;
  } nest{&D, ""};
  auto nested = [](void* user) -> loom_error* {
    Nest& n = *static_cast<Nest*>(user);
    const loom_graph_api& ga = *loom::find_graph(loom_backend_ref{n.B->api(), n.B->self()});
    const loom_graph_capture_args inner{LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31, step_body, nullptr,
                                        nullptr};
    void* h = nullptr;
    n.inner = message_of(*n.B, ga.capture(n.B->self(), &inner, &h));
    return nullptr;
  };
  const loom_graph_capture_args outer{LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31, nested, &nest, nullptr};
  REQUIRE(message_of(D, g.capture(D.self(), &outer, &graph)) == "");
  REQUIRE(message_of(D, g.launch(D.self(), graph)) == "");
  CHECK(nest.inner.find("do not nest") != std::string::npos);
  g.graph_free(D.self(), graph);

  // Arguments.
  const loom_graph_capture_args no_body{LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31, nullptr, nullptr,
                                        nullptr};
  CHECK(message_of(D, g.capture(D.self(), &no_body, &graph)).find("body is NULL") !=
        std::string::npos);
  const loom_graph_capture_args old{sizeof(size_t), step_body, &s.step, nullptr};
  CHECK(message_of(D, g.capture(D.self(), &old, &graph)).find("older") != std::string::npos);
  const loom_ext unknown{sizeof(loom_ext), "loom.no-such/1", LOOM_EXT_REQUIRED, nullptr};
  const loom_graph_capture_args with{LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31, step_body, &s.step,
                                     &unknown};
  CHECK(message_of(D, g.capture(D.self(), &with, &graph)).find("loom.no-such/1") !=
        std::string::npos);
  CHECK(message_of(D, g.launch(D.self(), nullptr)).find("graph is NULL") != std::string::npos);
}
