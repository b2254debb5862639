// dataset/bert and the SDK's masked-LM helpers (loom/cpp/masked_lm.hpp):
//  - the sample index and whole samples equal an independent Python transcription of
//    Megatron's rules drawing from numpy's own RandomState (make_bert_reference.py ->
//    data/bert_masking/), bit for bit;
//  - masking statistics over 10^5 samples against the specification: the share predicted,
//    80/10/10, whole words, the n-gram length distribution;
//  - samples are a function of (data, seed, index): two instances (two data-parallel ranks)
//    give the same ones;
//  - dataset/mnli's sentence-pair layout (Megatron's finetuning rule).
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "loom/cpp/masked_lm.hpp"
#include "loom/cpp/megatron_indexed.hpp"
#include "plugin_test_util.hpp"
#include "reference_records.hpp"

namespace {

const std::string kDir = std::string(LOOM_SOURCE_DIR) + "/tests/data/data/bert_masking/";
constexpr int64_t kT = 48;
constexpr uint32_t kSeed = 1234;

struct Expected {
  std::vector<loom::masked::SentenceSample> index;
  std::map<int64_t, std::map<std::string, std::vector<int32_t>>> samples;
};

Expected read_expected() {
  std::ifstream f(kDir + "expected.txt");
  REQUIRE_MESSAGE(f.good(), "missing " << kDir << "expected.txt (make_bert_reference.py)");
  Expected e;
  std::string line;  // an index record's rows
  int64_t current = -1;
  loomtest::each_record(f, [&](const std::string& kind, std::istream& in) {
    if (kind == "index") {
      size_t n = 0;
      in >> n;
      for (size_t i = 0; i < n && std::getline(f, line); ++i) {
        std::istringstream row(line);
        loom::masked::SentenceSample s;
        row >> s.begin >> s.end >> s.target_len;
        e.index.push_back(s);
      }
    } else if (kind == "sample") {
      in >> current;
    } else {
      int32_t v;
      while (in >> v) e.samples[current][kind].push_back(v);
    }
  });
  return e;
}

// A dataset/bert over the reference data, with its wordpiece tokenizer, and one split.
struct Bert {
  loomtest::TestHost h;
  loom_tokenizer_ref tok{};
  std::unique_ptr<ptest::Dataset> ds;
  int64_t index = -1, size = 0;
  explicit Bert(int64_t wanted, std::map<std::string, std::string> values = {}) {
    tok = h.load_tokenizer("wordpiece", {{"vocab_file", kDir + "vocab.txt"}});
    values["prefix"] = kDir + "sentences";
    ds = std::make_unique<ptest::Dataset>(h.host(), "bert", values);
    REQUIRE_MESSAGE(ds->created().ok(), ds->created().message);
    REQUIRE(ds->api()->struct_size >= LOOM_DATASET_API_SIZE_V2_3);
    const loom_sample_index_args a{
        LOOM_SAMPLE_INDEX_ARGS_SIZE_V2_3, 0, ds->size(), kT, wanted, kSeed, nullptr};
    ptest::Outcome o = ptest::outcome(ds->api()->build_samples(ds->self(), &a, &index, &size));
    REQUIRE_MESSAGE(o.ok(), o.message);
  }
  // Sample i's arrays: tokens, targets, padding_mask, token_types (T) and sop_labels.
  std::map<std::string, std::vector<int32_t>> sample(int64_t i, bool binary = true) const {
    const char* names[5] = {"tokens", "targets", "padding_mask", "token_types", "sop_labels"};
    std::vector<std::vector<int32_t>> data(5, std::vector<int32_t>(kT));
    std::vector<DLTensor> t(5);
    std::vector<DLTensor*> p(5);
    int64_t T = kT;
    for (size_t k = 0; k < 5; ++k) {
      t[k] = DLTensor{};
      t[k].data = data[k].data();
      t[k].device = {kDLCPU, 0};
      t[k].dtype = {kDLInt, 32, 1};
      t[k].ndim = k < 4 ? 1 : 0;
      t[k].shape = k < 4 ? &T : nullptr;
      p[k] = &t[k];
    }
    const size_t n = binary ? 5 : 4;
    ptest::Outcome o = ptest::outcome(ds->api()->sample(ds->self(), index, i, n, p.data()));
    REQUIRE_MESSAGE(o.ok(), o.message);
    std::map<std::string, std::vector<int32_t>> out;
    for (size_t k = 0; k < n; ++k) out[names[k]] = data[k];
    out["sop_labels"].resize(binary ? 1 : 0);
    return out;
  }
};

// A sample of `len` pieces for the statistics: [CLS], pieces 1 .. len-2 where piece t starts a
// word iff (t - 1) % 3 == 0 (words of 3 pieces: ids 3k start words), [SEP].
std::vector<int32_t> three_piece_words(int64_t len, loom::masked::TokenKinds& kinds) {
  kinds.cls = 2;
  kinds.sep = 3;
  kinds.continues_word = [](int32_t t) { return t % 3 != 0; };
  std::vector<int32_t> ids((size_t)len);
  ids.front() = 2;
  ids.back() = 3;
  for (int64_t t = 1; t < len - 1; ++t)
    ids[(size_t)t] = (int32_t)((t - 1) % 3 == 0 ? 6 + 3 * (t % 300) : 4 + 3 * (t % 300));
  return ids;
}

// |count - n p| < 5 sd of a binomial(n, p).
void within_5_sigma(double count, double n, double p, const std::string& what) {
  const double sd = std::sqrt(n * p * (1 - p));
  INFO(what << ": " << count << " of " << n << ", expected " << n * p << " +- " << 5 * sd);
  CHECK(std::fabs(count - n * p) < 5 * sd);
}

}  // namespace

