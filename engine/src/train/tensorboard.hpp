// TensorBoard event files (train.tensorboard): scalars as Event/Summary protobufs
// (engine/proto/tensorboard_event.proto, Debian's protobuf) in TFRecord framing, each
// record's length and data guarded by a masked CRC-32C (Boost.CRC). One file per run,
// named events.out.tfevents.<seconds>.<host>.<pid> as TensorBoard looks for; every record
// is flushed, so TensorBoard shows a run while it trains.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace loom::engine {

// The masked CRC-32C TFRecord stores: rotate right by 15, add 0xa282ead8.
uint32_t tfrecord_masked_crc(const void* data, size_t n);

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  void scalar(const std::string& tag, int64_t step, double value);
  const std::filesystem::path& path() const { return path_; }

 private:
  void record(const std::string& bytes);
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace loom::engine
