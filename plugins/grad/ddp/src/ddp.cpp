// grad/ddp: classic data parallelism. Every rank holds the whole model; each step every
// gradient is all-reduced with AVG over its data-parallel group, so all ranks step with the
// same averaged gradient.
//
// Buckets: consecutive gradients that lie back to back in one allocation (a model's flat
// gradient buffer) are reduced through one view of them, in place; other small CPU gradients
// are packed into a buffer; anything else is reduced alone, in place. A bucket holds at most
// bucket_mb MiB (or bucket_size elements, Megatron's --ddp-bucket-size) of one dtype and one
// group. The plan is made once at create (the host keeps the gradient tensors, and their
// shapes, for the instance's life) and is the same on every rank because every rank has the
// same gradients in the same order.
//
// Every bucket's all-reduce goes through the comm's start/wait (ABI 2.12), so its numbers
// are the same whether it starts early or late. With overlap_grad_reduce (Megatron's
// --overlap-grad-reduce) a bucket starts as soon as the host says all its gradients are final
// (grad_ready, which the model's per-layer announcements drive during the step's last
// backward pass), and reduce completes the ones in flight and reduces the rest; without it,
// reduce starts and completes every bucket. The start times go to the debug log
// (LOOM_LOG_LEVEL=debug), which is how tests/parallel shows reductions in flight while the
// backward pass goes on.
//
// The data-parallel group is host->get_group(LOOM_GROUP_DATA_CONTEXT): gradients are
// averaged over data x context replicas; the host owns the group. Since ABI 2.6 a gradient
// may name another group (an expert parameter's expert-data group); a bucket holds the
// gradients of one group only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/grad_ready.hpp"
#include "loom/cpp/grad_table.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/grad.h"

namespace {

size_t nbytes(const DLTensor* t) {
  return static_cast<size_t>(loom_tensor_numel(t)) * loom_dtype_bytes(t->dtype);
}
char* bytes_of(const DLTensor* t) { return static_cast<char*>(t->data) + t->byte_offset; }

// Consecutive gradients reduced by one all-reduce: in place when there is one, or when they
// lie back to back in one allocation (a model's flat gradient buffer: one view spans them);
// else packed into a buffer (CPU memory only).
struct Bucket {
  enum Form { kSingle, kView, kPacked };
  std::vector<DLTensor*> grads;
  size_t bytes = 0;
  DLDataType dtype{};
  Form form = kSingle;
  bool growable = false;  // may take more gradients
  int32_t kind = LOOM_GROUP_DATA_CONTEXT;
  loom_comm_group* group = nullptr;  // the host's
  int64_t numel = 0;                 // kView, kPacked: the elements the one tensor holds
  DLTensor flat{};                   // kView, kPacked: that tensor
  std::unique_ptr<char[]> own;       // kPacked with overlap: this bucket's own buffer
  // this step
  bool started = false;
  bool done_logged = false;  // its completion seen by progress()
  loom_comm_request* req = nullptr;
};

char* end_of(const Bucket& b) { return bytes_of(b.grads.front()) + b.bytes; }

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Ddp {
 public:
  Ddp(const loom_host* host, size_t limit, bool overlap, DLTensor* const* grads, size_t num_grads,
      const int32_t* kinds)
      : host_(host), overlap_(overlap) {
    loom::require(grads != nullptr || num_grads == 0, "grad/ddp: grads is NULL");
    if (loom_error* err = host->get_comm(host->ctx, &comm_)) {
      const std::string why = host->error_message(err);
      host->error_free(err);
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "grad/ddp all-reduces gradients and needs a comm plugin (" + why + ")");
    }
    for (size_t i = 0; i < num_grads; ++i)
      loom::require(grads[i] != nullptr, "grad/ddp: gradient " + std::to_string(i) + " is NULL");
    // The backend's stream orders the reductions after the backward's work on a device (NULL
    // on the CPU, and for a host without a backend, as tests have).
    loom_backend_ref be{};
    if (loom_error* e = host->get_backend(host->ctx, &be))
      host->error_free(e);
    else
      stream_ = loom::Backend(host).stream();
    plan(limit, grads, num_grads, kinds);
  }
  ~Ddp() {  // a step that failed may leave calls in flight: complete them
    for (Bucket& b : buckets_)
      if (b.req) comm_.api->wait(comm_.self, b.req);
  }

  Ddp(const Ddp&) = delete;
  Ddp& operator=(const Ddp&) = delete;

  const loom_host* host() const { return host_; }

  // The packing buffers, per gradient element (ddp keeps nothing else).
  double bytes_per_param() const {
    return numel_ == 0 ? 0.0 : static_cast<double>(buffer_bytes_) / static_cast<double>(numel_);
  }

  // ABI 2.12: gradients [first, first + count) are final; with overlap, a bucket whose
  // gradients are all final starts its all-reduce now, and the ones in flight are tested
  // (which is what moves MPI's non-blocking collectives along).
  void grad_ready(int64_t first, int64_t count) {
    if (!overlap_) return ready_.check(first, count, "grad/ddp: ");
    ready_.ready(first, count, "grad/ddp: ", [&](size_t i) {
      start(buckets_[ready_.bucket_of(i)], "during the backward pass");
    });
    progress();
  }

