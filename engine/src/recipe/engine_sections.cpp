// The engine's own recipe sections, and the engine-owned keys of the plugin sections, as
// static schema tables (the same loom_param_spec plugins use, so one validator and one
// documentation generator serve both).
#include <limits>

#include "loom/cpp/plugin.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr loom_param_type kBool = LOOM_PARAM_BOOL, kInt = LOOM_PARAM_INT, kFloat = LOOM_PARAM_FLOAT,
                          kString = LOOM_PARAM_STRING;
using loom::param;

constexpr loom_param_spec kTrain[] = {
    param("seed", kInt, "1234", "seed of every random stream (initialisation, data order, dropout)",
          0, kInf),
    param("iters", kInt, "100",
          "optimizer steps to train for (`loom eval` evaluates a checkpoint without training)", 1,
          kInf),
    param("micro_batch_size", kInt, "4", "samples per micro-batch on each rank", 1, kInf),
    param("global_batch_size", kInt, "0",
          "samples per optimizer step over all ranks; 0 = micro_batch_size x data-parallel size", 0,
          kInf),
    param("seq_len", kInt, "64", "tokens per training sample", 1, 16777216),
    param("log_interval", kInt, "10", "steps between log lines", 1, kInf),
    param("eval_interval", kInt, "0", "steps between evaluations on the valid split; 0 = never", 0,
          kInf),
    param("eval_iters", kInt, "10", "global batches per evaluation (Megatron's eval-iters)", 0,
          kInf),
    param("metrics", kString, "",
          "path of the JSON-lines metrics file; \"\" = none. A resumed run appends; a fresh run "
          "keeps a file already there as <path>.1 (the first free .N)"),
    param("tensorboard", kString, "",
          "folder for TensorBoard event files (Megatron's --tensorboard-dir): loss, lr, grad "
          "norm, loss scale, throughput, MFU, memory and eval loss per iteration; \"\" = none"),
    param("grad_clip", kFloat, "1.0", "clip gradients to this global L2 norm; 0 = off", 0, kInf),
    param("grad_norm_on_device", kBool, "true",
          "keep the global gradient norm on the device: the optimizer clips with it there "
          "(loom.opt-clip/1) and changes nothing when it is not finite, and the host reads it "
          "after the update is enqueued, then decides as before (train.nan_check, fp16's loss "
          "scale): the same numbers, with no host wait between the backward pass and the "
          "update. Used where the backend and the optimizer list what it needs "
          "(loom.sum-squares-total/1 and loom.opt-clip/1); where the backend also lists "
          "loom.ce-loss-total/1, the model sums its cross-entropy there too and the host reads "
          "the losses with the norm, none per micro-batch; where the optimizer lists "
          "loom.opt-schedule/1, the update reads the learning rate and the step count from "
          "the device too, so that it holds no host value. false: the host reads the losses "
          "and the norm first"),
    param("cuda_graph", kString, "none",
          "record a training step's device work once and replay it with one launch (Megatron's "
          "--cuda-graph-impl full_iteration): none, or step: after train.cuda_graph_warmup_steps "
          "eager steps, zero_grad through the optimizer's update is captured (loom.graph/1) and "
          "each later step uploads its micro-batches (loom.microbatch-device/1) and the learning "
          "rate, launches, and reads the loss and the gradient norm after it. The same numbers "
          "as eager. Needs train.grad_norm_on_device with a backend, model and optimizer that "
          "list what it uses, one rank and the LM loss alone; an evaluation, a save or a rerun "
          "of train.nan_check makes the next step capture again",
          1, 0, "none|step"),
    param("cuda_graph_warmup_steps", kInt, "3",
          "eager steps before train.cuda_graph captures (Megatron's --cuda-graph-warmup-steps): "
          "the allocations, cuBLASLt's plans and the autotuned GEMMs of a step are settled first",
          1, kInf),
    param("deterministic", kBool, "false",
          "the same bits on every run of the same recipe on the same machine (Megatron's "
          "--deterministic-mode): sets `deterministic = true` in every plugin section whose "
          "plugin has that switch (backend/cuda: the heuristic's GEMM algorithms, not timed ones; "
          "attention/cudnn: its backward without the atomic dQ accumulator; a plugin with no "
          "deterministic path refuses to start). Plugins without the switch are deterministic"),
    param("timers", kBool, "false",
          "the step profile (Megatron's --timing-log-level): every op, attention, comm, data "
          "and optimizer call of a step timed on the device (events on a GPU, the clock on the "
          "CPU) and summed by kind and by layer beside each kind's floor (FLOPs and bytes over "
          "the GEMM rate and copy bandwidth measured at start), with the gap no call covers, "
          "kernel launches, host synchronisations and device allocations per step; printed at "
          "each log line and written to the metrics file and TensorBoard. Off: no cost"),
    param("schedule_trace", kString, "",
          "trace one step's pipeline schedule as it ran: each forward and backward with its "
          "start and end, written per pipeline rank to <path>.<rank> for `loom schedule show "
          "--trace <path>`; \"\" = off"),
    param("schedule_trace_iter", kInt, "3", "the iteration train.schedule_trace traces", 1, kInf),
    param("objective", kString, "lm",
          "what the model is trained to minimise: lm, the next-token loss (over the loss mask); "
          "dpo, Direct Preference Optimisation's sigmoid loss on preference pairs (data.prefix "
          "names <p>_chosen_document, <p>_rejected_document is beside it; rows 2k and 2k+1 of a "
          "micro-batch are pair k, each conversation padded to its own row) against the log-"
          "probabilities of the model the run starts from, computed once before the first step "
          "and kept in the checkpoint folder",
          1, 0, "lm|dpo"),
    param("dpo_beta", kFloat, "0.1",
          "DPO's beta: how strongly the policy is held to the reference (TRL's and NeMo's beta)",
          1e-9, kInf),
    param("nan_check", kString, "stop",
          "a loss or gradient norm that is not finite (fp16's overflows aside, which the loss "
          "scaler skips): stop, save the last good state and exit 1 naming the iteration, rank "
          "and first non-finite gradient; skip, drop the update and go on; rerun, run the step "
          "again on the same batch: finite, a transient fault, go on; not, stop (Megatron's "
          "--check-for-nan-in-loss-and-grad and rerun state machine)",
          1, 0, "stop|skip|rerun"),
    param("loss_spike_factor", kFloat, "0",
          "log a loss above this many times the median of the last 100 steps, with the "
          "samples of its batch (loom data samples --first prints them); 0 = off",
          0, kInf),
    param("exit_signal_handler", kBool, "true",
          "on SIGTERM, SIGINT, SIGUSR1 or SIGUSR2 (a SLURM preemption, `scancel --signal`, "
          "Ctrl-C) finish the step, save a checkpoint when checkpoint.save is set, and exit "
          "with 3; a second SIGINT exits at once (Megatron's --exit-signal-handler)"),
    param("exit_interval", kInt, "0",
          "save and exit (0) after an iteration that is a multiple of this; 0 = off "
          "(Megatron's --exit-interval)",
          0, kInf),
    param("exit_duration_mins", kFloat, "0",
          "save and exit (0) after the first step that ends this many minutes after the start "
          "on any rank; 0 = off (Megatron's --exit-duration-in-mins)",
          0, kInf),
    param("recompute_granularity", kString, "none",
          "activation recompute (Megatron's --recompute-granularity): none; selective "
          "(train.recompute_modules of every layer, recomputed in backward from what the layer "
          "keeps); full (whole layers from their input, see recompute_method). Losses and "
          "gradients are bitwise those of none",
          1, 0, "none|selective|full"),
    param("recompute_method", kString, "uniform",
          "full recompute (Megatron's --recompute-method): uniform, groups of "
          "recompute_num_layers layers keep only their input; block, the first "
          "recompute_num_layers layers of each pipeline stage are recomputed, the others keep "
          "everything",
          1, 0, "uniform|block"),
    param("recompute_num_layers", kInt, "1",
          "full recompute: layers per group (uniform) or recomputed layers per stage (block)", 1,
          kInf),
    param("recompute_modules", kString, "core_attn",
          "selective recompute (Megatron's --recompute-modules), comma-separated: core_attn (the "
          "attention core's output and log-sum-exp), mlp_act (the MLP activation's output), "
          "layernorm (the pre-norm layers' norm outputs)"),
};

