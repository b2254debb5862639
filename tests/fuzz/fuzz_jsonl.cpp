// libFuzzer harness: JSON-lines input. The file is read the way `loom preprocess` reads its
// input (preprocess_input.cpp: plain, gzip or zstd told apart by their first bytes, capped
// here at 4 MiB of output) and the way training reads it (plugins/dataset/jsonl: one
// object per line, its "text" tokenised). The tokenizer is a stand-in: one id per byte,
// 256 = end of document. Input: the file.
#include "base/errors.hpp"
#include "data/preprocess_input.hpp"
#include "fuzz_host.hpp"

extern "C" const loom_plugin_descriptor* loom_plugin_entry(uint32_t, uint32_t);

namespace {

// One id per byte; the end-of-document id is 256.
struct ByteTokenizer {
  std::vector<int32_t> ids;
  static ByteTokenizer* self(loom_tokenizer* t) { return reinterpret_cast<ByteTokenizer*>(t); }
  static loom_tokenizer_api api() {
    loom_tokenizer_api a{};
    a.struct_size = LOOM_TOKENIZER_API_SIZE_V2;
    a.vocab_size = [](loom_tokenizer*) -> int64_t { return 257; };
    a.eod_id = [](loom_tokenizer*) -> int64_t { return 256; };
    a.encode = [](loom_tokenizer* t, const char* text, size_t len, const int32_t** ids,
                  size_t* n) -> loom_error* {
      auto& v = self(t)->ids;
      v.assign(reinterpret_cast<const uint8_t*>(text),
               reinterpret_cast<const uint8_t*>(text) + len);
      *ids = v.data();
      *n = v.size();
      return nullptr;
    };
    return a;
  }
};

void read_input(const std::string& path) {
  try {
    std::unique_ptr<loom::engine::InputFile> in = loom::engine::InputFile::open(path);
    std::vector<char> buf(1 << 16);
    size_t total = 0;
    for (size_t got; total < (4u << 20) && (got = in->read(buf.data(), buf.size())) > 0;)
      total += got;
    if (in->consumed() > in->file_size()) std::abort();  // read more of the file than it has
  } catch (const loom::engine::RunError& e) {
    loomfuzz::note(e.what());
  }
}

void load_dataset(const std::string& path, bool append_eod) {
  static loomfuzz::Host host;
  static ByteTokenizer tok;
  static const loom_tokenizer_api tok_api = ByteTokenizer::api();
  host.set_tokenizer({&tok_api, reinterpret_cast<loom_tokenizer*>(&tok)});
  static const loom_plugin_descriptor* d = loom_plugin_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  const auto* api = static_cast<const loom_dataset_api*>(d->api);
  const loomfuzz::Config c =
      loomfuzz::Host::config(d, {{"path", path}, {"append_eod", append_eod ? "true" : "false"}});
  loom_dataset* ds = nullptr;
  if (!loomfuzz::ok(api->create(host.host(), loomfuzz::as_config(c), &ds))) return;
  const int64_t n = api->num_documents(ds);
  for (int64_t i = -1; i <= n; ++i) {
    const int32_t* ids = nullptr;
    size_t len = 0;
    if (!loomfuzz::ok(api->document(ds, i, &ids, &len))) continue;
    for (size_t k = 0; k < len; ++k)
      if (ids[k] < 0 || ids[k] > 256) std::abort();
  }
  (void)api->cache_prefix(ds);
  api->destroy(ds);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      loomfuzz::put_file("data.jsonl", {reinterpret_cast<const char*>(data), size});
  read_input(path);
  load_dataset(path, size % 2 == 0);
  return 0;
}
