// Loom SDK C++ helpers (header-only): Megatron-LM's indexed dataset, `<prefix>.bin` +
// `<prefix>.idx`, read, written and validated byte for byte (the layout is stated in
// ../shared/design/MEGATRON_FORMATS.md §1 and docs/data.md). The engine (`loom preprocess`,
// `loom data inspect`) and dataset/indexed use this one implementation.
//
// .idx, little-endian, no padding:
//   magic "MMIDIDX\0\0" | u64 version 1 | u8 dtype code | u64 N sequences | u64 M = documents+1
//   | i32 lengths[N] | i64 byte pointers[N] | i64 document indices[M] | (i8 modes[N], optional)
// .bin: the sequences' tokens back to back, no header.
//
// Needs C++17 and POSIX (open/mmap). Not thread-safe per object; a Reader may be read from
// several threads once constructed (every accessor is const and touches no state).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/cpp/regular_file.hpp"

namespace loom::megatron {

static_assert(sizeof(int32_t) == 4 && sizeof(int64_t) == 8, "fixed-width integers");

// The magic bytes, the version and the header size of an .idx file.
inline constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIdxVersion = 1;
inline constexpr size_t kIdxHeaderBytes = 34;  // 9 + 8 + 1 + 8 + 8

// Token dtype codes as stored in the header (numpy dtypes in Megatron).
enum class DType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

inline bool valid_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

inline size_t itemsize(DType d) {
  switch (d) {
    case DType::u8:
    case DType::i8:
      return 1;
    case DType::i16:
    case DType::u16:
      return 2;
    case DType::i32:
    case DType::f32:
      return 4;
    case DType::i64:
    case DType::f64:
      return 8;
  }
  return 0;
}

inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::u8:
      return "uint8";
    case DType::i8:
      return "int8";
    case DType::i16:
      return "int16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::f64:
      return "float64";
    case DType::f32:
      return "float32";
    case DType::u16:
      return "uint16";
  }
  return "?";
}

// Megatron's choice of token dtype for an (unpadded) vocabulary size.
inline DType dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? DType::u16 : DType::i32;
}

inline std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }
inline std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }
// A dataset's prefix from what a user may write for it: the prefix, or either file's path.
inline std::string prefix_of(std::string path) {
  for (const std::string ext : {".idx", ".bin"})
    if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
      path.resize(path.size() - ext.size());
  return path;
}

// A file that is missing, unreadable, or not a valid indexed dataset. what() names the file
// and the problem: "data.bin: truncated: .bin has 1000 bytes, the index needs 1024".
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

inline std::string errno_text(int err) { return std::strerror(err); }

