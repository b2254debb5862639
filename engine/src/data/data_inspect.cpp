// `loom data inspect` (see data_inspect.hpp). Reads every token once for the histogram: a
// flat counter array for 1- and 2-byte dtypes, a hash map otherwise.
#include "data/data_inspect.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <unordered_map>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "data/preprocess_tokenizer.hpp"
#include "loader/registry.hpp"
#include "loom/cpp/megatron_indexed.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace loom::engine {

namespace {

std::string strip_extension(std::string prefix) {
  for (const std::string ext : {".idx", ".bin"})
    if (prefix.size() > ext.size() && prefix.ends_with(ext))
      prefix.resize(prefix.size() - ext.size());
  return prefix;
}

// Printable: control characters escaped, cut at `max` bytes.
std::string printable(const std::string& s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

// The files, dtype and counts of `r`, and the sequences' length range.
void print_summary(const megatron::Reader& r, const std::string& prefix) {
  const int64_t n = r.num_sequences(), docs = r.num_documents();
  std::cout << "dataset    " << prefix << "\n";
  std::cout << "files      " << megatron::bin_path(prefix) << " (" << r.bin_bytes() << " bytes), "
            << megatron::idx_path(prefix) << " (" << r.idx_bytes() << " bytes"
            << (r.has_modes() ? ", with sequence modes" : "") << ")\n";
  std::cout << "dtype      " << megatron::dtype_name(r.dtype()) << " (code "
            << static_cast<int>(r.dtype()) << ", " << r.itemsize() << " bytes per token)\n";
  std::cout << "sequences  " << n << "\n";
  int64_t empty_docs = 0;
  for (int64_t d = 0; d < docs; ++d) empty_docs += r.document_index(d) == r.document_index(d + 1);
  std::cout << "documents  " << docs;
  if (empty_docs > 0) std::cout << " (" << empty_docs << " without sequences)";
  std::cout << "\n";
  std::cout << "tokens     " << r.num_tokens() << "\n";
  if (n > 0) {
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min<int64_t>(lo, r.length(i));
      hi = std::max<int64_t>(hi, r.length(i));
    }
    char mean[64];
    std::snprintf(mean, sizeof mean, "%.1f",
                  static_cast<double>(r.num_tokens()) / static_cast<double>(n));
    std::cout << "length     min " << lo << ", mean " << mean << ", max " << hi
              << " tokens per sequence\n";
  }
}

// How often each token id occurs (every token read once): the number of distinct ids and
// the ten most frequent, decoded with `tok` when given.
void print_ids(megatron::Reader& r, Tokenizer* tok) {
  const int64_t n = r.num_sequences();
  std::vector<std::pair<int64_t, int64_t>> counts;  // (id, count)
  std::vector<int32_t> ids;
  const bool small = r.itemsize() <= 2;
  if (small) {
    std::vector<int64_t> flat(65536 + 32768, 0);  // u16 ids, and i8/i16 offset by 32768
    for (int64_t i = 0; i < n; ++i) {
      r.read(i, ids);
      for (int32_t id : ids) ++flat[static_cast<size_t>(id + 32768)];
    }
    for (size_t k = 0; k < flat.size(); ++k)
      if (flat[k]) counts.emplace_back(static_cast<int64_t>(k) - 32768, flat[k]);
  } else {
    std::unordered_map<int32_t, int64_t> map;
    for (int64_t i = 0; i < n; ++i) {
      r.read(i, ids);
      for (int32_t id : ids) ++map[id];
    }
    counts.assign(map.begin(), map.end());
  }
  std::cout << "distinct   " << counts.size() << " token ids";
  if (!counts.empty()) {
    auto [mn, mx] = std::minmax_element(counts.begin(), counts.end());
    std::cout << " (smallest " << mn->first << ", largest " << mx->first << ")";
  }
  std::cout << "\n";
  const size_t top = std::min<size_t>(10, counts.size());
  std::partial_sort(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(top), counts.end(),
                    [](const auto& a, const auto& b) {
                      return a.second != b.second ? a.second > b.second : a.first < b.first;
                    });
  if (top > 0) {
    std::cout << "top ids    ";
    for (size_t k = 0; k < top; ++k) {
      char pct[32];
      std::snprintf(pct, sizeof pct, "%.1f%%",
                    100.0 * static_cast<double>(counts[k].second) /
                        static_cast<double>(std::max<int64_t>(1, r.num_tokens())));
      std::cout << (k ? ", " : "") << counts[k].first << " x" << counts[k].second << " (" << pct
                << ")";
      if (tok) {
        const int32_t id = static_cast<int32_t>(counts[k].first);
        std::cout << " " << '"' << printable(tok->decode(&id, 1), 20) << '"';
      }
    }
    std::cout << "\n";
  }
}

// The first sequence's first `sample_tokens` ids, and their text with `tok`.
void print_first(megatron::Reader& r, Tokenizer* tok, int64_t sample_tokens) {
  std::vector<int32_t> ids;
  r.read(0, ids);
  const size_t shown = std::min<size_t>(ids.size(), static_cast<size_t>(sample_tokens));
  std::cout << "sequence 0 " << ids.size() << " tokens:";
  for (size_t k = 0; k < shown; ++k) std::cout << " " << ids[k];
  if (shown < ids.size()) std::cout << " ...";
  std::cout << "\n";
  if (tok)
    std::cout << "decoded    \"" << printable(tok->decode(ids.data(), shown), 400)
              << (shown < ids.size() ? "\"..." : "\"") << "\n";
}

}  // namespace

