#include "checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/errors.hpp"
#include "base/require_regular.hpp"

namespace loom::engine {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

static void fsync_path(const std::filesystem::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_safetensors(const std::filesystem::path& path, const StFile& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');  // data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw RunError("cannot write " + path.string());
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), (std::streamsize)text.size());
  for (const auto& [name, t] : tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()), (std::streamsize)t.data.size());
  out.close();
  if (!out) throw RunError("writing " + path.string() + " failed (disk full?)");
  fsync_path(path);
}

namespace {

// The JSON header of an open safetensors file; `n` its length, `file_size` the file's.
nlohmann::json read_header(std::ifstream& in, const std::filesystem::path& path, uint64_t& n,
                           uint64_t& file_size) {
  auto fail = [&](const std::string& why) -> RunError {
    return RunError(path.string() + ": " + why);
  };
  if (!in) throw fail("cannot open");
  in.seekg(0, std::ios::end);
  file_size = (uint64_t)in.tellg();
  in.seekg(0);
  if (file_size < 8) throw fail("truncated: " + std::to_string(file_size) + " bytes, no header");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  n = 0;
  for (int i = 0; i < 8; ++i) n |= (uint64_t)len[i] << (8 * i);
  if (n > file_size - 8) throw fail("truncated: header of " + std::to_string(n) + " bytes");
  std::string text(n, '\0');
  in.read(text.data(), (std::streamsize)n);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw fail(std::string("corrupt header: ") + e.what());
  }
  if (!header.is_object()) throw fail("corrupt header: not a JSON object");
  return header;
}

void read_metadata(const nlohmann::json& v, const std::filesystem::path& path,
                   std::map<std::string, std::string>& out) {
  try {
    for (auto& [k, mv] : v.items()) out[k] = mv.get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw RunError(path.string() + ": corrupt __metadata__ (not strings): " + e.what());
  }
}

}  // namespace

std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path) {
  require_regular_file(path.string());
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0, file_size = 0;
  nlohmann::json header = read_header(in, path, n, file_size);
  std::map<std::string, std::string> out;
  if (header.contains("__metadata__")) read_metadata(header["__metadata__"], path, out);
  return out;
}

namespace {

// read_safetensors, and read_safetensors_shapes when `with_data` is false.
StFile read_file(const std::filesystem::path& path, std::map<std::string, std::string>* metadata,
                 const std::function<bool(const std::string&)>& want, bool with_data) {
  auto fail = [&](const std::string& why) -> RunError {
    return RunError(path.string() + ": " + why);
  };
  require_regular_file(path.string());
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0, file_size = 0;
  nlohmann::json header = read_header(in, path, n, file_size);
  uint64_t data_size = file_size - 8 - n;
  StFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (metadata) read_metadata(v, path, *metadata);
      continue;
    }
    try {
      StTensor t;
      t.dtype = v.at("dtype").get<std::string>();
      // Integers only: nlohmann converts a float (4.6e21 written as an integer too large for
      // 64 bits) to an integer type with undefined behaviour.
      for (const char* key : {"shape", "data_offsets"})
        for (const nlohmann::json& x : v.at(key))
          if (!x.is_number_integer())
            throw fail("tensor " + name + ": " + key + " holds " + x.dump(-1).substr(0, 40) +
                       ", not a 64-bit integer");
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      size_t es = dtype_size(t.dtype);
      if (es == 0) throw fail("tensor " + name + ": unsupported dtype " + t.dtype);
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
        throw fail("truncated or corrupt: tensor " + name + " lies outside the file's " +
                   std::to_string(data_size) + " data bytes");
      uint64_t numel = 1;
      for (int64_t d : t.shape) {
        if (d < 0) throw fail("tensor " + name + ": negative dimension");
        // numel * es is at most the data size (checked below): larger shapes stop here,
        // before the product can wrap around to a size that matches.
        if (d > 0 && numel > data_size / es / (uint64_t)d)
          throw fail("tensor " + name + ": shape " + shape_str(t.shape) + " of " + t.dtype +
                     " is larger than the file's " + std::to_string(data_size) + " data bytes");
        numel *= (uint64_t)d;
      }
      if (numel * es != off[1] - off[0])
        throw fail("tensor " + name + ": " + std::to_string(off[1] - off[0]) +
                   " bytes for shape of " + std::to_string(numel) + " elements");
      ranges.push_back({off[0], off[1]});
      if (want && !want(name)) continue;
      if (!with_data) {
        out.emplace(name, std::move(t));
        continue;
      }
      t.data.resize(off[1] - off[0]);
      in.seekg((std::streamoff)(8 + n + off[0]));
      in.read(reinterpret_cast<char*>(t.data.data()), (std::streamsize)t.data.size());
      if (!in) throw fail("truncated while reading tensor " + name);
      out.emplace(name, std::move(t));
    } catch (const nlohmann::json::exception& e) {
      throw fail("corrupt header entry for " + name + ": " + e.what());
    }
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t end = 0;
  for (auto& [b, e] : ranges) {
    if (b < end) throw fail("corrupt: overlapping tensor data");
    end = e;
  }
  if (end != data_size)
    throw fail("size mismatch: tensors cover " + std::to_string(end) + " of " +
               std::to_string(data_size) + " data bytes");
  return out;
}

}  // namespace

StFile read_safetensors(const std::filesystem::path& path,
                        std::map<std::string, std::string>* metadata,
                        const std::function<bool(const std::string&)>& want) {
  return read_file(path, metadata, want, true);
}

StFile read_safetensors_shapes(const std::filesystem::path& path) {
  return read_file(path, nullptr, {}, false);
}

}  // namespace loom::engine
