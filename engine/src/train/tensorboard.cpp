#include "train/tensorboard.hpp"

#include <unistd.h>

#include <boost/crc.hpp>
#include <chrono>

#include "base/errors.hpp"
#include "tensorboard_event.pb.h"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t tfrecord_masked_crc(const void* data, size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;  // CRC-32C
  crc.process_bytes(data, n);
  const uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RunError("train.tensorboard: cannot create " + dir.string() + ": " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir / ("events.out.tfevents." + std::to_string((int64_t)now_s()) + "." + host + "." +
                 std::to_string(::getpid()));
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw RunError("train.tensorboard: cannot write " + path_.string());
  loom::tb::Event e;
  e.set_wall_time(now_s());
  e.set_file_version("brain.Event:2");
  record(e.SerializeAsString());
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  loom::tb::Event e;
  e.set_wall_time(now_s());
  e.set_step(step);
  loom::tb::SummaryValue* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  record(e.SerializeAsString());
}

// TFRecord: length (u64 LE), masked CRC of the length, data, masked CRC of the data.
void TensorBoardWriter::record(const std::string& bytes) {
  std::string head;
  put_le(head, bytes.size(), 8);
  std::string rec = head;
  put_le(rec, tfrecord_masked_crc(head.data(), head.size()), 4);
  rec += bytes;
  put_le(rec, tfrecord_masked_crc(bytes.data(), bytes.size()), 4);
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
  out_.flush();
  if (!out_) throw RunError("train.tensorboard: writing " + path_.string() + " failed");
}

}  // namespace loom::engine
