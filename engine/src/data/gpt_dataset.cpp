#include "data/gpt_dataset.hpp"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "loom/cpp/numpy_random.hpp"
#include "recipe/recipe.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

std::string sha256_hex(const void* data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr) != 1)
    throw RunError("sha256 failed (OpenSSL)");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

namespace {

// Bump when anything about the arrays' construction changes: old caches become stale.
constexpr const char* kAlgorithm = "loom-gpt-indices 1";

// The recipe validated the split already; a caller that bypasses it gets the same message.
std::vector<double> split_weights(const std::string& text) {
  std::vector<double> w;
  std::string problem = parse_split(text, &w);
  if (!problem.empty()) throw UsageError("data.split " + problem);
  return w;
}

// Epochs E: the smallest E >= 1 with (E*T - 1) // L >= samples, that is E*T >= samples*L + 1,
// in closed form (Megatron counts up one epoch at a time). The products are taken in 128 bits;
// an E whose E*T or E*n (documents) overflows int64 is refused, not wrapped.
int64_t num_epochs(int64_t tokens, int64_t seq_len, int64_t samples, int64_t docs) {
  const __int128 need = (__int128)samples * seq_len + 1;
  const __int128 e = std::max<__int128>(1, (need + tokens - 1) / tokens);
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  if (e * tokens > kMax || e * docs > kMax)
    throw RunError(std::to_string(samples) + " samples of " + std::to_string(seq_len) +
                   " tokens from " + std::to_string(tokens) +
                   " tokens of documents need more epochs than int64 counts; lower train.iters "
                   "or the batch size");
  return (int64_t)e;
}

// Resizes the index arrays, or says how much memory they would need.
void size_index(GptIndices& x, int64_t epochs, int64_t docs, int64_t samples) {
  try {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    if (samples >= kMax / 16 || epochs > kMax / 4 / std::max<int64_t>(docs, 1))
      throw std::bad_alloc();  // the byte counts alone would overflow
    x.doc_idx.resize((size_t)(epochs * docs));
    x.sample_idx.resize((size_t)(2 * (samples + 1)));
    x.shuffle_idx.resize((size_t)samples);
  } catch (const std::bad_alloc&) {
    const double gib =
        ((double)epochs * (double)docs * 4 + (double)(samples + 1) * 16 + (double)samples * 8) /
        (1024.0 * 1024 * 1024);
    throw RunError("the GPT sample index of " + std::to_string(samples) + " samples (" +
                   std::to_string(epochs) + " epochs of " + std::to_string(docs) +
                   " documents) needs " + std::to_string((int64_t)std::ceil(gib)) +
                   " GiB, more than this machine can allocate; lower train.iters or the batch "
                   "size");
  }
}

std::string npy_header(char type, int itemsize, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1)
    dims.resize(dims.size() - 2);  // (3,) but (3, 2)
  else
    dims.pop_back();
  std::string dict = "{'descr': '<" + std::string(1, type) + std::to_string(itemsize) +
                     "', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict += std::string(padded - total, ' ') + "\n";
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  uint16_t len = (uint16_t)dict.size();
  h += (char)(len & 0xff);
  h += (char)(len >> 8);
  return h + dict;
}

}  // namespace

SplitRanges split_documents(int64_t n, const std::string& weights) {
  std::vector<double> w = split_weights(weights);
  const double sum = w[0] + w[1] + w[2];
  SplitRanges r{};
  double c = 0;
  int64_t lo = 0;
  for (int k = 0; k < 3; ++k) {
    c += w[k] / sum;
    // nearbyint rounds half to even in the default rounding mode (Python's round()). The
    // last bound is N itself, whatever the floating-point sum of the weights says.
    int64_t hi = k == 2 ? n : std::min<int64_t>(n, (int64_t)std::nearbyint(c * (double)n));
    r.begin[k] = lo;
    r.end[k] = std::max(lo, hi);
    lo = r.end[k];
  }
  return r;
}

