// model/gpt and model/bert under tensor (TP), sequence (SP) and pipeline (PP) parallelism. Every
// rank builds two models from the same seed: a whole-model reference on a host with comm/single
// (tensor = pipeline = 1) and its part of the parallel model on a host with comm/mpi laid
// out by setup_parallel. Both run the same two micro-batches; the loss must match and every
// gradient (and initial value), assembled from the tensor-parallel shards into the full
// tensor with tp_split_dim and tp_block_sizes, must match the reference's. float64, so a
// mismatch is a bug, not rounding. Pipeline stages are driven by hand: forward on stage 0,
// the activation sent to stage 1, forward and backward there, the gradient sent back.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/cpp/comm.hpp"
#include "loom/cpp/model_step.hpp"
#include "model_test_util.hpp"
#include "test_host.hpp"

namespace {

using Overrides = std::map<std::string, std::string>;
using loom::layout::Degrees;

constexpr int64_t kB = 2, kT = 16, kN = kB * kT;
constexpr uint64_t kSeed = 1234;

// comm/mpi finalises MPI when its last instance goes; this one lives for the process.
using modeltest::mpi_anchor;
int world_size() {
  loom_comm_ref c{};
  mpi_anchor().check(mpi_anchor().host()->get_comm(mpi_anchor().host()->ctx, &c));
  return c.api->world_size(c.self);
}

// A GPT-2-style and a Llama-style tiny model, with vocabularies whose padded shards leave
// the second tensor rank with no real rows (100 of 256) or some (300 of 384).
struct Config {
  const char* name;
  Overrides options;
  int64_t vocab;
  const char* model;  // the plugin: gpt or bert
};
const Config kGpt2{"gpt2",
                   {{"n_layer", "4"}, {"n_head", "4"}, {"n_embd", "32"}, {"max_seq_len", "32"}},
                   100,
                   "gpt"};
// BERT: padding, token types, both heads (replicated under TP, on the last stage under PP).
const Config kBert{"bert",
                   {{"n_layer", "4"}, {"n_head", "4"}, {"n_embd", "32"}, {"max_seq_len", "32"}},
                   100,
                   "bert"};
// The original BERT's post-LN: the embedding LayerNorm on the first stage, no ln_f.
const Config kBertPost{"bert-post-ln",
                       {{"n_layer", "4"},
                        {"n_head", "4"},
                        {"n_embd", "32"},
                        {"max_seq_len", "32"},
                        {"norm_position", "post"}},
                       100,
                       "bert"};
const Config kLlama{"llama",
                    [] {
                      Overrides o = modeltest::small_llama("4");
                      o["pad_vocab_to"] = "64";
                      return o;
                    }(),
                    300, "gpt"};

DLTensor host_tensor(std::vector<double>& v, int64_t& shape) {
  shape = (int64_t)v.size();
  DLTensor t{};
  t.data = v.data();
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = loom_f64();
  t.shape = &shape;
  return t;
}

std::vector<double> download(const loom_backend_ref& be, const DLTensor* t) {
  std::vector<double> out(loom_tensor_numel(t));
  REQUIRE(be.api->to_host(be.self, t, out.data(), out.size() * sizeof(double)) == nullptr);
  return out;
}

// One model instance on its own host (modeltest::ModelInstance) in f64.
struct Instance : modeltest::ModelInstance {
  // d == nullptr: the whole model; else this rank's stage and shard of layout d.
  Instance(const std::string& comm_name, const Degrees* d, const Config& c)
      : ModelInstance(comm_name, d, c.model, c.options, c.vocab, kT, kB, loom_f64(), kSeed) {}

