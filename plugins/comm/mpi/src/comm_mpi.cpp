// comm/mpi: collectives and point-to-point over MPI, on tensors in CPU memory (kDLCPU or
// kDLCUDAHost), laid out compactly, of dtype f32, f64, i32, bf16 or f16.
//  - MPI has no bf16/f16 type: they move as 16-bit words, and the reductions (all_reduce,
//    reduce_scatter) convert to f32, reduce in f32 and round back to nearest even, which is
//    what mixed-precision activations need (an f32 sum of the ranks' partial results).
//  - create initialises MPI (MPI_THREAD_FUNNELED: every call comes from the thread that
//    created the comm) unless the host already did, and then finalises it when the last
//    instance it made is destroyed. MPI cannot be initialised twice in a process, so a
//    create after that finalise is an error.
//  - The world is a duplicate of MPI_COMM_WORLD, so our traffic never mixes with the
//    host's own MPI use; every communicator returns errors (MPI_ERRORS_RETURN) and each
//    one becomes a loom_error carrying MPI_Error_string's text.
//  - group_create is MPI_Comm_split(world, colors[rank], key = world rank): group ranks
//    follow world order. A NULL group means the world.
//  - AVG is SUM followed by a division by the group size (integer division for i32).
//  - ABI 2.12's start/wait/test run all_reduce, reduce_scatter and all_gather through
//    MPI_Iallreduce & co. with the same staging (16-bit widening, aliasing copies, AVG);
//    since 2.20 a started send is an MPI_Isend.
//  - Argument errors (dtype, shape, device, op) are found before any MPI call; they are the
//    same on every rank when every rank passes matching tensors, so no rank is left
//    waiting in a collective the others skipped.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/comm.h"
#include "loom/cpp/comm_args.hpp"
#include "loom/cpp/comm_plugin.hpp"
#include "loom/cpp/describe.hpp"
#include "loom/cpp/half.hpp"  // the SDK's bit-exact bf16/f16 <-> f32 conversions
#include "loom/cpp/plugin.hpp"

struct loom_comm_group {
  MPI_Comm comm;
};

