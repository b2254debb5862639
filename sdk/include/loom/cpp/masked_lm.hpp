// Loom SDK C++ helpers (header-only): the sample machinery of Megatron-LM's masked-language
// datasets (megatron/core/datasets/masked_dataset.py and helpers.cpp's build_mapping),
// written from their documented behaviour so that dataset/bert (and a T5 dataset) draw the
// same samples as Megatron for the same data and seed. The random draws are numpy's legacy
// RandomState (numpy_random.hpp) and the C++ standard's mt19937 / mt19937_64, as Megatron's.
//
//   build_sentence_samples: which sentences make each sample, and its target length;
//   mask_tokens:            the masked-LM predictions of one sample (n-grams, whole words,
//                           80/10/10).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/cpp/numpy_random.hpp"

namespace loom::masked {

// One sample: sentences [begin, end) of the dataset and the length it is cut to.
struct SentenceSample {
  int64_t begin = 0, end = 0;
  int32_t target_len = 0;
};

struct SampleIndexSpec {
  // doc_starts[d] = the first sentence of the split's document d, and one more entry: the
  // end of the last document (Megatron's document_indices for the split's documents).
  std::vector<int64_t> doc_starts;
  int64_t num_samples = 0;    // at least this many: whole epochs are built, as Megatron's
  int32_t max_seq_len = 0;    // tokens left for text (BERT: seq_len - 3 for [CLS] and 2 [SEP])
  double short_seq_prob = 0;  // probability of a shorter target length
  int32_t seed = 1;
  int32_t min_sentences = 1;  // 2 when the sample is split into segments A and B
};

// Megatron's build_mapping. Per epoch, each document with at least min_sentences sentences
// and none longer than 512 tokens is cut greedily into samples: sentences are added until
// their length reaches the target (then a sample ends if more than one sentence remains in
// the document and it has min_sentences), and the document's last sentence always ends one.
// Each target is max_seq_len, or with probability about short_seq_prob (1 in
// round(1/short_seq_prob) draws of an mt19937(seed)) 2 + draw % (max_seq_len - 1). Epochs
// repeat until num_samples is reached; then the samples are shuffled by Fisher-Yates with
// mt19937_64(seed + 1), j = draw % (i + 1).
// Throws std::runtime_error when no document yields a sample (Megatron would loop forever).
inline std::vector<SentenceSample> build_sentence_samples(const std::vector<int32_t>& sizes,
                                                          const SampleIndexSpec& s) {
  constexpr int32_t kLongSentence = 512;
  const int32_t short_ratio =
      s.short_seq_prob > 0 ? (int32_t)std::lround(1.0 / s.short_seq_prob) : 0;
  std::mt19937 gen(s.seed);
  auto target = [&]() -> int32_t {
    if (short_ratio == 0) return s.max_seq_len;
    const uint32_t r = (uint32_t)gen();
    if (r % (uint32_t)short_ratio == 0) return (int32_t)(2 + r % (uint32_t)(s.max_seq_len - 1));
    return s.max_seq_len;
  };
  std::vector<SentenceSample> out;
  const int64_t docs = (int64_t)s.doc_starts.size() - 1;
  while ((int64_t)out.size() < s.num_samples) {
    const size_t before = out.size();
    for (int64_t d = 0; d < docs; ++d) {
      const int64_t first = s.doc_starts[(size_t)d], last = s.doc_starts[(size_t)d + 1];
      int64_t remain = last - first;
      bool long_sentence = false;
      if (remain > 1)
        for (int64_t i = first; i < last && !long_sentence; ++i)
          long_sentence = sizes[(size_t)i] > kLongSentence;
      if (remain < s.min_sentences || long_sentence) continue;
      int64_t len = 0, start = first;
      int32_t count = 0, want = target();
      for (int64_t i = first; i < last; ++i) {
        len += sizes[(size_t)i];
        ++count;
        --remain;
        if ((len >= want && remain > 1 && count >= s.min_sentences) || remain == 0) {
          out.push_back({start, i + 1, want});
          start = i + 1;
          want = target();
          len = 0;
          count = 0;
        }
      }
    }
    if (out.size() == before)
      throw std::runtime_error("no document yields a sample: each needs at least " +
                               std::to_string(s.min_sentences) +
                               " sentence(s), none longer than 512 tokens");
  }
  std::mt19937_64 shuffle_gen((uint64_t)s.seed + 1);
  for (int64_t i = (int64_t)out.size() - 1; i > 0; --i) {
    const int64_t j = (int64_t)(shuffle_gen() % (uint64_t)(i + 1));
    std::swap(out[(size_t)i], out[(size_t)j]);
  }
  return out;
}

struct MaskingSpec {
  double probability = 0.15;   // of a token being predicted
  int32_t max_ngram = 3;       // n-grams of 1 .. max_ngram candidates (words or pieces)
  bool whole_word = true;      // a candidate is a whole word (its "##" pieces with it)
  bool longer_ngrams = false;  // favour long n-grams (P(n) proportional to n, not 1/n)
  // n ~ Geometric(0.2) clipped to max_ngram instead (SpanBERT's; Megatron's T5 uses it)
  bool geometric = false;
  bool mask_always = false;  // every prediction becomes [MASK], with no draw (T5's)
  int32_t mask_id = -1;      // [MASK]
  int64_t vocab = 0;         // the random replacement is uniform over [0, vocab)
};

// What the tokenizer tells about ids: [CLS]/[SEP] are never masked; a "##" piece
// continues the word before it.
struct TokenKinds {
  int32_t cls = -1, sep = -1;
  std::function<bool(int32_t)> continues_word;
};

struct Masked {
  std::vector<int32_t> tokens;     // the input, with the masked positions replaced
  std::vector<int64_t> positions;  // ascending
  std::vector<int32_t> labels;     // the original ids at `positions`
  // Each masked n-gram: its positions (ascending within, spans by their first position).
  std::vector<std::vector<int64_t>> spans;
  // The n drawn for each candidate tried, before it was shortened to fit (statistics).
  std::vector<int32_t> drawn;
};

namespace detail {
// numpy's float64 add.reduce over a contiguous array: pairwise summation, a plain loop
// below 8 elements, eight interleaved partial sums up to 128, halves (multiples of 8) above.
inline double numpy_sum(const double* a, size_t n) {
  if (n < 8) {
    double r = 0.0;
    for (size_t i = 0; i < n; ++i) r += a[i];
    return r;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t half = n / 2;
  half -= half % 8;
  return numpy_sum(a, half) + numpy_sum(a + half, n - half);
}
}  // namespace detail

// Megatron's _create_masked_lm_predictions (without permutation), drawing from `rng`:
// candidates are words (whole_word) or pieces, never [CLS]/[SEP]; the number of predictions
// is min(p * target_len, max(1, round-half-even(len * p))); the candidates are shuffled, and
// each in turn proposes an n-gram (n drawn by numpy's choice with P(n) proportional to 1/n, or
// min(Geometric(0.2), max_ngram) with `geometric`), shortened until it fits the remaining
// budget and skipped when it overlaps a masked one; each of its tokens is then [MASK] with
// probability 0.8, else with probability 0.5 a uniform random id, else itself (always [MASK],
// with no draw, with `mask_always`). The candidates are shuffled once more at the end, as
// Megatron does, so that the draws after it match.
inline Masked mask_tokens(const std::vector<int32_t>& ids, int32_t target_len, const MaskingSpec& m,
                          const TokenKinds& kinds, RandomState& rng) {
  std::vector<std::vector<int64_t>> candidates;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t t = ids[i];
    if (t == kinds.cls || t == kinds.sep) continue;
    if (kinds.continues_word(t) && m.whole_word && !candidates.empty())
      candidates.back().push_back((int64_t)i);
    else
      candidates.push_back({(int64_t)i});
  }
  const double budget = std::min(
      m.probability * target_len,
      (double)std::max<int64_t>(1, (int64_t)std::nearbyint((double)ids.size() * m.probability)));
  // P(n) for n = 1 .. N: 1/n normalised (numpy's float64 arithmetic, in its order)
  const int32_t N = m.max_ngram;
  std::vector<double> nprobs((size_t)N);
  for (int32_t n = 1; n <= N; ++n) nprobs[(size_t)n - 1] = 1.0 / (double)n;
  const double total = detail::numpy_sum(nprobs.data(), nprobs.size());
  for (double& p : nprobs) p /= total;
  if (m.longer_ngrams) std::reverse(nprobs.begin(), nprobs.end());
  // every candidate has N n-grams (the slices candidates[idx : idx + n], shorter at the end)
  std::vector<double> cdf((size_t)N);
  {
    const double s = detail::numpy_sum(nprobs.data(), nprobs.size());
    double c = 0;
    for (int32_t n = 0; n < N; ++n) cdf[(size_t)n] = c += nprobs[(size_t)n] / s;
    const double last = cdf.back();
    for (double& v : cdf) v /= last;
  }
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  rng.shuffle(order);