// Little-endian loads and stores; the .idx arrays are not naturally aligned (lengths start
// at byte 34), so every access goes through memcpy.
template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void append(std::string& out, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  out.append(b, sizeof v);
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the indexed format is little-endian; this helper assumes a little-endian host");

// A read-only mapping of a whole file (nothing mapped for an empty file).
class Mapping {
 public:
  Mapping() = default;
  explicit Mapping(const std::string& path) {
    std::string why;
    const int fd = open_regular_file(path, why);  // never a FIFO or /dev/zero
    if (fd < 0) throw FormatError(why);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw FormatError(path + ": cannot stat: " + errno_text(err));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw FormatError(path + ": cannot mmap: " + errno_text(err));
      }
      data_ = static_cast<const unsigned char*>(p);
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  Mapping(Mapping&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(o.size_) {}
  Mapping& operator=(Mapping&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// write(2) all of `n` bytes or throw.
inline void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw FormatError(path + ": write failed: " + errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

inline int open_for_write(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw FormatError(path + ": cannot create: " + errno_text(errno));
  return fd;
}

}  // namespace detail

// Reads a dataset through two read-only mappings, after checking every structural invariant
// of the format (O(N + M) at open). Throws FormatError naming the file and the problem.
class Reader {
 public:
  explicit Reader(const std::string& prefix)
      : prefix_(prefix), idx_(idx_path(prefix)), bin_(bin_path(prefix)) {
    validate();
  }

  const std::string& prefix() const { return prefix_; }
  DType dtype() const { return dtype_; }
  size_t itemsize() const { return megatron::itemsize(dtype_); }
  int64_t num_sequences() const { return n_; }
  int64_t num_documents() const { return m_ - 1; }
  bool has_modes() const { return has_modes_; }
  size_t idx_bytes() const { return idx_.size(); }
  size_t bin_bytes() const { return bin_.size(); }
  int64_t num_tokens() const { return static_cast<int64_t>(bin_.size() / itemsize()); }

  // Unchecked accessors (callers keep i in range).
  int32_t length(int64_t i) const { return detail::load<int32_t>(lengths_ + 4 * i); }
  int64_t pointer(int64_t i) const { return detail::load<int64_t>(pointers_ + 8 * i); }
  // Document d covers sequences [document_index(d), document_index(d + 1)), d < M - 1.
  int64_t document_index(int64_t d) const { return detail::load<int64_t>(doc_idx_ + 8 * d); }
  int8_t mode(int64_t i) const { return has_modes_ ? static_cast<int8_t>(modes_[i]) : 0; }
  // The raw bytes of sequence i (length(i) * itemsize() bytes, aligned to the item size).
  const void* raw(int64_t i) const { return bin_.data() ? bin_.data() + pointer(i) : nullptr; }

  // Sequence i converted to int32 ids into `out` (resized). Throws for an id that does not
  // fit an int32 (possible only with int64/float dtypes).
  void read(int64_t i, std::vector<int32_t>& out) const {
    if (i < 0 || i >= n_)
      throw std::out_of_range(prefix_ + ": sequence " + std::to_string(i) + " out of range [0, " +
                              std::to_string(n_) + ")");
    const size_t len = static_cast<size_t>(length(i));
    out.resize(len);
    if (len > 0) convert(i, static_cast<const unsigned char*>(raw(i)), len, out.data());
  }

 private:
  template <class T>
  static void widen(const unsigned char* p, size_t n, int32_t* out) {
    for (size_t k = 0; k < n; ++k)
      out[k] = static_cast<int32_t>(detail::load<T>(p + k * sizeof(T)));
  }
  template <class T>
  void narrow(int64_t seq, const unsigned char* p, size_t n, int32_t* out) const {
    for (size_t k = 0; k < n; ++k) {
      const T v = detail::load<T>(p + k * sizeof(T));
      bool ok = false;
      if constexpr (std::is_floating_point_v<T>) {
        const double d = static_cast<double>(v);
        ok = d >= -2147483648.0 && d < 2147483648.0 && d == std::floor(d);
      } else {
        ok = v >= INT32_MIN && v <= INT32_MAX;
      }
      if (!ok)
        throw FormatError(bin_path(prefix_) + ": sequence " + std::to_string(seq) + " token " +
                          std::to_string(k) + " is not an int32 token id");
      out[k] = static_cast<int32_t>(v);
    }
  }
  void convert(int64_t seq, const unsigned char* p, size_t n, int32_t* out) const {
    switch (dtype_) {
      case DType::u8:
        return widen<uint8_t>(p, n, out);
      case DType::i8:
        return widen<int8_t>(p, n, out);
      case DType::i16:
        return widen<int16_t>(p, n, out);
      case DType::u16:
        return widen<uint16_t>(p, n, out);
      case DType::i32:
        return widen<int32_t>(p, n, out);
      case DType::i64:
        return narrow<int64_t>(seq, p, n, out);
      case DType::f32:
        return narrow<float>(seq, p, n, out);
      case DType::f64:
        return narrow<double>(seq, p, n, out);
    }
  }

  [[noreturn]] void fail_idx(const std::string& what) const {
    throw FormatError(idx_path(prefix_) + ": " + what);
  }

  void validate() {
    const unsigned char* p = idx_.data();
    const size_t size = idx_.size();
    if (size < kIdxHeaderBytes)
      fail_idx("truncated: " + std::to_string(size) + " bytes, shorter than the " +
               std::to_string(kIdxHeaderBytes) + "-byte header");
    if (std::memcmp(p, kIdxMagic, sizeof kIdxMagic) != 0)
      fail_idx("bad magic: not a Megatron indexed dataset index (expected \"MMIDIDX\\0\\0\")");
    const uint64_t version = detail::load<uint64_t>(p + 9);
    if (version != kIdxVersion)
      fail_idx("unsupported version " + std::to_string(version) + " (expected 1)");
    const uint8_t code = p[17];
    if (!valid_dtype_code(code))
      fail_idx("unknown dtype code " + std::to_string(code) + " (expected 1-8)");
    dtype_ = static_cast<DType>(code);
    const uint64_t n = detail::load<uint64_t>(p + 18), m = detail::load<uint64_t>(p + 26);
    if (m < 1) fail_idx("document count M is 0 (M = documents + 1 is at least 1)");
    // Bound N and M by the file size before any arithmetic can overflow.
    if (n > size / 12 || m > size / 8)
      fail_idx("truncated: " + std::to_string(size) + " bytes cannot hold N=" + std::to_string(n) +
               " sequences and M=" + std::to_string(m) + " document indices");
    const size_t need = kIdxHeaderBytes + 12 * n + 8 * m;
    if (size == need) {
      has_modes_ = false;
    } else if (size == need + n && n > 0) {
      has_modes_ = true;
    } else if (size < need) {
      fail_idx("truncated: .idx has " + std::to_string(size) + " bytes, N=" + std::to_string(n) +
               " and M=" + std::to_string(m) + " need " + std::to_string(need));
    } else {
      fail_idx("size mismatch: .idx has " + std::to_string(size) +
               " bytes, N=" + std::to_string(n) + " and M=" + std::to_string(m) + " need " +
               std::to_string(need) + " (or " + std::to_string(need + n) + " with modes)");
    }
    n_ = static_cast<int64_t>(n);
    m_ = static_cast<int64_t>(m);
    lengths_ = p + kIdxHeaderBytes;
    pointers_ = lengths_ + 4 * n;
    doc_idx_ = pointers_ + 8 * n;
    modes_ = doc_idx_ + 8 * m;

    const uint64_t item = itemsize();
    uint64_t expect = 0;  // where the next sequence starts in .bin, in bytes
    for (int64_t i = 0; i < n_; ++i) {
      const int32_t len = length(i);
      if (len < 0) fail_idx("sequence " + std::to_string(i) + " has negative length");
      if (static_cast<uint64_t>(pointer(i)) != expect || pointer(i) < 0)
        fail_idx("inconsistent pointers: sequence " + std::to_string(i) + " starts at byte " +
                 std::to_string(pointer(i)) + ", the lengths before it put it at " +
                 std::to_string(expect));
      expect += static_cast<uint64_t>(len) * item;  // < 2^34 per step: no overflow for sane N
      if (expect > static_cast<uint64_t>(INT64_MAX)) fail_idx("lengths overflow int64 pointers");
    }
    if (document_index(0) != 0)
      fail_idx("document indices start at " + std::to_string(document_index(0)) + ", not 0");
    for (int64_t d = 1; d < m_; ++d)
      if (document_index(d) < document_index(d - 1))
        fail_idx("document indices decrease at entry " + std::to_string(d) + " (" +
                 std::to_string(document_index(d - 1)) + " then " +
                 std::to_string(document_index(d)) + ")");
    if (document_index(m_ - 1) != n_)
      fail_idx("the last document index is " + std::to_string(document_index(m_ - 1)) +
               ", not the sequence count " + std::to_string(n_));

    const size_t bin_size = bin_.size();
    if (bin_size != expect)
      throw FormatError(bin_path(prefix_) + ": " +
                        (bin_size < expect ? "truncated" : "size mismatch") + ": .bin has " +
                        std::to_string(bin_size) + " bytes, the index needs " +
                        std::to_string(expect));
  }

  std::string prefix_;
  detail::Mapping idx_, bin_;
  DType dtype_ = DType::u16;
  int64_t n_ = 0, m_ = 1;
  bool has_modes_ = false;
  const unsigned char *lengths_ = nullptr, *pointers_ = nullptr, *doc_idx_ = nullptr,
                      *modes_ = nullptr;
};

// Streams a dataset to disk: sequences are appended to `<prefix>.bin.tmp` as they come,
// the index arrays stay in memory (4 bytes per sequence, 8 per document), and finalize()
// writes `<prefix>.idx.tmp`, fsyncs both, removes any old `<prefix>.idx`, then renames
// .bin.tmp -> .bin and .idx.tmp -> .idx, the index last. An interrupted run therefore never
// leaves an .idx beside a .bin it does not describe; a Writer destroyed before finalize
// removes its temporary files.
class Writer {
 public:
  Writer(std::string prefix, DType dtype)
      : prefix_(std::move(prefix)), dtype_(dtype), item_(megatron::itemsize(dtype)) {
    if (dtype_ != DType::u8 && dtype_ != DType::i8 && dtype_ != DType::i16 &&
        dtype_ != DType::u16 && dtype_ != DType::i32 && dtype_ != DType::i64)
      throw FormatError(prefix_ + ": the writer stores integer token dtypes only, not " +
                        dtype_name(dtype_));
    bin_fd_ = detail::open_for_write(tmp_bin());
    doc_idx_.push_back(0);
    buf_.reserve(kBufBytes);
  }
  ~Writer() {
    if (bin_fd_ >= 0) ::close(bin_fd_);
    if (!finalized_) {
      ::unlink(tmp_bin().c_str());
      ::unlink(tmp_idx().c_str());
    }
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Appends one sequence. Throws when an id does not fit the dtype.
  void add_sequence(const int32_t* ids, size_t n) {
    if (finalized_) throw FormatError(prefix_ + ": add_sequence after finalize");
    if (n > static_cast<size_t>(INT32_MAX))
      throw FormatError(prefix_ + ": a sequence of " + std::to_string(n) +
                        " tokens exceeds the format's int32 length");
    switch (dtype_) {
      case DType::u8:
        put<uint8_t>(ids, n, 0, 255);
        break;
      case DType::i8:
        put<int8_t>(ids, n, -128, 127);
        break;
      case DType::i16:
        put<int16_t>(ids, n, INT16_MIN, INT16_MAX);
        break;
      case DType::u16:
        put<uint16_t>(ids, n, 0, 65535);
        break;
      case DType::i32:
        put<int32_t>(ids, n, INT32_MIN, INT32_MAX);
        break;
      default:
        put<int64_t>(ids, n, INT32_MIN, INT32_MAX);
        break;
    }
    lengths_.push_back(static_cast<int32_t>(n));
    tokens_ += static_cast<int64_t>(n);
  }
  void add_sequence(const std::vector<int32_t>& ids) { add_sequence(ids.data(), ids.size()); }
  // Ends the current document: the sequences added since the last call form it (possibly
  // none: an empty document still gets its index entry).
  void end_document() { doc_idx_.push_back(static_cast<int64_t>(lengths_.size())); }

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return tokens_; }
  const std::string& prefix() const { return prefix_; }

  // Writes the index and moves both files into place (see the class comment).
  void finalize() {
    if (finalized_) return;
    flush();
    fsync_close(std::exchange(bin_fd_, -1), tmp_bin());
    const int fd = detail::open_for_write(tmp_idx());
    try {
      write_index(fd);
      fsync_close(fd, tmp_idx());
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::unlink(idx_path(prefix_).c_str()) != 0 && errno != ENOENT)
      throw FormatError(idx_path(prefix_) + ": cannot replace: " + detail::errno_text(errno));
    rename(tmp_bin(), bin_path(prefix_));
    rename(tmp_idx(), idx_path(prefix_));
    finalized_ = true;
  }

 private:
  static constexpr size_t kBufBytes = size_t{1} << 20;

  std::string tmp_bin() const { return bin_path(prefix_) + ".tmp"; }
  std::string tmp_idx() const { return idx_path(prefix_) + ".tmp"; }

  template <class T>
  void put(const int32_t* ids, size_t n, int64_t lo, int64_t hi) {
    const size_t at = buf_.size();
    buf_.resize(at + n * sizeof(T));  // may exceed kBufBytes by one long sequence
    char* out = buf_.data() + at;
    for (size_t k = 0; k < n; ++k) {
      const int64_t v = ids[k];
      if (v < lo || v > hi) {
        buf_.resize(at);
        throw FormatError(prefix_ + ": token id " + std::to_string(v) + " does not fit " +
                          dtype_name(dtype_));
      }
      const T t = static_cast<T>(v);
      std::memcpy(out + k * sizeof(T), &t, sizeof(T));
    }
    if (buf_.size() >= kBufBytes) flush();
  }
  void flush() {
    detail::write_all(bin_fd_, buf_.data(), buf_.size(), tmp_bin());
    buf_.clear();
  }
  static void fsync_close(int fd, const std::string& path) {
    if (::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      throw FormatError(path + ": fsync failed: " + detail::errno_text(err));
    }
    if (::close(fd) != 0) throw FormatError(path + ": close failed: " + detail::errno_text(errno));
  }
  static void rename(const std::string& from, const std::string& to) {
    if (std::rename(from.c_str(), to.c_str()) != 0)
      throw FormatError(to + ": cannot rename " + from +
                        " into place: " + detail::errno_text(errno));
  }
  void write_index(int fd) {
    const std::string path = tmp_idx();
    std::string out;
    auto spill = [&] {
      if (out.size() >= kBufBytes) {
        detail::write_all(fd, out.data(), out.size(), path);
        out.clear();
      }
    };
    out.append(kIdxMagic, sizeof kIdxMagic);
    detail::append<uint64_t>(out, kIdxVersion);
    out.push_back(static_cast<char>(dtype_));
    detail::append<uint64_t>(out, lengths_.size());
    detail::append<uint64_t>(out, doc_idx_.size());
    for (int32_t len : lengths_) {
      detail::append<int32_t>(out, len);
      spill();
    }
    int64_t ptr = 0;
    for (int32_t len : lengths_) {
      detail::append<int64_t>(out, ptr);
      ptr += static_cast<int64_t>(len) * static_cast<int64_t>(item_);
      spill();
    }
    for (int64_t d : doc_idx_) {
      detail::append<int64_t>(out, d);
      spill();
    }
    detail::write_all(fd, out.data(), out.size(), path);
  }

  std::string prefix_;
  DType dtype_;
  size_t item_;
  int bin_fd_ = -1;
  std::string buf_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_idx_;
  int64_t tokens_ = 0;
  bool finalized_ = false;
};

}  // namespace loom::megatron
