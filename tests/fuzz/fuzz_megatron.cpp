// libFuzzer harness: the Megatron indexed dataset reader (loom/cpp/megatron_indexed.hpp)
// directly and through dataset/indexed, the plugin that serves it to training. Input: a
// 16-bit length, that many bytes of .idx, the rest is the .bin. A bad pair must be refused
// with FormatError (the plugin: an error), never read out of bounds.
#include "fuzz_host.hpp"
#include "loom/cpp/megatron_indexed.hpp"

extern "C" const loom_plugin_descriptor* loom_plugin_entry(uint32_t, uint32_t);

namespace {

namespace mt = loom::megatron;

// Every sequence and document the reader says it has, read back.
void read_all(const std::string& prefix) {
  try {
    mt::Reader r(prefix);
    std::vector<int32_t> ids;
    int64_t tokens = 0;
    for (int64_t i = 0; i < r.num_sequences(); ++i) {
      (void)r.mode(i);
      r.read(i, ids);
      tokens += static_cast<int64_t>(ids.size());
    }
    if (tokens != r.num_tokens()) std::abort();  // validated lengths cover the .bin exactly
    for (int64_t d = 0; d <= r.num_documents(); ++d)
      if (r.document_index(d) < 0 || r.document_index(d) > r.num_sequences()) std::abort();
  } catch (const mt::FormatError& e) {
    loomfuzz::note(e.what());
  }
}

void through_plugin(const std::string& prefix) {
  static loomfuzz::Host host;
  static const loom_plugin_descriptor* d = loom_plugin_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  const auto* api = static_cast<const loom_dataset_api*>(d->api);
  const loomfuzz::Config c = loomfuzz::Host::config(d, {{"prefix", prefix + ".idx"}});
  loom_dataset* ds = nullptr;
  if (!loomfuzz::ok(api->create(host.host(), loomfuzz::as_config(c), &ds))) return;
  const int64_t n = api->num_documents(ds);
  for (int64_t i = -1; i <= n; ++i) {  // one past each end on purpose
    const int32_t* ids = nullptr;
    size_t len = 0;
    (void)loomfuzz::ok(api->document(ds, i, &ids, &len));
  }
  api->destroy(ds);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loomfuzz::Bytes in(data, size);
  const size_t idx_len = in.u16();
  loomfuzz::put_file("ds.idx", in.take(idx_len));
  loomfuzz::put_file("ds.bin", in.rest());
  const std::string prefix = (loomfuzz::scratch() / "ds").string();
  read_all(prefix);
  through_plugin(prefix);
  return 0;
}