TEST_CASE("dataset/bert: the sample index equals Megatron's build_mapping (numpy reference)") {
  const Expected e = read_expected();
  loom::megatron::Reader r(kDir + "sentences");
  loom::masked::SampleIndexSpec spec;
  for (int64_t d = 0; d <= r.num_documents(); ++d) spec.doc_starts.push_back(r.document_index(d));
  std::vector<int32_t> sizes;
  for (int64_t i = 0; i < r.num_sequences(); ++i) sizes.push_back(r.length(i));
  spec.num_samples = 100;
  spec.max_seq_len = (int32_t)kT - 3;
  spec.short_seq_prob = 0.1;
  spec.seed = (int32_t)kSeed;
  spec.min_sentences = 2;
  const auto index = loom::masked::build_sentence_samples(sizes, spec);
  REQUIRE(index.size() == e.index.size());  // whole epochs: 148 >= 100
  int shorter = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    CAPTURE(i);
    CHECK(index[i].begin == e.index[i].begin);
    CHECK(index[i].end == e.index[i].end);
    CHECK(index[i].target_len == e.index[i].target_len);
    shorter += index[i].target_len < kT - 3;
  }
  CHECK(shorter > 0);  // the short-sequence draw was exercised
  // the document with a 600-token sentence yields no sample
  const int64_t long_begin = r.document_index(7), long_end = r.document_index(8);
  for (const auto& s : index) CHECK((s.end <= long_begin || s.begin >= long_end));
}

TEST_CASE("dataset/bert: samples equal the numpy reference bit for bit") {
  const Expected e = read_expected();
  Bert b(100);
  CHECK(b.size == (int64_t)e.index.size());
  REQUIRE(e.samples.size() == 13);
  for (const auto& [i, want] : e.samples) {
    CAPTURE(i);
    const auto got = b.sample(i);
    for (const auto& [name, values] : want) {
      CAPTURE(name);
      CHECK(got.at(name) == values);
    }
  }
}

TEST_CASE("dataset/bert: two instances (two data-parallel ranks) give the same samples") {
  Bert a(300), b(300);
  REQUIRE(a.size == b.size);
  for (int64_t i : {0, 1, 57, 299}) CHECK(a.sample(i) == b.sample(i));
  CHECK(a.sample(3) != a.sample(4));
}

