// Input files of `loom preprocess`: plain, gzip or zstd, told apart by their first bytes
// (not their names), read as one stream of decompressed bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom::engine {

class InputFile {
 public:
  // Throws RunError naming the file when it cannot be opened.
  static std::unique_ptr<InputFile> open(const std::string& path);
  virtual ~InputFile() = default;
  // Up to `n` decompressed bytes into `buf`; 0 at the end. Throws RunError on a read or
  // decompression error.
  virtual size_t read(char* buf, size_t n) = 0;
  // Bytes of the file itself consumed so far, and its size: progress for compressed input.
  virtual uint64_t consumed() const = 0;
  uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }
  const char* format() const { return format_; }  // "plain", "gzip", "zstd"

 protected:
  std::string path_;
  uint64_t size_ = 0;
  const char* format_ = "plain";
};

}  // namespace loom::engine
