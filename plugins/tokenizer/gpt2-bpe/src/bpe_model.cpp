// Loading vocab.json / merges.txt into byte form, and the BPE merge loop.
#include "bpe_model.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "byte_unicode.hpp"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/plugin_files.hpp"

namespace gpt2bpe {
namespace {

const std::string kPrefix = "tokenizer/gpt2-bpe: ";
const char* const kEndOfText = "<|endoftext|>";

// `s` in quotes with control bytes escaped, cut after `max` bytes, for messages.
std::string quote(std::string_view s, size_t max = 60) {
  std::string q = "'";
  for (unsigned char c : s.substr(0, max)) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      q += buf;
    } else {
      q.push_back(static_cast<char>(c));
    }
  }
  return q + (s.size() > max ? "...'" : "'");
}
std::string quote_path(const std::string& path) { return quote(path, std::string::npos); }

std::string read_file(const std::string& path, const char* key, const char* what) {
  const std::string where = "[tokenizer] " + std::string(key) + " " + quote_path(path);
  const std::string fix = " (set " + std::string(key) + " to GPT-2's " + what + ")";
  if (path.empty())
    throw loom::Error(LOOM_ERR_IO, kPrefix + "[tokenizer] " + key + " is empty" + fix);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw loom::Error(LOOM_ERR_IO, kPrefix + where + " is a directory, not a file" + fix);
  loom::require_regular_file(path, kPrefix + where + ": ");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw loom::Error(LOOM_ERR_IO,
                      kPrefix + "cannot open " + where + ": " + std::strerror(errno) + fix);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw loom::Error(LOOM_ERR_IO, kPrefix + "error reading " + where);
  return std::move(text).str();
}

// A token as the files spell it (UTF-8, one byte-map character per byte) -> its raw bytes.
// Every character of the map is below U+0144, so only 1- and 2-byte UTF-8 sequences occur.
bool spelling_to_bytes(std::string_view s, std::string& out, std::string& why) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    char32_t c = 0;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if (b0 >= 0xc2 && b0 <= 0xdf && i + 1 < s.size() &&
               (static_cast<unsigned char>(s[i + 1]) & 0xc0) == 0x80) {
      c = (char32_t(b0 & 0x1f) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3f);
      i += 2;
    } else {
      why = "byte " + std::to_string(i) + " starts no character of GPT-2's byte map";
      return false;
    }
    const int byte = char_to_byte(c);
    if (byte < 0) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
      why = std::string("character ") + buf + " is not in GPT-2's byte map";
      return false;
    }
    out.push_back(static_cast<char>(byte));
  }
  if (out.empty()) {
    why = "the token is empty";
    return false;
  }
  return true;
}

}  // namespace

BpeModel::BpeModel(const std::string& vocab_path, const std::string& merges_path) {
  std::unordered_map<std::string, int32_t> ids;  // raw bytes -> id, needed while loading
  load_vocab(vocab_path, ids);
  load_merges(merges_path, ids);
}

void BpeModel::load_vocab(const std::string& path, std::unordered_map<std::string, int32_t>& ids) {
  const std::string text = read_file(path, "vocab_file", "vocab.json, e.g. gpt2-vocab.json");
  const std::string where = kPrefix + "vocab_file " + quote_path(path) + ": ";
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + "not valid JSON: " + e.what());
  }
  if (!doc.is_object() || doc.empty())
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                      where + "expected a non-empty JSON object of token -> id");
  if (doc.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + "too many tokens");
  const auto n = static_cast<int64_t>(doc.size());
  tokens_.assign(static_cast<size_t>(n), std::string());
  std::vector<bool> seen(static_cast<size_t>(n), false);
  ids.reserve(static_cast<size_t>(n));
  std::string bytes, why;
  for (const auto& [key, value] : doc.items()) {
    auto token = [&key = key] { return "token " + quote(key); };  // for messages only
    if (!value.is_number_integer())
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + token() + " has a non-integer id");
    const auto id = value.get<int64_t>();
    if (id < 0 || id >= n)
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + token() + " has id " +
                                                       std::to_string(id) + "; ids must be 0.." +
                                                       std::to_string(n - 1) + ", each once");
    if (seen[static_cast<size_t>(id)])
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        where + "id " + std::to_string(id) + " is used twice (again by " + token() +
                            "); ids must be 0.." + std::to_string(n - 1) + ", each once");
    seen[static_cast<size_t>(id)] = true;
    if (!spelling_to_bytes(key, bytes, why))
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + token() + ": " + why);
    tokens_[static_cast<size_t>(id)] = bytes;
    ids.emplace(bytes, static_cast<int32_t>(id));
  }
  // Byte-level BPE starts from one token per byte, so every byte needs one.
  for (int b = 0; b < 256; ++b) {
    auto it = ids.find(std::string(1, static_cast<char>(b)));
    if (it == ids.end()) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02x", b);
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where + "no token for the single byte " + buf +
                                                       "; a byte-level BPE vocabulary has all 256");
    }
    byte_ids_[static_cast<size_t>(b)] = it->second;
  }
  // The end-of-document token; its text is not special when encoding (as in Megatron).
  auto eod = ids.find(kEndOfText);
  eod_ = eod == ids.end() ? -1 : eod->second;
}

