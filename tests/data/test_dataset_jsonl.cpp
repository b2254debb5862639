// dataset/jsonl: documents are the byte tokenizer's encoding of each line's text; empty
// documents are kept; malformed lines, missing keys and missing files are clear errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "plugin_test_util.hpp"

namespace fs = std::filesystem;

namespace {

// A file in a fresh temp folder, removed with the object.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& content) {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("loom-jsonl-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(dir_);
    path_ = (dir_ / name).string();
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  fs::path dir_;
  std::string path_;
};

std::vector<int32_t> byte_encode(loomtest::TestHost& h, loom_tokenizer_ref tok,
                                 const std::string& s) {
  const int32_t* ids = nullptr;
  size_t n = 0;
  h.check(tok.api->encode(tok.self, s.data(), s.size(), &ids, &n));
  return std::vector<int32_t>(ids, ids + n);
}

// The document the plugin should hold: the encoding plus the EOD (256) when non-empty.
std::vector<int32_t> with_eod(std::vector<int32_t> ids) {
  if (!ids.empty()) ids.push_back(256);
  return ids;
}

const std::string kUnicode = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xf0\x9f\x98\x80";

}  // namespace

TEST_CASE("dataset/jsonl: ids are the tokenizer's encoding of each line, empty docs kept") {
  loomtest::TestHost h;
  loom_tokenizer_ref tok = h.load_tokenizer("byte");
  // JSON escapes (\n, \u00e9, a surrogate pair) must decode before tokenising.
  TempFile f("docs.jsonl",
             "{\"text\": \"Hello, world!\\nline two\", \"id\": 1}\n"
             "{\"text\": \"\"}\n"
             "{\"id\": 3, \"text\": \"" +
                 kUnicode + " \\u00e9\\ud83d\\ude00\"}\n");
  ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}});
  REQUIRE_MESSAGE(ds.created().ok(), ds.created().message);
  REQUIRE(ds.size() == 3);
  CHECK(ds.doc(0) == with_eod(byte_encode(h, tok, "Hello, world!\nline two")));
  CHECK(ds.doc(1).empty());  // an empty document gets no EOD, as with Megatron's --append-eod
  CHECK(ds.doc(2) == with_eod(byte_encode(h, tok, kUnicode + " \xc3\xa9\xf0\x9f\x98\x80")));
  // documents can be read in any order, repeatedly
  CHECK(ds.doc(0) == with_eod(byte_encode(h, tok, "Hello, world!\nline two")));
  ptest::Outcome o = ds.doc_error(3);
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK(o.message.find("document 3") != std::string::npos);
}

TEST_CASE("dataset/jsonl: blank lines are skipped, CRLF works, json_key picks the member") {
  loomtest::TestHost h;
  loom_tokenizer_ref tok = h.load_tokenizer("byte");
  TempFile f("docs.jsonl", "{\"body\": \"a\"}\r\n\r\n   \n{\"body\": \"bc\", \"text\": 5}\n\n");
  ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}, {"json_key", "body"}});
  REQUIRE_MESSAGE(ds.created().ok(), ds.created().message);
  REQUIRE(ds.size() == 2);
  CHECK(ds.doc(0) == with_eod(byte_encode(h, tok, "a")));
  CHECK(ds.doc(1) == with_eod(byte_encode(h, tok, "bc")));
}

TEST_CASE("dataset/jsonl: append_eod = false keeps the bare encoding") {
  loomtest::TestHost h;
  loom_tokenizer_ref tok = h.load_tokenizer("byte");
  TempFile f("docs.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"\"}\n");
  ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}, {"append_eod", "false"}});
  REQUIRE_MESSAGE(ds.created().ok(), ds.created().message);
  CHECK(ds.doc(0) == byte_encode(h, tok, "ab"));
  CHECK(ds.doc(1).empty());
}

TEST_CASE("dataset/jsonl: an empty file has no documents") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  TempFile f("empty.jsonl", "");
  ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}});
  REQUIRE_MESSAGE(ds.created().ok(), ds.created().message);
  CHECK(ds.size() == 0);
}

TEST_CASE("dataset/jsonl: a malformed line's error names the file and line") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  TempFile f("bad.jsonl",
             "{\"text\": \"fine\"}\n\n{\"text\": \"unterminated}\n{\"text\": \"x\"}\n");
  ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}});
  const ptest::Outcome& o = ds.created();
  CHECK(o.code == LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MESSAGE(o.message.rfind(f.path() + ":3: invalid JSON: ", 0) == 0, o.message);
  CHECK(o.message.find("[json.exception") == std::string::npos);
  CHECK(o.message.find("at line") == std::string::npos);  // the parser's line is always 1
  CHECK(o.message.find("column ") != std::string::npos);
}

TEST_CASE("dataset/jsonl: missing key, non-string value, non-object line") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  {
    TempFile f("nokey.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n");
    ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}});
    CHECK(ds.created().code == LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MESSAGE(ds.created().message.find(f.path() + ":2: ") == 0, ds.created().message);
    CHECK(ds.created().message.find("\"text\"") != std::string::npos);
  }
  {
    TempFile f("number.jsonl", "{\"text\": 42}\n");
    ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}});
    CHECK_MESSAGE(ds.created().message.find(":1: key \"text\" is a number") != std::string::npos,
                  ds.created().message);
  }
  {
    TempFile f("array.jsonl", "[\"text\"]\n");
    ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}});
    CHECK_MESSAGE(ds.created().message.find(":1: expected a JSON object") != std::string::npos,
                  ds.created().message);
  }
}

TEST_CASE("dataset/jsonl: a missing file is an IO error naming the path") {
  loomtest::TestHost h;
  h.load_tokenizer("byte");
  const std::string path = "/nonexistent/loom/none.jsonl";
  ptest::Dataset ds(h.host(), "jsonl", {{"path", path}});
  CHECK(ds.created().code == LOOM_ERR_IO);
  CHECK(ds.created().message == "cannot open " + path);
}

TEST_CASE("dataset/jsonl: path is required and a tokenizer is needed") {
  auto* d = loomtest::load_descriptor("dataset", "jsonl");
  bool path_required = false;
  for (size_t i = 0; i < d->num_params; ++i)
    if (std::string(d->params[i].name) == "path")
      path_required = d->params[i].default_value == nullptr;
  CHECK(path_required);

  loomtest::TestHost h;  // no tokenizer loaded
  TempFile f("docs.jsonl", "{\"text\": \"a\"}\n");
  ptest::Dataset ds(h.host(), "jsonl", {{"path", f.path()}});
  CHECK_FALSE(ds.created().ok());
  CHECK(ds.created().message.find("tokenizer") != std::string::npos);
}