namespace {

using loom::dtype_str;
using loom::shape_str;

constexpr const char* kPrefix = "comm/mpi: ";

// The status an MPI error class stands for: the caller's mistake or a failure of MPI.
loom_status status_of(int err) {
  int cls = MPI_ERR_OTHER;
  MPI_Error_class(err, &cls);
  switch (cls) {
    case MPI_ERR_RANK:
    case MPI_ERR_TAG:
    case MPI_ERR_ROOT:
    case MPI_ERR_COUNT:
    case MPI_ERR_TRUNCATE:
    case MPI_ERR_BUFFER:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
      return LOOM_ERR_INVALID_ARGUMENT;
    default:
      return LOOM_ERR_INTERNAL;
  }
}

// Throws a loom error naming the function, the MPI call and MPI's own explanation.
void mpi_check(int err, const char* fn, const char* call) {
  if (err == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) std::strcpy(text, "unknown MPI error");
  throw loom::Error(status_of(err), std::string(kPrefix) + fn + ": " + call + " failed: " + text);
}

// The op arrives from C, where any int fits in the enum; read its bytes as an int so an
// out-of-range value is reported instead of being undefined behaviour in C++.
loom_reduce_op check_op(int32_t op, const char* fn) {
  return loom::comm_reduce_op(std::string(kPrefix) + fn, op);
}

MPI_Op mpi_op(loom_reduce_op op) {
  switch (op) {
    case LOOM_REDUCE_MAX:
      return MPI_MAX;
    case LOOM_REDUCE_MIN:
      return MPI_MIN;
    default:
      return MPI_SUM;  // AVG divides afterwards
  }
}

MPI_Datatype mpi_type(DLDataType d, const char* fn) {
  if (d.lanes == 1) {
    if (d.code == kDLFloat && d.bits == 32) return MPI_FLOAT;
    if (d.code == kDLFloat && d.bits == 64) return MPI_DOUBLE;
    if (d.code == kDLInt && d.bits == 32) return MPI_INT32_T;
    if ((d.code == kDLBfloat || d.code == kDLFloat) && d.bits == 16) return MPI_UINT16_T;
  }
  throw loom::Error(LOOM_ERR_UNIMPLEMENTED, std::string(kPrefix) + fn + ": dtype " + dtype_str(d) +
                                                " is not supported (only f32, f64, i32, bf16 "
                                                "and f16)");
}

char* bytes_of(const DLTensor* t) { return static_cast<char*>(t->data) + t->byte_offset; }

// A tensor MPI can read as one contiguous buffer of `count` elements of `type`.
struct Buf {
  char* ptr;
  int count;
  MPI_Datatype type;
  size_t nbytes;
  DLDataType dtype;
  bool half() const { return dtype.bits == 16; }
};

Buf check_tensor(const DLTensor* t, const char* fn, const char* what) {
  const std::string where = std::string(kPrefix) + fn + ": " + what;
  loom::comm_tensor(std::string(kPrefix) + fn, what, t);
  const int64_t n = loom_tensor_numel(t);
  const int dev = t->device.device_type;
  loom::require(dev == kDLCPU || dev == kDLCUDAHost,
                where + " is on device type " + std::to_string(dev) +
                    "; comm/mpi reaches CPU memory only (use comm \"nccl\" for GPU tensors)");
  MPI_Datatype type = mpi_type(t->dtype, fn);
  loom::require(n <= INT_MAX, where + " has " + std::to_string(n) +
                                  " elements; MPI counts stop at " + std::to_string(INT_MAX));
  return Buf{bytes_of(t), static_cast<int>(n), type,
             static_cast<size_t>(n) * loom_dtype_bytes(t->dtype), t->dtype};
}

void check_same_dtype(const DLTensor* in, const DLTensor* out, const char* fn) {
  loom::comm_same_dtype(std::string(kPrefix) + fn, in, out);
}

bool overlap(const Buf& a, const Buf& b) {
  return a.nbytes > 0 && b.nbytes > 0 && a.ptr < b.ptr + b.nbytes && b.ptr < a.ptr + a.nbytes;
}

// `in`'s bytes, copied aside when they share memory with `out` (MPI forbids aliasing).
const char* source(const Buf& in, const Buf& out, std::vector<char>& scratch) {
  if (!overlap(in, out)) return in.ptr;
  scratch.assign(in.ptr, in.ptr + in.nbytes);
  return scratch.data();
}

template <class T>
void divide(char* p, int count, int by) {
  T* v = reinterpret_cast<T*>(p);
  for (int i = 0; i < count; ++i) v[i] /= static_cast<T>(by);
}

void average(const Buf& b, int group_size) {
  if (b.type == MPI_FLOAT)
    divide<float>(b.ptr, b.count, group_size);
  else if (b.type == MPI_DOUBLE)
    divide<double>(b.ptr, b.count, group_size);
  else
    divide<int32_t>(b.ptr, b.count, group_size);
}

// A 16-bit float buffer as f32 (to reduce it with MPI_FLOAT), and back, rounding.
std::vector<float> widen(const Buf& b) {
  std::vector<float> f(static_cast<size_t>(b.count));
  const uint16_t* h = reinterpret_cast<const uint16_t*>(b.ptr);
  const bool bf = b.dtype.code == kDLBfloat;
  for (int i = 0; i < b.count; ++i) f[i] = bf ? loom::bf16_to_f32(h[i]) : loom::f16_to_f32(h[i]);
  return f;
}
void narrow(const std::vector<float>& f, const Buf& b) {
  uint16_t* h = reinterpret_cast<uint16_t*>(b.ptr);
  const bool bf = b.dtype.code == kDLBfloat;
  for (int i = 0; i < b.count; ++i) h[i] = bf ? loom::f32_to_bf16(f[i]) : loom::f32_to_f16(f[i]);
}
// The f32 view of a 16-bit buffer: same pointer and count, MPI_FLOAT elements.
Buf as_f32(const Buf& b, std::vector<float>& f) {
  return Buf{reinterpret_cast<char*>(f.data()), b.count, MPI_FLOAT, f.size() * sizeof(float),
             loom_f32()};
}

int live_instances = 0;       // comm/mpi instances in this process
bool we_initialised = false;  // MPI_Init_thread was ours: the last destroy finalises

class MpiComm {
 public:
  explicit MpiComm(const loom_host* host) : host_(host) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    loom::require(!finalized,
                  "comm/mpi: create: MPI is already finalised in this process and cannot be "
                  "initialised again (keep one comm/mpi instance for the whole run)",
                  LOOM_ERR_INTERNAL);
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      int provided = MPI_THREAD_SINGLE;
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "create",
                "MPI_Init_thread");
      we_initialised = true;
    }
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_FUNNELED)
      loom::log(host_, LOOM_LOG_WARN,
                "comm/mpi: MPI gives thread level MPI_THREAD_SINGLE; call comm/mpi only from "
                "the thread that initialised MPI");
    // The host's own MPI_COMM_WORLD keeps its handler unless MPI is ours.
    if (we_initialised) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world_), "create", "MPI_Comm_dup");
    mpi_check(MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN), "create",
              "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(world_, &rank_), "create", "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(world_, &size_), "create", "MPI_Comm_size");
    ++live_instances;
  }
  ~MpiComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&world_);
    if (--live_instances == 0 && we_initialised && !finalized) {
      MPI_Finalize();
      we_initialised = false;
    }
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  const loom_host* host() const { return host_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm(const loom_comm_group* g) const { return g ? g->comm : world_; }

 private:
  const loom_host* host_;
  MPI_Comm world_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

MpiComm* cast(loom_comm* c) { return reinterpret_cast<MpiComm*>(c); }

int comm_size(MPI_Comm comm) {
  int n = 1;
  mpi_check(MPI_Comm_size(comm, &n), "group_size", "MPI_Comm_size");
  return n;
}

loom_error* create(const loom_host* host, const loom_config*, loom_comm** out) {
  return loom::guard(host, [&] { *out = reinterpret_cast<loom_comm*>(new MpiComm(host)); });
}
void destroy(loom_comm* c) { delete cast(c); }
int world_rank(loom_comm* c) { return cast(c)->rank(); }
int world_size(loom_comm* c) { return cast(c)->size(); }

loom_error* group_create(loom_comm* c, const int* colors, const char* name, loom_comm_group** out) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    MPI_Comm comm = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split(m->comm(nullptr), colors[m->rank()], m->rank(), &comm),
              loom::group_create_what(name).c_str(), "MPI_Comm_split");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    *out = new loom_comm_group{comm};
  });
}
void group_destroy(loom_comm*, loom_comm_group* g) {
  if (g == nullptr) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&g->comm);
  delete g;
}
int group_rank(loom_comm* c, loom_comm_group* g) {
  int r = 0;
  MPI_Comm_rank(cast(c)->comm(g), &r);
  return r;
}
int group_size(loom_comm* c, loom_comm_group* g) {
  int n = 1;
  MPI_Comm_size(cast(c)->comm(g), &n);
  return n;
}

