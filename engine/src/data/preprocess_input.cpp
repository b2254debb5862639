// Plain, gzip (zlib) and zstd (libzstd streaming) input for `loom preprocess`.
#include "data/preprocess_input.hpp"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/errors.hpp"
#include "base/require_regular.hpp"

namespace loom::engine {

namespace {

std::string errno_text() { return std::strerror(errno); }

class PlainInput : public InputFile {
 public:
  explicit PlainInput(std::FILE* f) : f_(f) {}
  ~PlainInput() override { std::fclose(f_); }
  size_t read(char* buf, size_t n) override {
    const size_t got = std::fread(buf, 1, n, f_);
    if (got < n && std::ferror(f_)) throw RunError(path_ + ": read failed: " + errno_text());
    consumed_ += got;
    return got;
  }
  uint64_t consumed() const override { return consumed_; }

 private:
  std::FILE* f_;
  uint64_t consumed_ = 0;
};

class GzipInput : public InputFile {
 public:
  explicit GzipInput(gzFile gz) : gz_(gz) { gzbuffer(gz_, 1 << 18); }
  ~GzipInput() override { gzclose(gz_); }
  size_t read(char* buf, size_t n) override {
    const unsigned want = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    const int got = gzread(gz_, buf, want);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(gz_, &code);
      throw RunError(path_ + ": gzip: " + (msg ? msg : "read failed"));
    }
    // gzread returns a short count at the end; a truncated stream is an error, not an end.
    if (got == 0) {
      int code = 0;
      const char* msg = gzerror(gz_, &code);
      if (code != Z_OK && code != Z_STREAM_END)
        throw RunError(path_ + ": gzip: " + (msg ? msg : "read failed"));
    }
    return static_cast<size_t>(got);
  }
  uint64_t consumed() const override {
    const z_off_t off = gzoffset(gz_);
    return off < 0 ? 0 : static_cast<uint64_t>(off);
  }

 private:
  gzFile gz_;
};

class ZstdInput : public InputFile {
 public:
  explicit ZstdInput(std::FILE* f)
      : f_(f), dctx_(ZSTD_createDCtx()), in_buf_(ZSTD_DStreamInSize()) {
    if (!dctx_) throw RunError("zstd: cannot create a decompression context");
  }
  ~ZstdInput() override {
    ZSTD_freeDCtx(dctx_);
    std::fclose(f_);
  }
  size_t read(char* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size) {
        const size_t got = std::fread(in_buf_.data(), 1, in_buf_.size(), f_);
        if (got == 0) {
          if (std::ferror(f_)) throw RunError(path_ + ": read failed: " + errno_text());
          if (last_ret_ != 0)
            throw RunError(path_ + ": zstd: truncated input (the last frame is incomplete)");
          return 0;
        }
        consumed_ += got;
        in_ = ZSTD_inBuffer{in_buf_.data(), got, 0};
      }
      const size_t ret = ZSTD_decompressStream(dctx_, &out, &in_);
      if (ZSTD_isError(ret)) throw RunError(path_ + ": zstd: " + ZSTD_getErrorName(ret));
      last_ret_ = ret;
    }
    return out.pos;
  }
  uint64_t consumed() const override { return consumed_; }

 private:
  std::FILE* f_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  size_t last_ret_ = 0;  // 0 when the last frame ended
  uint64_t consumed_ = 0;
};

}  // namespace

std::unique_ptr<InputFile> InputFile::open(const std::string& path) {
  require_regular_file(path);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw RunError(path + ": cannot open: " + errno_text());
  unsigned char magic[4] = {};
  const size_t got = std::fread(magic, 1, 4, f);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::unique_ptr<InputFile> in;
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    std::fclose(f);
    gzFile gz = gzopen(path.c_str(), "rb");
    if (!gz) throw RunError(path + ": cannot open: " + errno_text());
    in = std::make_unique<GzipInput>(gz);
    in->format_ = "gzip";
  } else if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f &&
             magic[3] == 0xfd) {
    std::rewind(f);
    in = std::make_unique<ZstdInput>(f);
    in->format_ = "zstd";
  } else {
    std::rewind(f);
    in = std::make_unique<PlainInput>(f);
  }
  in->path_ = path;
  in->size_ = ec ? 0 : size;
  return in;
}

}  // namespace loom::engine
