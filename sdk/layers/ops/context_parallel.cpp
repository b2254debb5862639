// Loom layer library: context parallelism's ring attention (see
// loom/cpp/layers/ops/context_parallel.hpp). Every operand of an attention call is a compact
// tensor: the halves a step needs are copied out (and their gradients added back) batch row
// by batch row, so the attention plugin sees plain causal or full calls.
#include "loom/cpp/layers/ops/context_parallel.hpp"

#include "loom/cpp/comm.hpp"
#include "loom/cpp/layers/ops/attention_block.hpp"

namespace loom::layers {

void cp_slice(const ContextGroup& g, const int32_t* in, int64_t B, int64_t T, int32_t* out) {
  const int64_t Tl = T / g.size, Tc = Tl / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t) out[b * Tl + t] = in[b * T + cp_position(g, Tc, t)];
}

namespace {

// Rows [r0, r0 + n) of each of the B row blocks of src (src_rows rows of `width` elements)
// copied to (or, with `add`, added to) rows [d0, d0 + n) of dst's blocks of dst_rows.
void block_rows(const Ctx& c, DLTensor* dst, int64_t dst_rows, int64_t d0, const DLTensor* src,
                int64_t src_rows, int64_t r0, int64_t n, int64_t B, int64_t width, bool add) {
  for (int64_t b = 0; b < B; ++b) {
    View d = view(dst, {n * width}, (b * dst_rows + d0) * width);
    View s = view(src, {n * width}, (b * src_rows + r0) * width);
    if (add)
      c.call(&loom_ops::add, d.get(), (const DLTensor*)d, (const DLTensor*)s);
    else
      c.call(&loom_ops::copy, d.get(), (const DLTensor*)s);
  }
}

// Sends `send` to the next rank of the ring and receives the previous rank's into `recv`;
// even ranks send first, so that no ring of blocking sends waits for ever (comm.h).
void ring_shift(const Ctx& c, const DLTensor* send, DLTensor* recv, int tag) {
  const ContextGroup& g = c.cp;
  const int next = (g.rank + 1) % g.size, prev = (g.rank + g.size - 1) % g.size;
  auto s = [&] {
    loom::check(c.host, loom::comm_send(g.comm, g.group, send, next, tag, g.stream));
  };
  auto r = [&] {
    loom::check(c.host, loom::comm_recv(g.comm, g.group, recv, prev, tag, g.stream));
  };
  if (g.rank % 2 == 0) {
    s();
    r();
  } else {
    r();
    s();
  }
}

// One call's merge into the running (out, lse) (attention.h, ABI 2.7).
void merge(const Ctx& c, DLTensor* out, DLTensor* lse, const DLTensor* part_out,
           const DLTensor* part_lse, int64_t row0) {
  loom_attention_merge_args m{};
  m.struct_size = LOOM_ATTENTION_MERGE_ARGS_SIZE_V2_7;
  m.out = out;
  m.lse = lse;
  m.part_out = part_out;
  m.part_lse = part_lse;
  m.row0 = row0;
  loom::check(c.host, c.attn.api->merge(c.attn.self, &m));
}

struct Shapes {
  int64_t B, T, Tc, Hq, Hkv, D;
  explicit Shapes(const DLTensor* q, const DLTensor* k)
      : B(q->shape[0]),
        T(q->shape[1]),
        Tc(T / 2),
        Hq(q->shape[2]),
        Hkv(k->shape[2]),
        D(q->shape[3]) {}
};

const loom_attention_partial kPartial = {
    {sizeof(loom_attention_partial), LOOM_EXT_ATTENTION_PARTIAL, LOOM_EXT_REQUIRED, nullptr}};

}  // namespace