const loom_host* host_of(loom_comm* c) { return cast(c)->host(); }

// One all_reduce, reduce_scatter or all_gather, checked and staged for MPI: what MPI reads
// (`in`) and writes (`out`), 16-bit floats widened to f32 copies, `in` copied aside when it
// shares memory with `out`; finish() divides for AVG and rounds 16-bit results back into
// the caller's tensor. The blocking calls run it with MPI_Allreduce & co., start with
// MPI_Iallreduce & co. and a request that owns it until wait.
struct Staged : loom_comm_request {
  int32_t call = LOOM_COMM_CALL_ALL_REDUCE;
  const char* fn = "";
  MPI_Comm comm = MPI_COMM_NULL;
  int n = 1;  // group size
  loom_reduce_op op = LOOM_REDUCE_SUM;
  Buf in{}, out{}, user_out{};
  std::vector<float> wide_in, wide_out;
  std::vector<char> scratch;
  MPI_Request req = MPI_REQUEST_NULL;

  // The blocking MPI call.
  void run() {
    if (call == LOOM_COMM_CALL_ALL_REDUCE)
      mpi_check(MPI_Allreduce(MPI_IN_PLACE, out.ptr, out.count, out.type, mpi_op(op), comm), fn,
                "MPI_Allreduce");
    else if (call == LOOM_COMM_CALL_REDUCE_SCATTER)
      mpi_check(MPI_Reduce_scatter_block(in.ptr, out.ptr, out.count, out.type, mpi_op(op), comm),
                fn, "MPI_Reduce_scatter_block");
    else
      mpi_check(MPI_Allgather(in.ptr, in.count, in.type, out.ptr, in.count, out.type, comm), fn,
                "MPI_Allgather");
  }
  // The non-blocking one, into `req`.
  void begin() {
    if (call == LOOM_COMM_CALL_ALL_REDUCE)
      mpi_check(MPI_Iallreduce(MPI_IN_PLACE, out.ptr, out.count, out.type, mpi_op(op), comm, &req),
                fn, "MPI_Iallreduce");
    else if (call == LOOM_COMM_CALL_REDUCE_SCATTER)
      mpi_check(
          MPI_Ireduce_scatter_block(in.ptr, out.ptr, out.count, out.type, mpi_op(op), comm, &req),
          fn, "MPI_Ireduce_scatter_block");
    else
      mpi_check(MPI_Iallgather(in.ptr, in.count, in.type, out.ptr, in.count, out.type, comm, &req),
                fn, "MPI_Iallgather");
  }
  void finish() {
    if (call == LOOM_COMM_CALL_SEND) return;
    if (call != LOOM_COMM_CALL_ALL_GATHER && op == LOOM_REDUCE_AVG) average(out, n);
    if (user_out.half() && call != LOOM_COMM_CALL_ALL_GATHER) narrow(wide_out, user_out);
  }
};