constexpr loom_param_spec kCheckpoint[] = {
    param("save", kString, "", "directory to save checkpoints in; \"\" = never save"),
    param("async", kBool, "false",
          "write interval checkpoints in the background (Megatron's --async-save): the state is "
          "copied to host memory and the loop goes on while a thread writes and fsyncs the "
          "files; the checkpoint is renamed into place (and logged \"saved\") once every rank's "
          "files are durable; at most one save in flight; the last save blocks"),
    param("load", kString, "",
          "checkpoint directory to resume from; \"auto\" = the newest complete checkpoint "
          "under checkpoint.save, or a fresh start when there is none (requeue loops); \"\" = "
          "start fresh"),
    param("finetune", kString, "",
          "start from these weights only (a Loom checkpoint of any layout, or a Hugging Face "
          "GPT-2/Llama directory): a fresh optimizer and iteration 0, as Megatron's "
          "--finetune; checkpoint.load wins once it holds a checkpoint"),
    param("finetune_fresh", kString, "",
          "with checkpoint.finetune: comma-separated name prefixes of parameters that start "
          "from their initialisation instead (a new head: \"classifier\"); any other parameter "
          "the checkpoint lacks is an error"),
    param("no_load_optim", kBool, "false",
          "resume from checkpoint.load without its optimizer state (Megatron's --no-load-optim): "
          "weights, iteration and data position carry over, the optimizer (and fp16 loss scale) "
          "start fresh. Needed to resume with another optimizer; set it for that one run, since "
          "every resume that keeps it starts the optimizer afresh"),
    param("interval", kInt, "0", "steps between saves; 0 = save only at the end when save is set",
          0, kInf),
    param("overwrite", kBool, "false",
          "let a run that does not resume from checkpoint.save write over the checkpoints "
          "already there (refused otherwise, exit 2)"),
};