  void reduce_gradients() {
    for (Bucket& b : buckets_) {
      if (b.started) continue;
      start(b, "after the backward pass");
      // Without overlap the packed buckets share one buffer: each completes before the next.
      if (b.form == Bucket::kPacked && !b.own) finish(b);
    }
    for (Bucket& b : buckets_)
      if (b.req) finish(b);
    reset_step();
  }

 private:
  const loom_comm_api& api() const { return *comm_.api; }

  void reset_step() {
    ready_.reset();
    for (Bucket& b : buckets_) b.started = b.done_logged = false;
  }

  // Starts b's all-reduce (AVG), packing it first when it is packed.
  void start(Bucket& b, const char* when) {
    if (b.form == Bucket::kPacked) {
      char* buf = b.own ? b.own.get() : shared_.get();
      b.flat.data = buf;
      size_t off = 0;
      for (DLTensor* g : b.grads) {
        std::memcpy(buf + off, bytes_of(g), nbytes(g));
        off += nbytes(g);
      }
    }
    DLTensor* t = b.form == Bucket::kSingle ? b.grads[0] : &b.flat;
    loom::check(host_, loom::comm_start(comm_, LOOM_COMM_CALL_ALL_REDUCE, b.group, nullptr, t,
                                        LOOM_REDUCE_AVG, stream_, &b.req));
    b.started = true;
    loom::log(host_, LOOM_LOG_DEBUG,
              fmt("t=%.0fus bucket %zu of %zu (%lld elements) started %s", now_us(), index(b),
                  buckets_.size(), (long long)numel(b), when));
  }

  // Completes b's all-reduce and unpacks it.
  void finish(Bucket& b) {
    loom::check(host_, loom::comm_wait(comm_, b.req));
    b.req = nullptr;
    if (b.form == Bucket::kPacked) {
      const char* buf = static_cast<const char*>(b.flat.data);
      size_t off = 0;
      for (DLTensor* g : b.grads) {
        std::memcpy(bytes_of(g), buf + off, nbytes(g));
        off += nbytes(g);
      }
    }
  }

  // Tests the calls in flight, logging the ones that completed.
  void progress() {
    for (Bucket& b : buckets_) {
      if (!b.req || b.done_logged) continue;
      int done = 0;
      loom::check(host_, loom::comm_test(comm_, b.req, &done));
      if (!done) continue;
      b.done_logged = true;
      loom::log(host_, LOOM_LOG_DEBUG,
                fmt("t=%.0fus bucket %zu of %zu complete during the backward pass", now_us(),
                    index(b), buckets_.size()));
    }
  }

  size_t index(const Bucket& b) const { return (size_t)(&b - buckets_.data()); }
  static int64_t numel(const Bucket& b) {
    return b.form == Bucket::kSingle ? loom_tensor_numel(b.grads[0]) : b.numel;
  }
  template <class... A>
  static std::string fmt(const char* f, A... a) {
    char line[256];
    std::snprintf(line, sizeof line, f, a...);
    return line;
  }

  loom_comm_group* group_of(int32_t kind) {
    auto it = groups_.find(kind);
    if (it != groups_.end()) return it->second;
    return groups_[kind] = loom::reduce_group(host_, kind, "grad/ddp", "ddp averages");
  }

  // Whether g can join b: the same group and dtype, room under the limit, and either right
  // after b's last gradient in memory (a view) or, on the CPU, packable.
  static bool joins(const Bucket& b, const DLTensor* g, int32_t kind, size_t limit) {
    const size_t n = nbytes(g);
    if (!b.growable || b.kind != kind || !loom_dtype_eq(b.dtype, g->dtype) || b.bytes + n > limit)
      return false;
    const bool adjacent = b.form != Bucket::kPacked && g->data == b.grads.front()->data &&
                          bytes_of(g) == end_of(b) &&
                          g->device.device_type == b.grads[0]->device.device_type &&
                          g->device.device_id == b.grads[0]->device.device_id;
    const bool packable = b.form != Bucket::kView && g->device.device_type == kDLCPU;
    return adjacent || packable;
  }