std::unique_ptr<Staged> stage(MpiComm* m, loom_comm_group* g, int32_t call, const DLTensor* in,
                              DLTensor* out, int32_t op, const char* fn) {
  auto s = std::make_unique<Staged>();
  s->call = call;
  s->fn = fn;
  s->comm = m->comm(g);
  s->n = comm_size(s->comm);
  const bool reduces = call != LOOM_COMM_CALL_ALL_GATHER;
  if (reduces) s->op = check_op(op, fn);
  const bool in_place = call == LOOM_COMM_CALL_ALL_REDUCE;
  s->user_out = check_tensor(out, fn, in_place ? "tensor" : "out");
  const Buf user_in = in_place ? s->user_out : check_tensor(in, fn, "in");
  if (!in_place) check_same_dtype(in, out, fn);
  // 16-bit floats reduce as f32 copies (the input copy also ends any aliasing with out).
  const bool wide = reduces && s->user_out.half();
  if (wide && in_place) {
    s->wide_out = widen(user_in);
  } else if (wide) {
    s->wide_in = widen(user_in);
    s->wide_out.resize(static_cast<size_t>(s->user_out.count));
  }
  s->out = wide ? as_f32(s->user_out, s->wide_out) : s->user_out;
  s->in = wide && !in_place ? as_f32(user_in, s->wide_in) : user_in;
  const int64_t each = call == LOOM_COMM_CALL_ALL_GATHER ? s->in.count : s->out.count;
  const int64_t whole = call == LOOM_COMM_CALL_ALL_GATHER ? s->out.count : s->in.count;
  if (call != LOOM_COMM_CALL_ALL_REDUCE)
    loom::require(
        each * s->n == whole,
        std::string("comm/mpi: ") + fn + ": " +
            (call == LOOM_COMM_CALL_ALL_GATHER ? "out " + shape_str(out) : "in " + shape_str(in)) +
            " must hold group size (" + std::to_string(s->n) + ") times " +
            (call == LOOM_COMM_CALL_ALL_GATHER ? "in's " : "out's ") + std::to_string(each) +
            " elements, but holds " + std::to_string(whole));
  if (!in_place && overlap(s->in, s->out)) {  // MPI forbids aliasing: read a copy
    s->scratch.assign(s->in.ptr, s->in.ptr + s->in.nbytes);
    s->in.ptr = s->scratch.data();
  }
  return s;
}

