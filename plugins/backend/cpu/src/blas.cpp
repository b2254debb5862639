// Finding and loading OpenBLAS. Why dlopen and not a link-time dependency: OpenBLAS reads
// OPENBLAS_CORETYPE in its constructor, which runs when the library is loaded — with a link
// dependency that is before any plugin code runs, too early to set it. Loading it ourselves
// lets create() pick the core from cpuid first (see cpu_features.cpp for why that matters).
#include "blas.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "loom/cpp/plugin.hpp"

namespace loom_cpu {
namespace {

constexpr const char* kLibName = "libopenblas.so.0";

std::mutex g_mutex;
std::unique_ptr<Blas> g_blas;  // never unloaded: OpenBLAS threads may outlive an instance

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

template <class Fn>
Fn symbol(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (!p)
    throw loom::Error(LOOM_ERR_UNIMPLEMENTED, std::string("backend/cpu: ") + kLibName +
                                                  " has no symbol " + name +
                                                  " — is it OpenBLAS? install libopenblas0-openmp");
  return reinterpret_cast<Fn>(p);
}

}  // namespace

void Blas::use_threads(int n) const {
  if (threads_now.load(std::memory_order_relaxed) == n) return;
  set_num_threads(n);
  threads_now.store(n, std::memory_order_relaxed);
}

const Blas& load_blas(const loom_host* host, const CpuFeatures& cpu, const std::string& coretype) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_blas) {
    if (coretype != "auto" && coretype != "native" && lower(coretype) != lower(g_blas->corename))
      loom::log(host, LOOM_LOG_WARN,
                "blas_coretype=" + coretype +
                    " ignored: OpenBLAS is already loaded in this process with core " +
                    g_blas->corename);
    return *g_blas;
  }

  // Which core to ask for. The environment wins: a user who set it knows better.
  std::string requested;
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  if (env && *env) {
    requested = env;
    if (coretype != "auto" && lower(coretype) != lower(requested))
      loom::log(host, LOOM_LOG_WARN,
                "blas_coretype=" + coretype + " ignored: OPENBLAS_CORETYPE=" + requested +
                    " is set in the environment");
  } else {
    if (coretype == "auto")
      requested = cpu.openblas_coretype();
    else if (coretype != "native")
      requested = coretype;
    if (!requested.empty()) {
      // Already in the process (linked by the host or another plugin)? Then it has
      // initialised and the variable would change nothing; say so rather than pretend.
      if (void* h = dlopen(kLibName, RTLD_NOW | RTLD_NOLOAD)) {
        dlclose(h);
        loom::log(host, LOOM_LOG_WARN,
                  std::string("") + kLibName + " was loaded before backend/cpu, " +
                      "so OPENBLAS_CORETYPE=" + requested + " cannot take effect (set it in " +
                      "the environment before starting the program)");
      }
      setenv("OPENBLAS_CORETYPE", requested.c_str(), 1);  // unset or empty here
    }
  }

  void* lib = dlopen(kLibName, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    throw loom::Error(LOOM_ERR_IO, std::string("backend/cpu: cannot load ") + kLibName +
                                       " — install libopenblas0-openmp (" +
                                       (why ? why : "dlopen failed") + ")");
  }
  auto blas = std::make_unique<Blas>();
  blas->sgemm = symbol<Blas::sgemm_fn>(lib, "cblas_sgemm");
  blas->dgemm = symbol<Blas::dgemm_fn>(lib, "cblas_dgemm");
  blas->set_num_threads = symbol<void (*)(int)>(lib, "openblas_set_num_threads");
  blas->get_corename = symbol<char* (*)()>(lib, "openblas_get_corename");
  blas->get_config = symbol<char* (*)()>(lib, "openblas_get_config");
  const char* core = blas->get_corename();
  const char* config = blas->get_config();
  blas->corename = core ? core : "unknown";
  blas->config = config ? config : "";
  blas->requested = requested;
  if (blas->config.find("USE64BITINT") != std::string::npos)
    throw loom::Error(LOOM_ERR_UNIMPLEMENTED, std::string("backend/cpu: ") + kLibName +
                                                  " uses 64-bit integers (" + blas->config +
                                                  "); backend/cpu needs the 32-bit-int build " +
                                                  "(libopenblas0-openmp)");
  if (!requested.empty() && lower(requested) != lower(blas->corename))
    loom::log(host, LOOM_LOG_WARN,
              "asked OpenBLAS for core " + requested + " but it runs " + blas->corename + " (" +
                  blas->config + ")");
  g_blas = std::move(blas);
  return *g_blas;
}

double measure_sgemm_gflops(const Blas& blas, int n, int reps) {
  size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> a(nn), b(nn), c(nn);
  for (size_t i = 0; i < nn; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.125f - 0.375f;
    b[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  }
  auto run = [&] {
    blas.sgemm(Blas::kRowMajor, Blas::kNoTrans, Blas::kNoTrans, n, n, n, 1.0f, a.data(), n,
               b.data(), n, 0.0f, c.data(), n);
  };
  run();  // warm-up: thread start, buffer allocation
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * n * n * static_cast<double>(n) / s * 1e-9);
  }
  return best;
}

}  // namespace loom_cpu
