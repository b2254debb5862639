// Loom layer library, DPO's loss on the last stage (loom.preference/1, model.h; Rafailov et al.
// 2023, the sigmoid loss of TRL's DPOTrainer). Rows 2k and 2k+1 of the micro-batch are pair
// k's chosen and rejected sequences. A row's log-probability is minus its summed token losses,
// so the pair's loss is a function of two sums of the LM head's token losses; its gradient is
// the LM loss's gradient with each row's tokens weighted by d(loss)/d(row sum). One forward
// therefore suffices: the head's statistics path gives the token losses first, then each row's
// dlogits are written with its own weight (one vocab_ce_backward per row: the ops take one
// scale per call, and a micro-batch has few rows).
#include <cmath>
#include <string>

#include "loom/cpp/layers/decoder/decoder.hpp"

namespace loom::layers {

namespace {

// log sigmoid(z) and sigmoid(z) without overflow for either sign of z
double log_sigmoid(double z) {
  return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z));
}
double sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z));
}

}  // namespace

// The loss terms (kPreferenceLossNames' order) into losses_; with `grad`, the dlogits of
// every row in S.logits, as head_forward leaves them for head_backward.
size_t DecoderModel::preference_forward(Slot& S, const loom_microbatch& mb, const int32_t* targets,
                                        bool grad) {
  const auto* rows = reinterpret_cast<const loom_preference_rows*>(
      loom_ext_find(mb.ext, LOOM_EXT_PREFERENCE_ROWS));
  loom::require(rows && rows->base.struct_size >= LOOM_PREFERENCE_ROWS_SIZE_V1 && rows->policy,
                who_ + ": train.objective = \"dpo\": every micro-batch needs " +
                    LOOM_EXT_PREFERENCE_ROWS + " with its policy array (the host chains it)");
  const int64_t B = S.s.B, Tl = S.s.T, cols = head_.cols;
  loom::require(B % 2 == 0,
                who_ + ": a DPO micro-batch holds pairs of rows; it has " + std::to_string(B));
  // this rank's token losses (its chunk of each row under context parallelism), no gradient
  pref_token_loss_.assign((size_t)S.n, 0.0);
  loom_token_stats st{
      {sizeof st, LOOM_EXT_TOKEN_STATS, 0, nullptr}, pref_token_loss_.data(), nullptr};
  head_forward(S, targets, false, &st);
  std::vector<double> logp((size_t)B, 0.0);  // (B) log p of each row's counted targets
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; ++t) logp[(size_t)b] -= pref_token_loss_[(size_t)(b * Tl + t)];
  sum_over(ctx_, ctx_.cp, logp);  // the whole rows
  for (int64_t b = 0; b < B; ++b) rows->policy[b] = logp[(size_t)b];

  const double beta = opt_.dpo_beta;
  double loss = 0, chosen = 0, rejected = 0, margin = 0, right = 0;
  std::vector<double> w((size_t)B);  // d(pairs' summed loss) / d(row's summed token loss)
  for (int64_t k = 0; k < B / 2; ++k) {
    const size_t c = (size_t)(2 * k), r = c + 1;
    const double ref_c = rows->reference ? rows->reference[c] : 0.0;
    const double ref_r = rows->reference ? rows->reference[r] : 0.0;
    const double rc = beta * (logp[c] - ref_c), rr = beta * (logp[r] - ref_r), z = rc - rr;
    loss -= log_sigmoid(z);
    chosen += rc, rejected += rr, margin += z, right += z > 0 ? 1.0 : 0.0;
    // d(-log sigmoid z)/d(log p_c) = -beta sigmoid(-z), and a token loss is -log p
    w[c] = beta * sigmoid(-z);
    w[r] = -w[c];
  }
  if (grad) {
    // The host's loss_scale counts the micro-batch's B T tokens (S.loss_scale: times CP, whose
    // ranks each hold a chunk of every row); a pair's share is B T / (B / 2) of it.
    const double dscale = S.loss_scale * (double)(B * mb.seq_len) / (double)(B / 2);
    for (int64_t b = 0; b < B; ++b) {
      View lg = view(S.logits, {Tl, cols}, b * Tl * cols), tg = view(S.targets, {Tl}, b * Tl);
      View lse = view(S.lse, {Tl}, b * Tl);
      ce_.backward(ctx_.be, lg, lg, tg, lse, Tl, dscale * w[(size_t)b]);
    }
  }
  // Every context rank computed the same pairs: one reports them.
  const double pairs = ctx_.cp.rank == 0 ? (double)(B / 2) : 0.0;
  const double sums[5] = {loss, chosen, rejected, margin, right};
  for (size_t i = 0; i < 5; ++i)
    losses_[i] = loom_loss{LOOM_LOSS_SIZE_V2, kPreferenceLossNames[i], pairs > 0 ? sums[i] : 0.0,
                           pairs, i == 0 ? 1.0 : 0.0};
  return 5;
}

}  // namespace loom::layers