TEST_CASE("dataset/bert: sample layout: [CLS] A [SEP] B [SEP], padding, targets") {
  Bert b(400);
  const loom_tokenizer_ref tok = b.tok;
  auto id = [&](const char* t) { return (int32_t)tok.api->token_to_id(tok.self, t, strlen(t)); };
  const int32_t cls = id("[CLS]"), sep = id("[SEP]"), pad = id("[PAD]");
  int swapped = 0;
  for (int64_t i = 0; i < 400; ++i) {
    CAPTURE(i);
    const auto s = b.sample(i);
    const auto &tokens = s.at("tokens"), &targets = s.at("targets"),
               &padding = s.at("padding_mask"), &types = s.at("token_types");
    int64_t len = 0;
    while (len < kT && padding[len] == 1) ++len;
    CHECK(tokens[0] == cls);
    CHECK(tokens[len - 1] == sep);
    int seps = 0;
    for (int64_t t = 0; t < kT; ++t) {
      if (t >= len) {
        CHECK(padding[t] == 0);
        CHECK(tokens[t] == pad);
        CHECK(targets[t] == -1);
        CHECK(types[t] == 0);
        continue;
      }
      // a [SEP] of the layout is never masked; a masked token may be replaced by [SEP]'s id
      const bool is_sep = tokens[t] == sep && targets[t] == -1;
      seps += is_sep;
      CHECK(types[t] == (seps == 0 || (seps == 1 && is_sep) ? 0 : 1));
    }
    CHECK(seps == 2);  // the binary head: two segments

    swapped += s.at("sop_labels")[0];
  }
  CHECK(swapped > 150);  // about half of 400 (binomial: 4 sigma = 40)
  CHECK(swapped < 250);
}

TEST_CASE("dataset/bert: without the binary head one segment, no sop_labels") {
  Bert b(50, {{"binary_head", "false"}});
  for (int64_t i = 0; i < 50; ++i) {
    const auto s = b.sample(i, false);
    int seps = 0;
    for (int64_t t = 0; t < kT; ++t) seps += s.at("padding_mask")[t] && s.at("tokens")[t] == 3;
    CHECK(seps >= 1);
    for (int64_t t = 0; t < kT; ++t) CHECK(s.at("token_types")[t] == 0);
  }
}

