// DPO's reference (train.objective = "dpo"): the log-probability of every pair's chosen and
// rejected conversation under the model the run starts from (its initialisation, or
// checkpoint.finetune's weights; with LoRA, the base, since B starts at zero). It is computed
// once, by a forward-only pass over every pair in document order before the first step, and
// kept as <checkpoint.save>/dpo_reference.bin, which a resumed run reads back: after the first
// update the model is no longer the reference. One model in memory, and no second forward per
// step (TRL's precompute_ref_log_probs).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/tool_output.hpp"
#include "data/gpt_dataset.hpp"
#include "train/train_run.hpp"

namespace loom::engine {

namespace {

namespace fs = std::filesystem;
constexpr const char* kFile = "dpo_reference.bin";
constexpr const char* kMagic = "loom-dpo-reference";

// "<magic> 1 KEY sha256=HEX\n" then 2N little-endian doubles; KEY is "documents=N data=ID
// seq_len=L model=M" (TrainRun::reference_key).
void write_reference_file(const fs::path& path, const std::vector<double>& table,
                          const std::string& key) {
  const size_t bytes = table.size() * sizeof(double);
  const std::string header =
      std::string(kMagic) + " 1 " + key + " sha256=" + sha256_hex(table.data(), bytes) + "\n";
  write_file_atomically(path, [&](const fs::path& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(header.data(), (std::streamsize)header.size());
    out.write(reinterpret_cast<const char*>(table.data()), (std::streamsize)bytes);
    out.flush();
    if (!out) throw RunError("writing " + tmp.string() + " failed");
  });
}

struct ReferenceFile {
  std::map<std::string, std::string> key;  // documents, data, seq_len, model
  std::vector<double> table;
};

// The file at `path`, refused with the reason when it is damaged or holds another number of
// pairs than `documents`.
ReferenceFile read_reference(const fs::path& path, int64_t documents) {
  std::ifstream in(path, std::ios::binary);
  std::string header;
  if (!in || !std::getline(in, header))
    throw RunError("DPO reference " + path.string() + ": cannot be read");
  std::istringstream h(header);
  std::string magic, version, word;
  h >> magic >> version;
  if (magic != kMagic || version != "1")
    throw RunError("DPO reference " + path.string() + ": not a Loom DPO reference file");
  ReferenceFile f;
  while (h >> word)
    if (const size_t eq = word.find('='); eq != std::string::npos)
      f.key[word.substr(0, eq)] = word.substr(eq + 1);
  if (f.key["documents"] != std::to_string(documents))
    throw RunError("DPO reference " + path.string() + ": computed for " + f.key["documents"] +
                   " preference pairs, and this run's data has " + std::to_string(documents) +
                   ": it belongs to another dataset");
  f.table.resize((size_t)(2 * documents));
  const size_t bytes = f.table.size() * sizeof(double);
  in.read(reinterpret_cast<char*>(f.table.data()), (std::streamsize)bytes);
  if ((size_t)in.gcount() != bytes || in.peek() != EOF)
    throw RunError("DPO reference " + path.string() + ": truncated or too long (" +
                   std::to_string(bytes) + " bytes of log-probabilities expected)");
  if (f.key["sha256"] != sha256_hex(f.table.data(), bytes))
    throw RunError("DPO reference " + path.string() + ": its checksum does not match (damaged)");
  return f;
}

// The fields of `key` ("k=v k=v") that `file` gives otherwise, "k: theirs (this run: ours)".
std::string mismatch(const ReferenceFile& file, const std::string& key,
                     const std::vector<std::string>& fields) {
  std::istringstream in(key);
  std::string word, out;
  while (in >> word) {
    const size_t eq = word.find('=');
    const std::string k = word.substr(0, eq), v = word.substr(eq + 1);
    if (std::find(fields.begin(), fields.end(), k) == fields.end()) continue;
    const auto it = file.key.find(k);
    const std::string theirs = it == file.key.end() ? "?" : it->second;
    if (theirs != v) out += (out.empty() ? "" : ", ") + k + " " + theirs + " (this run: " + v + ")";
  }
  return out;
}

}  // namespace

// What a reference depends on: the pairs, the rows' length (a longer conversation is cut at
// seq_len + 1 tokens) and the model the run starts from.
std::string TrainRun::reference_key() const {
  const std::string model = start_model.empty()
                                ? "init:seed" + std::to_string(seed) + ":" + recipe.plugin("model")
                                : start_model;
  return "documents=" + std::to_string(pairs->documents()) + " data=" + pairs->identity() +
         " seq_len=" + std::to_string(seq_len) + " model=" + model;
}

void TrainRun::write_reference(const fs::path& path) const {
  if (rank == 0) write_reference_file(path, reference, reference_key());
}

// The forward-only pass over every pair (COLLECTIVE over the world): each last-stage rank
// records the rows it saw; the world sums rows and counts (context and tensor ranks see the
// same rows: the mean is exact), so that every rank ends with the whole table.
void TrainRun::compute_reference() {
  std::unique_ptr<Sampler> all = pairs->in_order(seq_len);
  const int64_t docs = pairs->documents(), per_micro = mbs * dp;
  int64_t micro = (2 * docs + per_micro - 1) / per_micro;
  micro = (micro + num_micro - 1) / num_micro * num_micro;  // whole steps' worth for the schedule
  feed.sampler = all.get();
  feed.first = 0;
  feed.preference->table = nullptr;
  feed.prepare(micro);
  run_schedule(micro, true, 0.0, &Feed::get, &feed);
  std::vector<double> sums((size_t)(4 * docs), 0.0);  // sums, then counts
  const Feed::Preference& p = *feed.preference;
  for (size_t j = 0; j < p.policy.size(); ++j) {
    if (p.sample[j] < 0 || !std::isfinite(p.policy[j])) continue;  // not the head's stage
    const size_t at = (size_t)all->pair_slot(p.sample[j]);
    sums[at] += p.policy[j];
    sums[(size_t)(2 * docs) + at] += 1.0;
  }
  sum_over(be, comm, nullptr, sums.data(), (int64_t)sums.size());
  reference.assign((size_t)(2 * docs), 0.0);
  for (size_t at = 0; at < reference.size(); ++at) {
    const double n = sums[(size_t)(2 * docs) + at];
    if (n <= 0)
      throw RunError("DPO reference: pair document " + std::to_string(at / 2) +
                     " was not read by any rank holding the head");
    reference[at] = sums[at] / n;
  }
  spdlog::info("dpo: reference log-probabilities of {} pairs computed ({} micro-batches)", docs,
               micro);
}

void TrainRun::prepare_reference() {
  if (!pairs) return;
  const std::string save_dir = recipe.get_string("checkpoint", "save");
  const std::string key = reference_key();
  fs::path from;  // the file the table came from; "" = computed here
  if (start_iter == 0) {
    // `loom eval --logprobs`'s file beside the data, when it is this start's
    const fs::path beside = pairs->stem() + "_" + kFile;
    if (fs::exists(beside)) {
      ReferenceFile f = read_reference(beside, pairs->documents());
      const std::string other = mismatch(f, key, {"data", "seq_len", "model"});
      if (other.empty()) {
        reference = std::move(f.table);
        from = beside;
      } else {
        spdlog::warn("dpo: {} is not this run's reference ({}): computing it", beside.string(),
                     other);
      }
    }
    if (from.empty()) compute_reference();
  } else {  // resumed: the reference is the run's start, kept beside its checkpoints
    std::vector<fs::path> where;
    if (!resumed_from.empty()) where.push_back(fs::path(resumed_from) / kFile);
    if (!save_dir.empty()) where.push_back(fs::path(save_dir) / kFile);
    for (const fs::path& w : where)
      if (fs::exists(w)) {
        from = w;
        break;
      }
    if (from.empty())
      throw RunError("train.objective = \"dpo\": resuming at iteration " +
                     std::to_string(start_iter) + ", but " + kFile +
                     " is not beside the checkpoints (" +
                     (where.empty() ? std::string("no folder") : where[0].string()) +
                     "): the reference log-probabilities are computed at a run's first step only");
    ReferenceFile f = read_reference(from, pairs->documents());
    const std::string other = mismatch(f, key, {"data", "seq_len"});
    if (!other.empty())
      throw RunError("DPO reference " + from.string() + ": computed for other rows (" + other +
                     ")");
    reference = std::move(f.table);
  }
  if (!from.empty())
    spdlog::info("dpo: reference log-probabilities of {} pairs read from {}", pairs->documents(),
                 from.string());
  const fs::path saved = fs::path(save_dir) / kFile;
  if (!save_dir.empty() && !(fs::exists(saved) && !from.empty() && fs::equivalent(from, saved))) {
    if (rank == 0) fs::create_directories(save_dir);
    write_reference(saved);
  }
  feed.preference->table = &reference;
}

}  // namespace loom::engine
