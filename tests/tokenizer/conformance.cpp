// The tokenizer conformance suite (STYLE item 14): each TEST_CASE below is one property,
// checked against every registered tokenizer case.
//
// TO REGISTER A TOKENIZER: append a Case to the list in cases() (a plugin may have several
// cases, told apart by `variant`), and its plugin target to LOOM_CONFORMANCE_PLUGINS in
// CMakeLists.txt. A case says how the plugin is configured, which files it needs (skipped,
// with a printed reason, when one is absent), how its round trip is judged, what it does with
// invalid UTF-8, and which inputs suit it.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "contract_tags.hpp"
#include "tokenizer_test_util.hpp"

namespace {

using toktest::Outcome;
using toktest::Tokenizer;

// How decode(encode(x)) is judged.
enum class RoundTrip {
  kExact,       // decode(encode(x)) == x, byte for byte (lossless tokenizers)
  kNormalised,  // normalise(decode(encode(x))) == normalise(x); the case sets `normalise`
  kIdsStable,   // encode(decode(encode(x))) == encode(x): decoding loses nothing of the ids
};

// What encode does with bytes that are not valid UTF-8.
enum class InvalidUtf8 {
  kEncodes,  // gives ids (in the vocabulary), and round-trips as the case's RoundTrip says
  kRejects,  // returns a clean LOOM_ERR_INVALID_ARGUMENT with a message
  kEither,   // either of the two, case by case; never a crash
};

struct Sample {
  std::string name;
  std::string text;
};

std::vector<Sample> text_samples();
std::string long_text(size_t bytes);

struct Case {
  const char* plugin;        // loads build/plugins/loom-tokenizer-<plugin>.so
  const char* variant = "";  // tells apart several cases of one plugin
  // Recipe keys of [tokenizer]; "{shared}" expands to the shared data folder
  // (../shared/data) and "{data}" to tests/tokenizer/data.
  std::map<std::string, std::string> config = {};
  std::vector<std::string> needs = {};  // files (same expansions); absent -> case skipped
  RoundTrip round_trip = RoundTrip::kExact;
  std::string (*normalise)(std::string_view) = nullptr;  // RoundTrip::kNormalised only
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kEncodes;
  std::vector<Sample> (*samples)() = text_samples;      // representative inputs for this plugin
  std::string (*long_input)(size_t bytes) = long_text;  // an input of about `bytes` bytes
};

// --- inputs for tokenizers of text ----------------------------------------------------

std::vector<Sample> text_samples() {
  return {
      {"ascii", "Hello, world! The quick brown fox jumps over the lazy dog."},
      {"utf8 2-byte", "h\xc3\xa9llo w\xc3\xb6rld, na\xc3\xafve caf\xc3\xa9 \xc3\x9f\xc3\xb8"},
      {"utf8 3/4-byte",
       "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xe2\x9c\x93 \xe2\x82\xac"
       "5 \xf0\x9f\x98\x80"
       "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd"},
      {"whitespace runs", "  two leading\t\ttabs\n\n\nnewlines   inner  \r\n trailing   "},
      {"only whitespace", " \n\t  \n"},
      {"digits", "0 12 345 6789 3.14159 1,000,000 2024-01-31 007 x86_64"},
      {"punctuation", "!@#$%^&*()_+-=[]{}|;':\",./<>?`~ ... --- !!!"},
      {"contractions", "I'm sure it's what they've said; we'll see, you'd know. DON'T"},
      {"code", "int main(void) {\n  return a[i] >= 0 ? 1 : -1;  // ok\n}\n"},
      {"single byte", "a"},
      {"special-looking text", "<|endoftext|> [CLS] </s> <unk>"},
      {"controls and NUL", std::string("a\0b\x01\x1f\x7f"
                                       "c",
                                       7)},
  };
}

// The text samples joined by newlines, repeated to `bytes` (cut after a newline).
std::string long_text(size_t bytes) {
  std::string block;
  for (const Sample& s : text_samples()) block += s.text + "\n";
  std::string out;
  while (out.size() + block.size() <= bytes) out += block;
  return out;
}

// --- inputs for tokenizer/null (the text is integers) ----------------------------------

constexpr int kNullVocab = 1000;

std::vector<Sample> integer_samples() {
  return {
      {"one id", "7"},
      {"ids", "0 1 2 3 999"},
      {"with EOD", "5 6 1000 7"},
      {"whitespace runs", "  12\t\t34\n\n56 \r\n 78  "},
      {"repeated", "3 3 3 3 3 3"},
  };
}

std::string long_integers(size_t bytes) {
  std::mt19937 rng(7);
  std::string out;
  while (out.size() < bytes) out += std::to_string(rng() % kNullVocab) + (rng() % 8 ? " " : "\n");
  return out;
}

// ASCII whitespace runs -> one space, none at either end.
std::string collapse_whitespace(std::string_view s) {
  std::string out;
  bool gap = false;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
      gap = !out.empty();
    } else {
      if (gap) out.push_back(' ');
      gap = false;
      out.push_back(c);
    }
  }
  return out;
}