// 10^5 samples through mask_tokens: lengths 20..80 of pieces where every third starts a
// word and the next two continue it (whole-word candidates of 3 pieces), p = 0.15, each with
// its own RandomState. Each count is held to its expectation within 5 standard deviations.
TEST_CASE("masked_lm: statistics over 10^5 samples match the specification") {
  loom::masked::MaskingSpec m;
  m.mask_id = 1;
  m.vocab = 1000;
  loom::masked::TokenKinds kinds;
  constexpr int kSamples = 100000;
  double predicted = 0, expected_predicted = 0, real = 0, masks = 0, same = 0, randoms = 0;
  std::vector<double> drawn(4, 0.0);
  int64_t spans_checked = 0;
  for (int i = 0; i < kSamples; ++i) {
    loom::RandomState rng((uint32_t)(7 + i));
    const int64_t len = 20 + i % 61;
    const std::vector<int32_t> ids = three_piece_words(len, kinds);
    const int32_t target = (int32_t)len;
    const loom::masked::Masked r = loom::masked::mask_tokens(ids, target, m, kinds, rng);
    const double budget =
        std::min(0.15 * target, (double)std::max<int64_t>(1, std::llround(len * 0.15)));
    REQUIRE(r.positions.size() <= budget);
    predicted += (double)r.positions.size();
    // whole words are 3 pieces here: the budget holds floor(budget / 3) of them
    expected_predicted += 3 * std::floor(budget / 3);
    real += (double)len;
    for (size_t k = 0; k < r.positions.size(); ++k) {
      const int32_t now = r.tokens[(size_t)r.positions[k]], was = r.labels[k];
      REQUIRE(was == ids[(size_t)r.positions[k]]);
      masks += now == m.mask_id;
      same += now == was;
      randoms += now != m.mask_id && now != was;
    }
    // whole words: a span starts at a word's first piece and ends at a word's last piece
    for (const auto& span : r.spans) {
      REQUIRE(!span.empty());
      CHECK((span.front() - 1) % 3 == 0);
      const int64_t end = span.back() + 1;
      CHECK((end == len - 1 || (end - 1) % 3 == 0));
      ++spans_checked;
    }
    for (int32_t n : r.drawn) drawn[(size_t)n] += 1;
  }
  // the budget is filled with whole words: shortening and skipping leave few unused. As the
  // budget min(p * target, round(p * len)) counts whole tokens and whole words, the share of
  // tokens predicted is under p (here words of 3 pieces take 0.129 of the tokens)
  CHECK(predicted / expected_predicted > 0.98);
  CHECK(predicted / real > 0.12);
  CHECK(predicted / real <= 0.15);
  MESSAGE("predicted " << predicted / real << " of the tokens, " << predicted / expected_predicted
                       << " of the budget; [MASK] " << masks / predicted << ", unchanged "
                       << same / predicted << ", random " << randoms / predicted);
  // 80 / 10 / 10: [MASK]; unchanged (plus a random draw that hit the original, 1/1000 of 10%);
  // a different random id
  within_5_sigma(masks, predicted, 0.8, "[MASK]");
  // 0.1 kept + 0.1 * P(random draw == original)
  within_5_sigma(same, predicted, 0.1 + 0.1 / 1000.0, "unchanged");
  within_5_sigma(randoms, predicted, 0.1 - 0.1 * 0.001, "random");
  // n-gram lengths drawn: P(n) = (1/n) / (1 + 1/2 + 1/3) = 6/11, 3/11, 2/11
  const double tries = drawn[1] + drawn[2] + drawn[3];
  const double p[4] = {0, 6.0 / 11, 3.0 / 11, 2.0 / 11};
  for (int k = 1; k <= 3; ++k)
    within_5_sigma(drawn[(size_t)k], tries, p[k], "n = " + std::to_string(k));
  CHECK(spans_checked > kSamples);
}

// T5's masking (Megatron's T5MaskedWordPieceDataset: geometric spans, every predicted token
// [MASK]ed, whole words) over 10^5 samples: the span lengths drawn follow min(Geometric(0.2),
// 10), every span is whole words of at most 10, every predicted token is replaced, and the
// budget is filled as BERT's.
TEST_CASE("masked_lm: T5's span statistics over 10^5 samples match the specification") {
  loom::masked::MaskingSpec m;
  m.mask_id = 1;
  m.vocab = 1000;
  m.max_ngram = 10;
  m.geometric = true;
  m.mask_always = true;
  loom::masked::TokenKinds kinds;
  constexpr int kSamples = 100000;
  double predicted = 0, expected_predicted = 0, real = 0, replaced = 0, span_words = 0;
  std::vector<double> drawn(11, 0.0);
  int64_t spans = 0;
  for (int i = 0; i < kSamples; ++i) {
    loom::RandomState rng((uint32_t)(11 + i));
    const int64_t len = 40 + i % 81;  // long enough for spans of several words
    const std::vector<int32_t> ids = three_piece_words(len, kinds);
    const auto r = loom::masked::mask_tokens(ids, (int32_t)len, m, kinds, rng);
    const double budget =
        std::min(0.15 * len, (double)std::max<int64_t>(1, std::llround(len * 0.15)));
    REQUIRE(r.positions.size() <= budget);
    predicted += (double)r.positions.size();
    expected_predicted += 3 * std::floor(budget / 3);
    real += (double)len;
    for (size_t k = 0; k < r.positions.size(); ++k)
      replaced += r.tokens[(size_t)r.positions[k]] == m.mask_id;
    for (const auto& span : r.spans) {
      REQUIRE(!span.empty());
      CHECK((span.front() - 1) % 3 == 0);
      const int64_t end = span.back() + 1;
      CHECK((end == len - 1 || (end - 1) % 3 == 0));
      const int64_t words = ((int64_t)span.size() + 2) / 3;
      CHECK(words <= m.max_ngram);
      span_words += (double)words;
      ++spans;
    }
    for (int32_t n : r.drawn) {
      REQUIRE((n >= 1 && n <= 10));
      drawn[(size_t)n] += 1;
    }
  }
  CHECK(replaced == predicted);
  CHECK(predicted / expected_predicted > 0.98);
  CHECK(predicted / real > 0.12);
  CHECK(predicted / real <= 0.15);
  // P(n = k) = 0.2 * 0.8^(k-1) for k < 10; P(n = 10) = 0.8^9 (the clipped tail)
  double tries = 0;
  for (int k = 1; k <= 10; ++k) tries += drawn[(size_t)k];
  for (int k = 1; k <= 10; ++k) {
    const double p = k < 10 ? 0.2 * std::pow(0.8, k - 1) : std::pow(0.8, 9);
    within_5_sigma(drawn[(size_t)k], tries, p, "n = " + std::to_string(k));
  }
  MESSAGE("T5 masking: predicted "
          << predicted / real << " of the tokens, " << predicted / expected_predicted
          << " of the budget; " << tries << " spans drawn, P(n=1) " << drawn[1] / tries
          << " (0.2), P(n=10) " << drawn[10] / tries << " (" << std::pow(0.8, 9)
          << "); mean span kept " << span_words / (double)spans << " words");
}