int cmd_data_inspect(const std::vector<std::string>& args) {
  std::string prefix, type_alias;
  TokenizerFlags tflags;
  int64_t sample_tokens = 64;
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help")(
      "sample-tokens", po::value<int64_t>(&sample_tokens)->default_value(64),
      "tokens of the first sequence to show (decoded with --tokenizer)");
  add_tokenizer_options(opts, tflags, type_alias);
  po::options_description hidden("arguments");
  hidden.add_options()("prefix", po::value<std::string>(&prefix), "dataset prefix");
  po::positional_options_description pos;
  pos.add("prefix", 1);
  po::options_description all;
  all.add(opts).add(hidden);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError("loom data inspect: " + std::string(e.what()) +
                     " (see loom data inspect --help)");
  }
  if (vm.count("help")) {
    std::cout << "usage: loom data inspect PREFIX [--tokenizer NAME --vocab-file ...]\n\n"
              << "PREFIX names <PREFIX>.bin and <PREFIX>.idx.\n\n"
              << opts << "\n";
    return 0;
  }
  finish_tokenizer_flags(tflags, type_alias, "loom data inspect");
  if (prefix.empty()) throw UsageError("loom data inspect: missing PREFIX (see --help)");
  if (sample_tokens < 0) throw UsageError("loom data inspect: --sample-tokens must be >= 0");
  prefix = strip_extension(prefix);
  for (const std::string& f : {megatron::idx_path(prefix), megatron::bin_path(prefix)}) {
    require_regular_file(f, "loom data inspect: ");
    if (!fs::exists(f)) throw UsageError("loom data inspect: no such file: " + f);
  }

  // The tokenizer first: a bad flag is reported before a long scan.
  std::unique_ptr<Registry> registry;
  std::unique_ptr<TokenizerFactory> factory;
  std::unique_ptr<Tokenizer> tok;
  if (tflags.given()) {
    registry = std::make_unique<Registry>();
    registry->discover();
    factory = std::make_unique<TokenizerFactory>(*registry, tflags, "loom data inspect");
    tok = factory->create();
  }

  std::unique_ptr<megatron::Reader> r;
  try {
    r = std::make_unique<megatron::Reader>(prefix);
  } catch (const megatron::FormatError& e) {
    throw RunError(e.what());
  }
  const int64_t n = r->num_sequences();
  print_summary(*r, prefix);
  print_ids(*r, tok.get());
  if (n > 0 && sample_tokens > 0) print_first(*r, tok.get(), sample_tokens);
  return 0;
}

}  // namespace loom::engine