// The blocking form of a staged call.
loom_error* blocking(loom_comm* c, loom_comm_group* g, int32_t call, const DLTensor* in,
                     DLTensor* out, int32_t op, const char* fn) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const std::unique_ptr<Staged> s = stage(m, g, call, in, out, op, fn);
    s->run();
    s->finish();
  });
}

loom_error* all_reduce(loom_comm* c, loom_comm_group* g, DLTensor* t, int32_t op, void*) {
  return blocking(c, g, LOOM_COMM_CALL_ALL_REDUCE, nullptr, t, op, "all_reduce");
}
loom_error* reduce_scatter(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                           int32_t op, void*) {
  return blocking(c, g, LOOM_COMM_CALL_REDUCE_SCATTER, in, out, op, "reduce_scatter");
}
loom_error* all_gather(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out, void*) {
  return blocking(c, g, LOOM_COMM_CALL_ALL_GATHER, in, out, 0, "all_gather");
}

// ABI 2.12: the same calls through MPI's non-blocking collectives. MPI progresses them inside
// its calls (test drives them; Open MPI has no progress thread by default).
loom_error* start(loom_comm* c, int32_t call, const loom_comm_args* a, loom_comm_request** out) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const char* fn = loom::start_what(call);
    std::unique_ptr<Staged> s = stage(m, a->group, call, a->in, a->out, a->op, fn);
    s->begin();
    *out = s.release();
  });
}
// ABI 2.20: a send in flight (MPI_Isend); the tensor is the caller's until wait.
loom_error* start_send(loom_comm* c, const loom_comm_args* a, loom_comm_request** out) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    auto s = std::make_unique<Staged>();
    s->call = LOOM_COMM_CALL_SEND;
    s->fn = "start(send)";
    s->comm = m->comm(a->group);
    s->in = check_tensor(a->in, "start(send)", "tensor");
    mpi_check(MPI_Isend(s->in.ptr, s->in.count, s->in.type, a->peer, a->tag, s->comm, &s->req),
              s->fn, "MPI_Isend");
    *out = s.release();
  });
}
loom_error* wait(loom_comm* c, loom_comm_request* r) {
  return loom::guard(cast(c)->host(), [&] {
    Staged* s = static_cast<Staged*>(r);
    mpi_check(MPI_Wait(&s->req, MPI_STATUS_IGNORE), s->fn, "MPI_Wait");
    s->finish();
  });
}
loom_error* test(loom_comm* c, loom_comm_request* r, int* done) {
  return loom::guard(cast(c)->host(), [&] {
    Staged* s = static_cast<Staged*>(r);
    mpi_check(MPI_Test(&s->req, done, MPI_STATUS_IGNORE), s->fn, "MPI_Test");
  });
}

loom_error* broadcast(loom_comm* c, loom_comm_group* g, DLTensor* t, int root, void*) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const Buf b = check_tensor(t, "broadcast", "tensor");
    MPI_Comm comm = m->comm(g);
    const int n = comm_size(comm);
    loom::comm_rank("comm/mpi: broadcast", "root", root, n);
    mpi_check(MPI_Bcast(b.ptr, b.count, b.type, root, comm), "broadcast", "MPI_Bcast");
  });
}

loom_error* all_to_all(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out, void*) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const Buf bi = check_tensor(in, "all_to_all", "in");
    const Buf bo = check_tensor(out, "all_to_all", "out");
    check_same_dtype(in, out, "all_to_all");
    MPI_Comm comm = m->comm(g);
    const int n = comm_size(comm);
    for (const DLTensor* t : {in, static_cast<const DLTensor*>(out)})
      loom::require(t->ndim >= 1 && t->shape[0] % n == 0,
                    std::string("comm/mpi: all_to_all: ") + (t == in ? "in " : "out ") +
                        shape_str(t) + " must split into group size (" + std::to_string(n) +
                        ") equal chunks along dim 0");
    loom::require(bi.count == bo.count, "comm/mpi: all_to_all: in " + shape_str(in) + " and out " +
                                            shape_str(out) + " must have equal element counts");
    std::vector<char> scratch;
    const int chunk = bi.count / n;
    mpi_check(MPI_Alltoall(source(bi, bo, scratch), chunk, bi.type, bo.ptr, chunk, bo.type, comm),
              "all_to_all", "MPI_Alltoall");
  });
}