void BpeModel::load_merges(const std::string& path,
                           const std::unordered_map<std::string, int32_t>& ids) {
  const std::string text = read_file(path, "merge_file", "merges.txt, e.g. gpt2-merges.txt");
  int32_t rank = 0;
  size_t lineno = 0;
  std::string left, right, why;
  merges_.reserve(64 * 1024);
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (lineno == 1 && line.starts_with("#version")) continue;
    if (line.empty()) continue;
    auto where = [&] {  // for messages only
      return kPrefix + "merge_file " + quote_path(path) + " line " + std::to_string(lineno) + ": ";
    };
    // Two tokens separated by whitespace (tokens never contain a space: it is 'Ġ').
    std::vector<std::string_view> parts;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      if (j > i) parts.push_back(line.substr(i, j - i));
      i = j;
    }
    if (parts.size() != 2)
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT,
                        where() + "expected two tokens separated by a space, found " +
                            std::to_string(parts.size()) + " in " + quote(line));
    if (!spelling_to_bytes(parts[0], left, why) || !spelling_to_bytes(parts[1], right, why))
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where() + quote(line) + ": " + why);
    auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
    if (l == ids.end() || r == ids.end() || m == ids.end()) {
      const std::string missing(l == ids.end()   ? parts[0]
                                : r == ids.end() ? parts[1]
                                                 : std::string(parts[0]) + std::string(parts[1]));
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where() + "token " + quote(missing) +
                                                       " is not in the vocabulary (vocab_file)");
    }
    if (rank == std::numeric_limits<int32_t>::max())
      throw loom::Error(LOOM_ERR_INVALID_ARGUMENT, where() + "too many merges");
    // A repeated pair takes its later rank, as a Python dict built from the list would.
    merges_[pair_key(l->second, r->second)] = Merge{rank++, m->second};
  }
}

void BpeModel::queue_pair(Scratch& s, int32_t pos, std::vector<Scratch::Candidate>& into) const {
  const Scratch::Symbol& l = s.symbols[static_cast<size_t>(pos)];
  const Scratch::Symbol& r = s.symbols[static_cast<size_t>(l.next)];
  auto it = merges_.find(pair_key(l.id, r.id));
  if (it != merges_.end())
    into.push_back(Scratch::Candidate{it->second.rank, pos, l.id, r.id, it->second.merged});
}

void BpeModel::encode_chunk(std::string_view chunk, Scratch& s, std::vector<int32_t>& out) const {
  const size_t n = chunk.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(chunk[0])]);
    return;
  }
  loom::require(n < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                kPrefix + "a pre-tokenised chunk of " + std::to_string(n) +
                    " bytes is too long (limit 2 GiB)");
  const auto last = static_cast<int32_t>(n - 1);
  s.symbols.resize(n);
  for (int32_t i = 0; i <= last; ++i)
    s.symbols[static_cast<size_t>(i)] = {byte_ids_[static_cast<unsigned char>(chunk[i])], i - 1,
                                         i == last ? -1 : i + 1};
  // A min-heap on (rank, position). One round takes every queued pair of the lowest rank,
  // left to right; a pair queued for a merge that changed a symbol since is stale and
  // skipped. Pairs a merge creates wait in `pending` until the round ends, so the round
  // matches one pass of "merge every occurrence of the best pair" even when a new pair
  // ranks lower (possible only in a hand-made merges file).
  auto later = [](const Scratch::Candidate& a, const Scratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  s.heap.clear();
  for (int32_t i = 0; i < last; ++i) queue_pair(s, i, s.heap);
  std::make_heap(s.heap.begin(), s.heap.end(), later);
  while (!s.heap.empty()) {
    const int32_t rank = s.heap.front().rank;
    s.pending.clear();
    while (!s.heap.empty() && s.heap.front().rank == rank) {
      std::pop_heap(s.heap.begin(), s.heap.end(), later);
      const Scratch::Candidate c = s.heap.back();
      s.heap.pop_back();
      Scratch::Symbol& l = s.symbols[static_cast<size_t>(c.pos)];
      if (l.id != c.left || l.next < 0) continue;
      Scratch::Symbol& r = s.symbols[static_cast<size_t>(l.next)];
      if (r.id != c.right) continue;
      l.id = c.merged;
      r.id = -1;
      l.next = r.next;
      if (l.next >= 0) s.symbols[static_cast<size_t>(l.next)].prev = c.pos;
      if (l.prev >= 0) queue_pair(s, l.prev, s.pending);
      if (l.next >= 0) queue_pair(s, c.pos, s.pending);
    }
    for (const Scratch::Candidate& c : s.pending) {
      s.heap.push_back(c);
      std::push_heap(s.heap.begin(), s.heap.end(), later);
    }
  }
  for (int32_t i = 0; i >= 0; i = s.symbols[static_cast<size_t>(i)].next)
    out.push_back(s.symbols[static_cast<size_t>(i)].id);
}

}  // namespace gpt2bpe
