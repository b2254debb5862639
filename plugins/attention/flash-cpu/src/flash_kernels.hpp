// Tiled exact attention on host memory, FlashAttention-2 style (Dao 2023): per (b, h) and tile
// of queries, tiles of keys with an online softmax (running max m, running sum l, rescaled
// accumulator), so nothing of size T x S is ever stored; backward recomputes each tile's
// probabilities from q, k and the saved lse.
//
// Layouts (attention.h): q(B,T,Hq,D), k/v(B,S,Hkv,D), out(B,T,Hq,D), lse(B,Hq,T). Query head
// h reads kv head g = h / G (G = Hq/Hkv); with causal, query t sees keys s <= t + (S - T),
// and with a sliding window only the last `window` of those. Tiles wholly outside a row's
// keys are skipped, so a window makes the work O(T * window), not O(T * S).
// exp is backend/cpu's vexp (the same exp its softmax uses: vectorisable in f32, libm's in f64).
// Storage type St (float, double, Bf16, F16) is widened to the accumulation type A (double
// for f64 data, float otherwise) when a tile is loaded; all arithmetic runs in A.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "loom/cpp/half.hpp"      // bf16/f16 rounding, as backend/cpu rounds
#include "loom/cpp/vec_math.hpp"  // an exp that vectorises (f32), as backend/cpu uses

namespace flash {

// The tile loops compiled for AVX-512, AVX2 and baseline x86-64, the widest picked at load
// (GCC function multiversioning, as backend/cpu's LOOM_CPU_CLONES): ~2x over SSE2 here.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLASH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FLASH_CLONES
#endif

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float widen(float x) { return x; }
inline double widen(double x) { return x; }
inline float widen(Bf16 x) { return loom::bf16_to_f32(x.bits); }
inline float widen(F16 x) { return loom::f16_to_f32(x.bits); }
template <class St, class A>
St narrow(A x) {
  if constexpr (std::is_same_v<St, Bf16>)
    return Bf16{loom::f32_to_bf16((float)x)};
  else if constexpr (std::is_same_v<St, F16>)
    return F16{loom::f32_to_f16((float)x)};
  else
    return static_cast<St>(x);
}

struct Dims {
  int64_t B, T, S, Hq, Hkv, D, G;
  int64_t bq, bk;  // tile sizes (queries, keys)
  double scale;
  bool causal;
  int64_t window = 0;     // > 0: query t sees keys (last_key(t) - window, last_key(t)]
  int64_t lse_pitch = 0;  // lse values between heads (0: T); a sequence of a longer row
  // loom.attention-bias/1: the bias (Hq, bias_T, bias_S) of the whole call; a sequence reads
  // its [0, T) x [0, S) corner
  int64_t bias_T = 0, bias_S = 0;
  int64_t last_key(int64_t t) const { return causal ? t + S - T : S - 1; }  // inclusive
  int64_t first_key(int64_t t) const {
    return window > 0 ? std::max<int64_t>(0, last_key(t) - window + 1) : 0;
  }
  int64_t lse_at(int64_t b, int64_t h, int64_t t) const {
    return (b * Hq + h) * (lse_pitch ? lse_pitch : T) + t;
  }
  // The first key tile any of queries [i0, ...) sees, aligned to bk.
  int64_t first_tile(int64_t i0) const { return first_key(i0) / bk * bk; }
};

// dst(rows, D) compact = src rows `pitch` elements apart.
template <class A, class St>
void load_rows(const St* src, int64_t pitch, int64_t rows, int64_t D, A* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) dst[r * D + d] = widen(src[r * pitch + d]);
}
// dst(D, ld) = the transpose of src's (rows, D), so score rows become axpys over keys.
template <class A, class St>
void load_rows_t(const St* src, int64_t pitch, int64_t rows, int64_t D, int64_t ld, A* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) dst[d * ld + r] = widen(src[r * pitch + d]);
}

// y(n) += a * x(n); restrict: the accumulators never alias the operands, which lets the
// compiler keep them in registers.
template <class A>
inline void axpy(A* __restrict y, const A* __restrict x, A a, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += a * x[c];
}