constexpr loom_param_spec kPrecision[] = {
    param("dtype", kString, "fp32",
          "compute dtype of the model: fp32; bf16 or fp16 (mixed precision: values and "
          "activations in that dtype, gradients and the optimizer's main parameters in fp32); "
          "fp64 computes everything in float64, for checking that parallel layouts agree",
          1, 0, "fp32|bf16|fp16|fp64"),
    param("loss_scale", kFloat, "0",
          "static loss scale; 0 = dynamic loss scaling with fp16 and none otherwise", 0, kInf),
    param("initial_loss_scale", kFloat, "4294967296",
          "fp16 dynamic loss scaling: the first scale (Megatron's 2^32)", 1, kInf),
    param("min_loss_scale", kFloat, "1",
          "fp16 dynamic loss scaling: the scale never backs off "
          "below this",
          0, kInf),
    param("loss_scale_window", kInt, "1000",
          "fp16 dynamic loss scaling: clean steps in a row before the scale doubles", 1, kInf),
    param("hysteresis", kInt, "2",
          "fp16 dynamic loss scaling: overflowing steps in a row before the scale halves", 1, kInf),
    param("fp8", kString, "none",
          "FP8 training (Megatron's --fp8-recipe): the transformer layers' linear GEMMs (forward, "
          "input and weight gradients) in 8-bit floats through the backend's loom.fp8/1; "
          "attention, norms, embedding, head, main parameters and optimizer keep dtype. "
          "tensorwise: each tensor scaled by its own amax; delayed: by its amax history; "
          "blockwise: DeepSeek-V3's 1x128 activation and 128x128 weight scales",
          1, 0, "none|tensorwise|delayed|blockwise"),
    param("fp8_format", kString, "hybrid",
          "FP8: hybrid = e4m3 forward, e5m2 gradients (Megatron's default); e4m3 = everything "
          "e4m3",
          1, 0, "hybrid|e4m3"),
    param("fp8_margin", kInt, "0",
          "FP8: scales 2^margin below the format's largest value over amax (Megatron's "
          "--fp8-margin)",
          0, 16),
    param("fp8_amax_history_len", kInt, "1",
          "FP8 delayed scaling: steps of amax history per tensor (Megatron's "
          "--fp8-amax-history-len and its default; Transformer Engine's own is 1024)",
          1, 1 << 16),
    param("fp8_amax_compute_algo", kString, "most_recent",
          "FP8 delayed scaling: the amax a scale is made from, the most recent step's "
          "(Megatron's default) or the history's max",
          1, 0, "most_recent|max"),
    param("fp8_first_last_bf16", kBool, "false",
          "FP8: keep the first fp8_layers_at_start_bf16 and last fp8_layers_at_end_bf16 "
          "transformer layers in dtype (Megatron's --first-last-layers-bf16; T5: of each "
          "stack)"),
    param("fp8_layers_at_start_bf16", kInt, "1",
          "FP8 with fp8_first_last_bf16: layers at the start kept in dtype", 0, kInf),
    param("fp8_layers_at_end_bf16", kInt, "1",
          "FP8 with fp8_first_last_bf16: layers at the end kept in dtype", 0, kInf),
};