  Masked out;
  out.tokens = ids;
  std::vector<char> masked(ids.size(), 0);
  std::vector<std::pair<int64_t, int32_t>> predictions;
  for (size_t start : order) {
    if ((double)predictions.size() >= budget) break;
    int32_t n = m.geometric ? (int32_t)std::min<int64_t>(rng.geometric(0.2), N)
                            : 1 + (int32_t)rng.choice(cdf);
    out.drawn.push_back(n);
    std::vector<int64_t> gram;
    bool skip = true;
    for (; n > 0; --n) {
      gram.clear();
      for (size_t c = start; c < std::min(candidates.size(), start + (size_t)n); ++c)
        gram.insert(gram.end(), candidates[c].begin(), candidates[c].end());
      if (budget >= (double)(predictions.size() + gram.size())) {
        skip = false;
        break;
      }
    }
    if (skip) continue;
    if (std::any_of(gram.begin(), gram.end(), [&](int64_t i) { return masked[(size_t)i]; }))
      continue;
    for (int64_t i : gram) {
      masked[(size_t)i] = 1;
      int32_t replace = ids[(size_t)i];
      if (m.mask_always)
        replace = m.mask_id;
      else if (rng.random_sample() < 0.8)
        replace = m.mask_id;
      else if (rng.random_sample() >= 0.5)
        replace = (int32_t)rng.randint(0, m.vocab);
      out.tokens[(size_t)i] = replace;
      predictions.emplace_back(i, ids[(size_t)i]);
    }
    out.spans.push_back(gram);
  }
  rng.shuffle(order);
  std::sort(predictions.begin(), predictions.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [pos, label] : predictions) {
    out.positions.push_back(pos);
    out.labels.push_back(label);
  }
  std::sort(out.spans.begin(), out.spans.end(),
            [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return out;
}

}  // namespace loom::masked