// s(nq, ld) rows i: s[i][j] = sum_d Q[i][d] * Kt[d][j0 + j] for j < nk (unscaled, as the
// reference's gemm; the scale multiplies the dot product afterwards).
template <class A>
FLASH_CLONES void tile_scores(const A* Q, int64_t nq, const A* Kt, int64_t kld, int64_t j0,
                              int64_t nk, int64_t D, A* s, int64_t ld) {
  for (int64_t i = 0; i < nq; ++i) {
    A* row = s + i * ld;
    std::fill(row, row + nk, A(0));
    for (int64_t d = 0; d < D; ++d) axpy(row, Kt + d * kld + j0, Q[i * D + d], nk);
  }
}

// A row of scores with the bias added: row[j] = scale * row[j] + brow[j] for j in [j1, jn),
// after which the row is scaled already (returns the scale still to apply: 1, or `scale`
// when there is no bias).
template <class A, class St>
inline A add_bias(A* row, const St* brow, int64_t j1, int64_t jn, A scale) {
  if (!brow) return scale;
  for (int64_t j = j1; j < jn; ++j) row[j] = scale * row[j] + A(widen(brow[j]));
  return A(1);
}

// Forward: out = softmax(scale * q k^T + bias) v, lse = log sum exp(scale * q k^T + bias) per
// query row (lse and bias may be NULL). Parallel over (b, h, query tile).
template <class A, class St, class L>
FLASH_CLONES void forward(const Dims& d, const St* q, const St* k, const St* v, St* out, L* lse,
                          const St* bias = nullptr) {
  const int64_t D = d.D, nqt = (d.T + d.bq - 1) / d.bq, tasks = d.B * d.Hq * nqt;
  const int64_t qp = d.Hq * D, kp = d.Hkv * D;  // row pitches
  const A ninf = -std::numeric_limits<A>::infinity();
#pragma omp parallel
  {
    std::vector<A> Q(d.bq * D), Kt(D * d.bk), V(d.bk * D), s(d.bq * d.bk), acc(d.bq * D);
    std::vector<A> m(d.bq), l(d.bq);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / (d.Hq * nqt), h = task / nqt % d.Hq, i0 = task % nqt * d.bq;
      const int64_t nq = std::min(d.bq, d.T - i0), g = h / d.G;
      load_rows(q + (b * d.T + i0) * qp + h * D, qp, nq, D, Q.data());
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), A(0));
      std::fill(acc.begin(), acc.end(), A(0));
      const int64_t kend = std::min(d.S, d.last_key(i0 + nq - 1) + 1);
      for (int64_t j0 = d.first_tile(i0); j0 < kend; j0 += d.bk) {
        const int64_t nk = std::min(d.bk, kend - j0);
        const St* kt = k + (b * d.S + j0) * kp + g * D;
        load_rows_t(kt, kp, nk, D, d.bk, Kt.data());
        load_rows(v + (b * d.S + j0) * kp + g * D, kp, nk, D, V.data());
        tile_scores(Q.data(), nq, Kt.data(), d.bk, 0, nk, D, s.data(), d.bk);
        for (int64_t i = 0; i < nq; ++i) {
          // Keys [j0 + j1, j0 + jn) of this tile are the ones this row sees.
          const int64_t jn = std::min(nk, d.last_key(i0 + i) - j0 + 1);
          const int64_t j1 = std::max<int64_t>(0, d.first_key(i0 + i) - j0);
          if (jn <= j1) continue;
          A* row = s.data() + i * d.bk;
          const St* brow = bias ? bias + (h * d.bias_T + i0 + i) * d.bias_S + j0 : nullptr;
          const A sc = add_bias(row, brow, j1, jn, A(d.scale));
          A mx = m[i];
          for (int64_t j = j1; j < jn; ++j) mx = std::max(mx, sc * row[j]);
          const A corr = std::exp(m[i] - mx);  // 0 on the first tile (m = -inf)
#pragma omp simd
          for (int64_t j = j1; j < jn; ++j) row[j] = loom::vexp(sc * row[j] - mx);
          A sum = 0;  // in order, as a sequential sum
          for (int64_t j = j1; j < jn; ++j) sum += row[j];
          l[i] = l[i] * corr + sum;
          m[i] = mx;
          A* o = acc.data() + i * D;
          for (int64_t c = 0; c < D; ++c) o[c] *= corr;
          for (int64_t j = j1; j < jn; ++j) axpy(o, V.data() + j * D, row[j], D);
        }
      }
      for (int64_t i = 0; i < nq; ++i) {
        St* o = out + (b * d.T + i0 + i) * qp + h * D;
        const A inv = A(1) / l[i];  // l >= 1: every row sees at least key 0 (T <= S)
        for (int64_t c = 0; c < D; ++c) o[c] = narrow<St>(acc[i * D + c] * inv);
        if (lse) lse[d.lse_at(b, h, i0 + i)] = static_cast<L>(m[i] + std::log(l[i]));
      }
    }
  }
}

