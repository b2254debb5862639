// Checkpoints across parallel layouts. Every rank of a run saves its own shards with
// metadata "loom.shards" saying where each sits in the full tensor; this file puts them
// together (merge) and cuts a full tensor into another layout's shard (take), so that a
// checkpoint of any tensor x pipeline x data layout, with or without the distributed
// optimizer, loads on any other (TrainRun::resume) and converts offline (`loom checkpoint
// convert`).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.hpp"
#include "loom/model.h"

namespace loom::engine {

// Where one tensor-parallel rank's shard of a parameter sits in the full tensor. Along
// split_dim the full tensor is blocks (the q|k|v rows of a fused projection, the gate;up
// rows of SwiGLU), each split evenly over the tp ranks; the shard is the concatenation of
// this rank's slice of every block.
// An expert parameter under expert parallelism is first cut along dimension 0 into ep equal
// slabs (expert rank e holds slab e); the tensor-parallel rule applies within the slab.
struct ShardSpec {
  std::vector<int64_t> full;  // the full tensor's shape
  int split_dim = -1;         // -1: whole on every rank
  std::vector<int64_t> blocks;
  int tp = 1, rank = 0;
  int ep = 1, ep_rank = 0;

  // From a "loom.shards" entry ({"shape", "split_dim", "blocks", "tp_rank", "tp_size", and
  // for an expert parameter under expert parallelism "ep_rank", "ep_size"}).
  static ShardSpec parse(const nlohmann::json& entry, const std::string& where);
  std::vector<int64_t> local_shape() const;
  // The spec within this rank's expert slab (itself when ep is 1).
  ShardSpec slab() const;
};

// A rank's checkpoint file of `kind` ("model", "optimizer"): "model.safetensors" on one
// model-parallel rank, else tagged by tensor and pipeline rank ("model-tp01-pp002...");
// `per_data_rank` adds the data-parallel rank (the distributed optimizer's shards), else
// expert parallelism adds the expert rank ("model-ep01": that rank's experts).
std::string checkpoint_file(const std::string& kind, const loom_parallel_layout& l,
                            bool per_data_rank);

// The "loom.shards" entry of a rank's parameter: where its shard sits in the full tensor.
nlohmann::json shard_entry(const loom_model_param& p, const loom_parallel_layout& l);

// The parameter an optimizer state tensor "<kind>.<parameter>" belongs to.
std::string param_of(const std::string& state);

// The string metadata of a checkpoint folder's (first) model file: "loom.vocab", what an
// import came from ("loom.hf_config", "loom.hf_dtype"); empty without a model file.
std::map<std::string, std::string> model_metadata(const std::filesystem::path& folder);

// Copies `local` into its place in `full` (allocated to spec.full on first use).
void put_shard(const ShardSpec& spec, const StTensor& local, StTensor& full,
               const std::string& what);
// This rank's shard of `full`. Rows beyond the real vocabulary are padding, whose count
// follows the tensor-parallel size (Megatron pads to a multiple of pad x TP): when `full`
// has another number of rows than spec.full along dimension 0 and both keep all `vocab`
// rows, the padding is cut or zero-filled (padded rows are never looked up nor scored).
StTensor take_shard(const ShardSpec& spec, const StTensor& full, int64_t vocab,
                    const std::string& what);

// A checkpoint as full tensors: the model's values, its main (master) parameters (the
// f32 "main." copies of a sharded mixed-precision run, otherwise the model file's values),
// and the optimizer's state by its name ("exp_avg.h.0.attn.qkv.weight"), every distributed
// optimizer's flat shard put back in place.
struct FullCheckpoint {
  StFile model, main, optimizer;
};
// `folder` is a checkpoint folder whose files were verified (load_checkpoint). `want`, when
// given, picks the parameters (by name) to merge, with their optimizer state: a rank of
// another layout reads only the tensors it will hold.
using ParamFilter = std::function<bool(const std::string&)>;
FullCheckpoint merge_checkpoint(const std::filesystem::path& folder, bool with_optimizer,
                                const ParamFilter& want = {});

// A LoRA run's checkpoint holds the adapters and the trained state alone; its model files'
// metadata "loom.peft_base" names the checkpoint folder its frozen weights are in (the
// run's checkpoint.finetune, an absolute path; "" when it holds them itself).
// merge_checkpoint adds the base's tensors that `model` lacks (those `want` picks), and
// refuses by name a base that is gone or corrupt.
std::string peft_base_of(const std::filesystem::path& folder);
void add_peft_base(const std::filesystem::path& folder, StFile& model, const ParamFilter& want);

}  // namespace loom::engine