void ring_attention_forward(const Ctx& c, const DLTensor* q, const DLTensor* k, const DLTensor* v,
                            DLTensor* out, DLTensor* lse) {
  const Shapes s(q, k);
  const int P = c.cp.size;
  attend(c, q, k, v, out, lse, true, nullptr);  // step 0: this rank's own keys
  Tensor kb[2] = {c.alloc({s.B, s.T, s.Hkv, s.D}), c.alloc({s.B, s.T, s.Hkv, s.D})};
  Tensor vb[2] = {c.alloc({s.B, s.T, s.Hkv, s.D}), c.alloc({s.B, s.T, s.Hkv, s.D})};
  Tensor kh = c.alloc({s.B, s.Tc, s.Hkv, s.D}), vh = c.alloc({s.B, s.Tc, s.Hkv, s.D});
  Tensor qh = c.alloc({s.B, s.Tc, s.Hq, s.D});
  Tensor po = c.alloc({s.B, s.T, s.Hq, s.D}), pl = c.alloc(lse->dtype, {s.B, s.Hq, s.T});
  const int64_t kw = s.Hkv * s.D, qw = s.Hq * s.D;
  block_rows(c, qh.get(), s.Tc, 0, q, s.T, s.Tc, s.Tc, s.B, qw, false);
  const DLTensor *kc = k, *vc = v;
  for (int j = 1; j < P; ++j) {
    ring_shift(c, kc, kb[j % 2].get(), 2 * j);
    ring_shift(c, vc, vb[j % 2].get(), 2 * j + 1);
    kc = kb[j % 2].get();
    vc = vb[j % 2].get();
    const int src = (c.cp.rank - j + P) % P;
    if (src < c.cp.rank) {  // every local query, src's first chunk
      block_rows(c, kh.get(), s.Tc, 0, kc, s.T, 0, s.Tc, s.B, kw, false);
      block_rows(c, vh.get(), s.Tc, 0, vc, s.T, 0, s.Tc, s.B, kw, false);
      attend(c, q, kh, vh, po, pl, false, nullptr);
      merge(c, out, lse, po, pl, 0);
    } else {  // the second local chunk's queries, all of src's keys
      View pho = view(po, {s.B, s.Tc, s.Hq, s.D}), phl = view(pl, {s.B, s.Hq, s.Tc});
      attend(c, qh, kc, vc, pho, phl, false, nullptr);
      merge(c, out, lse, pho, phl, s.Tc);
    }
  }
}

void ring_attention_backward(const Ctx& c, const DLTensor* dout, const DLTensor* q,
                             const DLTensor* k, const DLTensor* v, const DLTensor* out,
                             const DLTensor* lse, DLTensor* dq, DLTensor* dk, DLTensor* dv) {
  const Shapes s(q, k);
  const int P = c.cp.size;
  const int64_t kw = s.Hkv * s.D, qw = s.Hq * s.D;
  const loom_ext* partial = &kPartial.base;
  // the keys and values of src, and the gradients of them gathered so far, travelling
  Tensor kb[2] = {c.alloc({s.B, s.T, s.Hkv, s.D}), c.alloc({s.B, s.T, s.Hkv, s.D})};
  Tensor vb[2] = {c.alloc({s.B, s.T, s.Hkv, s.D}), c.alloc({s.B, s.T, s.Hkv, s.D})};
  Tensor dkb[2] = {c.alloc({s.B, s.T, s.Hkv, s.D}), c.alloc({s.B, s.T, s.Hkv, s.D})};
  Tensor dvb[2] = {c.alloc({s.B, s.T, s.Hkv, s.D}), c.alloc({s.B, s.T, s.Hkv, s.D})};
  attend_backward(c, dout, q, k, v, out, lse, dq, dkb[0].get(), dvb[0].get(), true, partial);
  Tensor kh = c.alloc({s.B, s.Tc, s.Hkv, s.D}), vh = c.alloc({s.B, s.Tc, s.Hkv, s.D});
  Tensor dkh = c.alloc({s.B, s.Tc, s.Hkv, s.D}), dvh = c.alloc({s.B, s.Tc, s.Hkv, s.D});
  Tensor dkp = c.alloc({s.B, s.T, s.Hkv, s.D}), dvp = c.alloc({s.B, s.T, s.Hkv, s.D});
  Tensor dqp = c.alloc({s.B, s.T, s.Hq, s.D});
  // the second local chunk's queries with their output, gradient and lse
  Tensor qh = c.alloc({s.B, s.Tc, s.Hq, s.D}), oh = c.alloc({s.B, s.Tc, s.Hq, s.D});
  Tensor doh = c.alloc({s.B, s.Tc, s.Hq, s.D}), lh = c.alloc(lse->dtype, {s.B, s.Hq, s.Tc});
  block_rows(c, qh.get(), s.Tc, 0, q, s.T, s.Tc, s.Tc, s.B, qw, false);
  block_rows(c, oh.get(), s.Tc, 0, out, s.T, s.Tc, s.Tc, s.B, qw, false);
  block_rows(c, doh.get(), s.Tc, 0, dout, s.T, s.Tc, s.Tc, s.B, qw, false);
  block_rows(c, lh.get(), s.Tc, 0, lse, s.T, s.Tc, s.Tc, s.B * s.Hq, 1, false);
  const DLTensor *kc = k, *vc = v;
  int cur = 0;
  for (int j = 1; j < P; ++j) {
    const int nxt = 1 - cur;
    ring_shift(c, kc, kb[nxt].get(), 4 * j);
    ring_shift(c, vc, vb[nxt].get(), 4 * j + 1);
    ring_shift(c, dkb[cur].get(), dkb[nxt].get(), 4 * j + 2);
    ring_shift(c, dvb[cur].get(), dvb[nxt].get(), 4 * j + 3);
    cur = nxt;
    kc = kb[cur].get();
    vc = vb[cur].get();
    const int src = (c.cp.rank - j + P) % P;
    if (src < c.cp.rank) {
      block_rows(c, kh.get(), s.Tc, 0, kc, s.T, 0, s.Tc, s.B, kw, false);
      block_rows(c, vh.get(), s.Tc, 0, vc, s.T, 0, s.Tc, s.B, kw, false);
      attend_backward(c, dout, q, kh, vh, out, lse, dqp, dkh, dvh, false, partial);
      c.call(&loom_ops::add, dq, (const DLTensor*)dq, (const DLTensor*)dqp.get());
      block_rows(c, dkb[cur].get(), s.T, 0, dkh, s.Tc, 0, s.Tc, s.B, kw, true);
      block_rows(c, dvb[cur].get(), s.T, 0, dvh, s.Tc, 0, s.Tc, s.B, kw, true);
    } else {
      View dqh = view(dqp, {s.B, s.Tc, s.Hq, s.D});
      attend_backward(c, doh, qh, kc, vc, oh, lh, dqh, dkp, dvp, false, partial);
      block_rows(c, dq, s.T, s.Tc, dqh, s.Tc, 0, s.Tc, s.B, qw, true);
      c.call(&loom_ops::add, dkb[cur].get(), (const DLTensor*)dkb[cur].get(),
             (const DLTensor*)dkp.get());
      c.call(&loom_ops::add, dvb[cur].get(), (const DLTensor*)dvb[cur].get(),
             (const DLTensor*)dvp.get());
    }
  }
  // the last keys' gradients home: they belong to the next rank
  ring_shift(c, dkb[cur].get(), dk, 4 * P);
  ring_shift(c, dvb[cur].get(), dv, 4 * P + 1);
}

