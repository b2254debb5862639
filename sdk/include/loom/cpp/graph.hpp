// Loom SDK C++ helpers for loom.graph/1 (graph.h, ABI 2.31): the checks every backend makes of
// a capture, the refusal every backend gives inside one, the lookup a caller uses, and the
// whole extension for a backend whose work is done when a call returns (backend/cpu), which
// keeps the body and runs it at each launch under the capture rules.
#pragma once

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/graph.h"

namespace loom {

// The instance's loom.graph/1 table, or NULL for one that does not lend it.
inline const loom_graph_api* find_graph(const loom_backend_ref& be) {
  return backend_ext<loom_graph_api>(be, LOOM_EXT_GRAPH, LOOM_GRAPH_API_SIZE_V1);
}

// What is wrong with capture's arguments ("" when nothing).
inline std::string graph_capture_refusal(const loom_graph_capture_args* a, void** graph) {
  if (graph == nullptr) return "graph is NULL";
  if (a == nullptr || a->struct_size < LOOM_GRAPH_CAPTURE_ARGS_SIZE_V2_31)
    return "args are NULL or older than loom_graph_capture_args of ABI 2.31";
  if (a->body == nullptr) return "body is NULL";
  for (const loom_ext* e = a->ext; e != nullptr; e = e->next)
    if (e->flags & LOOM_EXT_REQUIRED)
      return std::string("does not implement extension '") + (e->id ? e->id : "(null)") +
             "', which the caller requires";
  return "";
}
// The refusal of a capture or launch made while a graph's body runs.
inline std::string graph_nesting_refusal(const char* call) {
  return std::string(call) + " inside a graph's body: graphs do not nest";
}

// The answer to `call` made while a graph's body runs, the same on every backend.
inline std::string graph_call_refusal(const std::string& who, const char* call) {
  return who + ": " + call +
         " inside a graph's body (" LOOM_EXT_GRAPH
         "): the host may not wait for the device nor copy host memory there; write "
         "what a launch needs before it and read its results after it";
}

namespace host_graph {

// A graph of a backend without graphs: the body, run by each launch.
struct Graph {
  loom_error* (*body)(void*) = nullptr;
  void* user = nullptr;
};

// The instances whose graph bodies run now, each with its host and its name (for refusals
// made in tables shared by backends, such as host_stream's). One thread drives an instance
// (backend.h) and a body runs on the thread that launched it, so an entry is only ever read
// by its own thread; the list is shared, under a mutex, rather than thread_local because
// thread-local storage in a dlopen'ed plugin made LeakSanitizer's exit-time scan fault
// ("Tracer caught signal 11", as in commit cd984fe).
struct Running {
  const loom_backend* be = nullptr;
  const loom_host* host = nullptr;
  const char* who = "";
};
inline std::mutex running_mutex;
inline std::vector<Running> running;

// The entry of `be` when it runs a body (a copy: the list may grow meanwhile).
inline std::optional<Running> running_of(const loom_backend* be) {
  if (be == nullptr) return std::nullopt;
  std::lock_guard lock(running_mutex);
  for (const Running& r : running)
    if (r.be == be) return r;
  return std::nullopt;
}
inline bool replaying(const loom_backend* be) { return running_of(be).has_value(); }

// Throws loom::Error (INVALID_ARGUMENT) when `be` runs a graph's body: `call` is refused there.
inline void refuse_in_graph(const loom_backend* be, const char* call) {
  if (auto r = running_of(be))
    throw Error(LOOM_ERR_INVALID_ARGUMENT, graph_call_refusal(r->who, call));
}
// The same as a host-made error, or NULL when `be` runs no body.
inline loom_error* refusal(const loom_backend* be, const char* call) noexcept {
  const auto r = running_of(be);
  if (!r || r->host == nullptr) return nullptr;
  return guard(r->host, [&] { refuse_in_graph(be, call); });
}

// loom_graph_api's three slots for backend `be` whose errors `host` makes; `who` (static
// storage) names it.
inline loom_error* capture(const loom_host* host, const loom_backend* be, const char* who,
                           const loom_graph_capture_args* a, void** graph) noexcept {
  return guard(host, [&] {
    const std::string why = graph_capture_refusal(a, graph);
    require(why.empty(), std::string(who) + ": capture: " + why);
    require(!replaying(be), std::string(who) + ": " + graph_nesting_refusal("capture"));
    *graph = new Graph{a->body, a->user};
  });
}
inline loom_error* launch(const loom_host* host, const loom_backend* be, const char* who,
                          void* graph) noexcept {
  if (graph == nullptr || replaying(be))
    return guard(host, [&] {
      require(graph != nullptr, std::string(who) + ": launch: graph is NULL");
      require(false, std::string(who) + ": " + graph_nesting_refusal("launch"));
    });
  const Graph& g = *static_cast<const Graph*>(graph);
  struct Scope {  // the rules hold while the body runs, however it ends
    const loom_backend* be;
    Scope(const loom_backend* b, const loom_host* host, const char* who) : be(b) {
      std::lock_guard lock(running_mutex);
      running.push_back(Running{b, host, who});
    }
    ~Scope() {
      std::lock_guard lock(running_mutex);
      running.erase(std::remove_if(running.begin(), running.end(),
                                   [&](const Running& r) { return r.be == be; }),
                    running.end());  // (not std::erase_if: nvcc compiles this header as C++17)
    }
  } scope(be, host, who);
  return g.body(g.user);
}
inline void graph_free(void* graph) noexcept { delete static_cast<Graph*>(graph); }

}  // namespace host_graph
}  // namespace loom
