// Safetensors files: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and [begin, end) byte range, then the raw data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace loom::engine {

struct StTensor {
  std::string dtype;  // "F32", "F64", "BF16", "F16", "I32"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

using StFile = std::map<std::string, StTensor>;

// Writes `tensors` (and string metadata) to `path` and fsyncs it.
void write_safetensors(const std::filesystem::path& path, const StFile& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Reads and validates a whole file: header well-formed, every range inside the file,
// sizes consistent with dtype and shape, no overlaps, nothing missing at the end.
// Throws RunError naming the file and what is wrong.
// `want`, when given, picks the tensors to read (the header is checked whole either way).
StFile read_safetensors(const std::filesystem::path& path,
                        std::map<std::string, std::string>* metadata = nullptr,
                        const std::function<bool(const std::string&)>& want = {});

// Every tensor's dtype and shape (no data), the header checked as read_safetensors checks it:
// what a reader compares with a config before it allocates anything.
StFile read_safetensors_shapes(const std::filesystem::path& path);

// The string metadata of a file ("__metadata__"), reading the header only.
std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path);

size_t dtype_size(const std::string& dtype);
std::string shape_str(const std::vector<int64_t>& shape);  // "(2, 3)", for messages

}  // namespace loom::engine
