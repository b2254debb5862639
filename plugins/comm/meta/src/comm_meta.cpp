// comm/meta: one rank of a world that is not there, for walk-throughs on backend/meta (`loom
// validate --memory`): `world` and `rank` come from the recipe, groups are formed from the
// colours exactly as a real comm forms them (so every group has its real size and this
// rank its real place in it), and every collective, send and recv returns at once without
// touching memory. A run over it computes nothing that is true, only what it allocates.
#include <string>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm_plugin.hpp"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/plugin.hpp"

struct loom_comm_group {
  int size, rank;
};

struct loom_comm {
  const loom_host* host;
  int world, rank;
};

namespace {

loom_error* create(const loom_host* host, const loom_config* cfg, loom_comm** out) {
  return loom::guard(host, [&] {
    loom::Config c(host, cfg);
    const int world = (int)c.get_int("world"), rank = (int)c.get_int("rank");
    loom::require(rank < world, "comm/meta: rank " + std::to_string(rank) +
                                    " is outside a world of " + std::to_string(world));
    *out = new loom_comm{host, world, rank};
  });
}
void destroy(loom_comm* c) { delete c; }
int world_rank(loom_comm* c) { return c->rank; }
int world_size(loom_comm* c) { return c->world; }
const loom_host* host_of(loom_comm* c) { return c->host; }

// The ranks whose colour is this rank's, in world order: the group and this rank's place.
loom_error* group_create(loom_comm* c, const int* colors, const char*, loom_comm_group** out) {
  return loom::guard(c->host, [&] {
    int size = 0, rank = 0;
    for (int r = 0; r < c->world; ++r)
      if (colors[r] == colors[c->rank]) {
        if (r == c->rank) rank = size;
        ++size;
      }
    *out = new loom_comm_group{size, rank};
  });
}
void group_destroy(loom_comm*, loom_comm_group* g) { delete g; }
int group_rank(loom_comm* c, loom_comm_group* g) { return g ? g->rank : c->rank; }
int group_size(loom_comm* c, loom_comm_group* g) { return g ? g->size : c->world; }

loom_error* all_reduce(loom_comm*, loom_comm_group*, DLTensor*, int32_t, void*) { return nullptr; }
loom_error* reduce_scatter(loom_comm*, loom_comm_group*, const DLTensor*, DLTensor*, int32_t,
                           void*) {
  return nullptr;
}
loom_error* all_gather(loom_comm*, loom_comm_group*, const DLTensor*, DLTensor*, void*) {
  return nullptr;
}
loom_error* broadcast(loom_comm*, loom_comm_group*, DLTensor*, int, void*) { return nullptr; }
loom_error* all_to_all(loom_comm*, loom_comm_group*, const DLTensor*, DLTensor*, void*) {
  return nullptr;
}
loom_error* barrier(loom_comm*, loom_comm_group*, void*) { return nullptr; }
loom_error* send(loom_comm*, loom_comm_group*, const DLTensor*, int, int, void*) { return nullptr; }
loom_error* recv(loom_comm*, loom_comm_group*, DLTensor*, int, int, void*) { return nullptr; }
loom_error* all_to_all_v(loom_comm*, loom_comm_group*, const DLTensor*, DLTensor*, const int64_t*,
                         const int64_t*, void*) {
  return nullptr;
}

constexpr loom::CommCalls kCalls{"comm/meta",    true,         host_of,
                                 world_rank,     group_create, all_reduce,
                                 reduce_scatter, all_gather,   broadcast,
                                 all_to_all,     barrier,      send,
                                 recv,           all_to_all_v, group_size,
                                 nullptr,        nullptr,      nullptr,
                                 nullptr,        nullptr};  // start: done inside it; abort: one
                                                            // rank, nothing to end
constexpr loom_comm_api kApi =
    loom::CommSlots<kCalls>::api(create, destroy, world_size, group_destroy, group_rank);

constexpr loom_param_spec kParams[] = {
    loom::param("world", LOOM_PARAM_INT, "1", "ranks of the world this rank pretends to be in", 1,
                1 << 24),
    loom::param("rank", LOOM_PARAM_INT, "0", "this rank's place in that world", 0, 1 << 24),
};

}  // namespace

LOOM_PLUGIN(.description =
                "one rank of a pretended world: real group sizes, no communication (loom validate "
                "--memory)",
            .params = kParams, .api = &kApi)
