// `loom preprocess` (see preprocess.hpp). One reader (this thread) cuts the input into
// chunks of whole lines; N workers, each with its own tokenizer instance, turn chunks into
// token ids; this thread writes chunks in input order, so the output does not depend on
// the number of workers. At most 2N + 1 chunks are in flight.
#include "data/preprocess.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "base/tool_output.hpp"
#include "data/preprocess_chat.hpp"
#include "data/preprocess_input.hpp"
#include "data/preprocess_sentences.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/megatron_indexed.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace loom::engine {

namespace {

// One key's token ids for the documents of a chunk.
struct KeyIds {
  std::vector<int32_t> ids;       // every sequence, back to back
  std::vector<int32_t> seq_lens;  // tokens per sequence
  std::vector<int32_t> doc_seqs;  // sequences per document
};

struct Chunk {
  std::string data;  // whole lines
  int64_t first_line = 1;
  // Filled by a worker:
  std::vector<KeyIds> keys;
  int64_t documents = 0, bad = 0, blank = 0;
  std::string first_bad, error;
  bool done = false;
};

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: syntax
// error ..." without the exception id and the line (ours is the file's line).
std::string json_reason(const std::exception& e) {
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

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// A malformed line: skipped with --skip-bad-lines, otherwise the end of the run.
struct BadLine : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The outputs' keys: --json-keys, or a conversation's ids and loss mask.
std::vector<std::string> output_keys(const PreprocessOptions& o) {
  return o.chat() ? chat_output_keys(o.preference) : o.json_keys;
}

class ChunkEncoder {
 public:
  ChunkEncoder(const PreprocessOptions& o, Tokenizer& tok, int64_t eod)
      : o_(o), tok_(tok), eod_(eod) {
    if (o.chat()) chat_.emplace(chat_format_of(o.chat_format, o.chat_template, "loom preprocess"));
  }

  void run(Chunk& c) {
    c.keys.assign(output_keys(o_).size(), KeyIds{});
    std::string_view data(c.data);
    int64_t line_no = c.first_line;
    size_t pos = 0;
    while (pos < data.size()) {
      size_t nl = data.find('\n', pos);
      if (nl == std::string_view::npos) nl = data.size();
      std::string_view line = data.substr(pos, nl - pos);
      pos = nl + 1;
      const std::string where = o_.input + ":" + std::to_string(line_no++) + ": ";
      if (blank(line)) {
        ++c.blank;
        continue;
      }
      try {
        line_into(line, c);
        ++c.documents;
      } catch (const BadLine& e) {
        if (!o_.skip_bad_lines) {
          c.error = where + e.what();
          return;
        }
        if (c.bad++ == 0) c.first_bad = where + e.what();
      } catch (const std::exception& e) {
        c.error = where + e.what();
        return;
      }
    }
  }

 private:
  void line_into(std::string_view line, Chunk& c) {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line.begin(), line.end());
    } catch (const nlohmann::json::parse_error& e) {
      throw BadLine("invalid JSON: " + json_reason(e));
    }
    if (!doc.is_object())
      throw BadLine("expected a JSON object, got " + std::string(doc.type_name()));
    if (chat_) return chat_into(doc, c);
    // Check every key before any output, so a skipped line leaves no trace.
    std::vector<const nlohmann::json*> values;
    for (const std::string& key : o_.json_keys) {
      auto it = doc.find(key);
      if (it == doc.end())
        throw BadLine("no key \"" + key + "\" (choose the members with --json-keys)");
      bool ok = it->is_string();
      if (it->is_array()) {
        ok = true;
        for (const auto& s : *it) ok &= s.is_string();
      }
      if (!ok)
        throw BadLine("key \"" + key + "\" is a " + std::string(it->type_name()) +
                      ", not a string (or a list of strings)");
      values.push_back(&*it);
    }
    for (size_t k = 0; k < values.size(); ++k) add_document(*values[k], c.keys[k]);
  }

