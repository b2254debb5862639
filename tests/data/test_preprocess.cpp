// `loom preprocess` and `loom data inspect`, run as the real executable with the byte
// tokenizer (ids = bytes, EOD 256, so expected outputs are written down directly), and with
// gpt2-bpe on Tiny Shakespeare when that plugin and ../shared/data are present.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom/cpp/megatron_indexed.hpp"
#include "preprocess_run.hpp"
#include "test_files.hpp"
#include "test_skip.hpp"

namespace fs = std::filesystem;
namespace mg = loom::megatron;

namespace {

using namespace loomtest;         // TempDir, slurp, spit, q (tests/support/test_files.hpp)
using namespace preprocess_test;  // run_loom, read_docs (preprocess_run.hpp)

std::vector<int32_t> bytes_of(const std::string& s, bool eod = false) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  if (eod) ids.push_back(256);
  return ids;
}

std::string json_line(const std::string& text) {
  std::string out = "{\"text\": \"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"}\n";
}

// Many varied documents, for chunking and worker-count checks.
std::string many_lines(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    std::string text;
    for (int k = 0; k < (i * 7) % 23; ++k) text += "word" + std::to_string(i * k) + " ";
    if (i % 5 == 0) text += "Sentence one. Sentence two! ";
    out += json_line(text);
  }
  return out;
}

std::string pp(const std::string& in, const std::string& out, const std::string& extra = "") {
  return "preprocess --input " + q(in) + " --output-prefix " + q(out) + " --tokenizer byte " +
         extra;
}

bool no_outputs(const std::string& prefix) {
  for (const char* ext : {".bin", ".idx", ".bin.tmp", ".idx.tmp"})
    if (fs::exists(prefix + ext)) return false;
  return true;
}

}  // namespace

