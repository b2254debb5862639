// A stored PyTorch float64 reference (tests/model/make_reference.py for model/gpt,
// make_bert_reference.py for model/bert, make_t5_reference.py for model/t5): the model options, the
// batch, the parameters, the loss sums and every parameter gradient, as text.
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "model_test_util.hpp"
#include "reference_records.hpp"

namespace modeltest {

struct Reference {
  Overrides options;
  int64_t vocab = 0, batch = 0, seq = 0;
  std::vector<int32_t> tokens, targets, token_types, padding_mask, sop_labels, labels;
  std::vector<int32_t> dec_tokens, dec_targets;  // T5's (B, decoder_seq_len)
  double loss_sum = 0, sop_sum = 0, mtp_sum = 0, loss_scale = 0, accuracy = -1;
  // DPO (make_reference.py's *_dpo_* cases): beta and each row's reference log-probability;
  // loss_sum is then the pairs' summed DPO loss
  double dpo_beta = 0;
  std::vector<double> dpo_reference;
  std::map<std::string, std::vector<double>> params, grads;
};

inline Reference load(const std::string& name) {
  const std::string path = std::string(LOOM_MODEL_TEST_DATA) + "/" + name + ".txt";
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(),
                  "missing reference data " << path << " (run its tests/model/make_*reference.py)");
  Reference r;
  loomtest::each_record(f, [&](const std::string& kind, std::istream& in) {
    if (kind == "option") {
      std::string k, v;
      in >> k >> v;
      r.options[k] = v;
    } else if (kind == "create") {
      in >> r.vocab >> r.batch >> r.seq;
    } else if (kind == "tokens" || kind == "targets" || kind == "token_types" ||
               kind == "padding_mask" || kind == "sop_labels" || kind == "labels" ||
               kind == "dec_tokens" || kind == "dec_targets") {
      auto& dst = kind == "tokens"         ? r.tokens
                  : kind == "targets"      ? r.targets
                  : kind == "token_types"  ? r.token_types
                  : kind == "padding_mask" ? r.padding_mask
                  : kind == "labels"       ? r.labels
                  : kind == "dec_tokens"   ? r.dec_tokens
                  : kind == "dec_targets"  ? r.dec_targets
                                           : r.sop_labels;
      int32_t t;
      while (in >> t) dst.push_back(t);
    } else if (kind == "loss_sum") {
      in >> r.loss_sum;
    } else if (kind == "accuracy") {
      in >> r.accuracy;
    } else if (kind == "sop_sum") {
      in >> r.sop_sum;
    } else if (kind == "mtp_sum") {
      in >> r.mtp_sum;
    } else if (kind == "dpo_beta") {
      in >> r.dpo_beta;
    } else if (kind == "dpo_reference") {
      double v;
      while (in >> v) r.dpo_reference.push_back(v);
    } else if (kind == "loss_scale") {
      in >> r.loss_scale;
    } else if (kind == "param" || kind == "grad") {
      std::string pname;
      size_t n = 0;
      in >> pname >> n;
      std::vector<double> v(n);
      for (auto& x : v) in >> x;
      // parameters are float32 numbers printed with 9 digits: round back to exactly them
      if (kind == "param")
        for (auto& x : v) x = (double)(float)x;
      REQUIRE_MESSAGE(!in.fail(), "truncated " << kind << " " << pname << " in " << path);
      (kind == "param" ? r.params : r.grads)[pname] = std::move(v);
    }
  });
  REQUIRE(r.tokens.size() == size_t(r.batch * r.seq));
  return r;
}

}  // namespace modeltest
