// dataset/t5: Megatron-LM's T5MaskedWordPieceDataset over an indexed dataset of sentences, as
// a dataset that makes its own samples (ABI 2.3). For the T5 model to come; `loom data
// samples` shows them today.
//
// Sample i of a split, with Megatron's draws (loom/cpp/masked_lm.hpp):
//   - its sentences and target length from the split's sample index (build_mapping with
//     seq_len - 2, one sentence at least), their tokens back to back, cut to the target;
//   - span corruption with numpy RandomState(seed + i): whole-word n-grams of up to
//     max_ngram (10) words with Geometric(0.2) lengths, mask_prob (0.15) of the tokens, each
//     span replaced by the next sentinel <extra_id_k> (tokenizer.vocab_extra_ids, Megatron's
//     --vocab-extra-ids);
//   - encoder input: the text with each span replaced by its sentinel, padded with [PAD] to
//     seq_len; decoder input: [BOS] then each sentinel followed by its span's tokens; decoder
//     targets: each sentinel and its tokens, then [EOS]; both padded to decoder_seq_len (the
//     targets with -1).
// Arrays: tokens, padding_mask (int32 B x T, the encoder's), dec_tokens, dec_padding_mask,
// dec_targets (int32 B x decoder_seq_len).
//
// Where Loom differs from Megatron: the index is built in memory for each run; padding is
// told by position, and the padding holds [PAD] ids rather than 0.
#include <deque>
#include <string>
#include <vector>

#include "loom/cpp/dataset.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/sentence_corpus.hpp"
#include "loom/dataset.h"

namespace {

std::string s(int64_t v) { return std::to_string(v); }

constexpr int64_t kBatchSeq[2] = {LOOM_DIM_BATCH, LOOM_DIM_SEQ};
constexpr DLDataType kI32 = {kDLInt, 32, 1};

struct Options : loom::masked::CorpusKeys {
  int64_t decoder_seq_len;
  explicit Options(const loom::Config& c)
      : CorpusKeys(c), decoder_seq_len(c.get_int("decoder_seq_len")) {}
};

// The arrays for a decoder length: the encoder's (B, T), the decoder's (B, K).
struct Specs {
  int64_t dec_shape[2] = {LOOM_DIM_BATCH, 0};
  loom_array_spec specs[5];
  explicit Specs(int64_t K) {
    dec_shape[1] = K;
    specs[0] = {LOOM_ARRAY_SPEC_SIZE_V2, LOOM_ARRAY_TOKENS, kI32, 2, kBatchSeq};
    specs[1] = {LOOM_ARRAY_SPEC_SIZE_V2, "padding_mask", kI32, 2, kBatchSeq};
    specs[2] = {LOOM_ARRAY_SPEC_SIZE_V2, "dec_tokens", kI32, 2, dec_shape};
    specs[3] = {LOOM_ARRAY_SPEC_SIZE_V2, "dec_padding_mask", kI32, 2, dec_shape};
    specs[4] = {LOOM_ARRAY_SPEC_SIZE_V2, "dec_targets", kI32, 2, dec_shape};
  }
};

class T5Dataset : public loom::masked::SentenceDataset {
 public:
  T5Dataset(const loom_host* host, const loom::Config& c) : T5Dataset(host, Options(c)) {}
  T5Dataset(const loom_host* host, Options o)
      : SentenceDataset(host, "dataset/t5", o.prefix),
        opt_(std::move(o)),
        specs_(opt_.decoder_seq_len) {
    const loom_tokenizer_ref tok = loom::host_tokenizer(host, "dataset/t5");
    bos_ = loom::token_id(tok, "[BOS]", "dataset/t5");
    eos_ = loom::token_id(tok, "[EOS]", "dataset/t5");
    for (int k = 0;; ++k) {
      const std::string t = "<extra_id_" + s(k) + ">";
      const int64_t id = tok.api->token_to_id(tok.self, t.data(), t.size());
      if (id < 0) break;
      sentinels_.push_back((int32_t)id);
    }
    loom::require(!sentinels_.empty(),
                  "dataset/t5 needs sentinel tokens <extra_id_0> ...: set "
                  "tokenizer.vocab_extra_ids (Megatron's T5 uses 100)");
    fit_masking(opt_.masking);
    opt_.masking.geometric = true;
    opt_.masking.mask_always = true;
  }
  void build(const loom_sample_index_args& a, int64_t* index, int64_t* num_samples) {
    loom::require(a.seq_len >= 4, "dataset/t5: seq_len = " + s(a.seq_len) + " is too short");
    indices_.build(corpus_, a, (int32_t)(a.seq_len - 2), 1, opt_.short_seq_prob, index,
                   num_samples);
  }

  void sample(int64_t index, int64_t i, size_t num, DLTensor* const* out) const;