constexpr loom_param_spec kLr[] = {
    param("schedule", kString, "cosine", "learning-rate schedule after warmup", 1, 0,
          "constant|linear|cosine|wsd"),
    param("max", kFloat, "3e-4", "peak learning rate, reached at the end of warmup", 0, kInf),
    param("min", kFloat, "0", "learning rate at the end of decay", 0, kInf),
    param("warmup_iters", kInt, "0", "steps of linear warmup from 0 to max", 0, kInf),
    param("decay_iters", kInt, "0", "step at which decay reaches min; 0 = train.iters", 0, kInf),
    param("wsd_decay_fraction", kFloat, "0.1",
          "wsd: the last fraction of decay_iters decays linearly to min (stable at max before)", 0,
          1),
};

constexpr loom_param_spec kParallel[] = {
    param("tensor", kInt, "1", "tensor-parallel degree", 1, kInf),
    param("pipeline", kInt, "1", "pipeline-parallel degree (stages)", 1, kInf),
    param("context", kInt, "1",
          "context-parallel degree (Megatron's --context-parallel-size): each sample's tokens "
          "split over this many ranks of every data-parallel replica, in 2 x context chunks; "
          "train.seq_len must be divisible by 2 x context",
          1, kInf),
    param("cp_comm_type", kString, "p2p",
          "context parallelism's attention (Megatron's --cp-comm-type): \"p2p\", ring attention "
          "passing keys and values round the context group; \"a2a\", all-to-all of heads for "
          "tokens (Ulysses: the heads must divide by tensor x context)"),
    param("expert", kInt, "1",
          "expert-parallel degree (Megatron's --expert-model-parallel-size): the experts of "
          "every MoE layer split over this many ranks of data x context, tokens sent to them "
          "by all-to-all; must divide model.num_experts",
          1, kInf),
    param("expert_tensor", kInt, "1",
          "expert tensor parallelism (Megatron's --expert-tensor-parallel-size): 1 keeps every "
          "expert whole on each tensor rank (experts not split); the tensor size splits each "
          "expert's MLP over the tensor group as a dense MLP is (model.moe_ffn_hidden_size "
          "must divide by it). Megatron's default is the tensor size; Loom's is 1",
          1, kInf),
    param("virtual_stages", kInt, "1",
          "model chunks per pipeline rank (interleaved-1f1b; 2 for zb-v and dualpipev)", 1, kInf),
    param("sequence_parallel", kBool, "false",
          "shard norm and dropout activations over the tensor-parallel group"),
    param("data", kString, "ddp",
          "parallel plugin for the data-parallel gradients: ddp, distributed-optimizer, ..."),
    param("schedule", kString, "1f1b",
          "parallel plugin for the pipeline schedule: 1f1b, interleaved-1f1b (with "
          "virtual_stages), gpipe, zb-h1, zb-v and dualpipev (virtual_stages = 2, a V), ..."),
};

// `loom serve`'s chat template (OpenAI /v1/chat/completions): every message becomes
// message_template with {role} and {content} replaced, then generation_prompt opens the
// assistant's turn; the reply ends at stop (or the end-of-document token). The defaults are
// ChatML's.
constexpr loom_param_spec kServe[] = {
    param("chat_template", kString, "<|im_start|>{role}\n{content}<|im_end|>\n",
          "one chat message as text: {role} and {content} are replaced"),
    param("chat_generation_prompt", kString, "<|im_start|>assistant\n",
          "text after the messages that opens the assistant's reply"),
    param("chat_stop", kString, "<|im_end|>",
          "the reply ends before this text; \"\" = only at the end-of-document token"),
    param("chat_format", kString, "",
          "a model family's chat format, as `loom preprocess --chat-format` renders its SFT "
          "data (chatml, llama3, mistral, gemma, deepseek-v3): it then renders the messages and "
          "ends the reply instead of the three keys above; a finetuning recipe sets it, so its "
          "checkpoints serve in the format they were trained in"),
};

template <size_t N>
EngineSection section(const char* name, const loom_param_spec (&params)[N], const char* doc) {
  return EngineSection{name, params, N, doc};
}

// `plugin` of each plugin section: the default plugin is the default value.
constexpr loom_param_spec kBackend[] = {
    param("plugin", kString, "cpu", "backend plugin: the device and its kernels (cpu, cuda, ...)")};
constexpr loom_param_spec kComm[] = {
    param("plugin", kString, "single",
          "comm plugin: collectives between ranks (single, mpi, nccl)"),
    param("timeout_s", kFloat, "600",
          "watchdog: a rank of a multi-rank job that waits longer than this in one blocking "
          "collective or send/recv prints what it waits in (call, group, peer, bytes, iteration) "
          "and ends the job with exit 1, as Megatron's --distributed-timeout-minutes; 0 = off",
          0, kInf)};