// lse(T) of one head from its widened Q(T,D) and Kt(D,S), the forward's online pass without
// the output: for backward when the saved lse is coarser than the data (f32 lse, f64 data).
template <class A, class St>
FLASH_CLONES void recompute_lse(const Dims& d, const A* Q, const A* Kt, A* s, A* lse,
                                const St* bias_h) {
  for (int64_t i0 = 0; i0 < d.T; i0 += d.bq) {
    const int64_t nq = std::min(d.bq, d.T - i0);
    for (int64_t i = 0; i < nq; ++i) lse[i0 + i] = -std::numeric_limits<A>::infinity();
    std::vector<A> l(nq, A(0));
    const int64_t kend = std::min(d.S, d.last_key(i0 + nq - 1) + 1);
    for (int64_t j0 = d.first_tile(i0); j0 < kend; j0 += d.bk) {
      const int64_t nk = std::min(d.bk, kend - j0);
      tile_scores(Q + i0 * d.D, nq, Kt, d.S, j0, nk, d.D, s, d.bk);
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t jn = std::min(nk, d.last_key(i0 + i) - j0 + 1);
        const int64_t j1 = std::max<int64_t>(0, d.first_key(i0 + i) - j0);
        if (jn <= j1) continue;
        A* row = s + i * d.bk;
        const St* brow = bias_h ? bias_h + (i0 + i) * d.bias_S + j0 : nullptr;
        const A sc = add_bias(row, brow, j1, jn, A(d.scale));
        A mx = lse[i0 + i];
        for (int64_t j = j1; j < jn; ++j) mx = std::max(mx, sc * row[j]);
        A sum = 0;
        for (int64_t j = j1; j < jn; ++j) sum += std::exp(sc * row[j] - mx);
        l[i] = l[i] * std::exp(lse[i0 + i] - mx) + sum;
        lse[i0 + i] = mx;
      }
    }
    for (int64_t i = 0; i < nq; ++i) lse[i0 + i] += std::log(l[i]);
  }
}