// dataset/mnli (the 3-column form; GLUE's 12 columns are training.bert_finetune's): the layout
// [CLS] A [SEP] B [SEP] cut to seq_len - 1 tokens before the last [SEP], the labels, and the
// epoch order (every example once per epoch).
TEST_CASE("dataset/mnli: columns, cleaning, layout, labels, order") {
  loomtest::TestHost h;
  const loom_tokenizer_ref tok =
      h.load_tokenizer("wordpiece", {{"vocab_file", kDir + "vocab.txt"}});
  const std::string path = std::string(LOOM_BINARY_DIR) + "/test_mnli.tsv";
  {
    std::ofstream f(path);
    f << "premise\thypothesis\tlabel\n"
      << "w10  w11 . w13\tw14\tneutral\n"
      << "w10 w11 w13 w14 w16 w17 w19 w20\tw22 w23 w25\tentailment\n"
      << "w26\tw28 w29\tcontradiction\n";
  }
  ptest::Dataset ds(h.host(), "mnli", {{"path", path}});
  REQUIRE_MESSAGE(ds.created().ok(), ds.created().message);
  REQUIRE(ds.size() == 3);
  auto id = [&](const std::string& t) {
    return (int32_t)tok.api->token_to_id(tok.self, t.data(), t.size());
  };
  const int32_t cls = id("[CLS]"), sep = id("[SEP]"), pad = id("[PAD]");
  constexpr int64_t T = 10;
  const loom_sample_index_args a{LOOM_SAMPLE_INDEX_ARGS_SIZE_V2_3, 0, 3, T, 7, 5, nullptr};
  int64_t index = -1, n = 0;
  REQUIRE(ptest::outcome(ds.api()->build_samples(ds.self(), &a, &index, &n)).ok());
  CHECK(n == 9);                                     // whole epochs: 3 x 3 >= 7
  std::map<int32_t, std::vector<int32_t>> by_label;  // label -> tokens
  std::vector<int> seen(3, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> tokens(T), padding(T), types(T);
    int32_t label = -1;
    int64_t shape = T;
    DLTensor t[4] = {};
    int32_t* data[4] = {tokens.data(), padding.data(), types.data(), &label};
    DLTensor* p[4];
    for (int k = 0; k < 4; ++k) {
      t[k].data = data[k];
      t[k].device = {kDLCPU, 0};
      t[k].dtype = {kDLInt, 32, 1};
      t[k].ndim = k < 3 ? 1 : 0;
      t[k].shape = k < 3 ? &shape : nullptr;
      p[k] = &t[k];
    }
    REQUIRE(ptest::outcome(ds.api()->sample(ds.self(), index, i, 4, p)).ok());
    REQUIRE((label >= 0 && label < 3));
    ++seen[(size_t)label];
    if (i < 3) by_label[label] = tokens;
    if (i < 3) {  // the first epoch: types 0 through the first [SEP], 1 after; padding 0
      int64_t len = 0;
      while (len < T && padding[len]) ++len;
      CHECK(tokens[len - 1] == sep);
      for (int64_t k = len; k < T; ++k) CHECK((tokens[k] == pad && types[k] == 0));
    }
  }
  CHECK(seen == std::vector<int>{3, 3, 3});  // each example once per epoch
  // neutral (2): [CLS] w10 w11 . w13 [SEP] w14 [SEP]; "." is not in this vocabulary: [UNK]
  const std::vector<int32_t> neutral = {cls, id("w10"), id("w11"), id("[UNK]"), id("w13"),
                                        sep, id("w14"), sep,       pad,         pad};
  CHECK(by_label[2] == neutral);
  // entailment (1): 1 + 8 + 1 + 3 = 13 tokens >= T: cut to T - 1 = 9, then [SEP]
  const std::vector<int32_t> ent = {cls,       id("w10"), id("w11"), id("w13"), id("w14"),
                                    id("w16"), id("w17"), id("w19"), id("w20"), sep};
  CHECK(by_label[1] == ent);
  CHECK(by_label[0] ==
        std::vector<int32_t>{cls, id("w26"), sep, id("w28"), id("w29"), sep, pad, pad, pad, pad});
}

