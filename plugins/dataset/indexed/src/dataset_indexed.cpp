// dataset/indexed: a Megatron-LM indexed dataset (`<prefix>.bin` + `<prefix>.idx`, as
// `loom preprocess` or Megatron's tools/preprocess_data.py write it).
//
// Documents handed to the host are the file's *sequences* (Megatron's GPT dataset samples
// sequences; without --split-sentences there is one per document). Both files are mapped
// read-only and fully validated at create, so a truncated or corrupt dataset is refused
// with the file and the reason (LOOM_ERR_IO) before training starts. Token ids of any
// dtype are converted to int32 into one instance buffer, valid until the next call.
#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/dataset.hpp"
#include "loom/cpp/megatron_indexed.hpp"
#include "loom/cpp/plugin.hpp"

namespace {

class IndexedDataset {
 public:
  // Accept a path to either file too: "data_text_document.idx" means its prefix.
  IndexedDataset(const loom_host* host, const loom::Config& c)
      : host_(host), prefix_(loom::megatron::prefix_of(c.get_string("prefix"))) {
    loom::require(!prefix_.empty(), "dataset/indexed: [data] prefix is empty");
    try {
      reader_ = std::make_unique<loom::megatron::Reader>(prefix_);
    } catch (const loom::megatron::FormatError& e) {
      throw loom::Error(LOOM_ERR_IO, std::string("dataset/indexed: ") + e.what());
    }
  }
  const loom_host* host() const { return host_; }
  // Index caches go beside the dataset, as Megatron keeps them.
  const char* cache_prefix() const { return prefix_.c_str(); }
  int64_t num_documents() const { return reader_->num_sequences(); }

  void document(int64_t i, const int32_t** ids, size_t* num_ids) {
    loom::require(i >= 0 && i < num_documents(), "dataset/indexed: document " + std::to_string(i) +
                                                     " out of range [0, " +
                                                     std::to_string(num_documents()) + ")");
    try {
      reader_->read(i, ids_);
    } catch (const loom::megatron::FormatError& e) {
      throw loom::Error(LOOM_ERR_IO, std::string("dataset/indexed: ") + e.what());
    }
    loom::view_ids(ids_, ids, num_ids);
  }

 private:
  const loom_host* host_;
  std::string prefix_;
  std::unique_ptr<loom::megatron::Reader> reader_;
  std::vector<int32_t> ids_;
};

const loom_dataset_api kApi =
    loom::DocumentDatasetTable<IndexedDataset>::api(loom::create_dataset<IndexedDataset>);

const loom_param_spec kParams[] = {
    loom::param("prefix", LOOM_PARAM_STRING, nullptr,
                "path prefix of <prefix>.bin and <prefix>.idx (relative to the working directory)"),
};

}  // namespace

LOOM_PLUGIN(.description =
                "Megatron-LM indexed dataset (.bin/.idx, as `loom preprocess` writes it); one "
                "document per sequence",
            .params = kParams, .api = &kApi)