// Counts and displacements in elements, from rows of `row` elements each.
std::vector<int> elements(const int64_t* rows, int n, int64_t row, const char* what) {
  std::vector<int> out((size_t)n);
  for (int j = 0; j < n; ++j) {
    loom::require(rows[j] * row <= INT_MAX, std::string("comm/mpi: all_to_all_v: ") + what + "[" +
                                                std::to_string(j) + "] exceeds MPI's int counts");
    out[(size_t)j] = (int)(rows[j] * row);
  }
  return out;
}
std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t j = 1; j < counts.size(); ++j) d[j] = d[j - 1] + counts[j - 1];
  return d;
}

loom_error* all_to_all_v(loom_comm* c, loom_comm_group* g, const DLTensor* in, DLTensor* out,
                         const int64_t* send_counts, const int64_t* recv_counts, void*) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const Buf bi = check_tensor(in, "all_to_all_v", "in");
    const Buf bo = check_tensor(out, "all_to_all_v", "out");
    check_same_dtype(in, out, "all_to_all_v");
    loom::require(!overlap(bi, bo), "comm/mpi: all_to_all_v: in and out overlap");
    MPI_Comm comm = m->comm(g);
    const int n = comm_size(comm);
    int64_t row = 1;
    for (int32_t d = 1; d < in->ndim; ++d) row *= in->shape[d];
    const std::vector<int> sc = elements(send_counts, n, row, "send_counts");
    const std::vector<int> rc = elements(recv_counts, n, row, "recv_counts");
    const std::vector<int> sd = displacements(sc), rd = displacements(rc);
    mpi_check(MPI_Alltoallv(bi.ptr, sc.data(), sd.data(), bi.type, bo.ptr, rc.data(), rd.data(),
                            bo.type, comm),
              "all_to_all_v", "MPI_Alltoallv");
  });
}

loom_error* barrier(loom_comm* c, loom_comm_group* g, void*) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(),
                     [&] { mpi_check(MPI_Barrier(m->comm(g)), "barrier", "MPI_Barrier"); });
}

loom_error* send(loom_comm* c, loom_comm_group* g, const DLTensor* t, int peer, int tag, void*) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const Buf b = check_tensor(t, "send", "tensor");
    mpi_check(MPI_Send(b.ptr, b.count, b.type, peer, tag, m->comm(g)), "send", "MPI_Send");
  });
}

loom_error* recv(loom_comm* c, loom_comm_group* g, DLTensor* t, int peer, int tag, void*) {
  MpiComm* m = cast(c);
  return loom::guard(m->host(), [&] {
    const Buf b = check_tensor(t, "recv", "tensor");
    MPI_Status st;
    mpi_check(MPI_Recv(b.ptr, b.count, b.type, peer, tag, m->comm(g), &st), "recv", "MPI_Recv");
    int got = 0;
    mpi_check(MPI_Get_count(&st, b.type, &got), "recv", "MPI_Get_count");
    loom::require(got == b.count, "comm/mpi: recv from " + std::to_string(peer) + " with tag " +
                                      std::to_string(tag) + " expected " + std::to_string(b.count) +
                                      " elements but got " + std::to_string(got));
  });
}

// ABI 2.14: this rank failed while others may wait for it in a collective: end the job
// (MPI_Finalize on this path would wait for them forever).
void abort_job(loom_comm*, int code) { MPI_Abort(MPI_COMM_WORLD, code); }

constexpr loom::CommCalls kCalls{"comm/mpi", false,          host_of,    world_rank,   group_create,
                                 all_reduce, reduce_scatter, all_gather, broadcast,    all_to_all,
                                 barrier,    send,           recv,       all_to_all_v, group_size,
                                 start,      wait,           test,       abort_job,    start_send};
constexpr loom_comm_api kApi =
    loom::CommSlots<kCalls>::api(create, destroy, world_size, group_destroy, group_rank);

}  // namespace

LOOM_PLUGIN(.description =
                "collectives and send/recv over MPI on CPU tensors (f32, f64, i32, bf16, f16); "
                "start ranks with mpirun",
            .api = &kApi)