  void plan(size_t limit, DLTensor* const* grads, size_t num_grads, const int32_t* kinds) {
    size_t largest = 0, packed_total = 0;
    std::vector<size_t> bucket_of;  // of each gradient
    for (size_t i = 0; i < num_grads; ++i) {
      DLTensor* g = grads[i];
      const size_t n = nbytes(g);
      const int32_t kind = kinds ? kinds[i] : LOOM_GROUP_DATA_CONTEXT;
      loom_comm_group* group = group_of(kind);
      const bool growable =
          api().group_size(comm_.self, group) > 1 && loom::is_compact(g) && n < limit;
      if (buckets_.empty() || !joins(buckets_.back(), g, kind, limit)) {
        buckets_.emplace_back();
        Bucket& b = buckets_.back();
        b.dtype = g->dtype, b.growable = growable, b.kind = kind, b.group = group;
      } else {
        Bucket& b = buckets_.back();
        if (b.form == Bucket::kSingle)
          b.form = g->data == b.grads[0]->data && bytes_of(g) == end_of(b) ? Bucket::kView
                                                                           : Bucket::kPacked;
      }
      Bucket& b = buckets_.back();
      b.grads.push_back(g);
      b.bytes += n;
      bucket_of.push_back(buckets_.size() - 1);
      numel_ += loom_tensor_numel(g);
    }
    for (Bucket& b : buckets_) {
      if (b.form == Bucket::kSingle) continue;
      b.numel = static_cast<int64_t>(b.bytes / loom_dtype_bytes(b.dtype));
      b.flat.data = b.form == Bucket::kView ? b.grads[0]->data : nullptr;
      b.flat.byte_offset = b.form == Bucket::kView ? b.grads[0]->byte_offset : 0;
      b.flat.device = b.form == Bucket::kView ? b.grads[0]->device : DLDevice{kDLCPU, 0};
      b.flat.ndim = 1;
      b.flat.dtype = b.dtype;
      b.flat.shape = &b.numel;
      if (b.form != Bucket::kPacked) continue;
      largest = std::max(largest, b.bytes);
      packed_total += b.bytes;
      // With overlap, packed buckets are in flight together: each needs its own buffer.
      if (overlap_) b.own.reset(new char[b.bytes]);
    }
    if (!overlap_ && largest > 0) shared_.reset(new char[largest]);
    buffer_bytes_ = overlap_ ? packed_total : largest;
    ready_.plan(std::move(bucket_of));
  }

  const loom_host* host_;
  bool overlap_ = false;
  loom_comm_ref comm_{nullptr, nullptr};
  void* stream_ = nullptr;                      // the backend's device stream, NULL on the CPU
  std::map<int32_t, loom_comm_group*> groups_;  // the host's, by kind
  std::vector<Bucket> buckets_;
  loom::BucketReadiness ready_;     // each gradient's bucket, and this step's final ones
  std::unique_ptr<char[]> shared_;  // without overlap: the largest packed bucket
  size_t buffer_bytes_ = 0;
  int64_t numel_ = 0;
};

using Entries = loom::GradEntries<Ddp>;
Ddp* cast(loom_grad* g) { return Entries::self(g); }

loom_error* create(const loom_host* host, const loom_config* cfg, const loom_grad_create_args* args,
                   loom_grad** out) {
  return loom::guard(host, [&] {
    loom::check_grad_create_args(args, "grad/ddp");
    loom::Config c(host, cfg);
    const double bucket_mb = c.get_float("bucket_mb");
    const int64_t bucket_size = c.get_int("bucket_size");
    loom::require(bucket_mb >= 0, "grad/ddp: bucket_mb must be >= 0");
    // bucket_size (elements, Megatron's --ddp-bucket-size) wins over bucket_mb when set.
    size_t limit = static_cast<size_t>(bucket_mb * 1024.0 * 1024.0);
    if (bucket_size > 0 && args->num_grads > 0 && args->grads[0])
      limit = static_cast<size_t>(bucket_size) * loom_dtype_bytes(args->grads[0]->dtype);
    const int32_t* kinds = loom::grad_reduce_groups(*args);
    *out = reinterpret_cast<loom_grad*>(new Ddp(host, limit, c.get_bool("overlap_grad_reduce"),
                                                args->grads, args->num_grads, kinds));
  });
}
loom_error* reduce(loom_grad* g, const loom_grad_reduce_args* args) {
  return loom::guard(cast(g)->host(), [&] {
    loom::check_grad_reduce_args(args, "grad/ddp");
    cast(g)->reduce_gradients();
  });
}

const loom_grad_api kApi = {LOOM_GRAD_API_SIZE_V2_12,
                            create,
                            Entries::destroy,
                            reduce,
                            nullptr,  // shard_params: nothing is sharded
                            nullptr,  // after_step: parameters are already identical
                            Entries::bytes_per_param,
                            Entries::grad_ready,
                            nullptr,  // residency: none, gradients whole
                            nullptr,
                            nullptr};

const loom_param_spec kParams[] = {
    loom::param("bucket_mb", LOOM_PARAM_FLOAT, "25",
                "gradient bucket size in MiB: gradients back to back in memory, or small CPU "
                "gradients packed, are all-reduced together (0 = one all-reduce per tensor)",
                0, 1e6),
    loom::param("bucket_size", LOOM_PARAM_INT, "0",
                "gradient bucket size in elements (Megatron's --ddp-bucket-size); 0 = bucket_mb "
                "decides",
                0, 1e15),
    loom::param("overlap_grad_reduce", LOOM_PARAM_BOOL, "false",
                "start each bucket's all-reduce during the backward pass, as soon as the model "
                "has announced all its gradients (Megatron's --overlap-grad-reduce); the "
                "numbers are those without it"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "data parallel: all-reduce (average) every gradient over its data-parallel group "
                "(data x context, or expert data for expert parameters)",
            .params = kParams, .api = &kApi)