TEST_CASE("byte tokenizer: ids are the bytes, EOD 256 appended, empty documents kept") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl",
       "{\"text\": \"Hello\", \"id\": 1}\n{\"text\": \"\"}\n\n"
       "{\"id\": 3, \"text\": \"a\\nb \\u00e9\"}\n");
  Result r = run_loom(pp(dir / "in.jsonl", dir / "out/ds", "--append-eod"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(contains(r.out, "3 documents, 2 sequences, 13 tokens"));
  const std::string p = dir / "out/ds_text_document";
  mg::Reader rd(p);
  CHECK(rd.dtype() == mg::DType::u16);  // vocabulary 257 < 65500
  CHECK(read_docs(p) == Docs{{bytes_of("Hello", true)}, {}, {bytes_of("a\nb \xc3\xa9", true)}});
  CHECK(!fs::exists(p + ".bin.tmp"));
  CHECK(!fs::exists(p + ".idx.tmp"));

  // Without --append-eod; the idx bytes for the same ids match the hand layout: doc idx
  // [0, 1, 1, 2] keeps the empty document.
  r = run_loom(pp(dir / "in.jsonl", dir / "plain"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(read_docs(dir / "plain_text_document") ==
        Docs{{bytes_of("Hello")}, {}, {bytes_of("a\nb \xc3\xa9")}});
  const std::string idx = slurp(dir / "plain_text_document.idx");
  REQUIRE(idx.size() == 34 + 12 * 2 + 8 * 4);
  CHECK(idx.substr(34 + 24, 32) == std::string("\0\0\0\0\0\0\0\0\1\0\0\0\0\0\0\0"
                                               "\1\0\0\0\0\0\0\0\2\0\0\0\0\0\0\0",
                                               32));
}

TEST_CASE("--json-keys with two keys writes two datasets") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl",
       "{\"text\": \"body one\", \"title\": \"T1\"}\n"
       "{\"title\": \"\", \"text\": \"b2\"}\n");
  Result r = run_loom(pp(dir / "in.jsonl", dir / "ds", "--json-keys text title --append-eod"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(read_docs(dir / "ds_text_document") ==
        Docs{{bytes_of("body one", true)}, {bytes_of("b2", true)}});
  CHECK(read_docs(dir / "ds_title_document") == Docs{{bytes_of("T1", true)}, {}});

  // A line without one of the keys is a bad line for both outputs.
  spit(dir / "in2.jsonl", "{\"text\": \"x\", \"title\": \"y\"}\n{\"text\": \"only\"}\n");
  r = run_loom(pp(dir / "in2.jsonl", dir / "ds2", "--json-keys text title"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err, "in2.jsonl:2: no key \"title\""), r.err);
  r = run_loom(pp(dir / "in2.jsonl", dir / "ds2", "--json-keys text title --skip-bad-lines"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(read_docs(dir / "ds2_text_document").size() == 1);
  CHECK(read_docs(dir / "ds2_title_document").size() == 1);
}

TEST_CASE("--split-sentences: one sequence per non-empty sentence, EOD on the last") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl", json_line("First one. Mr. Smith said hi!  Then?\n\nNew paragraph") +
                             json_line("") + json_line("no split here"));
  Result r = run_loom(pp(dir / "in.jsonl", dir / "s", "--split-sentences --append-eod"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(contains(r.out, "s_text_sentence.bin/.idx"));
  CHECK(!fs::exists(dir / "s_text_document.idx"));
  CHECK(read_docs(dir / "s_text_sentence") ==
        Docs{{bytes_of("First one."), bytes_of("Mr. Smith said hi!"), bytes_of("Then?"),
              bytes_of("New paragraph", true)},
             {},
             {bytes_of("no split here", true)}});
  // A list of strings is a document already split into sentences.
  spit(dir / "list.jsonl", "{\"text\": [\"a b\", \"\", \"c\"]}\n");
  r = run_loom(pp(dir / "list.jsonl", dir / "l"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(read_docs(dir / "l_text_document") == Docs{{bytes_of("a b"), bytes_of("c")}});
}

TEST_CASE(".jsonl.gz and .jsonl.zst give the same files as the plain input") {
  TempDir dir("preprocess");
  const std::string text = many_lines(400);
  spit(dir / "in.jsonl", text);
  {
    gzFile gz = gzopen((dir / "in.jsonl.gz").c_str(), "wb");
    REQUIRE(gz != nullptr);
    REQUIRE(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())) ==
            static_cast<int>(text.size()));
    gzclose(gz);
  }
  {
    std::string z(ZSTD_compressBound(text.size()), '\0');
    const size_t n = ZSTD_compress(z.data(), z.size(), text.data(), text.size(), 3);
    REQUIRE(!ZSTD_isError(n));
    z.resize(n);
    spit(dir / "in.jsonl.zst", z);
  }
  Result r = run_loom(pp(dir / "in.jsonl", dir / "plain", "--append-eod"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  for (const char* ext : {"gz", "zst"}) {
    CAPTURE(ext);
    const std::string out = dir / (std::string("c_") + ext);
    r = run_loom(
        pp(dir / (std::string("in.jsonl.") + ext), out, "--append-eod --chunk-bytes 1000"));
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(slurp(out + "_text_document.bin") == slurp(dir / "plain_text_document.bin"));
    CHECK(slurp(out + "_text_document.idx") == slurp(dir / "plain_text_document.idx"));
  }
  // A truncated compressed file is an I/O failure, not a shorter dataset.
  const std::string gz = slurp(dir / "in.jsonl.gz");
  spit(dir / "cut.jsonl.gz", gz.substr(0, gz.size() / 2));
  r = run_loom(pp(dir / "cut.jsonl.gz", dir / "cut"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err, "cut.jsonl.gz: gzip"), r.err);
  CHECK(no_outputs(dir / "cut_text_document"));
  const std::string zst = slurp(dir / "in.jsonl.zst");
  spit(dir / "cut.jsonl.zst", zst.substr(0, zst.size() / 2));
  r = run_loom(pp(dir / "cut.jsonl.zst", dir / "cutz"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err, "cut.jsonl.zst: zstd"), r.err);
  CHECK(no_outputs(dir / "cutz_text_document"));
}

TEST_CASE("a malformed line stops with its line number; --skip-bad-lines counts them") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl",
       "{\"text\": \"ok\"}\n{\"text\": \"fine\"}\n{\"text\": \"broken}\n"
       "[1, 2]\n{\"text\": 5}\n{\"text\": \"last\"}\n");
  Result r = run_loom(pp(dir / "in.jsonl", dir / "ds"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err, "in.jsonl:3: invalid JSON: "), r.err);
  CHECK(no_outputs(dir / "ds_text_document"));

  r = run_loom(pp(dir / "in.jsonl", dir / "ds", "--skip-bad-lines --workers 2 --chunk-bytes 20"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(contains(r.out, "skipped 3 bad lines (first: "), r.out);
  CHECK(contains(r.out, "in.jsonl:3: invalid JSON"));
  CHECK(read_docs(dir / "ds_text_document") ==
        Docs{{bytes_of("ok")}, {bytes_of("fine")}, {bytes_of("last")}});

  spit(dir / "arr.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n");
  r = run_loom(pp(dir / "arr.jsonl", dir / "arr"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err, "arr.jsonl:2: expected a JSON object, got array"), r.err);
  spit(dir / "num.jsonl", "{\"text\": 5}\n");
  r = run_loom(pp(dir / "num.jsonl", dir / "num"));
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err, "num.jsonl:1: key \"text\" is a number"), r.err);
}

TEST_CASE("--workers 2 and 3 write the same bytes as 1 worker") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl", many_lines(3000));
  Result r = run_loom(pp(dir / "in.jsonl", dir / "w1", "--append-eod --split-sentences"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  for (const char* w : {"2", "3"}) {
    CAPTURE(w);
    const std::string out = dir / (std::string("w") + w);
    r = run_loom(
        pp(dir / "in.jsonl", out,
           std::string("--append-eod --split-sentences --chunk-bytes 777 --workers ") + w));
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(slurp(out + "_text_sentence.bin") == slurp(dir / "w1_text_sentence.bin"));
    CHECK(slurp(out + "_text_sentence.idx") == slurp(dir / "w1_text_sentence.idx"));
  }
}

TEST_CASE("an interrupted run leaves no valid-looking .idx, and keeps an older dataset") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl", many_lines(2000));
  const std::string crash = "LOOM_TEST_PREPROCESS_EXIT_AFTER_DOCS=500";
  Result r = run_loom(pp(dir / "in.jsonl", dir / "ds", "--chunk-bytes 500"), crash);
  CHECK(r.code == 86);  // the hook's abrupt exit, as a kill would leave things
  CHECK(!fs::exists(dir / "ds_text_document.idx"));
  CHECK(!fs::exists(dir / "ds_text_document.bin"));
  CHECK(fs::exists(dir / "ds_text_document.bin.tmp"));  // what was being written

  spit(dir / "small.jsonl", json_line("old data"));
  r = run_loom(pp(dir / "small.jsonl", dir / "ds"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  r = run_loom(pp(dir / "in.jsonl", dir / "ds", "--chunk-bytes 500 --overwrite"), crash);
  CHECK(r.code == 86);
  CHECK(read_docs(dir / "ds_text_document") == Docs{{bytes_of("old data")}});
}

TEST_CASE("an existing output is replaced only with --overwrite, and never the input") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl", json_line("old data"));
  Result r = run_loom(pp(dir / "in.jsonl", dir / "ds"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  spit(dir / "new.jsonl", json_line("new data"));
  r = run_loom(pp(dir / "new.jsonl", dir / "ds"));
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.err, (dir / "ds_text_document.bin") + " already exists; pass "
                                                                 "--overwrite"),
                r.err);
  CHECK(read_docs(dir / "ds_text_document") == Docs{{bytes_of("old data")}});
  r = run_loom(pp(dir / "new.jsonl", dir / "ds", "--overwrite"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(read_docs(dir / "ds_text_document") == Docs{{bytes_of("new data")}});
  // The input itself as an output (here through a link to it): refused even with --overwrite.
  fs::create_symlink(dir / "new.jsonl", dir / "x_text_document.idx");
  r = run_loom(pp(dir / "new.jsonl", dir / "x", "--overwrite"));
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.err, "is the input"), r.err);
  CHECK(slurp(dir / "new.jsonl") == json_line("new data"));
}

TEST_CASE("bad flags exit 2 and name the problem") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl", json_line("x"));
  const std::string in = q(dir / "in.jsonl"), out = q(dir / "o");
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"preprocess --input " + in + " --output-prefix " + out, "missing --tokenizer"},
      {"preprocess --output-prefix " + out + " --tokenizer byte", "missing --input"},
      {"preprocess --input " + in + " --tokenizer byte", "missing --output-prefix"},
      {"preprocess --input " + q(dir / "nope.jsonl") + " --output-prefix " + out +
           " --tokenizer byte",
       "--input: no such file"},
      {"preprocess --input " + in + " --output-prefix " + out + " --tokenizer nosuch", "nosuch"},
      {"preprocess --input " + in + " --output-prefix " + out + " --tokenizer byte --vocab-file " +
           in,
       "tokenizer/byte takes no vocab_file (--vocab-file)"},
      {"preprocess --input " + in + " --output-prefix " + out + " --tokenizer byte --workers 0",
       "--workers must be between 1 and 256"},
      {"preprocess --input " + in + " --output-prefix " + out + " --tokenizer byte --json-keys a a",
       "names 'a' twice"},
      {"preprocess --input " + in + " --output-prefix " + out + " --tokenizer byte --bogus",
       "unrecognised option '--bogus'"},
      {"preprocess --input " + in + " --output-prefix " + out +
           " --tokenizer byte --tokenizer-type GPT2BPETokenizer",
       "disagree"},
      {"data inspect " + q(dir / "absent"), "no such file"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    Result r = run_loom(c.args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(contains(r.err, c.says), r.err);
  }
  // A tokenizer that needs a vocabulary names the missing file.
  if (fs::exists(std::string(LOOM_TEST_PLUGIN_DIR) + "/loom-tokenizer-gpt2-bpe.so")) {
    Result r = run_loom("preprocess --input " + in + " --output-prefix " + out +
                        " --tokenizer GPT2BPETokenizer --vocab-file " + q(dir / "vocab.json") +
                        " --merge-file " + q(dir / "merges.txt"));
    CHECK(r.code == 2);
    CHECK_MESSAGE(contains(r.err, "--vocab-file: no such file: " + (dir / "vocab.json")), r.err);
    r = run_loom("preprocess --input " + in + " --output-prefix " + out + " --tokenizer gpt2-bpe");
    CHECK(r.code == 2);
    CHECK_MESSAGE(contains(r.err, "needs"), r.err);
  }
}

TEST_CASE("loom data inspect prints the counts; a damaged dataset fails with the reason") {
  TempDir dir("preprocess");
  spit(dir / "in.jsonl", json_line("aab") + json_line("") + json_line("b"));
  Result r = run_loom(pp(dir / "in.jsonl", dir / "ds", "--append-eod"));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const std::string p = dir / "ds_text_document";
  r = run_loom("data inspect " + q(p) + " --tokenizer byte");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(contains(r.out, "dtype      uint16 (code 8, 2 bytes per token)"), r.out);
  CHECK(contains(r.out, "sequences  2\n"));
  CHECK(contains(r.out, "documents  3 (1 without sequences)\n"));
  CHECK(contains(r.out, "tokens     6\n"));
  CHECK(contains(r.out, "length     min 2, mean 3.0, max 4 tokens per sequence"));
  CHECK(contains(r.out, "top ids    97 x2 (33.3%) \"a\", 98 x2 (33.3%) \"b\", 256 x2"));
  CHECK(contains(r.out, "sequence 0 4 tokens: 97 97 98 256"));
  CHECK(contains(r.out, "decoded    \"aab\""));
  // The .idx path works as the prefix too.
  CHECK(run_loom("data inspect " + q(p + ".idx")).code == 0);

  const std::string bin = slurp(p + ".bin");
  spit(p + ".bin", bin.substr(0, bin.size() - 2));
  r = run_loom("data inspect " + q(p));
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.err, "truncated: .bin has 10 bytes, the index needs 12"), r.err);
}

TEST_CASE("gpt2-bpe on Tiny Shakespeare (needs the plugin and ../shared/data)") {
  const std::string so = std::string(LOOM_TEST_PLUGIN_DIR) + "/loom-tokenizer-gpt2-bpe.so";
  const std::string shared = LOOM_SHARED_DATA;
  const std::string vocab = shared + "/gpt2/gpt2-vocab.json",
                    merges = shared + "/gpt2/gpt2-merges.txt",
                    text = shared + "/tinyshakespeare/input.txt";
  if (!fs::exists(so)) {
    loomtest::skip("gpt2-bpe preprocessing: " + so + " is not built");
    return;
  }
  if (!fs::exists(vocab) || !fs::exists(merges) || !fs::exists(text)) {
    loomtest::skip("gpt2-bpe preprocessing: " + shared + " (shared data) is absent");
    return;
  }
  TempDir dir("preprocess");
  // The format page's checks, then paragraphs of the first 8 KB of Tiny Shakespeare.
  std::string jsonl = json_line("Hello world") + json_line("First Citizen:\nBefore we proceed");
  const std::string head = slurp(text).substr(0, 8192);
  size_t at = 0;
  int paragraphs = 0;
  while (at < head.size()) {
    size_t end = head.find("\n\n", at);
    if (end == std::string::npos) end = head.size();
    jsonl += json_line(head.substr(at, end - at));
    ++paragraphs;
    at = end + 2;
  }
  spit(dir / "shakespeare.jsonl", jsonl);
  const std::string flags = " --tokenizer GPT2BPETokenizer --vocab-file " + q(vocab) +
                            " --merge-file " + q(merges) + " --append-eod";
  Result r = run_loom("preprocess --input " + q(dir / "shakespeare.jsonl") + " --output-prefix " +
                      q(dir / "ts") + flags);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const std::string p = dir / "ts_text_document";
  mg::Reader rd(p);
  CHECK(rd.dtype() == mg::DType::u16);  // 50257 < 65500
  CHECK(rd.num_documents() == 2 + paragraphs);
  Docs docs = read_docs(p);
  CHECK(docs[0] == Docs::value_type{{15496, 995, 50256}});
  CHECK(docs[1] == Docs::value_type{{5962, 22307, 25, 198, 8421, 356, 5120, 50256}});
  REQUIRE(docs[2].size() == 1);
  CHECK(std::vector<int32_t>(docs[2][0].begin(), docs[2][0].begin() + 4) ==
        std::vector<int32_t>{5962, 22307, 25, 198});  // "First Citizen:\n"

  r = run_loom("preprocess --input " + q(dir / "shakespeare.jsonl") + " --output-prefix " +
               q(dir / "ts2") + flags + " --workers 2 --chunk-bytes 512");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(slurp(dir / "ts2_text_document.bin") == slurp(p + ".bin"));
  CHECK(slurp(dir / "ts2_text_document.idx") == slurp(p + ".idx"));

  r = run_loom("data inspect " + q(p) + " --tokenizer gpt2-bpe --vocab-file " + q(vocab) +
               " --merge-file " + q(merges));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(contains(r.out, "decoded    \"Hello world<|endoftext|>\""), r.out);
}