  loom_comm_group* group(loom_group_kind k) {
    loom_comm_group* g = nullptr;
    th.check(th.host()->get_group(th.host()->ctx, k, &g));
    return g;
  }
  const loom_model_param* find(const std::string& name) const {
    for (auto& p : params)
      if (name == p.name) return &p;
    return nullptr;
  }
};

struct Batch {
  std::vector<int32_t> tokens, targets, types, padding, sop;
  std::unique_ptr<loom::HostBatch> hb;  // views of the arrays
  const loom_microbatch* mb() const { return hb->get(); }
};
constexpr double kLossScale = 1.0 / 50.0;
// Deterministic micro-batch k, the same on every rank; every 7th target ignored. BERT's:
// row 1 has 11 real tokens then padding (targets -1), segment B from the middle of each
// row's real tokens, sentence-order labels k and 1-k.
Batch make_batch(int k, const Config& c) {
  Batch b;
  const bool bert = std::string(c.model) == "bert";
  for (int64_t i = 0; i < kN; ++i) {
    const int64_t row = i / kT, t = i % kT, len = row == 1 && bert ? 11 : kT;
    b.tokens.push_back((int32_t)((i * 37 + k * 11 + (i * i) % 13) % c.vocab));
    b.targets.push_back(i % 7 == 3 || t >= len ? -1 : (int32_t)((i * 53 + k * 29 + 5) % c.vocab));
    b.padding.push_back(t < len ? 1 : 0);
    b.types.push_back(t < len && t >= len / 2 ? 1 : 0);
  }
  b.sop = {k % 2, 1 - k % 2};
  b.hb = std::make_unique<loom::HostBatch>(kB, kT);
  b.hb->tokens_targets(b.tokens.data(), b.targets.data());
  if (bert) {
    b.hb->add("token_types", b.types.data()).add("padding_mask", b.padding.data());
    b.hb->add_per_sample("sop_labels", b.sop.data());
  }
  return b;
}

// The full tensor from every tensor rank's shard of `local` (collective over the group).
std::vector<double> assemble(Instance& in, const loom_model_param& p, std::vector<double> local,
                             std::vector<int64_t>* full_shape) {
  const DLTensor* t = p.value;
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  const int tp = in.th.layout().tensor;
  if (tp == 1 || p.tp_split_dim < 0) {
    *full_shape = shape;
    return local;
  }
  std::vector<double> all(local.size() * tp);
  int64_t s_in = 0, s_out = 0;
  DLTensor ti = host_tensor(local, s_in), to = host_tensor(all, s_out);
  in.th.check(loom::comm_all_gather(in.comm, in.group(LOOM_GROUP_TENSOR), &ti, &to));
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  const int64_t n = (int64_t)local.size();
  std::vector<double> full(all.size());
  if (p.tp_split_dim == 1) {
    *full_shape = {rows, cols * tp};
    for (int r = 0; r < tp; ++r)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          full[i * cols * tp + r * cols + j] = all[r * n + i * cols + j];
    return full;
  }
  *full_shape = shape;
  (*full_shape)[0] = rows * tp;
  std::vector<int64_t> blocks{rows * tp};
  if (p.tp_num_blocks > 0) blocks.assign(p.tp_block_sizes, p.tp_block_sizes + p.tp_num_blocks);
  for (int r = 0; r < tp; ++r) {
    int64_t local0 = 0, global0 = 0;
    for (int64_t b : blocks) {
      const int64_t lb = b / tp;
      for (int64_t i = 0; i < lb; ++i)
        for (int64_t j = 0; j < cols; ++j)
          full[(global0 + r * lb + i) * cols + j] = all[r * n + (local0 + i) * cols + j];
      local0 += lb;
      global0 += b;
    }
    REQUIRE(local0 == rows);
  }
  return full;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Loss of two micro-batches through this rank's stage (stage 0 <-> stage 1 by hand), and
// finish_grads. Returns the loss the last stage saw (0 elsewhere).
double run_parallel(Instance& in, Batch* batches, int nb) {
  const loom_parallel_layout& L = in.th.layout();
  double loss = 0;
  if (L.pipeline == 1) {
    for (int k = 0; k < nb; ++k) {
      double l = 0, n = 0;
      in.th.check(loom::model_step(in.api, in.m, batches[k].mb(), kLossScale, true, &l, &n));
      loss += l;
    }
  } else {
    REQUIRE(L.pipeline == 2);
    loom_stage_info info{};
    info.struct_size = LOOM_STAGE_INFO_SIZE_V2;
    info.batch = kB;
    info.seq_len = kT;
    in.th.check(in.api->stage_info(in.m, &info));
    CHECK(info.is_first == (L.pipeline_rank == 0));
    CHECK(info.is_last == (L.pipeline_rank == 1));
    // One hidden state between the stages, B*T rows (over tensor with sequence parallelism).
    const loom_stage_tensor& io = info.is_first ? info.outputs[0] : info.inputs[0];
    REQUIRE((info.is_first ? info.num_outputs : info.num_inputs) == 1);
    CHECK(io.ndim == 2);
    CHECK(io.shape[0] == (L.sequence_parallel ? kN / L.tensor : kN));
    loom_comm_group* pg = in.group(LOOM_GROUP_PIPELINE);
    DLTensor* buf = nullptr;
    in.th.check(in.be.api->alloc_tensor(in.be.self, io.dtype, io.ndim, io.shape, &buf));
    const DLTensor* bufs[1] = {buf};
    auto& cm = in.comm;
    auto forward = [&](int k, const DLTensor* const* inputs) {
      loom_stage_forward_args f{};
      f.struct_size = LOOM_STAGE_FORWARD_ARGS_SIZE_V2;
      f.slot = k;
      f.mb = batches[k].mb();
      f.loss_scale = kLossScale;
      f.num_inputs = inputs ? 1 : 0;
      f.inputs = inputs;
      in.th.check(in.api->stage_forward(in.m, &f));
      return f;
    };
    auto backward = [&](int k, const DLTensor* const* doutputs) {
      loom_stage_backward_args b{};
      b.struct_size = LOOM_STAGE_BACKWARD_ARGS_SIZE_V2;
      b.slot = k;
      b.num_doutputs = doutputs ? 1 : 0;
      b.doutputs = doutputs;
      in.th.check(in.api->stage_backward(in.m, &b));
      return b;
    };
    if (info.is_first) {  // forward both micro-batches (slots 0, 1), then both backwards
      for (int k = 0; k < nb; ++k) {
        const loom_stage_forward_args f = forward(k, nullptr);
        REQUIRE(f.num_outputs == 1);
        CHECK(f.num_losses == 0);
        in.th.check(loom::comm_send(cm, pg, f.outputs[0], 1, k));
      }
      for (int k = 0; k < nb; ++k) {
        in.th.check(loom::comm_recv(cm, pg, buf, 1, 100 + k));
        CHECK(backward(k, bufs).num_dinputs == 0);
      }
    } else {
      for (int k = 0; k < nb; ++k) {
        in.th.check(loom::comm_recv(cm, pg, buf, 0, k));
        const loom_stage_forward_args f = forward(k, bufs);
        CHECK(f.num_outputs == 0);
        REQUIRE(f.num_losses >= 1);  // BERT adds "sop"
        CHECK(std::string(f.losses[0].name) == "lm");
        loss += f.losses[0].sum;
      }
      for (int k = 0; k < nb; ++k) {
        const loom_stage_backward_args b = backward(k, nullptr);
        REQUIRE(b.num_dinputs == 1);
        in.th.check(loom::comm_send(cm, pg, b.dinputs[0], 0, 100 + k));
      }
    }
    in.be.api->free_tensor(in.be.self, buf);
  }
  in.th.check(in.api->finish_grads(in.m));
  return loss;
}

void check_layout(const Config& c, Degrees d) {
  const int world = world_size();
  if (world % (d.tensor * d.pipeline) != 0) return;
  const std::string config = c.name;
  CAPTURE(config);
  CAPTURE(d.tensor);
  CAPTURE(d.pipeline);
  CAPTURE(d.sequence_parallel);
  mpi_anchor();
  Batch batches[2] = {make_batch(0, c), make_batch(1, c)};

  Instance ref("single", nullptr, c);
  double ref_loss = 0;
  for (auto& b : batches) {
    double l = 0, n = 0;
    ref.th.check(loom::model_step(ref.api, ref.m, b.mb(), kLossScale, true, &l, &n));
    ref_loss += l;
  }
  ref.th.check(ref.api->finish_grads(ref.m));  // a no-op at tensor = pipeline = 1

  Instance par("mpi", &d, c);
  const loom_parallel_layout& L = par.th.layout();
  const double loss = run_parallel(par, batches, 2);
  if (L.pipeline_rank == L.pipeline - 1)
    CHECK(std::fabs(loss - ref_loss) <= 1e-5 * std::fabs(ref_loss));

  // every parameter of this stage: shards assembled, values and gradients vs the reference
  int layers = 0;
  for (const loom_model_param& p : par.params) {
    const std::string name = p.name;
    CAPTURE(name);
    const loom_model_param* r = ref.find(p.name);
    REQUIRE(r != nullptr);
    if (std::string(p.name).find(".ln_1.weight") != std::string::npos) ++layers;
    CHECK(p.pipeline_duplicate ==
          (std::string(p.name) == "wte" && L.pipeline > 1 && L.pipeline_rank == L.pipeline - 1));
    std::vector<int64_t> vshape, gshape;
    const std::vector<double> value = assemble(par, p, download(par.be, p.value), &vshape);
    const std::vector<double> grad = assemble(par, p, download(par.be, p.grad), &gshape);
    const std::vector<double> rvalue = download(ref.be, r->value),
                              rgrad = download(ref.be, r->grad);
    // The vocabulary is padded to pad_vocab_to x tensor, so wte / lm_head may have more
    // (padding) rows than the reference's: the shared rows must match, the extra rows take
    // no gradient.
    const std::vector<int64_t> rshape(r->value->shape, r->value->shape + r->value->ndim);
    const bool vocab_rows = name == "wte" || name == "lm_head.weight" || name == "lm_head.bias";
    REQUIRE(vshape.size() == rshape.size());
    CHECK((vocab_rows ? vshape[0] >= rshape[0] : vshape[0] == rshape[0]));
    for (size_t k = 1; k < vshape.size(); ++k) CHECK(vshape[k] == rshape[k]);
    const size_t shared = std::min(value.size(), rvalue.size());
    double dv = 0, dg = 0;
    for (size_t i = 0; i < shared; ++i) {
      dv = std::max(dv, std::fabs(value[i] - rvalue[i]));
      dg = std::max(dg, std::fabs(grad[i] - rgrad[i]));
    }
    int64_t padding_grads = 0;
    for (size_t i = shared; i < grad.size(); ++i) padding_grads += grad[i] != 0.0;
    CHECK(padding_grads == 0);
    CHECK(dv <= 1e-12 * std::max(1.0, max_abs(rvalue)));
    CHECK(max_abs(rgrad) > 0);  // every parameter takes part in the loss
    CHECK(dg <= 1e-5 * max_abs(rgrad));
  }
  CHECK(layers == 4 / L.pipeline);
}

// Generation under tensor parallelism: sequences joining and leaving a batch of KV-cache
// slots get, from every rank, the logits the whole model gives (the vocabulary's shards
// gathered; the second rank of kGpt2 holds no real row).
void check_decode(const Config& c, int tensor) {
  if (world_size() % tensor != 0) return;
  const std::string config = c.name;
  CAPTURE(config);
  mpi_anchor();
  Degrees d;
  d.tensor = tensor;
  Instance ref("single", nullptr, c);
  Instance par("mpi", &d, c);
  auto ext = [](Instance& in) {
    const auto* desc = loomtest::load_descriptor("model", "gpt");
    const loom_ext* e = loom_ext_find(desc->ext, LOOM_EXT_DECODE_SLOTS);
    REQUIRE(e != nullptr);
    (void)in;
    return reinterpret_cast<const loom_decode_slots_ext*>(e);
  };
  const auto* dec = reinterpret_cast<const loom_decode_ext*>(
      loom_ext_find(loomtest::load_descriptor("model", "gpt")->ext, LOOM_EXT_DECODE));
  REQUIRE(dec != nullptr);
  for (Instance* in : {&ref, &par}) in->th.check(dec->kv_reset(in->m, 3, kT));
  const int64_t V = c.vocab;
  double worst = 0, scale = 0;
  auto step = [&](std::vector<int64_t> slots, int64_t n, int k) {
    std::vector<int32_t> toks;
    for (size_t i = 0; i < slots.size() * n; ++i) toks.push_back((int32_t)((i * 31 + k * 7) % V));
    std::vector<float> a(slots.size() * V), b(slots.size() * V);
    ref.th.check(ext(ref)->decode_slots(ref.m, slots.data(), (int64_t)slots.size(), toks.data(), n,
                                        a.data()));
    par.th.check(ext(par)->decode_slots(par.m, slots.data(), (int64_t)slots.size(), toks.data(), n,
                                        b.data()));
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, (double)std::fabs(a[i] - b[i]));
      scale = std::max(scale, (double)std::fabs(a[i]));
    }
  };
  step({1}, 5, 0);     // a prompt of 5 in slot 1
  step({0, 2}, 3, 1);  // two prompts of 3
  step({2, 1, 0}, 1, 2);
  for (Instance* in : {&ref, &par}) in->th.check(ext(*in)->kv_clear(in->m, 1));
  step({1}, 2, 3);  // a new sequence in slot 1
  step({0, 1, 2}, 1, 4);
  CHECK(scale > 0);
  CHECK(worst <= 1e-6 * scale);
  MESSAGE(config << " tensor " << tensor << ": decode max |parallel - whole| = " << worst);
}

