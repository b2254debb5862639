// grad/ddp: classic data parallelism. Every rank holds the whole model; after the last
// micro-batch's backward, reduce all-reduces every gradient with AVG over the
// data-parallel group, so all ranks step with the same averaged gradient.
//
// Small CPU gradients are packed into flat buckets of at most bucket_mb (one all-reduce
// per bucket instead of one per tensor; fewer, larger messages). A gradient that is bigger
// than a bucket, not on the CPU or not compact is all-reduced in place on its own. With a
// group of one rank nothing is packed: each gradient's all-reduce is the identity there,
// so copying into buckets would only cost time. The bucket plan is made once at create
// (the host keeps the gradient tensors, and their shapes, for the instance's life) and is
// the same on every rank because every rank has the same gradients in the same order.
//
// The data-parallel group is host->get_group(LOOM_GROUP_DATA_CONTEXT): gradients are
// averaged over data x context replicas; the host owns the group. Since ABI 2.6 a gradient
// may name another group (an expert parameter's expert-data group); a bucket holds the
// gradients of one group only.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/grad.h"

namespace {

size_t nbytes(const DLTensor* t) {
  return static_cast<size_t>(loom_tensor_numel(t)) * loom_dtype_bytes(t->dtype);
}
char* bytes_of(const DLTensor* t) { return static_cast<char*>(t->data) + t->byte_offset; }

// Consecutive gradients reduced by one all-reduce: packed when there are several,
// in place when there is one.
struct Bucket {
  std::vector<DLTensor*> grads;
  size_t bytes = 0;
  DLDataType dtype{};
  bool packed = false;  // may take more gradients (CPU, compact, smaller than a bucket)
  int32_t kind = LOOM_GROUP_DATA_CONTEXT;
  loom_comm_group* group = nullptr;  // the host's
};

class Ddp {
 public:
  Ddp(const loom_host* host, double bucket_mb, DLTensor* const* grads, size_t num_grads,
      const int32_t* kinds)
      : host_(host) {
    loom::require(grads != nullptr || num_grads == 0, "grad/ddp: grads is NULL");
    if (loom_error* err = host->get_comm(host->ctx, &comm_)) {
      const std::string why = host->error_message(err);
      host->error_free(err);
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "grad/ddp all-reduces gradients and needs a comm plugin (" + why + ")");
    }
    for (size_t i = 0; i < num_grads; ++i)
      loom::require(grads[i] != nullptr, "grad/ddp: gradient " + std::to_string(i) + " is NULL");
    plan(bucket_mb, grads, num_grads, kinds);
  }

  Ddp(const Ddp&) = delete;
  Ddp& operator=(const Ddp&) = delete;

  const loom_host* host() const { return host_; }

  // The bucket buffer, per gradient element (ddp keeps nothing else).
  double bytes_per_param() const {
    return numel_ == 0 ? 0.0 : static_cast<double>(buffer_bytes_) / static_cast<double>(numel_);
  }

  void reduce_gradients() {
    for (Bucket& b : buckets_) {
      if (b.grads.size() == 1) {
        loom::check(host_, loom::comm_all_reduce(comm_, b.group, b.grads[0], LOOM_REDUCE_AVG));
        continue;
      }
      size_t off = 0;
      for (DLTensor* g : b.grads) {
        std::memcpy(buffer_.get() + off, bytes_of(g), nbytes(g));
        off += nbytes(g);
      }
      int64_t numel = static_cast<int64_t>(b.bytes / loom_dtype_bytes(b.dtype));
      DLTensor flat{};
      flat.data = buffer_.get();
      flat.device = DLDevice{kDLCPU, 0};
      flat.ndim = 1;
      flat.dtype = b.dtype;
      flat.shape = &numel;
      loom::check(host_, loom::comm_all_reduce(comm_, b.group, &flat, LOOM_REDUCE_AVG));
      off = 0;
      for (DLTensor* g : b.grads) {
        std::memcpy(bytes_of(g), buffer_.get() + off, nbytes(g));
        off += nbytes(g);
      }
    }
  }

 private:
  const loom_comm_api& api() const { return *comm_.api; }

  loom_comm_group* group_of(int32_t kind) {
    loom::require(kind == LOOM_GROUP_DATA_CONTEXT || kind == LOOM_GROUP_EXPERT_DATA,
                  "grad/ddp: a gradient asks for reduce group " + std::to_string(kind) +
                      "; ddp averages over data x context or the expert-data group");
    auto it = groups_.find(kind);
    if (it != groups_.end()) return it->second;
    loom_comm_group* g = nullptr;
    loom::check(host_, host_->get_group(host_->ctx, (loom_group_kind)kind, &g));
    return groups_[kind] = g;
  }

