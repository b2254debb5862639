// libFuzzer harness: the safetensors reader (safetensors.cpp). Input: the file. It must be
// refused with RunError, or read into tensors whose bytes fill their shapes exactly; what
// was read must write and read back the same.
#include "base/errors.hpp"
#include "checkpoint/safetensors.hpp"
#include "fuzz_host.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace le = loom::engine;
  const std::string path =
      loomfuzz::put_file("t.safetensors", {reinterpret_cast<const char*>(data), size});
  try {
    (void)le::read_safetensors_metadata(path);
  } catch (const le::RunError& e) {
    loomfuzz::note(e.what());
  }
  le::StFile file;
  std::map<std::string, std::string> meta;
  try {
    // every other tensor, to cover the partial read too
    bool take = false;
    (void)le::read_safetensors(path, nullptr, [&](const std::string&) { return take = !take; });
    file = le::read_safetensors(path, &meta);
  } catch (const le::RunError& e) {
    loomfuzz::note(e.what());
    return 0;
  }
  for (const auto& [name, t] : file) {
    unsigned __int128 bytes = le::dtype_size(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    if (bytes != t.data.size()) std::abort();  // a tensor's bytes must fill its shape
  }
  const std::string again = (loomfuzz::scratch() / "again.safetensors").string();
  le::write_safetensors(again, file, meta);
  std::map<std::string, std::string> meta2;
  le::StFile back = le::read_safetensors(again, &meta2);
  if (meta2 != meta || back.size() != file.size()) std::abort();
  for (const auto& [name, t] : file) {
    const le::StTensor& b = back.at(name);
    if (b.dtype != t.dtype || b.shape != t.shape || b.data != t.data) std::abort();
  }
  return 0;
}