// --- inputs for tokenizer/wordpiece and tokenizer/hf-json --------------------------------

std::vector<Sample> text_samples_without(const std::string& name) {
  std::vector<Sample> out;
  for (Sample& s : text_samples())
    if (s.name != name) out.push_back(std::move(s));
  return out;
}

// BERT gives no ids for whitespace-only text.
std::vector<Sample> wordpiece_samples() { return text_samples_without("only whitespace"); }

// Llama-2's HF layout matches "</s>" and "<unk>" in text as added tokens, and the spaces
// around them do not survive decode + encode (the `tokenizers` crate behaves the same).
std::vector<Sample> no_special_samples() { return text_samples_without("special-looking text"); }
std::string no_special_long_text(size_t bytes) {
  std::string block;
  for (const Sample& s : no_special_samples()) block += s.text + "\n";
  std::string out;
  while (out.size() + block.size() <= bytes) out += block;
  return out;
}

// ======================= THE REGISTERED TOKENIZERS: append here =======================
const std::vector<Case>& cases() {
  static const std::vector<Case> k = {
      {.plugin = "byte"},
      {.plugin = "null",
       .config = {{"vocab_size", std::to_string(kNullVocab)}},
       .round_trip = RoundTrip::kNormalised,
       .normalise = collapse_whitespace,
       .invalid_utf8 = InvalidUtf8::kRejects,
       .samples = integer_samples,
       .long_input = long_integers},
      {.plugin = "gpt2-bpe",
       .config = {{"vocab_file", "{shared}/gpt2/gpt2-vocab.json"},
                  {"merge_file", "{shared}/gpt2/gpt2-merges.txt"}},
       .needs = {"{shared}/gpt2/gpt2-vocab.json", "{shared}/gpt2/gpt2-merges.txt"}},
      // BERT is lossy (case, accents, spacing): its decoded text must re-encode to the same
      // ids. Its test vocabulary covers every character of text_samples(), so no [UNK].
      {.plugin = "wordpiece",
       .config = {{"vocab_file", "{data}/wordpiece-vocab.txt"}},
       .round_trip = RoundTrip::kIdsStable,
       .invalid_utf8 = InvalidUtf8::kRejects,
       .samples = wordpiece_samples},
      {.plugin = "sentencepiece",
       .config = {{"model_file", "{data}/sp-shakespeare-bpe.model"}},
       .round_trip = RoundTrip::kIdsStable},  // lossless for valid UTF-8; invalid -> U+FFFD
      {.plugin = "hf-json",
       .variant = "Llama-2 layout, byte_fallback",
       .config = {{"tokenizer_file", "{data}/hf-llama2-bf.json"}, {"add_special_tokens", "false"}},
       .round_trip = RoundTrip::kIdsStable,  // lossless for valid UTF-8; invalid -> U+FFFD
       .samples = no_special_samples,
       .long_input = no_special_long_text},
  };
  return k;
}
// ========================================================================================

std::string expand(std::string s) {
  const std::pair<std::string, std::string> vars[] = {{"{shared}", LOOM_SHARED_DATA},
                                                      {"{data}", LOOM_TOKENIZER_TEST_DATA}};
  for (const auto& [from, to] : vars)
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  return s;
}