  void chat_into(const nlohmann::json& doc, Chunk& c) {
    std::vector<std::vector<int32_t>> arrays;
    try {
      arrays = encode_chat_line(*chat_, tok_, doc, o_.preference, o_.append_eod ? eod_ : -1);
    } catch (const ChatRefused& e) {
      throw BadLine("chat format " + chat_->name() + " refuses this conversation: " + e.what());
    } catch (const std::invalid_argument& e) {
      throw BadLine(e.what());
    }
    for (size_t k = 0; k < arrays.size(); ++k) {  // each one document of one sequence
      c.keys[k].ids.insert(c.keys[k].ids.end(), arrays[k].begin(), arrays[k].end());
      c.keys[k].seq_lens.push_back(static_cast<int32_t>(arrays[k].size()));
      c.keys[k].doc_seqs.push_back(1);
    }
  }

  void add_sentence(std::string_view s, KeyIds& out) {
    auto [ids, n] = tok_.encode(s.data(), s.size());
    if (n == 0) return;  // an empty sentence is no sequence
    out.ids.insert(out.ids.end(), ids, ids + n);
    out.seq_lens.push_back(static_cast<int32_t>(n));
  }

  void add_text(std::string_view text, KeyIds& out) {
    if (!o_.split_sentences) return add_sentence(text, out);
    for (std::string_view s : split_sentences(text)) add_sentence(s, out);
  }

  void add_document(const nlohmann::json& value, KeyIds& out) {
    const size_t seqs_before = out.seq_lens.size();
    if (value.is_string()) {
      add_text(value.get_ref<const std::string&>(), out);
    } else {  // a list of strings: the document's sentences, already split
      for (const auto& s : value) add_sentence(s.get_ref<const std::string&>(), out);
    }
    const size_t seqs = out.seq_lens.size() - seqs_before;
    if (o_.append_eod && seqs > 0) {
      out.ids.push_back(static_cast<int32_t>(eod_));
      ++out.seq_lens.back();
    }
    out.doc_seqs.push_back(static_cast<int32_t>(seqs));
  }

  const PreprocessOptions& o_;
  Tokenizer& tok_;
  int64_t eod_;
  std::optional<ChatFormat> chat_;
};

