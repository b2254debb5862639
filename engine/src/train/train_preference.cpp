// DPO's reference (train.objective = "dpo"): the log-probability of every pair's chosen and
// rejected conversation under the model the run starts from (its initialisation, or
// checkpoint.finetune's weights; with LoRA, the base, since B starts at zero). It is computed
// once, by a forward-only pass over every pair in document order before the first step, and
// kept as <checkpoint.save>/dpo_reference.bin, which a resumed run reads back: after the first
// update the model is no longer the reference. One model in memory, and no second forward per
// step (TRL's precompute_ref_log_probs).
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/gpt_dataset.hpp"
#include "train/train_run.hpp"

namespace loom::engine {

namespace {

namespace fs = std::filesystem;
constexpr const char* kFile = "dpo_reference.bin";
constexpr const char* kMagic = "loom-dpo-reference 1";

// "<magic> documents=N data=ID sha256=HEX\n" then 2N little-endian doubles.
void write_reference(const fs::path& path, const std::vector<double>& table,
                     const std::string& identity) {
  const size_t bytes = table.size() * sizeof(double);
  const std::string header =
      std::string(kMagic) + " documents=" + std::to_string(table.size() / 2) + " data=" + identity +
      " sha256=" + sha256_hex(table.data(), bytes) + "\n";
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(header.data(), (std::streamsize)header.size());
    out.write(reinterpret_cast<const char*>(table.data()), (std::streamsize)bytes);
    out.flush();
    if (!out) throw RunError("writing " + tmp.string() + " failed");
  }
  fs::rename(tmp, path);
}

// The table in `path`, refused with the reason when it is not this data's or is damaged.
std::vector<double> read_reference(const fs::path& path, int64_t documents,
                                   const std::string& identity) {
  std::ifstream in(path, std::ios::binary);
  std::string header;
  if (!in || !std::getline(in, header))
    throw RunError("DPO reference " + path.string() + ": cannot be read");
  std::istringstream h(header);
  std::string a, b, docs, data, sum;
  h >> a >> b >> docs >> data >> sum;
  if (a + " " + b != kMagic)
    throw RunError("DPO reference " + path.string() + ": not a Loom DPO reference file");
  if (docs != "documents=" + std::to_string(documents) || data != "data=" + identity)
    throw RunError("DPO reference " + path.string() + ": computed for other preference pairs (" +
                   docs + "; this run's data has " + std::to_string(documents) +
                   " pairs); it belongs to another dataset");
  std::vector<double> table((size_t)(2 * documents));
  const size_t bytes = table.size() * sizeof(double);
  in.read(reinterpret_cast<char*>(table.data()), (std::streamsize)bytes);
  if ((size_t)in.gcount() != bytes || in.peek() != EOF)
    throw RunError("DPO reference " + path.string() + ": truncated or too long (" +
                   std::to_string(bytes) + " bytes of log-probabilities expected)");
  if (sum != "sha256=" + sha256_hex(table.data(), bytes))
    throw RunError("DPO reference " + path.string() + ": its checksum does not match (damaged)");
  return table;
}

}  // namespace

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
    const size_t at = (size_t)(2 * all->pair_document(p.sample[j]) + p.sample[j] % 2);
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
  const std::string identity = pairs->identity();
  bool have_saved = false;
  if (start_iter == 0) {
    compute_reference();
  } else {  // resumed: the reference is the run's start, kept beside its checkpoints
    std::vector<fs::path> where;
    if (!resumed_from.empty()) where.push_back(fs::path(resumed_from) / kFile);
    if (!save_dir.empty()) where.push_back(fs::path(save_dir) / kFile);
    fs::path found;
    for (const fs::path& w : where)
      if (fs::exists(w)) {
        found = w;
        break;
      }
    if (found.empty())
      throw RunError("train.objective = \"dpo\": resuming at iteration " +
                     std::to_string(start_iter) + ", but " + kFile +
                     " is not beside the checkpoints (" +
                     (where.empty() ? std::string("no folder") : where[0].string()) +
                     "): the reference log-probabilities are computed at a run's first step only");
    reference = read_reference(found, pairs->documents(), identity);
    have_saved = !save_dir.empty() && fs::exists(fs::path(save_dir) / kFile) &&
                 fs::equivalent(found, fs::path(save_dir) / kFile);
    spdlog::info("dpo: reference log-probabilities of {} pairs read from {}", pairs->documents(),
                 found.string());
  }
  if (rank == 0 && !save_dir.empty() && !have_saved) {
    fs::create_directories(save_dir);
    write_reference(fs::path(save_dir) / kFile, reference, identity);
  }
  feed.preference->table = &reference;
}

}  // namespace loom::engine