std::string label(const Case& c) {
  return std::string("tokenizer/") + c.plugin +
         (*c.variant ? std::string(" [") + c.variant + "]" : "");
}

// Runs fn(case, tokenizer) for every case whose files are present, with the case named in
// any failure. A case whose create fails is reported and the others still run.
template <class Fn>
void for_each_case(Fn&& fn) {
  for (const Case& c : cases()) {
    const std::string name = label(c);
    std::vector<std::string> needs;
    for (const std::string& n : c.needs) needs.push_back(expand(n));
    if (!toktest::have_files(name, needs)) continue;
    std::map<std::string, std::string> config;
    for (const auto& [k, v] : c.config) config[k] = expand(v);
    INFO("case: " << name);
    Tokenizer tok(c.plugin, config);
    CHECK_MESSAGE(tok.created().ok(), "create failed: " << tok.created().message);
    if (tok.created().ok()) fn(c, tok);
  }
}

// A short printable window of `s` around `at`, for failure messages.
std::string window(std::string_view s, size_t at) {
  const size_t from = at > 20 ? at - 20 : 0;
  std::string out;
  for (unsigned char ch : s.substr(from, 40)) {
    if (ch >= 0x20 && ch < 0x7f) {
      out.push_back(static_cast<char>(ch));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return "'" + out + "'";
}

// "" when equal, else where and how they first differ.
std::string difference(std::string_view got, std::string_view want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return "lengths " + std::to_string(got.size()) + " vs " + std::to_string(want.size()) +
         ", first difference at byte " + std::to_string(i) + ": got " + window(got, i) + ", want " +
         window(want, i);
}

// Every id in [0, vocab_size).
void check_ids_in_vocab(Tokenizer& tok, const std::vector<int32_t>& ids, const std::string& what) {
  const int64_t vocab = tok.vocab_size();
  auto bad =
      std::find_if(ids.begin(), ids.end(), [&](int32_t id) { return id < 0 || id >= vocab; });
  CHECK_MESSAGE(bad == ids.end(), what << ": id " << (bad == ids.end() ? 0 : *bad)
                                       << " at position " << (bad - ids.begin())
                                       << " is outside [0, " << vocab << ")");
}

void check_round_trip(const Case& c, Tokenizer& tok, const std::string& text,
                      const std::vector<int32_t>& ids, const std::string& what) {
  const std::string back = tok.decode(ids);
  switch (c.round_trip) {
    case RoundTrip::kExact: {
      const std::string d = difference(back, text);
      CHECK_MESSAGE(d.empty(), what << ": decode(encode(x)) != x: " << d);
      break;
    }
    case RoundTrip::kNormalised: {
      REQUIRE_MESSAGE(bool(c.normalise), "RoundTrip::kNormalised needs `normalise`");
      const std::string d = difference(c.normalise(back), c.normalise(text));
      CHECK_MESSAGE(d.empty(), what << ": normalised decode(encode(x)) != normalised x: " << d);
      break;
    }
    case RoundTrip::kIdsStable:
      CHECK_MESSAGE(tok.encode(back) == ids, what << ": encode(decode(ids)) != ids");
      break;
  }
}

}  // namespace

TEST_CASE("conformance: the registered cases (which ran, which were skipped)") {
  std::string ran, skipped;
  for (const Case& c : cases()) {
    std::vector<std::string> needs;
    for (const std::string& n : c.needs) needs.push_back(expand(n));
    (toktest::have_files(label(c), needs) ? ran : skipped) += " " + label(c);
  }
  MESSAGE("tokenizer conformance cases run:" << (ran.empty() ? " none" : ran)
                                             << (skipped.empty() ? "" : "; skipped:" + skipped));
  CHECK_FALSE(cases().empty());
}

TEST_CASE("conformance: descriptor, vocabulary and end-of-document id") {
  for_each_case([](const Case& c, Tokenizer& tok) {
    const loom_plugin_descriptor* d = loomtest::load_descriptor("tokenizer", c.plugin);
    CHECK(d->kind == LOOM_KIND_TOKENIZER);
    CHECK(std::string(d->name) == c.plugin);
    CHECK(d->abi_major == LOOM_ABI_MAJOR);
    REQUIRE(d->api != nullptr);
    CHECK(tok.api()->struct_size >= LOOM_TOKENIZER_API_SIZE_V2);
    for (size_t i = 0; i < d->num_params; ++i) {
      CAPTURE(d->params[i].name);
      CHECK(d->params[i].doc != nullptr);
      CHECK(std::string(d->params[i].doc).size() > 0);
    }
    const int64_t vocab = tok.vocab_size();
    CHECK(vocab > 0);
    CHECK(vocab <= int64_t{std::numeric_limits<int32_t>::max()} + 1);  // ids are int32
    CHECK(tok.vocab_size() == vocab);                                  // stable
    const int64_t eod = tok.eod_id();
    CHECK((eod == -1 || (eod >= 0 && eod < vocab)));
  });
}

TEST_CASE("conformance: representative inputs round-trip; every id is in the vocabulary") {
  for_each_case([](const Case& c, Tokenizer& tok) {
    for (const Sample& s : c.samples()) {
      CAPTURE(s.name);
      const std::vector<int32_t> ids = tok.encode(s.text);
      if (!s.text.empty()) CHECK_MESSAGE(!ids.empty(), s.name << ": no ids for non-empty text");
      check_ids_in_vocab(tok, ids, s.name);
      check_round_trip(c, tok, s.text, ids, s.name);
    }
  });
}

TEST_CASE("conformance: empty input gives no ids; no ids decode to empty text") {
  for_each_case([](const Case&, Tokenizer& tok) {
    CHECK(tok.encode(std::string_view()).empty());        // NULL pointer, length 0
    CHECK(tok.encode(std::string_view("x", 0)).empty());  // valid pointer, length 0
    CHECK(tok.decode({}).empty());
  });
}

TEST_CASE("conformance: NULL text with a non-zero length is a clean error") {
  for_each_case([](const Case&, Tokenizer& tok) {
    const int32_t* ids = nullptr;
    size_t n = 0;
    Outcome o = toktest::outcome(tok.api()->encode(tok.self(), nullptr, 3, &ids, &n));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK_FALSE(o.message.empty());
    const char* text = nullptr;
    size_t len = 0;
    o = toktest::outcome(tok.api()->decode(tok.self(), nullptr, 3, &text, &len));
    CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  });
}

TEST_CASE("conformance: invalid UTF-8 is encoded or cleanly refused, as the case declares") {
  const std::vector<Sample> invalid = {
      {"0xff 0xfe", "\xff\xfe"},
      {"bad continuation inside text", "abc\xc3(def"},
      {"lone continuation bytes", "x\x80\xbf y"},
      {"truncated 3-byte sequence at the end", "euro \xe2\x82"},
      {"UTF-16 surrogate", "s \xed\xa0\x80 t"},
      {"overlong slash", "a\xc0\xaf b"},
      {"above U+10FFFF", "\xf4\x90\x80\x80 z"},
      {"5-byte form", "\xf8\x88\x80\x80\x80"},
      {"invalid between spaces", "  \xff  \xfe\n"},
  };
  for_each_case([&](const Case& c, Tokenizer& tok) {
    for (const Sample& s : invalid) {
      CAPTURE(s.name);
      std::vector<int32_t> ids;
      const Outcome o = tok.try_encode(s.text, ids);
      switch (c.invalid_utf8) {
        case InvalidUtf8::kEncodes:
          REQUIRE_MESSAGE(o.ok(), s.name << ": declared to encode invalid UTF-8: " << o.message);
          break;
        case InvalidUtf8::kRejects:
          CHECK_MESSAGE(o.code == LOOM_ERR_INVALID_ARGUMENT,
                        s.name << ": declared to refuse invalid UTF-8, got code " << o.code);
          CHECK_FALSE(o.message.empty());
          break;
        case InvalidUtf8::kEither:
          if (!o.ok()) CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
          if (!o.ok()) CHECK_FALSE(o.message.empty());
          break;
      }
      if (!o.ok()) continue;
      CHECK_FALSE(ids.empty());
      check_ids_in_vocab(tok, ids, s.name);
      check_round_trip(c, tok, s.text, ids, s.name);
    }
  });
}

TEST_CASE("conformance: a 1 MB input encodes and round-trips") {
  for_each_case([](const Case& c, Tokenizer& tok) {
    const std::string text = c.long_input(size_t{1} << 20);
    REQUIRE(text.size() > 900 * 1024);
    const std::vector<int32_t> ids = tok.encode(text);
    CHECK(ids.size() > 0);
    check_ids_in_vocab(tok, ids, "1 MB input");
    check_round_trip(c, tok, text, ids, "1 MB input");
  });
}

TEST_CASE("conformance: decoding an id outside the vocabulary is a clean error naming it") {
  for_each_case([](const Case&, Tokenizer& tok) {
    const int64_t vocab = tok.vocab_size();
    std::vector<int64_t> bad = {-1, std::numeric_limits<int32_t>::min()};
    if (vocab <= std::numeric_limits<int32_t>::max()) bad.push_back(vocab);
    if (vocab < std::numeric_limits<int32_t>::max())
      bad.push_back(std::numeric_limits<int32_t>::max());
    for (int64_t id : bad) {
      CAPTURE(id);
      std::string text;
      const Outcome o = tok.try_decode({0, static_cast<int32_t>(id)}, text);
      CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
      CHECK_MESSAGE(o.message.find(std::to_string(id)) != std::string::npos,
                    "the message does not name the id: " << o.message);
    }
    // The instance is still usable after an error.
    std::string text;
    CHECK(tok.try_decode({0}, text).ok());
  });
}

// ABI 2.3: a tokenizer with a vocabulary of strings lists each entry once: id_to_token and
// token_to_id are inverse over the whole vocabulary; an unknown string is -1, an id outside
// the vocabulary a clean error naming it. A tokenizer without one leaves both NULL.
TEST_CASE("conformance: token_to_id and id_to_token are inverse, or both absent") {
  for_each_case([](const Case&, Tokenizer& tok) {
    const loom_tokenizer_api* api = tok.api();
    const bool has = api->struct_size >= LOOM_TOKENIZER_API_SIZE_V2_3 && api->token_to_id;
    if (api->struct_size >= LOOM_TOKENIZER_API_SIZE_V2_3)
      CHECK((api->token_to_id == nullptr) == (api->id_to_token == nullptr));
    if (!has) return;
    for (int64_t id = 0; id < tok.vocab_size(); ++id) {
      const char* t = nullptr;
      size_t len = 0;
      const Outcome o = toktest::outcome(api->id_to_token(tok.self(), (int32_t)id, &t, &len));
      REQUIRE_MESSAGE(o.ok(), o.message);
      const int64_t back = api->token_to_id(tok.self(), t, len);
      if (back != id) FAIL_CHECK("id " << id << " -> '" << std::string(t, len) << "' -> " << back);
    }
    const std::string none = "\x01no such entry\x02";
    CHECK(api->token_to_id(tok.self(), none.data(), none.size()) == -1);
    const char* t = nullptr;
    size_t len = 0;
    const Outcome bad =
        toktest::outcome(api->id_to_token(tok.self(), (int32_t)tok.vocab_size(), &t, &len));
    CHECK(bad.code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK(bad.message.find(std::to_string(tok.vocab_size())) != std::string::npos);
  });
}

TEST_CASE("conformance: results do not depend on earlier calls") {
  for_each_case([](const Case& c, Tokenizer& tok) {
    const std::vector<Sample> samples = c.samples();
    std::vector<std::vector<int32_t>> first;
    for (const Sample& s : samples) first.push_back(tok.encode(s.text));
    // The same instance in reverse order.
    for (size_t i = samples.size(); i-- > 0;) {
      CAPTURE(samples[i].name);
      CHECK(tok.encode(samples[i].text) == first[i]);
    }
    // A fresh instance, in reverse order too (one instance: some load large files).
    std::map<std::string, std::string> config;
    for (const auto& [k, v] : c.config) config[k] = expand(v);
    Tokenizer fresh(c.plugin, config);
    REQUIRE(fresh.created().ok());
    for (size_t i = samples.size(); i-- > 0;) {
      CAPTURE(samples[i].name);
      CHECK(fresh.encode(samples[i].text) == first[i]);
    }
  });
}

TEST_CASE("conformance: encode's result stays valid and can be passed straight to decode") {
  for_each_case([](const Case& c, Tokenizer& tok) {
    for (const Sample& s : c.samples()) {
      CAPTURE(s.name);
      const std::vector<int32_t> want = tok.encode(s.text);
      const int32_t* ids = nullptr;
      size_t n = 0;
      REQUIRE(
          toktest::outcome(tok.api()->encode(tok.self(), s.text.data(), s.text.size(), &ids, &n))
              .ok());
      REQUIRE(n == want.size());
      CHECK(std::equal(want.begin(), want.end(), ids));
      const std::string expected = tok.decode(want);
      REQUIRE(
          toktest::outcome(tok.api()->encode(tok.self(), s.text.data(), s.text.size(), &ids, &n))
              .ok());
      const char* text = nullptr;
      size_t len = 0;
      REQUIRE(toktest::outcome(tok.api()->decode(tok.self(), ids, n, &text, &len)).ok());
      CHECK(std::string(text, len) == expected);
    }
  });
}

TEST_CASE("conformance: the contract's thread tag holds (separate instances, separate threads)") {
  // tokenizer.h tags encode and decode `owner`: one thread at a time per instance, and
  // separate instances are independent. `loom preprocess` relies on it (one instance per
  // worker thread). A plugin with shared mutable state (a global cache, a static buffer)
  // gives wrong ids here, or a report from the sanitizer build.
  const loomtest::ContractTable tags = loomtest::contract_table(
      std::string(LOOM_SOURCE_DIR) + "/sdk/include/loom/tokenizer.h", "loom_tokenizer_api");
  for (const char* slot : {"create", "encode", "decode"}) {
    CAPTURE(slot);
    REQUIRE(tags.tags.count(slot) == 1);
    REQUIRE(tags.tags.at(slot).thread == "owner");  // else this case must check `any`
  }
  for_each_case([](const Case& c, Tokenizer& tok) {
    const std::vector<Sample> samples = c.samples();
    std::vector<std::vector<int32_t>> want_ids;
    std::vector<std::string> want_text;
    for (const Sample& s : samples) {
      want_ids.push_back(tok.encode(s.text));
      want_text.push_back(tok.decode(want_ids.back()));
    }
    std::map<std::string, std::string> config;
    for (const auto& [k, v] : c.config) config[k] = expand(v);
    constexpr int kThreads = 4, kRounds = 3;
    std::vector<std::unique_ptr<Tokenizer>> toks;
    for (int t = 0; t < kThreads; ++t) {
      toks.push_back(std::make_unique<Tokenizer>(c.plugin, config));
      REQUIRE(toks.back()->created().ok());
    }
    // Workers only count; doctest's assertions stay on this thread.
    std::vector<int> wrong(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        Tokenizer& mine = *toks[t];
        for (int round = 0; round < kRounds; ++round)
          for (size_t i = 0; i < samples.size(); ++i) {
            // Each thread starts at another sample, so different inputs run at once.
            const size_t k = (i + static_cast<size_t>(t)) % samples.size();
            const int32_t* ids = nullptr;
            size_t n = 0;
            const std::string& text = samples[k].text;
            toktest::Outcome e = toktest::outcome(
                mine.api()->encode(mine.self(), text.data(), text.size(), &ids, &n));
            if (!e.ok() || std::vector<int32_t>(ids, ids + n) != want_ids[k]) {
              ++wrong[t];
              continue;
            }
            const char* back = nullptr;
            size_t len = 0;
            toktest::Outcome d =
                toktest::outcome(mine.api()->decode(mine.self(), ids, n, &back, &len));
            if (!d.ok() || std::string(back, len) != want_text[k]) ++wrong[t];
          }
      });
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      CAPTURE(t);
      CHECK_MESSAGE(wrong[t] == 0, wrong[t] << " of " << kRounds * samples.size()
                                            << " results differ from one thread's");
    }
  });
}