// T5's masking (Megatron's T5MaskedWordPieceDataset, for a T5 dataset to come): n-grams of up
// to 10 words with lengths from numpy's legacy geometric(0.2), every prediction [MASK]; bit
// for bit against make_bert_reference.py's numpy transcription (data/bert_masking/t5_masking).
TEST_CASE("masked_lm: geometric n-grams and always-[MASK] equal numpy (T5's masking)") {
  std::ifstream f(kDir + "t5_masking.txt");
  REQUIRE_MESSAGE(f.good(), "missing " << kDir << "t5_masking.txt (make_bert_reference.py)");
  loom::masked::MaskingSpec m;
  m.max_ngram = 10;
  m.geometric = true;
  m.mask_always = true;
  m.mask_id = 4;
  m.vocab = 102;
  loom::masked::TokenKinds kinds;
  kinds.cls = 2;
  kinds.sep = 3;
  kinds.continues_word = [](int32_t t) { return t >= 5 && t % 3 == 0; };  // "##p<i>"
  std::map<std::string, std::vector<int64_t>> c;
  std::vector<std::vector<int64_t>> spans;
  int cases = 0, multi = 0;
  auto check_case = [&](int k) {
    CAPTURE(k);
    std::vector<int32_t> ids(c["ids"].begin(), c["ids"].end());
    loom::RandomState rng((uint32_t)(7 + k));
    const auto r = loom::masked::mask_tokens(ids, (int32_t)ids.size(), m, kinds, rng);
    CHECK(std::vector<int64_t>(r.tokens.begin(), r.tokens.end()) == c["tokens"]);
    CHECK(r.positions == c["positions"]);
    CHECK(std::vector<int64_t>(r.labels.begin(), r.labels.end()) == c["labels"]);
    CHECK(r.spans == spans);
    for (const auto& sp : r.spans) multi += sp.size() > 1;
    ++cases;
  };
  int k = -1;
  loomtest::each_record(f, [&](const std::string& kind, std::istream& in) {
    if (kind == "case") {
      if (k >= 0) check_case(k);
      in >> k;
      c.clear();
      spans.clear();
    } else if (kind == "spans") {
      spans.emplace_back();
      std::string tok;
      while (in >> tok) {
        if (tok == "|")
          spans.emplace_back();
        else
          spans.back().push_back(std::stoll(tok));
      }
      if (spans.size() == 1 && spans[0].empty()) spans.clear();
    } else {
      int64_t v;
      while (in >> v) c[kind].push_back(v);
    }
  });
  if (k >= 0) check_case(k);
  CHECK(cases >= 20);
  CHECK(multi > 0);  // n-grams longer than one word were drawn
}