std::shared_ptr<DocumentSource> DocumentSource::read(const loom_dataset_api* api, loom_dataset* ds,
                                                     std::string name) {
  auto src = std::make_shared<DocumentSource>();
  src->api = api;
  src->ds = ds;
  src->name = std::move(name);
  const char* prefix = api->cache_prefix ? api->cache_prefix(ds) : nullptr;
  src->cache_prefix = prefix ? prefix : "";
  const int64_t n = api->num_documents(ds);
  if (n < 0 || n > std::numeric_limits<int32_t>::max())
    throw RunError(src->name + ": " + std::to_string(n) +
                   " documents; the GPT dataset indexes at most 2^31-1");
  src->sizes.resize((size_t)n);
  log::Progress progress("reading document lengths of " + src->name, n);
  for (int64_t d = 0; d < n; ++d) {
    const int32_t* ids = nullptr;
    size_t len = 0;
    check(api->document(ds, d, &ids, &len), "reading document " + std::to_string(d));
    if (len > (size_t)std::numeric_limits<int32_t>::max())
      throw RunError(src->name + ": document " + std::to_string(d) + " has over 2^31 tokens");
    src->sizes[(size_t)d] = (int32_t)len;
    if (d % 65536 == 0) progress.update(d);
  }
  progress.finish();
  src->sizes_digest = sha256_hex(src->sizes.data(), src->sizes.size() * sizeof(int32_t));
  return src;
}

// Padded samples (GptIndexSpec::pad): sample k is document doc_idx[k] from its start, so
// sample_idx row k is (k, 0) and the shuffle index is the identity; the document index tiles
// the split's non-empty documents over the epochs needed and shuffles them together.
GptIndices build_padded_indices(const std::vector<int32_t>& sizes, const GptIndexSpec& spec) {
  std::vector<int32_t> docs;
  for (int64_t d = spec.doc_begin; d < spec.doc_end; ++d)
    if (sizes[(size_t)d] > 0) docs.push_back((int32_t)d);
  if (docs.empty())
    throw RunError("documents [" + std::to_string(spec.doc_begin) + ", " +
                   std::to_string(spec.doc_end) + ") hold no tokens: nothing to sample");
  const int64_t n = (int64_t)docs.size();
  const int64_t E = std::max<int64_t>(1, (spec.num_samples + n - 1) / n), S = E * n;
  GptIndices out;
  size_index(out, E, n, S);
  out.num_epochs = E;
  for (int64_t k = 0; k < S; ++k) out.doc_idx[(size_t)k] = docs[(size_t)(k % n)];
  loom::RandomState rng(spec.seed);
  if (!spec.in_order) rng.shuffle(out.doc_idx.data(), out.doc_idx.size());
  for (int64_t k = 0; k <= S; ++k) {
    out.sample_idx[(size_t)(2 * k)] = k;
    out.sample_idx[(size_t)(2 * k + 1)] = 0;
  }
  for (int64_t k = 0; k < S; ++k) out.shuffle_idx[(size_t)k] = k;
  return out;
}

GptIndices build_gpt_indices(const std::vector<int32_t>& sizes, const GptIndexSpec& spec) {
  if (spec.pad) return build_padded_indices(sizes, spec);
  const int64_t n = spec.doc_end - spec.doc_begin, L = spec.seq_len;
  if (L < 1) throw RunError("seq_len must be >= 1");
  int64_t T = 0;
  for (int64_t d = spec.doc_begin; d < spec.doc_end; ++d) T += sizes[(size_t)d];
  if (T < 1)
    throw RunError("documents [" + std::to_string(spec.doc_begin) + ", " +
                   std::to_string(spec.doc_end) + ") hold no tokens: nothing to sample");
  GptIndices out;
  const int64_t E = num_epochs(T, L, spec.num_samples, n);
  const int64_t S = (E * T - 1) / L;
  size_index(out, E, n, S);
  out.num_epochs = E;
  const int64_t sans_last = ((E - 1) * T - 1) / L;  // samples before the last epoch (E > 1)
  if (E > 1) {
    const int64_t from_last = spec.num_samples - sans_last;
    const int64_t per_epoch = (T - 1) / L;
    out.separate_last_epoch = from_last < (int64_t)(0.80 * (double)per_epoch);
  }

  loom::RandomState rng(spec.seed);
  // Document index: E epochs of the split's documents, shuffled together, or the first
  // E-1 together and the last alone.
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < n; ++i)
      out.doc_idx[(size_t)(e * n + i)] = (int32_t)(spec.doc_begin + i);
  if (out.separate_last_epoch) {
    rng.shuffle(out.doc_idx.data(), (size_t)((E - 1) * n));
    rng.shuffle(out.doc_idx.data() + (E - 1) * n, (size_t)n);
  } else {
    rng.shuffle(out.doc_idx.data(), out.doc_idx.size());
  }

  // Sample index: row k = where sample k starts; each sample spans L+1 tokens and its last
  // token is the next sample's first.
  int64_t pos = 0, offset = 0;
  out.sample_idx[0] = 0;
  out.sample_idx[1] = 0;
  for (int64_t k = 1; k <= S; ++k) {
    int64_t remaining = L + 1;
    while (remaining != 0) {
      const int64_t left = sizes[(size_t)out.doc_idx[(size_t)pos]] - offset;
      remaining -= left;
      if (remaining <= 0) {
        offset += remaining + left - 1;  // stays on the sample's last token
        remaining = 0;
      } else {
        ++pos;
        offset = 0;
      }
    }
    out.sample_idx[(size_t)(2 * k)] = pos;
    out.sample_idx[(size_t)(2 * k + 1)] = offset;
  }

  // Shuffle index: arange(S) shuffled, or the samples before the last epoch and those of the
  // last epoch shuffled apart.
  for (int64_t i = 0; i < S; ++i) out.shuffle_idx[(size_t)i] = i;
  const int64_t first = out.separate_last_epoch ? sans_last : S;
  rng.shuffle(out.shuffle_idx.data(), (size_t)first);
  if (first < S) rng.shuffle(out.shuffle_idx.data() + first, (size_t)(S - first));
  return out;
}