TEST_CASE("model/gpt: generation under tensor parallelism gives the whole model's logits") {
  check_decode(kGpt2, 2);
  check_decode(kLlama, 2);
}

TEST_CASE("model/gpt: tensor parallel = 2 matches one rank") {
  Degrees d;
  d.tensor = 2;
  check_layout(kGpt2, d);
  check_layout(kLlama, d);
  check_layout(kBert, d);
  check_layout(kBertPost, d);
}

TEST_CASE("model/gpt: tensor parallel = 2 with sequence parallelism matches one rank") {
  Degrees d;
  d.tensor = 2;
  d.sequence_parallel = true;
  check_layout(kGpt2, d);
  check_layout(kLlama, d);
  check_layout(kBert, d);
  check_layout(kBertPost, d);
}

TEST_CASE("model/gpt: pipeline = 2 stages match one rank") {
  Degrees d;
  d.pipeline = 2;
  check_layout(kGpt2, d);
  check_layout(kLlama, d);
  check_layout(kBert, d);
  check_layout(kBertPost, d);
}

TEST_CASE("model/gpt: tensor = 2 x pipeline = 2 (with and without sequence parallelism)") {
  Degrees d;
  d.tensor = 2;
  d.pipeline = 2;
  check_layout(kGpt2, d);
  check_layout(kLlama, d);
  d.sequence_parallel = true;
  check_layout(kGpt2, d);
  check_layout(kLlama, d);
  check_layout(kBert, d);
  check_layout(kBertPost, d);
}

TEST_CASE("model/gpt: layouts the model cannot split are refused with the numbers") {
  if (world_size() % 2 != 0) return;
  Degrees d;
  d.tensor = 2;
  Config odd = kGpt2;
  odd.options["n_head"] = "1";
  std::string msg;
  try {
    Instance bad("mpi", &d, odd);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  CHECK(msg.find("n_head = 1 is not divisible by tensor = 2") != std::string::npos);
  Degrees p;
  p.pipeline = 2;
  Config three = kGpt2;
  three.options["n_layer"] = "3";
  msg.clear();
  try {
    Instance bad("mpi", &p, three);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  CHECK(msg.find("n_layer = 3 is not divisible by pipeline_stages = 2") != std::string::npos);
}

}  // namespace
