// model/t5 beyond the whole-model reference (test_gpt_reference.cpp): generation. The encoder
// runs once per sequence (loom.encode/1), the decoder token by token over its KV cache; the
// cross-entropy of the decoded logits must be the PyTorch float64 reference's loss
// (tests/model/make_t5_reference.py), chunked decoding must equal token-by-token decoding,
// and slots decode independently of each other.
#include "loom/cpp/layers/t5/t5.hpp"
#include "model_test_util.hpp"
#include "reference_file.hpp"

using namespace modeltest;

namespace {

const loom_encode_ext* encode_ext(const loom_plugin_descriptor* d) {
  const loom_ext* e = loom_ext_find(d->ext, LOOM_EXT_ENCODE);
  REQUIRE(e != nullptr);
  REQUIRE(e->struct_size >= LOOM_ENCODE_EXT_SIZE_V1);
  return reinterpret_cast<const loom_encode_ext*>(e);
}

// Loads the reference's parameters into m.
void load_params(Host& h, Gpt& m, const Reference& r) {
  for (auto& p : m.params) {
    const auto& ref = r.params.at(p.name);
    std::vector<double> v(loom_tensor_numel(p.value), 0.0);
    std::copy(ref.begin(), ref.end(), v.begin());
    upload(h.be, p.value, v);
  }
}

double cross_entropy(const float* lg, int64_t V, int32_t target) {
  double mx = lg[0], z = 0;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, (double)lg[v]);
  for (int64_t v = 0; v < V; ++v) z += std::exp(lg[v] - mx);
  return mx + std::log(z) - lg[target];
}

void check_generation(const char* name, DLDataType dt, double tol) {
  const Reference r = load(name);
  const loom_plugin_descriptor* desc = loomtest::load_descriptor("model", "t5");
  Host h;
  Gpt m(h, r.options, r.vocab, r.batch, r.seq, dt, desc);
  load_params(h, m, r);
  const loom_encode_ext* enc = encode_ext(desc);
  const int64_t B = r.batch, T = r.seq, V = r.vocab;
  const int64_t K = (int64_t)r.dec_tokens.size() / B;
  m.check(m.decode_ext()->kv_reset(m.self(), B, K));
  // decoding before encoding is refused
  std::vector<float> logits(B * V);
  loom_error* e = m.decode_ext()->decode(m.self(), r.dec_tokens.data(), 1, logits.data());
  REQUIRE(e != nullptr);
  CHECK(std::string(e->message).find("encode") != std::string::npos);
  delete e;
  // each row's real encoder tokens into its slot
  for (int64_t b = 0; b < B; ++b) {
    int64_t len = 0;
    while (len < T && r.padding_mask[b * T + len] == 1) ++len;
    m.check(enc->encode(m.self(), b, r.tokens.data() + b * T, len));
  }
  // the decoder token by token: logits[t] of every row
  std::vector<std::vector<float>> step(K, std::vector<float>(B * V));
  double ce = 0;
  for (int64_t t = 0; t < K; ++t) {
    std::vector<int32_t> tok(B);
    for (int64_t b = 0; b < B; ++b) tok[b] = r.dec_tokens[b * K + t];
    m.check(m.decode_ext()->decode(m.self(), tok.data(), 1, step[t].data()));
    for (int64_t b = 0; b < B; ++b)
      if (r.dec_targets[b * K + t] != -1)
        ce += cross_entropy(step[t].data() + b * V, V, r.dec_targets[b * K + t]);
  }
  INFO("decoded cross-entropy " << ce << " vs reference " << r.loss_sum);
  CHECK(std::fabs(ce - r.loss_sum) < tol * r.loss_sum);
  MESSAGE(std::string(name) << " " << (dt.bits == 64 ? "f64" : "f32")
                            << ": cross-entropy of KV-cached decoding vs PyTorch's loss, rel err "
                            << std::fabs(ce - r.loss_sum) / r.loss_sum);

  // chunks: row 1 alone, 2 decoder tokens then K - 2, through decode_slots; the rows' caches
  // are independent, so this equals the token-by-token logits of row 1
  const int64_t slot = 1;
  int64_t real = 0;
  while (real < T && r.padding_mask[slot * T + real] == 1) ++real;
  m.check(enc->encode(m.self(), slot, r.tokens.data() + slot * T, real));
  std::vector<float> one(V);
  m.check(m.slots_ext()->decode_slots(m.self(), &slot, 1, r.dec_tokens.data() + slot * K, 2,
                                      one.data()));
  for (int64_t v = 0; v < V; ++v)
    CHECK(one[v] == doctest::Approx(step[1][slot * V + v]).epsilon(tol));
  m.check(m.slots_ext()->decode_slots(m.self(), &slot, 1, r.dec_tokens.data() + slot * K + 2, K - 2,
                                      one.data()));
  for (int64_t v = 0; v < V; ++v)
    CHECK(one[v] == doctest::Approx(step[K - 1][slot * V + v]).epsilon(tol));
  // the cache is full now: one more token is an error, not a crash
  e = m.slots_ext()->decode_slots(m.self(), &slot, 1, r.dec_tokens.data(), 1, one.data());
  REQUIRE(e != nullptr);
  CHECK(std::string(e->message).find("KV cache") != std::string::npos);
  delete e;
  // an encoding longer than the position table is refused
  std::vector<int32_t> long_prompt(std::stoi(r.options.at("max_seq_len")) + 1, 3);
  e = enc->encode(m.self(), 0, long_prompt.data(), (int64_t)long_prompt.size());
  REQUIRE(e != nullptr);
  delete e;
}

}  // namespace

TEST_CASE("model/t5: KV-cached generation over a once-run encoder gives PyTorch's loss") {
  check_generation("t5_tiny", loom_f32(), 1e-5);
  // decode hands out f32 logits (loom.decode/1) whatever the compute dtype: f32 rounding
  // bounds the f64 run's agreement too
  check_generation("t5_tiny", loom_f64(), 1e-7);
}

// The relative position bias of each new query over the cached keys (its position is the
// sequence's length so far) must be the one training computed.
TEST_CASE("model/t5: generation with the relative position bias gives PyTorch's loss") {
  check_generation("t5_tiny_relative", loom_f32(), 1e-5);
  check_generation("t5_tiny_relative", loom_f64(), 1e-7);
}

TEST_CASE("model/t5: relative position buckets are Megatron's") {
  // torch's buckets from tests/model/make_t5_reference.py's transcription of Megatron's
  // _relative_position_bucket, for relative positions -600 .. 600
  std::ifstream f(std::string(LOOM_MODEL_TEST_DATA) + "/t5_buckets.txt");
  REQUIRE(f.good());
  std::string line;
  int rows = 0;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    int64_t nb = 0, md = 0, bi = 0;
    in >> nb >> md >> bi;
    INFO(nb << " buckets, max distance " << md << (bi ? ", bidirectional" : ", causal"));
    for (int64_t rel = -600; rel <= 600; ++rel) {
      int32_t want = -1;
      in >> want;
      CHECK(loom::layers::relative_bucket(rel, bi != 0, nb, md) == want);
    }
    REQUIRE(!in.fail());
    ++rows;
  }
  CHECK(rows == 4);
}