std::string gpt_index_hash(const DocumentSource& src, const GptIndexSpec& spec) {
  std::string d = std::string(kAlgorithm) + "\ndocuments " + std::to_string(src.sizes.size()) +
                  "\nsizes " + src.sizes_digest + "\nrange " + std::to_string(spec.doc_begin) +
                  " " + std::to_string(spec.doc_end) + "\nseq_len " + std::to_string(spec.seq_len) +
                  "\nseed " + std::to_string(spec.seed) + "\nsamples " +
                  std::to_string(spec.num_samples) + "\n";
  return sha256_hex(d.data(), d.size()).substr(0, 32);
}

void write_npy(const std::string& path, const void* data, char type, int itemsize,
               const std::vector<int64_t>& shape) {
  size_t count = 1;
  for (int64_t d : shape) count *= (size_t)d;
  const std::string header = npy_header(type, itemsize, shape);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw RunError("cannot write " + tmp + ": " + std::strerror(errno));
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, (size_t)itemsize, count, f) == count && std::fflush(f) == 0 &&
            ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    throw RunError("cannot write " + path);
  }
}

bool read_npy(const std::string& path, char type, int itemsize, const std::vector<int64_t>& shape,
              void* out, size_t out_bytes) {
  const std::string header = npy_header(type, itemsize, shape);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size != header.size() + out_bytes) return false;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  std::string got(header.size(), '\0');
  bool ok = std::fread(got.data(), 1, got.size(), f) == got.size() && got == header &&
            std::fread(out, 1, out_bytes, f) == out_bytes;
  std::fclose(f);
  return ok;
}

namespace {

// Whether arrays read from a cache are internally consistent for (sizes, spec, E, S).
bool plausible(const GptIndices& x, const std::vector<int32_t>& sizes, const GptIndexSpec& spec) {
  for (int32_t d : x.doc_idx)
    if (d < spec.doc_begin || d >= spec.doc_end) return false;
  const int64_t rows = (int64_t)x.sample_idx.size() / 2;
  int64_t prev = 0;
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t pos = x.sample_idx[(size_t)(2 * k)], off = x.sample_idx[(size_t)(2 * k + 1)];
    if (pos < prev || pos >= (int64_t)x.doc_idx.size() || off < 0) return false;
    if (off > 0 && off >= sizes[(size_t)x.doc_idx[(size_t)pos]]) return false;
    prev = pos;
  }
  std::vector<bool> seen(x.shuffle_idx.size(), false);
  for (int64_t s : x.shuffle_idx) {
    if (s < 0 || s >= (int64_t)seen.size() || seen[(size_t)s]) return false;
    seen[(size_t)s] = true;
  }
  return true;
}

}  // namespace