// ----- all-to-all (Ulysses) context parallelism ---------------------------------------------
namespace {

// Row orders of one all-to-all, head vectors of D elements as rows. Local: (B, 2Tc, H, D), this
// rank's chunks; exchanged: (P, B, 2Tc, H/P, D), block j for (or from) rank j; whole: (B, T,
// H/P, D), the sequence in order, this rank's head group.
struct A2aOrder {
  std::vector<int32_t> to_send;   // exchanged row <- local row (head group j to rank j)
  std::vector<int32_t> to_whole;  // whole row <- received row (rank i sent chunks i, 2P-1-i)
  std::vector<int32_t> to_back;   // exchanged row <- whole row (the inverse of to_whole)
  std::vector<int32_t> to_local;  // local row <- received row (the inverse of to_send)
  A2aOrder(int P, int64_t B, int64_t Tc, int64_t H) {
    const int64_t Hg = H / P, T2 = 2 * Tc, n = B * T2 * H;
    to_send.resize(n), to_whole.resize(n), to_back.resize(n), to_local.resize(n);
    for (int64_t j = 0; j < P; ++j)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T2; ++t)
          for (int64_t g = 0; g < Hg; ++g) {
            const int64_t x = ((j * B + b) * T2 + t) * Hg + g, l = (b * T2 + t) * H + j * Hg + g;
            to_send[x] = (int32_t)l;
            to_local[l] = (int32_t)x;
            // the exchanged row x came from rank j: its local row t is global position p
            const int64_t c = t < Tc ? j : 2 * P - 1 - j, p = c * Tc + t % Tc;
            const int64_t w = (b * P * T2 + p) * Hg + g;
            to_whole[w] = (int32_t)x;
            to_back[x] = (int32_t)w;
          }
  }
};

