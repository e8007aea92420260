// qkv/models/logit_agreement.h - how closely one model's next-token distributions follow
// another's on the same text, stated as llama.cpp's `perplexity --kl-divergence` states a
// quantized model's accuracy: the KL divergence from the reference, the share of positions whose
// most likely token is the same, and each model's perplexity.
//
// Legend: T tokens, V vocabulary, C a model's context (context_length()).
//
//   logits_over(model, ids (T))     -> the logits at every position, (T, V) as windows of at most C
//                                      positions, each a fresh forward (a position sees only the
//                                      tokens of its own window before it)
//   LogitTally::add(ref, cand, next)   one position's two rows of V logits: p = softmax(ref),
//                                      q = softmax(cand) from log-softmax in double (the largest
//                                      logit subtracted first),
//                                        KL(p || q) = sum_v p_v (log p_v - log q_v)     (nats;
//                                      a sum rounded below 0 counts as 0)
//                                      top-1 agreement: argmax p == argmax q (the first of equal
//                                      largest logits); with next >= 0 (the token that follows),
//                                      -log p_next and -log q_next toward the perplexities
//   compare_logits(ref, cand, ids)    every position of the text: position t's next is ids[t + 1]
//                                      (the last position has none, a window's last the next
//                                      window's first)
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/models/language_model.h"

namespace qkv {

struct LogitAgreement {
  int64_t positions = 0;    // compared: T
  int64_t predictions = 0;  // next tokens scored: T - 1
  double mean_kl = 0, max_kl = 0;  // KL(p_ref || p_cand) over the positions, nats
  double top1 = 0;                 // the share of positions whose argmax is the same, in [0, 1]
  // the mean of -log p(next) over the predictions (nats), the reference's and the candidate's, and
  // its exp, the perplexity (inf past a double's range: a mean above 709.78)
  double ref_nll = 0, cand_nll = 0;
  double ref_perplexity = 0, cand_perplexity = 0;
};

class LogitTally {
 public:
  // ref, cand: V logits each (V >= 1); next: the token that follows (0 <= next < V), or -1.
  // A logit that is not finite is a qkv::Error naming the row and the position.
  void add(const float* ref, const float* cand, int64_t V, int64_t next);
  // The positions added so far (zeros before any).
  LogitAgreement result() const;

 private:
  int64_t positions_ = 0, predictions_ = 0, same_top_ = 0;
  double kl_sum_ = 0, kl_max_ = 0, ref_nll_ = 0, cand_nll_ = 0;
};

// ids (T >= 1) -> one (1, t, V) tensor of logits per window, t <= C, in order.
std::vector<Tensor> logits_over(LanguageModel& model, const std::vector<int64_t>& ids);

// The candidate's logits against the reference's, both logits_over the same ids (T >= 2): the
// same windows, each of the same vocabulary (qkv::Error naming the window otherwise).
LogitAgreement compare_logits(const std::vector<Tensor>& ref, const std::vector<Tensor>& cand,
                              const std::vector<int64_t>& ids);
// logits_over both models, compared (models of the same vocabulary: qkv::Error naming both).
LogitAgreement compare_on_text(LanguageModel& ref, LanguageModel& cand, const std::vector<int64_t>& ids);

}  // namespace qkv