GptIndices load_or_build_gpt_indices(const DocumentSource& src, const GptIndexSpec& spec,
                                     bool use_cache, IndexOrigin* origin) {
  if (origin) *origin = IndexOrigin::kMemory;
  if (!use_cache || src.cache_prefix.empty() || spec.pad) return build_gpt_indices(src.sizes, spec);

  const std::string stem = src.cache_prefix + "." + gpt_index_hash(src, spec);
  const std::string doc_path = stem + ".doc_idx.npy", sample_path = stem + ".sample_idx.npy",
                    shuffle_path = stem + ".shuffle_idx.npy";
  // The shapes follow from the sizes alone; a file of another shape is stale or corrupt.
  int64_t T = 0;
  for (int64_t d = spec.doc_begin; d < spec.doc_end; ++d) T += src.sizes[(size_t)d];
  if (T > 0 && spec.seq_len > 0) {
    const int64_t n = spec.doc_end - spec.doc_begin;
    const int64_t E = num_epochs(T, spec.seq_len, spec.num_samples, n);
    const int64_t S = (E * T - 1) / spec.seq_len;
    GptIndices x;
    x.num_epochs = E;
    size_index(x, E, n, S);
    if (read_npy(doc_path, 'i', 4, {E * n}, x.doc_idx.data(), x.doc_idx.size() * 4) &&
        read_npy(sample_path, 'i', 8, {S + 1, 2}, x.sample_idx.data(), x.sample_idx.size() * 8) &&
        read_npy(shuffle_path, 'i', 8, {S}, x.shuffle_idx.data(), x.shuffle_idx.size() * 8) &&
        plausible(x, src.sizes, spec)) {
      spdlog::info("data: {}: index of {} samples loaded from {}.*_idx.npy", src.name, S, stem);
      if (origin) *origin = IndexOrigin::kLoaded;
      return x;
    }
  }
  GptIndices x = build_gpt_indices(src.sizes, spec);
  if (origin) *origin = IndexOrigin::kBuilt;
  try {
    const int64_t S = (int64_t)x.shuffle_idx.size();
    write_npy(doc_path, x.doc_idx.data(), 'i', 4, {(int64_t)x.doc_idx.size()});
    write_npy(sample_path, x.sample_idx.data(), 'i', 8, {S + 1, 2});
    write_npy(shuffle_path, x.shuffle_idx.data(), 'i', 8, {S});
    spdlog::info("data: {}: index of {} samples built and cached at {}.*_idx.npy", src.name, S,
                 stem);
  } catch (const RunError& e) {
    spdlog::warn("data: {}: index not cached ({}); it is rebuilt on every run", src.name, e.what());
  }
  return x;
}

GptDataset::GptDataset(std::shared_ptr<DocumentSource> src, const GptIndexSpec& spec,
                       bool use_cache)
    : src_(std::move(src)), spec_(spec) {
  idx_ = load_or_build_gpt_indices(*src_, spec_, use_cache);
}

void GptDataset::check_sample(int64_t i) const {
  if (i < 0 || i >= size())
    throw RunError(src_->name + ": sample " + std::to_string(i) + " out of range [0, " +
                   std::to_string(size()) + ")");
}

int32_t GptDataset::document(int64_t i) const {
  if (!spec_.pad) throw RunError(src_->name + ": only a padded sample is one document");
  check_sample(i);
  return idx_.doc_idx[(size_t)idx_.sample_idx[(size_t)(2 * idx_.shuffle_idx[(size_t)i])]];
}

int64_t GptDataset::text(int64_t i, int32_t* out) const {
  check_sample(i);
  const int64_t j = idx_.shuffle_idx[(size_t)i];
  if (spec_.pad) {  // one document from its start, cut and padded with 0
    const int32_t doc = document(i);
    const int32_t* ids = nullptr;
    size_t len = 0;
    check(src_->api->document(src_->ds, doc, &ids, &len),
          "reading document " + std::to_string(doc));
    const int64_t n = std::min<int64_t>((int64_t)len, spec_.seq_len + 1);
    if (n > 0) std::memcpy(out, ids, (size_t)n * sizeof(int32_t));
    std::fill(out + n, out + spec_.seq_len + 1, 0);
    return n;
  }
  const int64_t p0 = idx_.sample_idx[(size_t)(2 * j)], o0 = idx_.sample_idx[(size_t)(2 * j + 1)];
  const int64_t p1 = idx_.sample_idx[(size_t)(2 * j + 2)],
                o1 = idx_.sample_idx[(size_t)(2 * j + 3)];
  const int64_t want = spec_.seq_len + 1;
  int64_t n = 0;
  for (int64_t p = p0; p <= p1; ++p) {
    const int32_t doc = idx_.doc_idx[(size_t)p];
    const int32_t* ids = nullptr;
    size_t len = 0;
    check(src_->api->document(src_->ds, doc, &ids, &len),
          "reading document " + std::to_string(doc));
    const int64_t from = p == p0 ? o0 : 0;
    const int64_t to = p == p1 ? o1 + 1 : (int64_t)len;  // exclusive
    if (to > (int64_t)len || from > to || n + (to - from) > want)
      throw RunError(src_->name + ": document " + std::to_string(doc) +
                     " changed length since the index was built (stale cache?)");
    // An empty document may hand out a null pointer: copy nothing rather than memcpy(null).
    if (to > from) std::memcpy(out + n, ids + from, (size_t)(to - from) * sizeof(int32_t));
    n += to - from;
  }
  if (n != want)
    throw RunError(src_->name + ": sample " + std::to_string(i) + " has " + std::to_string(n) +
                   " tokens instead of " + std::to_string(want));
  return n;
}

}  // namespace loom::engine