// out rows <- in rows by a host index, `width` elements a row (embedding ops gather rows).
void gather_rows(const Ctx& c, const std::vector<int32_t>& order, const DLTensor* in, DLTensor* out,
                 int64_t width) {
  const int64_t n = (int64_t)order.size();
  Tensor idx = c.alloc(loom_i32(), {n});
  loom::check(c.host, c.be.api()->from_host(c.be.self(), idx.get(), order.data(), (size_t)n * 4));
  View o = view(out, {n, width}), t = view(in, {n, width});
  loom::embedding_forward(c.be, o.get(), idx, t, false);
}

// One all-to-all between row orders: src rows gathered by `out_order`, exchanged over the
// context group, then gathered by `in_order` into dst.
void exchange(const Ctx& c, const std::vector<int32_t>& out_order,
              const std::vector<int32_t>& in_order, const DLTensor* src, DLTensor* dst, int64_t D) {
  const int64_t n = loom_tensor_numel(src), P = c.cp.size;
  Tensor send = c.alloc(src->dtype, {n}), recv = c.alloc(src->dtype, {n});
  gather_rows(c, out_order, src, send, D);
  View s = view(send, {P, n / P}), r = view(recv, {P, n / P});
  loom::check(c.host, loom::comm_all_to_all(c.cp.comm, c.cp.group, s, r.get(), c.cp.stream));
  gather_rows(c, in_order, recv, dst, D);
}
// local (B, 2Tc, H, D) -> whole (B, T, H/P, D), and back.
void to_heads(const Ctx& c, const A2aOrder& a, const DLTensor* local, DLTensor* whole, int64_t D) {
  exchange(c, a.to_send, a.to_whole, local, whole, D);
}
void from_heads(const Ctx& c, const A2aOrder& a, const DLTensor* whole, DLTensor* local,
                int64_t D) {
  exchange(c, a.to_back, a.to_local, whole, local, D);
}

}  // namespace

void a2a_attention_forward(const Ctx& c, const DLTensor* q, const DLTensor* k, const DLTensor* v,
                           DLTensor* out, DLTensor* lse) {
  const Shapes s(q, k);
  const int P = c.cp.size;
  const A2aOrder aq(P, s.B, s.Tc, s.Hq), akv(P, s.B, s.Tc, s.Hkv);
  const int64_t T = s.T * P, hq = s.Hq / P, hkv = s.Hkv / P;
  Tensor qw = c.alloc({s.B, T, hq, s.D}), kw = c.alloc({s.B, T, hkv, s.D});
  Tensor vw = c.alloc({s.B, T, hkv, s.D}), ow = c.alloc({s.B, T, hq, s.D});
  to_heads(c, aq, q, qw, s.D);
  to_heads(c, akv, k, kw, s.D);
  to_heads(c, akv, v, vw, s.D);
  attend(c, qw, kw, vw, ow, view(lse, {s.B, hq, T}), true, nullptr);
  from_heads(c, aq, ow, out, s.D);
}

void a2a_attention_backward(const Ctx& c, const DLTensor* dout, const DLTensor* q,
                            const DLTensor* k, const DLTensor* v, const DLTensor* out,
                            const DLTensor* lse, DLTensor* dq, DLTensor* dk, DLTensor* dv) {
  const Shapes s(q, k);
  const int P = c.cp.size;
  const A2aOrder aq(P, s.B, s.Tc, s.Hq), akv(P, s.B, s.Tc, s.Hkv);
  const int64_t T = s.T * P, hq = s.Hq / P, hkv = s.Hkv / P;
  auto whole = [&](const DLTensor* local, const A2aOrder& a, int64_t h) {
    Tensor w = c.alloc({s.B, T, h, s.D});
    to_heads(c, a, local, w, s.D);
    return w;
  };
  // the forward's operands again (one all-to-all each rather than kept per layer)
  Tensor qw = whole(q, aq, hq), kw = whole(k, akv, hkv), vw = whole(v, akv, hkv);
  Tensor ow = whole(out, aq, hq), dow = whole(dout, aq, hq);
  Tensor dqw = c.alloc({s.B, T, hq, s.D}), dkw = c.alloc({s.B, T, hkv, s.D});
  Tensor dvw = c.alloc({s.B, T, hkv, s.D});
  attend_backward(c, dow, qw, kw, vw, ow, view(lse, {s.B, hq, T}), dqw, dkw, dvw, true, nullptr);
  from_heads(c, aq, dqw, dq, s.D);
  from_heads(c, akv, dkw, dk, s.D);
  from_heads(c, akv, dvw, dv, s.D);
}

}  // namespace loom::layers
