// comm/nccl's bootstraps: one rank alone, or MPI through the helper library (bootstrap.hpp).
#include "bootstrap.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "mpi_bootstrap.h"
#include "nccl_support.hpp"

namespace comm_nccl {
namespace {

// The launcher's local rank, when it says.
int env_local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return std::atoi(v);
  return -1;
}

// One rank, no peers: collectives over it are copies, and no message has anyone to go to.
class Single final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank(const char*) override { return std::max(env_local_rank(), 0); }
  void broadcast(void*, size_t, const char*) override {}
  int min(int value, const char*) override { return value; }
  std::unique_ptr<Bootstrap> split(int, const char*) override { return std::make_unique<Single>(); }
  void send(const void*, size_t, int peer, const char* fn) override { no_peer(peer, fn); }
  void recv(void*, size_t, int peer, const char* fn) override { no_peer(peer, fn); }

 private:
  [[noreturn]] static void no_peer(int peer, const char* fn) {
    fail(LOOM_ERR_INVALID_ARGUMENT, fn,
         "peer " + std::to_string(peer) + " does not exist: this world is one rank");
  }
};

class Mpi final : public Bootstrap {
 public:
  Mpi(const loom_nccl_mpi_api* api, loom_nccl_mpi_group* g) : api_(api), g_(g) {}
  ~Mpi() override { api_->free_group(g_); }
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;

  int rank() const override { return api_->rank(g_); }
  int size() const override { return api_->size(g_); }
  int local_rank(const char* fn) override {
    if (int r = env_local_rank(); r >= 0) return r;
    int r = 0;
    check(api_->local_rank(g_, &r, err_), fn, err_);
    return r;
  }
  void broadcast(void* data, size_t bytes, const char* fn) override {
    check(api_->broadcast(g_, data, bytes, 0, err_), fn, err_);
  }
  int min(int value, const char* fn) override {
    check(api_->min_int(g_, &value, err_), fn, err_);
    return value;
  }
  std::unique_ptr<Bootstrap> split(int color, const char* fn) override {
    loom_nccl_mpi_group* out = nullptr;
    check(api_->split(g_, color, rank(), &out, err_), fn, err_);
    return std::make_unique<Mpi>(api_, out);
  }
  void send(const void* data, size_t bytes, int peer, const char* fn) override {
    check(api_->send(g_, data, bytes, peer, err_), fn, err_);
  }
  void recv(void* data, size_t bytes, int peer, const char* fn) override {
    check(api_->recv(g_, data, bytes, peer, err_), fn, err_);
  }

  static void check(int rc, const char* fn, const char* err) {
    if (rc != 0) fail(LOOM_ERR_INTERNAL, fn, err);
  }

 private:
  const loom_nccl_mpi_api* api_;
  loom_nccl_mpi_group* g_;
  char err_[LOOM_NCCL_MPI_ERR_LEN] = {0};
};

const loom_nccl_mpi_api* mpi_api = nullptr;  // the helper, loaded once and kept

// The helper library beside this plugin (nccl-bootstrap/libloom-nccl-mpi.so), or a reason.
const loom_nccl_mpi_api* load_mpi(std::string& why) {
  if (mpi_api != nullptr) return mpi_api;
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&load_mpi), &self) == 0 || self.dli_fname == nullptr) {
    why = "dladdr cannot tell where comm/nccl was loaded from";
    return nullptr;
  }
  std::string dir = self.dli_fname;
  dir = dir.substr(0, dir.find_last_of('/') + 1);
  const std::string path = dir + "nccl-bootstrap/libloom-nccl-mpi.so";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    why = e != nullptr ? e : path + ": cannot load";
    return nullptr;
  }
  auto fn = reinterpret_cast<loom_nccl_mpi_api_fn>(dlsym(h, LOOM_NCCL_MPI_API_SYMBOL));
  if (fn == nullptr || fn() == nullptr || fn()->struct_size < sizeof(loom_nccl_mpi_api)) {
    why = path + " has no usable " LOOM_NCCL_MPI_API_SYMBOL;
    return nullptr;
  }
  mpi_api = fn();
  return mpi_api;
}

// The launcher variable that says an MPI launcher started this process, or nullptr.
const char* launcher_variable() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                          "MPI_LOCALNRANKS", "SLURM_STEP_ID"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return var;
  return nullptr;
}

}  // namespace

std::unique_ptr<Bootstrap> world_bootstrap(std::string& how) {
  const char* forced = std::getenv("LOOM_NCCL_BOOTSTRAP");
  const std::string choice = forced != nullptr ? forced : "";
  const char* var = launcher_variable();
  if (choice == "single" || (choice.empty() && var == nullptr)) {
    how = choice.empty() ? "one rank without MPI (no MPI launcher variable is set)"
                         : "one rank without MPI (LOOM_NCCL_BOOTSTRAP=single)";
    return std::make_unique<Single>();
  }
  if (!choice.empty() && choice != "mpi")
    fail(LOOM_ERR_INVALID_ARGUMENT, "create",
         "LOOM_NCCL_BOOTSTRAP is '" + choice + "'; it takes mpi or single");
  const std::string reason = var != nullptr ? std::string(var) +
                                                  " is set, so an MPI launcher "
                                                  "started this process"
                                            : "LOOM_NCCL_BOOTSTRAP=mpi";
  std::string why;
  const loom_nccl_mpi_api* api = load_mpi(why);
  if (api == nullptr)
    fail(LOOM_ERR_INVALID_ARGUMENT, "create",
         "needs MPI to start its ranks (" + reason + ") but the MPI bootstrap cannot load: " + why +
             "; run one rank without a launcher, or set LOOM_NCCL_BOOTSTRAP=single");
  char err[LOOM_NCCL_MPI_ERR_LEN] = {0};
  Mpi::check(api->init(err), "create", err);
  loom_nccl_mpi_group* g = nullptr;
  Mpi::check(api->world(&g, err), "create", err);
  how = "MPI (" + reason + ")";
  return std::make_unique<Mpi>(api, g);
}

void bootstrap_release() {
  if (mpi_api != nullptr) mpi_api->finalize_if_ours();
}

}  // namespace comm_nccl