  void plan(double bucket_mb, DLTensor* const* grads, size_t num_grads, const int32_t* kinds) {
    const size_t limit = static_cast<size_t>(bucket_mb * 1024.0 * 1024.0);
    size_t largest = 0;
    for (size_t i = 0; i < num_grads; ++i) {
      DLTensor* g = grads[i];
      const size_t n = nbytes(g);
      const int32_t kind = kinds ? kinds[i] : LOOM_GROUP_DATA_CONTEXT;
      loom_comm_group* group = group_of(kind);
      const int group_size = api().group_size(comm_.self, group);
      const bool packable =
          group_size > 1 && g->device.device_type == kDLCPU && loom::is_compact(g) && n < limit;
      const Bucket* last = buckets_.empty() ? nullptr : &buckets_.back();
      const bool fits = packable && last && last->packed && loom_dtype_eq(last->dtype, g->dtype) &&
                        last->kind == kind && last->bytes + n <= limit;
      if (!fits) buckets_.push_back(Bucket{{}, 0, g->dtype, packable, kind, group});
      Bucket& b = buckets_.back();
      b.grads.push_back(g);
      b.bytes += n;
      numel_ += loom_tensor_numel(g);
      if (b.grads.size() > 1 && b.bytes > largest) largest = b.bytes;
    }
    if (largest > 0) buffer_.reset(new char[largest]);
    buffer_bytes_ = largest;
  }

  const loom_host* host_;
  loom_comm_ref comm_{nullptr, nullptr};
  std::map<int32_t, loom_comm_group*> groups_;  // the host's, by kind
  std::vector<Bucket> buckets_;
  std::unique_ptr<char[]> buffer_;  // the largest packed bucket
  size_t buffer_bytes_ = 0;
  int64_t numel_ = 0;
};

Ddp* cast(loom_grad* g) { return reinterpret_cast<Ddp*>(g); }

loom_error* create(const loom_host* host, const loom_config* cfg, const loom_grad_create_args* args,
                   loom_grad** out) {
  return loom::guard(host, [&] {
    loom::require(args != nullptr && args->struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2,
                  "grad/ddp: create args NULL or smaller than ABI 2.0's");
    loom::require_known_exts(args->ext, {}, "grad/ddp");
    loom::Config c(host, cfg);
    const double bucket_mb = c.get_float("bucket_mb");
    loom::require(bucket_mb >= 0, "grad/ddp: bucket_mb must be >= 0");
    const int32_t* kinds =
        args->struct_size >= LOOM_GRAD_CREATE_ARGS_SIZE_V2_6 ? args->reduce_groups : nullptr;
    *out =
        reinterpret_cast<loom_grad*>(new Ddp(host, bucket_mb, args->grads, args->num_grads, kinds));
  });
}
void destroy(loom_grad* g) { delete cast(g); }
loom_error* reduce(loom_grad* g, const loom_grad_reduce_args* args) {
  return loom::guard(cast(g)->host(), [&] {
    loom::require(args != nullptr && args->struct_size >= LOOM_GRAD_REDUCE_ARGS_SIZE_V2,
                  "grad/ddp: reduce args NULL or smaller than ABI 2.0's");
    loom::require_known_exts(args->ext, {}, "grad/ddp");
    cast(g)->reduce_gradients();
  });
}

double bytes_per_param(loom_grad* g) { return cast(g)->bytes_per_param(); }

const loom_grad_api kApi = {LOOM_GRAD_API_SIZE_V2,
                            create,
                            destroy,
                            reduce,
                            nullptr,  // shard_params: nothing is sharded
                            nullptr,  // after_step: parameters are already identical
                            bytes_per_param};

const loom_param_spec kParams[] = {
    loom::param("bucket_mb", LOOM_PARAM_FLOAT, "25",
                "gradient bucket size in MiB: small CPU gradients are packed and all-reduced "
                "together (0 = one all-reduce per tensor)",
                0, 1e6),
};

const loom_plugin_descriptor kDescriptor = {
    LOOM_PLUGIN_DESCRIPTOR_SIZE_V2,
    LOOM_ABI_MAJOR,
    LOOM_ABI_MINOR,
    LOOM_KIND_GRAD,
    "ddp",
    "0.1.0",
    "Loom",
    "Apache-2.0",
    "data parallel: all-reduce (average) every gradient over its data-parallel group (data x "
    "context, or expert data for expert parameters)",
    kParams,
    sizeof(kParams) / sizeof(kParams[0]),
    &kApi,
    nullptr,   // capabilities
    nullptr};  // ext

}  // namespace

LOOM_PLUGIN_ENTRY(kDescriptor)