constexpr loom_param_spec kModel[] = {
    param("plugin", kString, "gpt", "model plugin: the network (gpt, ...)")};
constexpr loom_param_spec kAttention[] = {
    param("plugin", kString, "reference", "attention plugin: the attention core for the backend")};
constexpr loom_param_spec kOptimizer[] = {
    param("plugin", kString, "adamw", "optimizer plugin: the update rule (adamw, sgd, ...)")};
constexpr loom_param_spec kTokenizer[] = {
    param("plugin", kString, "byte", "tokenizer plugin: text <-> token ids (byte, gpt2-bpe, ...)")};
constexpr loom_param_spec kData[] = {
    param("plugin", kString, "mock", "dataset plugin: the storage format of the documents"),
    param("split", kString, "98,2,0",
          "train,valid,test weights: documents (Megatron's sequences) are split in these "
          "proportions, as Megatron's --split"),
    param("blend", kString, "",
          "\"w1 path1 w2 path2 ...\" as Megatron's --data-path: one dataset per path (the "
          "plugin's prefix/path key), each split by `split`, blended by weight; \"\" = none"),
    param("train_blend", kString, "",
          "separate train datasets, used whole (Megatron's --train-data-path); with "
          "valid_blend/test_blend instead of blend and split"),
    param("valid_blend", kString, "", "separate valid datasets, used whole; \"\" = no valid split"),
    param("test_blend", kString, "", "separate test datasets, used whole; \"\" = no test split"),
    param("cache", kBool, "true",
          "cache the sampler's index arrays as .npy files beside the data (when the dataset has "
          "a home on disk)"),
    param("pack_sequences", kBool, "false",
          "packed sequences: each document of a sample attends only to itself and its positions "
          "restart at 0 after every EOD token (Megatron's --reset-position-ids and "
          "--reset-attention-mask), and the target after an EOD is not trained on "
          "(--eod-mask-loss); the micro-batch carries a positions array, which the model reads"),
    param("pad_sequences", kBool, "false",
          "one document per sample, from its first token, cut at seq_len + 1 tokens and padded "
          "(the padding's targets ignored): supervised finetuning's alternative to "
          "pack_sequences, which never splits a conversation; the documents are shuffled over as "
          "many epochs as the samples need"),
    param("loss_mask_prefix", kString, "",
          "a loss mask for the [data] dataset (read with the same plugin; 0 = the target of that "
          "token is ignored); \"\" = the <name>_chat_loss_mask_document that `loom preprocess "
          "--chat-format` writes beside <name>_chat_document, when there is one"),
    param("loss_on_prompt", kBool, "false",
          "supervised finetuning: train on every token of a conversation, prompts included, "
          "instead of the assistant's replies alone (the loss mask is then not read)"),
};

template <size_t N>
PluginSection plugin_section(const char* name, loom_plugin_kind kind,
                             const loom_param_spec (&extra)[N], const char* doc) {
  return PluginSection{name, kind, extra[0].default_value, extra, N, doc};
}

}  // namespace

const std::vector<EngineSection>& engine_sections() {
  static const std::vector<EngineSection> sections = {
      section("train", kTrain, "the training loop: steps, batch sizes, logging, evaluation"),
      section("checkpoint", kCheckpoint, "saving and resuming"),
      section("precision", kPrecision, "mixed precision"),
      section("lr", kLr, "the learning-rate schedule"),
      section("parallel", kParallel,
              "parallel layout; also takes the keys of the parallel plugin named by `data`"),
      section("serve", kServe, "`loom serve`: the chat template of /v1/chat/completions"),
  };
  return sections;
}

const std::vector<PluginSection>& plugin_sections() {
  static const std::vector<PluginSection> sections = {
      plugin_section("backend", LOOM_KIND_BACKEND, kBackend, "the device"),
      plugin_section("comm", LOOM_KIND_COMM, kComm, "communication between ranks"),
      plugin_section("model", LOOM_KIND_MODEL, kModel, "the network"),
      plugin_section("attention", LOOM_KIND_ATTENTION, kAttention, "the attention core"),
      plugin_section("optimizer", LOOM_KIND_OPTIMIZER, kOptimizer, "the update rule"),
      plugin_section("tokenizer", LOOM_KIND_TOKENIZER, kTokenizer, "text <-> token ids"),
      plugin_section("data", LOOM_KIND_DATASET, kData, "the training documents"),
  };
  return sections;
}

}  // namespace loom::engine