// Backward (FlashAttention-2): with P = exp(scale * q k^T - lse) recomputed per tile and
// Di = rowsum(dO * O): dV = P^T dO, dP = dO V^T, dS = P * (dP - Di), dQ = scale * dS K,
// dK = scale * dS^T Q; dk, dv summed over the G query heads of a kv group. dq, dk, dv are
// written (=). Parallel over (b, kv head), so every output row has one writer. lse == NULL
// (or recompute) makes it recompute the lse in A. With a bias, P comes from the biased
// scores and dbias (A, the call's (Hq, bias_T, bias_S)) gains dS, summed over the batch: each
// (b, h) sums into its own buffer, added to dbias one at a time.
template <class A, class St, class L>
FLASH_CLONES void backward(const Dims& d, const St* dout, const St* q, const St* k, const St* v,
                           const St* out, const L* lse, bool recompute, St* dq, St* dk, St* dv,
                           const St* bias = nullptr, A* dbias = nullptr) {
  const int64_t D = d.D, T = d.T, S = d.S, qp = d.Hq * D, kp = d.Hkv * D;
#pragma omp parallel
  {
    // Whole heads, widened once: O((T + S) * D) per thread, never T x S.
    std::vector<A> Q(T * D), dO(T * D), dQ(T * D), Di(T), lh(T);
    std::vector<A> K(S * D), Kt(D * S), V(S * D), Vt(D * S), dK(S * D), dV(S * D);
    std::vector<A> p(d.bq * d.bk), ds(d.bq * d.bk), dB(dbias ? T * S : 0);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < d.B * d.Hkv; ++task) {
      const int64_t b = task / d.Hkv, g = task % d.Hkv;
      const St* kg = k + b * S * kp + g * D;
      const St* vg = v + b * S * kp + g * D;
      load_rows(kg, kp, S, D, K.data());
      load_rows_t(kg, kp, S, D, S, Kt.data());
      load_rows(vg, kp, S, D, V.data());
      load_rows_t(vg, kp, S, D, S, Vt.data());
      std::fill(dK.begin(), dK.end(), A(0));
      std::fill(dV.begin(), dV.end(), A(0));
      for (int64_t h = g * d.G; h < (g + 1) * d.G; ++h) {
        const int64_t qoff = b * T * qp + h * D;
        load_rows(q + qoff, qp, T, D, Q.data());
        load_rows(dout + qoff, qp, T, D, dO.data());
        for (int64_t t = 0; t < T; ++t) {
          A acc = 0;
          for (int64_t c = 0; c < D; ++c) acc += dO[t * D + c] * A(widen(out[qoff + t * qp + c]));
          Di[t] = acc;
        }
        const St* bh = bias ? bias + h * d.bias_T * d.bias_S : nullptr;
        if (dbias) std::fill(dB.begin(), dB.end(), A(0));
        if (recompute) {
          recompute_lse(d, Q.data(), Kt.data(), p.data(), lh.data(), bh);
        } else {
          for (int64_t t = 0; t < T; ++t) lh[t] = A(lse[d.lse_at(b, h, t)]);
        }
        std::fill(dQ.begin(), dQ.end(), A(0));
        for (int64_t j0 = 0; j0 < S; j0 += d.bk) {
          const int64_t nk = std::min(d.bk, S - j0);
          for (int64_t i0 = 0; i0 < T; i0 += d.bq) {
            const int64_t nq = std::min(d.bq, T - i0);
            // The whole tile is masked: above the diagonal, or left of every row's window.
            if (d.last_key(i0 + nq - 1) < j0 || d.first_key(i0) >= j0 + nk) continue;
            tile_scores(Q.data() + i0 * D, nq, Kt.data(), S, j0, nk, D, p.data(), d.bk);
            tile_scores(dO.data() + i0 * D, nq, Vt.data(), S, j0, nk, D, ds.data(), d.bk);
            for (int64_t i = 0; i < nq; ++i) {
              const int64_t jn = std::max<int64_t>(0, std::min(nk, d.last_key(i0 + i) - j0 + 1));
              const int64_t j1 = std::min(jn, std::max<int64_t>(0, d.first_key(i0 + i) - j0));
              A* pr = p.data() + i * d.bk;
              A* dr = ds.data() + i * d.bk;  // dP in, dS out
              const A li = lh[i0 + i], di = Di[i0 + i];
              const St* brow = bh ? bh + (i0 + i) * d.bias_S + j0 : nullptr;
              const A sc = add_bias(pr, brow, j1, jn, A(d.scale));
#pragma omp simd
              for (int64_t j = j1; j < jn; ++j) {
                pr[j] = loom::vexp(sc * pr[j] - li);
                dr[j] = pr[j] * (dr[j] - di);
              }
              if (dbias)
                for (int64_t j = j1; j < jn; ++j) dB[(i0 + i) * S + j0 + j] += dr[j];
              A* dqr = dQ.data() + (i0 + i) * D;
              const A* qr = Q.data() + (i0 + i) * D;
              const A* dor = dO.data() + (i0 + i) * D;
              for (int64_t j = j1; j < jn; ++j) {
                const A pj = pr[j], sj = A(d.scale) * dr[j];
                axpy(dqr, K.data() + (j0 + j) * D, sj, D);
                axpy(dK.data() + (j0 + j) * D, qr, sj, D);
                axpy(dV.data() + (j0 + j) * D, dor, pj, D);
              }
            }
          }
        }
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < D; ++c) dq[qoff + t * qp + c] = narrow<St>(dQ[t * D + c]);
        if (dbias) {
#pragma omp critical(flash_dbias)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < S; ++j)
              dbias[(h * d.bias_T + t) * d.bias_S + j] += dB[t * S + j];
        }
      }
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < D; ++c) {
          dk[b * S * kp + s * kp + g * D + c] = narrow<St>(dK[s * D + c]);
          dv[b * S * kp + s * kp + g * D + c] = narrow<St>(dV[s * D + c]);
        }
    }
  }
}

}  // namespace flash
