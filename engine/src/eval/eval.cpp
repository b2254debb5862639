// `loom eval` (eval.hpp): the checkpoint's own recipe rebuilt on this run's layout with the
// weights loaded as checkpoint.finetune loads them (any saved layout), then every sample
// forward through the pipeline schedule with loom.token-stats/1 on its micro-batch; the
// ranks holding the head report each sample's loss and whether each scored token was the
// most likely one.
#include "eval/eval.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/hf_interop.hpp"
#include "loom/cpp/model_step.hpp"
#include "train/train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

// While alive, info lines are not printed when info is the level in force (a chosen debug
// level stays): the training run eval rebuilds only to load the weights reports its set-up
// (the optimizer, memory per parameter, "finetuning from"), which is not the evaluation's.
// Warnings and errors still print.
class QuietSetup {
 public:
  QuietSetup() : raised_(spdlog::get_level() == spdlog::level::info) {
    if (raised_) spdlog::set_level(spdlog::level::warn);
  }
  ~QuietSetup() {
    if (raised_) spdlog::set_level(spdlog::level::info);
  }
  QuietSetup(const QuietSetup&) = delete;
  QuietSetup& operator=(const QuietSetup&) = delete;

 private:
  bool raised_;
};

std::string read_text(const fs::path& p) {
  require_regular_file(p.string(), "loom eval: ");
  std::ifstream f(p, std::ios::binary);
  if (!f) throw UsageError("loom eval: cannot read " + p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The schedule's get_microbatch over a list of samples; micro-batch i of data-parallel rank
// r holds samples first + (i*dp + r)*B + b, padding rows (all targets -1) past the end.
struct EvalFeed {
  const std::vector<EvalSample>* samples = nullptr;
  int64_t first = 0, B = 0, T = 0, dp = 1, dp_rank = 0;
  int32_t pad = 0;
  std::vector<int32_t> tokens, targets;
  std::unique_ptr<loom::HostBatch> batch;
  // per micro-batch of the current run: what the head's stage writes
  std::vector<std::vector<double>> loss;
  std::vector<std::vector<int32_t>> top1;
  std::vector<loom_token_stats> ext;

  int64_t index(int64_t i, int64_t b) const { return first + (i * dp + dp_rank) * B + b; }
  static loom_error* get(void* user, int64_t i, loom_microbatch* out) {
    auto* f = static_cast<EvalFeed*>(user);
    for (int64_t b = 0; b < f->B; ++b) {
      const int64_t k = f->index(i, b);
      int32_t* tk = f->tokens.data() + b * f->T;
      int32_t* tg = f->targets.data() + b * f->T;
      if (k < (int64_t)f->samples->size()) {
        std::copy((*f->samples)[k].tokens.begin(), (*f->samples)[k].tokens.end(), tk);
        std::copy((*f->samples)[k].targets.begin(), (*f->samples)[k].targets.end(), tg);
      } else {
        std::fill(tk, tk + f->T, f->pad);
        std::fill(tg, tg + f->T, -1);
      }
    }
    *out = *f->batch->get();
    out->ext = &f->ext[i].base;
    return nullptr;
  }
};

struct Totals {
  double loss = 0, scored = 0, correct = 0, samples = 0;
};

// Every sample through the schedule, forward only; sums over the world of what the head's
// ranks saw (each sample counted once: by tensor rank 0 of the last stage of its
// data-parallel rank).
Totals run_samples(TrainRun& r, const std::vector<EvalSample>& samples) {
  EvalFeed f;
  f.samples = &samples;
  f.B = r.mbs;
  f.T = r.seq_len;
  f.dp = r.dp;
  f.dp_rank = r.layout.data_rank;
  f.tokens.resize(f.B * f.T);
  f.targets.resize(f.B * f.T);
  f.batch = std::make_unique<loom::HostBatch>(f.B, f.T);
  f.batch->tokens_targets(f.tokens.data(), f.targets.data());
  const int64_t micro = r.num_micro;
  f.loss.assign(micro, std::vector<double>(f.B * f.T));
  f.top1.assign(micro, std::vector<int32_t>(f.B * f.T));
  f.ext.resize(micro);
  for (int64_t i = 0; i < micro; ++i)
    f.ext[i] = {{sizeof(loom_token_stats), LOOM_EXT_TOKEN_STATS, LOOM_EXT_REQUIRED, nullptr},
                f.loss[i].data(),
                f.top1[i].data()};
  const bool reports = r.layout.pipeline_rank == r.layout.pipeline - 1 && r.layout.tensor_rank == 0;
  Totals t;
  for (f.first = 0; f.first < (int64_t)samples.size(); f.first += micro * r.dp * f.B) {
    for (int64_t i = 0; i < micro; ++i) {
      std::fill(f.loss[i].begin(), f.loss[i].end(), 0.0);
      std::fill(f.top1[i].begin(), f.top1[i].end(), 0);
    }
    r.run_schedule(micro, true, 0.0, &EvalFeed::get, &f);
    if (!reports) continue;
    for (int64_t i = 0; i < micro; ++i)
      for (int64_t b = 0; b < f.B; ++b) {
        const int64_t k = f.index(i, b);
        if (k >= (int64_t)samples.size()) continue;
        double loss = 0, scored = 0, right = 0;
        for (int64_t p = 0; p < f.T; ++p)
          if (samples[k].targets[p] != -1) {
            loss += f.loss[i][b * f.T + p];
            right += f.top1[i][b * f.T + p];
            scored += 1;
          }
        t.loss += loss;
        t.scored += scored;
        t.correct += right == scored ? 1 : 0;  // every scored token the most likely one
        t.samples += 1;
      }
  }
  double sums[4] = {t.loss, t.scored, t.correct, t.samples};
  sum_over(r.be, r.comm, nullptr, sums, 4);
  return {sums[0], sums[1], sums[2], sums[3]};
}

}  // namespace

// `loom eval --logprobs P`: the run a DPO recipe would make from this checkpoint, on the pairs
// at P, as far as its reference pass (TrainRun::compute_reference); the file is keyed as the
// run keys it, so a run that starts from this checkpoint with rows this long reads it.
void write_logprobs(const EvalOptions& o, Registry& registry) {
  CheckpointSource source(o.checkpoint);
  if (source.dir().empty())
    throw UsageError("loom eval: no checkpoint in " + o.checkpoint.string());
  std::vector<std::string> extra = {"train.objective=dpo"};
  if (o.micro_batch > 0) extra.push_back("train.micro_batch_size=" + std::to_string(o.micro_batch));
  if (o.seq_len > 0) extra.push_back("train.seq_len=" + std::to_string(o.seq_len));
  Recipe recipe = inference_recipe(source.dir(), o.overrides, extra, registry);
  recipe.set("data.plugin=indexed");
  recipe.set("data.prefix=" + o.logprobs.string());
  recipe.validate(registry);
  auto quiet = std::make_unique<QuietSetup>();
  TrainRun r(recipe, registry);
  r.resume();
  r.hold_params(false);
  quiet.reset();
  // a Hugging Face directory is read through an import in scratch: key it by its own path,
  // as a run's checkpoint.finetune names it
  if (is_hf_dir(o.checkpoint))
    r.start_model = fs::absolute(o.checkpoint).lexically_normal().string();
  const fs::path out = r.pairs->stem() + "_dpo_reference.bin";
  check_output("loom eval --logprobs", out, {o.checkpoint}, o.overwrite);
  r.compute_reference();
  r.write_reference(out);
  if (r.rank == 0)
    spdlog::info("eval: the log-probabilities of {} preference pairs under {} (rows of {}) in {}",
                 r.pairs->documents(), r.start_model, r.seq_len, out.string());
}

void evaluate_checkpoint(const EvalOptions& o, Registry& registry) {
  if (!o.logprobs.empty()) return write_logprobs(o, registry);
  if (o.task != "wikitext" && o.task != "lambada")
    throw UsageError("loom eval: --task must be wikitext or lambada, not '" + o.task + "'");
  CheckpointSource source(o.checkpoint);
  if (source.dir().empty())
    throw UsageError("loom eval: no checkpoint in " + o.checkpoint.string());
  std::vector<std::string> extra;
  if (o.micro_batch > 0) extra.push_back("train.micro_batch_size=" + std::to_string(o.micro_batch));
  if (o.seq_len > 0) extra.push_back("train.seq_len=" + std::to_string(o.seq_len));
  Recipe recipe = inference_recipe(source.dir(), o.overrides, extra, registry);
  // The training run is only the way to the weights; one line says what is scored instead
  // of its set-up lines.
  auto quiet = std::make_unique<QuietSetup>();
  TrainRun r(recipe, registry);
  if (r.layout.context > 1) throw UsageError("loom eval: context parallelism is not supported");
  r.resume();  // checkpoint.finetune: the weights, from any saved layout
  quiet.reset();
  if (r.rank == 0)
    spdlog::info("eval: {} ({} on {} rank(s)), task {}, data {}", source.dir().string(),
                 recipe.plugin("model"), r.world, o.task, o.data.string());
  loom_tokenizer_ref tok = r.session.tokenizer();
  auto encode = [&](const std::string& text) {
    const int32_t* ids = nullptr;
    size_t n = 0;
    check(tok.api->encode(tok.self, text.data(), text.size(), &ids, &n), "encoding");
    return std::vector<int32_t>(ids, ids + n);
  };
  const int64_t eod = tok.api->eod_id(tok.self);
  const int32_t pad = (int32_t)std::max<int64_t>(eod, 0);
  nlohmann::json out = {
      {"task", o.task}, {"checkpoint", o.checkpoint.string()}, {"seq_len", r.seq_len}};
  if (o.task == "wikitext") {
    const std::string raw = read_text(o.data);
    const std::string trimmed = strip(raw);
    // words of the raw file as Megatron counts them: split on single spaces
    int64_t words = 1;
    for (char c : trimmed) words += c == ' ';
    const std::vector<int32_t> ids = encode(wikitext_detokenize(raw));
    if (ids.size() < 2 || words < 2)
      throw UsageError("loom eval: " + o.data.string() + " has under 2 tokens or words");
    const int64_t ov = std::min(o.overlapping, r.seq_len);
    const std::vector<EvalSample> samples = lm_windows(ids, r.seq_len, ov, pad);
    const Totals t = run_samples(r, samples);
    const double val_loss = t.loss / (double)(ids.size() - 1);
    const double ratio = (double)(ids.size() - 1) / (double)(words - 1);
    out.update({{"windows", samples.size()},
                {"overlapping_eval", ov},
                {"tokens", ids.size()},
                {"words", words},
                {"scored_tokens", t.scored},
                {"avg_loss", val_loss},
                {"ppl", std::exp(std::min(20.0, val_loss))},
                {"adjusted_ppl", std::exp(std::min(20.0, val_loss * ratio))},
                {"token_ratio", ratio}});
    if (r.rank == 0)
      spdlog::info(
          "wikitext: {} windows of {} every {}; avg loss {:.6E} | ppl {:.6E} | adjusted "
          "ppl {:.6E} | token ratio {:.6f}",
          samples.size(), r.seq_len, ov, val_loss, (double)out["ppl"], (double)out["adjusted_ppl"],
          ratio);
  } else {
    require_regular_file(o.data.string(), "loom eval: --data: ");
    std::ifstream in(o.data);
    if (!in) throw UsageError("loom eval: cannot read " + o.data.string());
    std::vector<EvalSample> samples;
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (strip(line).empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
        throw UsageError(o.data.string() + ":" + std::to_string(n) +
                         ": expected a JSON object with a string \"text\"");
      auto [context, answer] = lambada_split(j["text"].get<std::string>(), o.strict, encode);
      if (answer.empty() || (int64_t)answer.size() > r.seq_len)
        throw UsageError(o.data.string() + ":" + std::to_string(n) +
                         ": no last word to predict within seq_len");
      samples.push_back(cloze_sample(std::move(context), answer, r.seq_len, pad));
    }
    if (samples.empty()) throw UsageError("loom eval: " + o.data.string() + " holds no passage");
    const Totals t = run_samples(r, samples);
    out.update({{"strict", o.strict},
                {"correct", t.correct},
                {"total", t.samples},
                {"accuracy", t.correct / t.samples},
                {"avg_loss", t.loss / t.scored}});
    if (r.rank == 0)
      spdlog::info("lambada{}: number correct {:.0f}, total {:.0f}, accuracy {:.4f}",
                   o.strict ? " (strict)" : "", t.correct, t.samples, t.correct / t.samples);
  }
  if (r.rank == 0) {
    std::cout << out.dump() << std::endl;
    if (!o.output.empty())
      write_file_atomically(o.output, [&](const std::filesystem::path& tmp) {
        std::ofstream f(tmp);
        f << out.dump(2) << "\n";
        if (!f.flush()) throw RunError(o.output.string() + ": could not write the results");
      });
  }
}

}  // namespace loom::engine