// The workers: each takes the next queued chunk, encodes it, marks it done.
class WorkerPool {
 public:
  WorkerPool(const PreprocessOptions& o, std::vector<std::unique_ptr<Tokenizer>>& toks,
             int64_t eod) {
    for (auto& tok : toks)
      threads_.emplace_back([this, &o, t = tok.get(), eod] {
        ChunkEncoder enc(o, *t, eod);
        work(enc);
      });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    queued_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void submit(std::shared_ptr<Chunk> c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(c));
    }
    queued_.notify_one();
  }
  void wait(const Chunk& c) {
    std::unique_lock<std::mutex> lock(mu_);
    finished_.wait(lock, [&] { return c.done; });
  }

 private:
  void work(ChunkEncoder& enc) {
    for (;;) {
      std::shared_ptr<Chunk> c;
      {
        std::unique_lock<std::mutex> lock(mu_);
        queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        c = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        enc.run(*c);
      } catch (const std::exception& e) {
        c->error = e.what();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        c->done = true;
      }
      finished_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable queued_, finished_;
  std::deque<std::shared_ptr<Chunk>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Cuts the input into chunks of whole lines of about `chunk_bytes`.
class ChunkReader {
 public:
  ChunkReader(InputFile& in, size_t chunk_bytes) : in_(in), chunk_bytes_(chunk_bytes) {}
  std::shared_ptr<Chunk> next() {
    if (eof_ && carry_.empty()) return nullptr;
    auto c = std::make_shared<Chunk>();
    std::string& data = c->data;
    data = std::move(carry_);
    carry_.clear();
    c->first_line = next_line_;
    size_t last_nl = data.rfind('\n');
    // Read until the chunk is big enough and holds a line end (a line longer than the
    // chunk size makes a bigger chunk), or the input ends.
    while (!eof_ && (data.size() < chunk_bytes_ || last_nl == std::string::npos)) {
      const size_t at = data.size();
      data.resize(at + kBlock);
      const size_t got = in_.read(data.data() + at, kBlock);
      data.resize(at + got);
      if (got == 0) {
        eof_ = true;
        break;
      }
      if (const void* nl = memrchr(data.data() + at, '\n', got))
        last_nl = static_cast<size_t>(static_cast<const char*>(nl) - data.data());
    }
    if (!eof_) {  // the partial last line waits for the next chunk
      carry_.assign(data, last_nl + 1, std::string::npos);
      data.resize(last_nl + 1);
    }
    for (char ch : data) next_line_ += ch == '\n';
    bytes_ += data.size();
    if (data.empty()) return nullptr;  // only at the end
    return c;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kBlock = size_t{1} << 18;
  InputFile& in_;
  size_t chunk_bytes_;
  std::string carry_;
  bool eof_ = false;
  int64_t next_line_ = 1;
  uint64_t bytes_ = 0;
};

// "preprocess: 12.3 MB of 45.6 MB (27%), 1234 documents, 5.6 MB/s": redrawn in place on a
// terminal, an info line every `interval` seconds otherwise.
class Throughput {
 public:
  Throughput(const InputFile& in, double interval)
      : in_(in),
        interval_(interval),
        tty_(isatty(STDERR_FILENO) == 1 && spdlog::should_log(spdlog::level::info)) {}
  void update(uint64_t bytes, int64_t documents, bool final = false) {
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (!final && since < (tty_ ? 0.25 : interval_)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    char line[256];
    const double mb = static_cast<double>(bytes) / 1e6;
    const double pct = in_.file_size() > 0 ? 100.0 * static_cast<double>(in_.consumed()) /
                                                 static_cast<double>(in_.file_size())
                                           : 100.0;
    std::snprintf(line, sizeof line,
                  "preprocess: %.1f MB read (%.0f%% of %s), %lld documents, %.1f MB/s", mb,
                  std::min(pct, 100.0), in_.path().c_str(), static_cast<long long>(documents),
                  secs > 0 ? mb / secs : 0.0);
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
      std::fflush(stderr);
    } else if (!final) {
      spdlog::info("{}", line);
    }
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  const InputFile& in_;
  double interval_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
};

// Test hook: LOOM_TEST_PREPROCESS_EXIT_AFTER_DOCS=n ends the process abruptly (as a kill
// would) once n documents are written, to check that no valid-looking .idx is left.
int64_t exit_after_docs() {
  const char* v = std::getenv("LOOM_TEST_PREPROCESS_EXIT_AFTER_DOCS");
  return v && *v ? std::atoll(v) : -1;
}

void check_options(const PreprocessOptions& o) {
  if (o.input.empty()) throw UsageError("loom preprocess: missing --input FILE");
  if (o.output_prefix.empty()) throw UsageError("loom preprocess: missing --output-prefix PREFIX");
  if (!o.tokenizer.given())
    throw UsageError("loom preprocess: missing --tokenizer NAME (see loom plugins)");
  if (o.json_keys.empty()) throw UsageError("loom preprocess: --json-keys needs at least one key");
  std::set<std::string> seen;
  for (const std::string& k : o.json_keys) {
    if (k.empty()) throw UsageError("loom preprocess: --json-keys: empty key");
    if (!seen.insert(k).second)
      throw UsageError("loom preprocess: --json-keys names '" + k + "' twice");
  }
  if (o.workers < 1 || o.workers > 256)
    throw UsageError("loom preprocess: --workers must be between 1 and 256, got " +
                     std::to_string(o.workers));
  if (o.chunk_bytes < 1) throw UsageError("loom preprocess: --chunk-bytes must be >= 1");
  if (o.preference && !o.chat())
    throw UsageError("loom preprocess: --preference-pairs needs --chat-format or --chat-template");
  if (o.chat()) {  // a conversation is one sequence, ended by its format's own markers
    if (o.split_sentences)
      throw UsageError(
          "loom preprocess: --chat-format takes no --split-sentences (a "
          "conversation is one sequence)");
    chat_format_of(o.chat_format, o.chat_template, "loom preprocess");
  }
  require_regular_file(o.input, "loom preprocess: --input: ");
  std::error_code ec;
  if (!fs::is_regular_file(o.input, ec))
    throw UsageError("loom preprocess: --input: no such file: " + o.input);
  const std::string level = o.split_sentences ? "_sentence" : "_document";
  for (const std::string& key : output_keys(o))
    for (const char* ext : {".bin", ".idx"})
      check_output("loom preprocess", o.output_prefix + "_" + key + level + ext, {o.input},
                   o.overwrite);
}

}  // namespace

PreprocessStats preprocess(const PreprocessOptions& o, Registry& registry) {
  check_options(o);
  TokenizerFlags flags = o.tokenizer;
  if (o.chat()) flags.defaults.push_back("add_special_tokens=false");  // the text has its BOS
  TokenizerFactory factory(registry, flags, "loom preprocess");
  std::vector<std::unique_ptr<Tokenizer>> toks;
  for (int i = 0; i < o.workers; ++i) toks.push_back(factory.create());
  const int64_t vocab = toks[0]->vocab_size();
  const int64_t eod = toks[0]->eod_id();
  if (o.append_eod && eod < 0)
    throw UsageError("loom preprocess: --append-eod: " + factory.who() +
                     " has no end-of-document token");
  if (vocab <= 0) throw RunError(factory.who() + " reports vocab_size " + std::to_string(vocab));
  const megatron::DType dtype = megatron::dtype_for_vocab(vocab);

  std::unique_ptr<InputFile> in = InputFile::open(o.input);
  const fs::path parent = fs::path(o.output_prefix).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::create_directories(parent, ec) && ec)
    throw RunError("cannot create " + parent.string() + ": " + ec.message());

  PreprocessStats stats;
  std::vector<std::unique_ptr<megatron::Writer>> writers;
  const std::string level = o.split_sentences ? "sentence" : "document";
  for (const std::string& key : output_keys(o)) {
    PreprocessOutput out;
    out.key = key;
    out.prefix = o.output_prefix + "_" + key + "_" + level;
    try {
      writers.push_back(std::make_unique<megatron::Writer>(
          out.prefix, o.chat() && key.ends_with("_loss_mask") ? megatron::DType::u8 : dtype));
    } catch (const megatron::FormatError& e) {
      throw RunError(e.what());
    }
    stats.outputs.push_back(out);
  }
  spdlog::info("preprocess: {} ({}) with {} ({} tokens, {} ids), {} worker{} -> {}_<key>_{}",
               o.input, in->format(), factory.who(), vocab, megatron::dtype_name(dtype), o.workers,
               o.workers == 1 ? "" : "s", o.output_prefix, level);

  const int64_t crash_after = exit_after_docs();
  Throughput progress(*in, o.log_interval_s);
  ChunkReader reader(*in, o.chunk_bytes);
  {
    WorkerPool pool(o, toks, eod);
    std::deque<std::shared_ptr<Chunk>> inflight;
    const size_t max_inflight = 2 * static_cast<size_t>(o.workers) + 1;
    bool eof = false;
    for (;;) {
      while (!eof && inflight.size() < max_inflight) {
        std::shared_ptr<Chunk> c = reader.next();
        if (!c) {
          eof = true;
          break;
        }
        inflight.push_back(c);
        pool.submit(std::move(c));
      }
      if (inflight.empty()) break;
      std::shared_ptr<Chunk> c = std::move(inflight.front());
      inflight.pop_front();
      pool.wait(*c);
      if (!c->error.empty()) throw RunError(c->error);
      try {
        for (size_t k = 0; k < writers.size(); ++k) {
          const KeyIds& kid = c->keys[k];
          size_t seq = 0, at = 0;
          for (int32_t nseq : kid.doc_seqs) {
            for (int32_t s = 0; s < nseq; ++s, ++seq) {
              writers[k]->add_sequence(kid.ids.data() + at, static_cast<size_t>(kid.seq_lens[seq]));
              at += static_cast<size_t>(kid.seq_lens[seq]);
            }
            writers[k]->end_document();
          }
        }
      } catch (const megatron::FormatError& e) {
        throw RunError(e.what());
      }
      stats.documents += c->documents;
      stats.bad_lines += c->bad;
      stats.blank_lines += c->blank;
      if (stats.first_bad.empty()) stats.first_bad = c->first_bad;
      if (crash_after >= 0 && stats.documents >= crash_after) std::_Exit(86);
      progress.update(reader.bytes(), stats.documents);
    }
  }
  try {
    for (auto& w : writers) w->finalize();
  } catch (const megatron::FormatError& e) {
    throw RunError(e.what());
  }
  progress.update(reader.bytes(), stats.documents, true);
  stats.bytes = reader.bytes();
  stats.seconds = progress.seconds();
  for (size_t k = 0; k < writers.size(); ++k) {
    stats.outputs[k].sequences = writers[k]->num_sequences();
    stats.outputs[k].documents = writers[k]->num_documents();
    stats.outputs[k].tokens = writers[k]->num_tokens();
  }
  return stats;
}

int cmd_preprocess(const std::vector<std::string>& args) {
  PreprocessOptions o;
  std::string type_alias, dataset_impl;
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help")(
      "input", po::value<std::string>(&o.input),
      "JSON lines, one document per line; gzip or zstd compressed input is recognised")(
      "output-prefix", po::value<std::string>(&o.output_prefix),
      "writes <prefix>_<key>_document.bin/.idx (or _sentence) per key")(
      "json-keys", po::value<std::vector<std::string>>(&o.json_keys)->multitoken(),
      "members holding the text (default: text); one output per key")(
      "append-eod", po::bool_switch(&o.append_eod),
      "end each non-empty document with the tokenizer's end-of-document id")(
      "split-sentences", po::bool_switch(&o.split_sentences),
      "one sequence per sentence (rule-based splitter, see docs/data.md)")(
      "workers", po::value<int>(&o.workers)->default_value(1),
      "tokenising threads; the output is the same for any number")(
      "skip-bad-lines", po::bool_switch(&o.skip_bad_lines),
      "skip (and count) malformed lines instead of stopping at the first")(
      "overwrite", po::bool_switch(&o.overwrite),
      "replace outputs that already exist (refused otherwise)")(
      "log-interval", po::value<double>(&o.log_interval_s)->default_value(10),
      "seconds between progress lines when stderr is not a terminal")(
      "chat-format", po::value<std::string>(&o.chat_format),
      "lines are conversations ({\"messages\": [...]} or prompt/completion) in this chat "
      "format (chatml, llama3, mistral, gemma, deepseek-v3, or a tokenizer_config.json using "
      "one): writes <prefix>_chat_document and its loss mask <prefix>_chat_loss_mask_document")(
      "chat-template", po::value<std::string>(&o.chat_template),
      "conversations in a plain template instead, e.g. \"<|{role}|>\\n{content}</s>\\n\"")(
      "preference-pairs", po::bool_switch(&o.preference),
      "with a chat format: lines are {\"prompt\", \"chosen\", \"rejected\"} (DPO's data), "
      "written as <prefix>_chosen_document and <prefix>_rejected_document, each with its mask")(
      "dataset-impl", po::value<std::string>(&dataset_impl),
      "accepted for Megatron scripts: only mmap (the format written)");
  add_tokenizer_options(opts, o.tokenizer, type_alias);
  po::options_description hidden("hidden");
  hidden.add_options()("chunk-bytes", po::value<size_t>(&o.chunk_bytes),
                       "input bytes per work item (tests)");
  po::options_description all;
  all.add(opts).add(hidden);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError("loom preprocess: " + std::string(e.what()) + " (see loom preprocess --help)");
  }
  if (vm.count("help")) {
    std::cout << "usage: loom preprocess --input FILE --output-prefix PREFIX --tokenizer NAME "
                 "[options]\n\n"
              << opts << "\n";
    return 0;
  }
  finish_tokenizer_flags(o.tokenizer, type_alias, "loom preprocess");
  if (!dataset_impl.empty() && dataset_impl != "mmap")
    throw UsageError("loom preprocess: --dataset-impl " + dataset_impl +
                     ": only mmap (Megatron's indexed format) is written");

  Registry registry;
  registry.discover();
  PreprocessStats s = preprocess(o, registry);
  for (const PreprocessOutput& out : s.outputs)
    std::cout << "wrote " << out.prefix << ".bin/.idx: " << out.documents << " documents, "
              << out.sequences << " sequences, " << out.tokens << " tokens\n";
  const double mb = static_cast<double>(s.bytes) / 1e6;
  char rate[160];
  std::snprintf(rate, sizeof rate, "%.1f MB in %.2f s (%.1f MB/s)", mb, s.seconds,
                s.seconds > 0 ? mb / s.seconds : 0.0);
  std::cout << s.documents << " documents from " << o.input << ", " << rate << "\n";
  if (s.bad_lines > 0)
    std::cout << "skipped " << s.bad_lines << " bad line" << (s.bad_lines == 1 ? "" : "s")
              << " (first: " << s.first_bad << ")\n";
  return 0;
}

}  // namespace loom::engine