 private:
  Options opt_;
  Specs specs_;
  int32_t bos_ = -1, eos_ = -1;
  std::vector<int32_t> sentinels_;
};

void T5Dataset::sample(int64_t index, int64_t i, size_t num, DLTensor* const* out) const {
  const loom::masked::SentenceIndices::Pick ix = indices_.pick(index, i);
  const int64_t T = ix.seq_len, K = opt_.decoder_seq_len;
  loom::require(num == 5 && out != nullptr, "dataset/t5: sample needs 5 arrays, got " + s(num));
  loom::check_sample_arrays("dataset/t5", specs_.specs, 2, 2, out, T);          // the encoder's (T)
  loom::check_sample_arrays("dataset/t5", specs_.specs + 2, 3, 3, out + 2, K);  // (K)
  const loom::masked::SentenceSample& smp = ix.sample;
  std::vector<int32_t> tokens = corpus_.text(smp.begin, smp.end);
  if ((int64_t)tokens.size() > smp.target_len) tokens.resize((size_t)smp.target_len);
  loom::RandomState rng(ix.rng_seed);
  const loom::masked::Masked m =
      loom::masked::mask_tokens(tokens, smp.target_len, opt_.masking, kinds_, rng);
  loom::require(m.spans.size() <= sentinels_.size(),
                "dataset/t5: sample " + s(i) + " has " + s(m.spans.size()) +
                    " spans but the "
                    "tokenizer only " +
                    s(sentinels_.size()) + " sentinels (vocab_extra_ids)");
  std::vector<int32_t> enc, dec_in{bos_}, dec_out;
  size_t at = 0;
  for (size_t k = 0; k < m.spans.size(); ++k) {
    const std::vector<int64_t>& span = m.spans[k];
    enc.insert(enc.end(), m.tokens.begin() + (int64_t)at, m.tokens.begin() + span.front());
    enc.push_back(sentinels_[k]);
    dec_in.push_back(sentinels_[k]);
    dec_out.push_back(sentinels_[k]);
    for (int64_t p : span) {
      dec_in.push_back(tokens[(size_t)p]);
      dec_out.push_back(tokens[(size_t)p]);
    }
    at = (size_t)span.back() + 1;
  }
  enc.insert(enc.end(), m.tokens.begin() + (int64_t)at, m.tokens.end());
  dec_out.push_back(eos_);
  loom::require((int64_t)enc.size() <= T && (int64_t)dec_in.size() <= K,
                "dataset/t5: sample " + s(i) + " needs " + s(enc.size()) + " encoder and " +
                    s(dec_in.size()) + " decoder tokens; decoder_seq_len is " + s(K));
  loom::fill_padded(out[0], enc, T, vocab_.pad);
  loom::fill_padding_mask(out[1], enc.size(), T);
  loom::fill_padded(out[2], dec_in, K, vocab_.pad);
  loom::fill_padding_mask(out[3], dec_in.size(), K);
  loom::fill_padded(out[4], dec_out, K, -1);
}

loom_error* sample_spec(const loom_host* host, const loom_config* cfg, size_t* num,
                        const loom_array_spec** specs) {
  return loom::guard(host, [&] {
    loom::require(num != nullptr && specs != nullptr, "sample_spec outputs are NULL");
    // one per decoder length the process has seen, kept for the process's life
    static std::deque<Specs> made;
    const int64_t K = loom::Config(host, cfg).get_int("decoder_seq_len");
    for (const Specs& m : made)
      if (m.dec_shape[1] == K) {
        *num = 5;
        *specs = m.specs;
        return;
      }
    made.emplace_back(K);
    *num = 5;
    *specs = made.back().specs;
  });
}

const loom_dataset_api kApi =
    loom::SampleDatasetTable<T5Dataset>::api(loom::create_dataset<T5Dataset>, sample_spec);

const loom_param_spec kParams[] = {
    loom::param("prefix", LOOM_PARAM_STRING, nullptr,
                "path prefix of <prefix>.bin and <prefix>.idx, written by `loom preprocess "
                "--split-sentences` (sentences grouped in documents)"),
    loom::param("decoder_seq_len", LOOM_PARAM_INT, "128",
                "decoder length (Megatron's --decoder-seq-length); train.seq_len is the "
                "encoder's",
                2, 1 << 20),
    loom::param("mask_prob", LOOM_PARAM_FLOAT, "0.15",
                "share of tokens corrupted (Megatron's --mask-prob)", 0.0, 1.0),
    loom::param("short_seq_prob", LOOM_PARAM_FLOAT, "0.1",
                "probability of a shorter target length (Megatron's --short-seq-prob)", 0.0, 1.0),
    loom::param("max_ngram", LOOM_PARAM_INT, "10",
                "longest corrupted span, in words (Megatron's T5: 10)", 1, 64),
    loom::param("whole_word", LOOM_PARAM_BOOL, "true",
                "spans of whole words: a word's \"##\" pieces with it (Megatron's T5: true)"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "Megatron-LM's T5 dataset: span corruption with sentinels (encoder input, decoder "
                "input and targets) over an indexed dataset of sentences",
            .params = kParams, .api = &kApi)
