// The recipe's parallel degrees, their check against the world size and the model, and the
// resolved layout that `loom validate` prints.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "loom/cpp/layout.hpp"

namespace loom::engine {

class Recipe;
class Registry;

// parallel.tensor/context/pipeline/expert/virtual_stages/sequence_parallel.
layout::Degrees layout_degrees(const Recipe& recipe);
// How the model's layers split over the stages (model.n_layer and
// decoder_first/last_pipeline_num_layers where the model has them) for `stages` stages.
layout::StageSplit stage_split(const Recipe& recipe, int64_t stages);
// A checkpoint's record of an uneven split (first_stage_layers, last_stage_layers; nothing
// when even): files saved under one split hold other layers than another's, so a resume
// under another reshards.
std::map<std::string, int64_t> stage_split_record(const Recipe& recipe, int64_t stages);

// The ranks a launcher started this process among, and its rank there: mpirun (Open MPI), a
// PMI or PMIx launcher (MPICH's Hydra, srun --mpi=pmi2/pmix) or an srun step; {1, 0} when
// none did. (SLURM_NTASKS alone is the allocation's, set in an sbatch script that starts
// one process too.)
std::pair<int, int> launched_as();
// The world `loom validate` lays out by default: a launcher's world size (1 included), else an
// sbatch allocation's SLURM_NTASKS, else 0 (none).
int launcher_world_size();
// The ranks a launcher started on this node, and the variable that said so
// (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE, LOCAL_WORLD_SIZE,
// SLURM_STEP_TASKS_PER_NODE when uniform); {0, ""} when none does.
std::pair<int, const char*> launcher_local_size();

// Throws UsageError naming every number involved when the layout does not fit `world` ranks,
// the model's layers and heads (read from the [model] section when it has n_layer, n_head,
// n_kv_head) or the batch (global batch a multiple of micro-batch x data-parallel size; the
// interleaved schedule needs micro-batches per step divisible by the pipeline size).
void check_layout(const Recipe& recipe, int world);

// Before validate, for a recipe whose parallel.data changes to `data` (a grad plugin): forgets
// the [parallel] keys of the other grad plugins that `data` does not take (fsdp's zero_stage
// when going to ddp), which would otherwise be refused as unknown.
void keep_grad_keys_of(Recipe& recipe, Registry& registry, const std::string& data);

// Micro-batches per step on each data-parallel rank.
int64_t microbatches_per_step(const Recipe& recipe, int data_parallel);

// A few lines: degrees, this layout's groups (world ranks of each), layers per stage and
// micro-batches per step.
std::string describe_layout(const Recipe& recipe, int world);

}  // namespace loom::engine