// dataset/t5 (Megatron's T5MaskedWordPieceDataset): the index (seq_len - 2, one sentence at
// least) and whole samples (span corruption with the tokenizer's <extra_id_k> sentinels,
// encoder input, decoder input and targets) equal make_bert_reference.py's numpy
// transcription bit for bit (data/bert_masking/t5_samples.txt).
TEST_CASE("dataset/t5: samples equal the numpy reference bit for bit") {
  std::ifstream f(kDir + "t5_samples.txt");
  REQUIRE_MESSAGE(f.good(), "missing " << kDir << "t5_samples.txt (make_bert_reference.py)");
  std::map<int64_t, std::map<std::string, std::vector<int32_t>>> want;
  int64_t index_size = 0, current = -1;
  std::string line;  // an index record's rows
  loomtest::each_record(f, [&](const std::string& kind, std::istream& in) {
    if (kind == "index") {
      in >> index_size;
      for (int64_t i = 0; i < index_size && std::getline(f, line); ++i) {
      }
    } else if (kind == "sample") {
      in >> current;
    } else {
      int32_t v;
      while (in >> v) want[current][kind].push_back(v);
    }
  });
  REQUIRE(want.size() == 13);
  loomtest::TestHost h;
  h.load_tokenizer("wordpiece", {{"vocab_file", kDir + "vocab.txt"}, {"vocab_extra_ids", "10"}});
  ptest::Dataset ds(h.host(), "t5", {{"prefix", kDir + "sentences"}, {"decoder_seq_len", "24"}});
  REQUIRE_MESSAGE(ds.created().ok(), ds.created().message);
  constexpr int64_t T = 40, K = 24;
  const loom_sample_index_args a{
      LOOM_SAMPLE_INDEX_ARGS_SIZE_V2_3, 0, ds.size(), T, 100, kSeed, nullptr};
  int64_t index = -1, n = 0;
  REQUIRE(ptest::outcome(ds.api()->build_samples(ds.self(), &a, &index, &n)).ok());
  CHECK(n == index_size);
  const char* names[5] = {"tokens", "padding_mask", "dec_tokens", "dec_padding_mask",
                          "dec_targets"};
  for (const auto& [i, arrays] : want) {
    CAPTURE(i);
    std::vector<std::vector<int32_t>> data = {std::vector<int32_t>(T), std::vector<int32_t>(T),
                                              std::vector<int32_t>(K), std::vector<int32_t>(K),
                                              std::vector<int32_t>(K)};
    int64_t tshape = T, kshape = K;
    DLTensor t[5] = {};
    DLTensor* p[5];
    for (int k = 0; k < 5; ++k) {
      t[k].data = data[(size_t)k].data();
      t[k].device = {kDLCPU, 0};
      t[k].dtype = {kDLInt, 32, 1};
      t[k].ndim = 1;
      t[k].shape = k < 2 ? &tshape : &kshape;
      p[k] = &t[k];
    }
    const ptest::Outcome o = ptest::outcome(ds.api()->sample(ds.self(), index, i, 5, p));
    REQUIRE_MESSAGE(o.ok(), o.message);
    for (int k = 0; k < 5; ++k) {
      CAPTURE(names[k]);
      CHECK(data[(size_t)k] == arrays.at(names[k]));
    }
  }
  // without sentinels in the vocabulary, dataset/t5 says what to set
  loomtest::TestHost plain;
  plain.load_tokenizer("wordpiece", {{"vocab_file", kDir + "vocab.txt"}});
  ptest::Dataset none(plain.host(), "t5", {{"prefix", kDir + "sentences"}});
  CHECK(none.created().message.find("set tokenizer.vocab_extra_ids") != std::string::npos);
}
