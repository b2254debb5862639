// dataset/jsonl: a JSON-lines file, one document per line: {"text": "..."}.
//
// The whole file is read and tokenised with the run's tokenizer at create, so errors show
// up before training starts, and every document is then a view into one flat int32 id
// array (4 bytes per token plus 8 per document). Lines that are empty or only whitespace
// are skipped (a trailing newline is common); every other line must be a JSON object whose
// `json_key` member is a string. A document whose text is empty is kept with 0 tokens, like
// Megatron's preprocessing, so document indices match line order. As with Megatron's
// --append-eod, a document with tokens ends with the tokenizer's end-of-document id
// (append_eod, default true): the engine's sampler inserts nothing between documents. Line numbers
// in errors are 1-based and count every line of the file.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/cpp/dataset.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/plugin_files.hpp"
#include "loom/tokenizer.h"

namespace {

// nlohmann's messages read "[json.exception.parse_error.101] parse error at line 1, column
// 5: syntax error ..."; keep "column 5: syntax error ..." (the line is ours, and the parser
// only ever saw one line).
std::string reason(const std::exception& e) {
  std::string m = e.what();
  if (!m.empty() && m[0] == '[') {
    const size_t close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  const std::string at_line = "parse error at line ";
  if (m.rfind(at_line, 0) == 0) {
    const size_t column = m.find("column ");
    m = column != std::string::npos ? m.substr(column) : m.substr(at_line.size());
  }
  return m;
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

class JsonlDataset {
 public:
  JsonlDataset(const loom_host* host, const loom::Config& c)
      : host_(host), path_(c.get_string("path")) {
    loom::require(!path_.empty(), "dataset/jsonl: [data] path is empty");
    const std::string key = c.get_string("json_key");
    const bool append_eod = c.get_bool("append_eod");
    loom_tokenizer_ref tok{nullptr, nullptr};
    if (loom_error* err = host->get_tokenizer(host->ctx, &tok)) {
      const std::string why = host->error_message(err);
      host->error_free(err);
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        "dataset/jsonl tokenises text and needs a [tokenizer] (" + why + ")");
    }
    const int64_t eod = tok.api->eod_id(tok.self);
    loom::require_regular_file(path_, "dataset/jsonl: ");
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw loom::Error(LOOM_ERR_IO, "cannot open " + path_);
    offsets_.push_back(0);
    std::string line;
    for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
      if (blank(line)) continue;
      const std::string where = path_ + ":" + std::to_string(lineno) + ": ";
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
      } catch (const nlohmann::json::parse_error& e) {
        throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + "invalid JSON: " + reason(e));
      }
      loom::require(doc.is_object(),
                    where + "expected a JSON object, got " + std::string(doc.type_name()));
      auto it = doc.find(key);
      loom::require(it != doc.end(), where + "no key \"" + key +
                                         "\" (set [data] json_key to the member that holds "
                                         "the text)");
      loom::require(it->is_string(), where + "key \"" + key + "\" is a " +
                                         std::string(it->type_name()) + ", not a string");
      const std::string& text = it->get_ref<const std::string&>();
      const int32_t* ids = nullptr;
      size_t n = 0;
      loom_error* err = tok.api->encode(tok.self, text.data(), text.size(), &ids, &n);
      if (err) {
        const loom_status code = host->error_code(err);
        const std::string msg = host->error_message(err);
        host->error_free(err);
        throw loom::Error(code, where + msg);
      }
      ids_.insert(ids_.end(), ids, ids + n);
      if (append_eod && n > 0 && eod >= 0) ids_.push_back(static_cast<int32_t>(eod));
      offsets_.push_back(ids_.size());
    }
    if (in.bad()) throw loom::Error(LOOM_ERR_IO, "error reading " + path_);
    ids_.shrink_to_fit();
    offsets_.shrink_to_fit();
  }
  const loom_host* host() const { return host_; }
  // Index caches go beside the JSON-lines file it was tokenised from.
  const char* cache_prefix() const { return path_.c_str(); }
  int64_t num_documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }

  void document(int64_t i, const int32_t** ids, size_t* num_ids) const {
    loom::require(i >= 0 && i < num_documents(), "dataset/jsonl: document " + std::to_string(i) +
                                                     " out of range [0, " +
                                                     std::to_string(num_documents()) + ")");
    static const int32_t kNone = 0;  // a valid pointer even when every document is empty
    *ids = ids_.empty() ? &kNone : ids_.data() + offsets_[i];
    *num_ids = offsets_[i + 1] - offsets_[i];
  }

 private:
  const loom_host* host_;
  std::string path_;
  std::vector<int32_t> ids_;       // every document's ids, back to back
  std::vector<uint64_t> offsets_;  // document i is ids_[offsets_[i], offsets_[i+1])
};

const loom_dataset_api kApi =
    loom::DocumentDatasetTable<JsonlDataset>::api(loom::create_dataset<JsonlDataset>);

const loom_param_spec kParams[] = {
    loom::param("path", LOOM_PARAM_STRING, nullptr,
                "the .jsonl file, one JSON object per line (relative to the working directory)"),
    loom::param("json_key", LOOM_PARAM_STRING, "text", "member of each object that holds the text"),
    loom::param("append_eod", LOOM_PARAM_BOOL, "true",
                "end each non-empty document with the tokenizer's end-of-document id (as "
                "Megatron's --append-eod)"),
};

}  // namespace

LOOM_PLUGIN(
        .description =
            "JSON-lines text, one document per line, tokenised at load with the run's tokenizer",
        .params = kParams, .api = &kApi)
