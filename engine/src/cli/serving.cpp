// `loom generate`, `loom serve` and `loom eval`: the commands that load a trained model to
// use it. Their options are checked here; the work is in generate.cpp, serve_*.cpp, eval.cpp.
#include <cstdint>

#include "base/tool_output.hpp"
#include "cli/command.hpp"
#include "eval/eval.hpp"
#include "loader/registry.hpp"
#include "serve/generate.hpp"
#include "serve/serve.hpp"

namespace loom::engine::cli {

int cmd_generate(const std::vector<std::string>& args) {
  Command c("generate", "--checkpoint DIR --prompt TEXT [options]");
  GenerateOptions o;
  c.options.add_options()("checkpoint", po::value<std::string>(),
                          "checkpoint directory (or its parent, with `latest`)")(
      "prompt", po::value<std::string>(), "text to continue")(
      "max-new-tokens", po::value<int64_t>(&o.max_new_tokens)->default_value(o.max_new_tokens),
      "tokens to generate")("temperature",
                            po::value<double>(&o.temperature)->default_value(o.temperature),
                            "sampling temperature; 0 = greedy")(
      "top-k", po::value<int64_t>(&o.top_k)->default_value(o.top_k),
      "keep the k likeliest; 0 = off")("top-p", po::value<double>(&o.top_p)->default_value(o.top_p),
                                       "keep the smallest set with this probability mass; 1 = off")(
      "seed", po::value<uint64_t>(&o.seed)->default_value(o.seed), "sampling seed")(
      "logits-out", po::value<std::string>(),
      "write the logits of every prompt position to this safetensors file (tensor "
      "\"logits\", prompt tokens x vocabulary, f32)")("overwrite", po::bool_switch(&o.overwrite),
                                                      "replace an existing --logits-out file");
  add_set_option(c);
  if (!c.parse(args)) return 0;
  o.checkpoint = c.required<std::string>("checkpoint", "--checkpoint DIR");
  o.prompt = c.required<std::string>("prompt", "--prompt TEXT");
  o.overrides = c.list("set");
  if (c.vm.count("logits-out")) o.logits_out = c.vm["logits-out"].as<std::string>();
  // Before the model loads: an output that would replace an input, or a file the user did
  // not say may go, is refused (exit 2) as by every tool that writes (tool_output.hpp).
  if (!o.logits_out.empty())
    check_output("loom generate --logits-out", o.logits_out, {o.checkpoint}, o.overwrite);
  if (o.max_new_tokens < 0 || o.max_new_tokens > (int64_t{1} << 30))
    throw UsageError("loom generate: --max-new-tokens must be from 0 to 1073741824, got " +
                     std::to_string(o.max_new_tokens));
  if (!(o.temperature >= 0)) throw UsageError("loom generate: --temperature must be >= 0");
  if (o.top_k < 0) throw UsageError("loom generate: --top-k must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) throw UsageError("loom generate: --top-p must be in (0, 1]");
  Registry registry;
  registry.discover();
  generate(o, registry);
  return 0;
}

int cmd_serve(const std::vector<std::string>& args) {
  Command c("serve", "--checkpoint DIR [options]");
  ServeOptions o;
  c.options.add_options()("checkpoint", po::value<std::string>(),
                          "checkpoint directory (or its parent, with `latest`), or a Hugging "
                          "Face GPT-2/Llama directory")(
      "host", po::value<std::string>(&o.host)->default_value(o.host), "address to listen on")(
      "port", po::value<int>(&o.port)->default_value(o.port), "port; 0 = any free one")(
      "port-file", po::value<std::string>(), "write the port listened on to this file")(
      "model-name", po::value<std::string>(&o.model_name),
      "the model's id in /v1/models and responses (default: the checkpoint folder's name)")(
      "max-batch", po::value<int64_t>(&o.max_batch)->default_value(o.max_batch),
      "sequences decoded together (continuous batching)")(
      "max-queue", po::value<int64_t>(&o.max_queue)->default_value(o.max_queue),
      "requests waiting for a free sequence; beyond, 503")(
      "max-len", po::value<int64_t>(&o.max_len)->default_value(o.max_len),
      "tokens per sequence, prompt included; 0 = the model's context (or train.seq_len)")(
      "max-body", po::value<int64_t>(&o.max_body)->default_value(o.max_body),
      "largest request body in bytes; beyond, 413")(
      "max-connections", po::value<int64_t>(&o.max_connections)->default_value(o.max_connections),
      "open connections; beyond, 503")(
      "idle-timeout", po::value<double>(&o.idle_timeout)->default_value(o.idle_timeout),
      "seconds a connection may wait before a request's first byte (then it is closed), and "
      "a client may take to accept any byte of an answer")(
      "header-timeout", po::value<double>(&o.header_timeout)->default_value(o.header_timeout),
      "seconds for the rest of a request's header once it has begun; then 408")(
      "body-timeout", po::value<double>(&o.body_timeout)->default_value(o.body_timeout),
      "seconds for a request's body after its header; then 408");
  add_set_option(c);
  if (!c.parse(args)) return 0;
  o.checkpoint = c.required<std::string>("checkpoint", "--checkpoint DIR");
  o.overrides = c.list("set");
  if (c.vm.count("port-file")) o.port_file = c.vm["port-file"].as<std::string>();
  if (o.port < 0 || o.port > 65535) throw UsageError("loom serve: --port must be 0..65535");
  for (auto [v, name] : {std::pair{o.max_batch, "--max-batch"},
                         {o.max_body, "--max-body"},
                         {o.max_connections, "--max-connections"}})
    if (v < 1) throw UsageError(std::string("loom serve: ") + name + " must be >= 1");
  for (auto [v, name] : {std::pair{o.idle_timeout, "--idle-timeout"},
                         {o.header_timeout, "--header-timeout"},
                         {o.body_timeout, "--body-timeout"}})
    if (!(v > 0 && v <= 86400))
      throw UsageError(std::string("loom serve: ") + name + " must be > 0 and <= 86400 seconds");
  if (o.max_queue < 0 || o.max_len < 0)
    throw UsageError("loom serve: --max-queue and --max-len must be >= 0");
  Registry registry;
  registry.discover();
  serve(o, registry);
  return 0;
}

int cmd_eval(const std::vector<std::string>& args) {
  Command c("eval",
            "--checkpoint DIR (--task wikitext|lambada --data FILE | --logprobs PREFIX) "
            "[options]");
  EvalOptions o;
  c.options.add_options()("checkpoint", po::value<std::string>(),
                          "checkpoint directory (any layout), or a Hugging Face GPT-2/Llama "
                          "directory")("task", po::value<std::string>(&o.task),
                                       "wikitext (perplexity) or lambada (cloze accuracy)")(
      "data", po::value<std::string>(),
      "wikitext: the raw text file (wiki.test.tokens); lambada: JSON lines with \"text\"")(
      "seq-len", po::value<int64_t>(&o.seq_len)->default_value(0),
      "tokens per window; 0 = the checkpoint's train.seq_len")(
      "overlapping-eval", po::value<int64_t>(&o.overlapping)->default_value(o.overlapping),
      "wikitext: stride of the windows; each window after the first scores its last this many "
      "tokens (Megatron's --overlapping-eval)")(
      "strict", po::bool_switch(&o.strict),
      "lambada: predict the whole last word, not just its last token (Megatron's "
      "--strict-lambada)")("micro-batch", po::value<int64_t>(&o.micro_batch)->default_value(0),
                           "samples per micro-batch; 0 = the checkpoint's train.micro_batch_size")(
      "output", po::value<std::string>(), "also write the results to this JSON file")(
      "logprobs", po::value<std::string>(),
      "DPO instead of a task: the log-probabilities of the preference pairs at PREFIX "
      "(<p>_chosen_document, from loom preprocess --preference-pairs) under this checkpoint, "
      "written beside them as <p>_dpo_reference.bin: the reference a train.objective = \"dpo\" "
      "run starting from this checkpoint reads instead of computing it")(
      "overwrite", po::bool_switch(&o.overwrite), "replace an existing --output file");
  add_set_option(c);
  c.notes = kEvalDataNotes;
  if (!c.parse(args)) return 0;
  o.checkpoint = c.required<std::string>("checkpoint", "--checkpoint DIR");
  if (c.vm.count("logprobs")) {
    o.logprobs = c.vm["logprobs"].as<std::string>();
    if (!o.task.empty() || c.vm.count("data"))
      throw UsageError("loom eval: --logprobs replaces --task and --data");
  } else {
    o.data = c.required<std::string>("data", "--data FILE");
    if (o.task.empty()) throw UsageError("loom eval: --task wikitext|lambada is required");
  }
  if (c.vm.count("output")) o.output = c.vm["output"].as<std::string>();
  if (!o.output.empty() && o.logprobs.empty())
    check_output("loom eval --output", o.output, {o.checkpoint, o.data}, o.overwrite);
  o.overrides = c.list("set");
  if (o.overlapping < 1 || o.seq_len < 0 || o.micro_batch < 0)
    throw UsageError(
        "loom eval: --overlapping-eval must be >= 1, --seq-len and --micro-batch >= 0");
  Registry registry;
  registry.discover();
  evaluate_checkpoint(o, registry);
  return 0;
}

}  // namespace loom::engine::cli
