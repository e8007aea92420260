#include "qkv/models/logit_agreement.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"

namespace qkv {
namespace {

// log-softmax of V logits in double: x - max - log(sum exp(x - max)); a logit that is not finite
// is refused (it would make every figure nan).
void log_softmax(const float* x, int64_t V, std::vector<double>& out, const char* which, int64_t position) {
  out.resize(static_cast<size_t>(V));
  double top = -INFINITY;
  for (int64_t v = 0; v < V; ++v) {
    QKV_CHECK(std::isfinite(x[v]), "the ", which, " logit of token ", v, " at position ", position, " is ", x[v],
              "; expected a finite number");
    top = std::max(top, static_cast<double>(x[v]));
  }
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v]) - top);
  const double log_sum = std::log(sum);
  for (int64_t v = 0; v < V; ++v) out[static_cast<size_t>(v)] = static_cast<double>(x[v]) - top - log_sum;
}

int64_t argmax(const float* x, int64_t V) { return std::max_element(x, x + V) - x; }

}  // namespace

void LogitTally::add(const float* ref, const float* cand, int64_t V, int64_t next) {
  QKV_CHECK(V >= 1, "a row of logits of ", V, " tokens: expected at least 1");
  QKV_CHECK(next >= -1 && next < V, "the next token ", next, " at position ", positions_, ": expected an id in [0, ",
            V, ") or -1 (none)");
  std::vector<double> lp, lq;
  log_softmax(ref, V, lp, "reference's", positions_);
  log_softmax(cand, V, lq, "candidate's", positions_);
  double kl = 0;
  for (size_t v = 0; v < lp.size(); ++v) kl += std::exp(lp[v]) * (lp[v] - lq[v]);
  kl = std::max(kl, 0.0);  // never below 0 but by rounding (distributions within 1e-16 of one-hot)
  kl_sum_ += kl;
  kl_max_ = positions_ == 0 ? kl : std::max(kl_max_, kl);
  same_top_ += argmax(ref, V) == argmax(cand, V);
  if (next >= 0) {
    ref_nll_ -= lp[static_cast<size_t>(next)];
    cand_nll_ -= lq[static_cast<size_t>(next)];
    ++predictions_;
  }
  ++positions_;
}

LogitAgreement LogitTally::result() const {
  LogitAgreement a;
  a.positions = positions_;
  a.predictions = predictions_;
  if (positions_ > 0) {
    a.mean_kl = kl_sum_ / static_cast<double>(positions_);
    a.max_kl = kl_max_;
    a.top1 = static_cast<double>(same_top_) / static_cast<double>(positions_);
  }
  if (predictions_ > 0) {
    a.ref_nll = ref_nll_ / static_cast<double>(predictions_);
    a.cand_nll = cand_nll_ / static_cast<double>(predictions_);
    a.ref_perplexity = std::exp(a.ref_nll);
    a.cand_perplexity = std::exp(a.cand_nll);
  }
  return a;
}

std::vector<Tensor> logits_over(LanguageModel& model, const std::vector<int64_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size()), C = model.context_length(), V = model.vocab_size();
  QKV_CHECK(T >= 1, "logits over a text of no tokens");
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = ids[static_cast<size_t>(t)];
    QKV_CHECK(id >= 0 && id < V, "token ", t, " of the text is id ", id, "; the model's vocabulary is [0, ", V, ")");
  }
  std::vector<Tensor> windows;
  for (int64_t begin = 0; begin < T; begin += C) {
    const int64_t n = std::min(C, T - begin);
    windows.push_back(model.forward(std::vector<int64_t>(ids.begin() + begin, ids.begin() + begin + n), 1, n));
  }
  return windows;
}

LogitAgreement compare_logits(const std::vector<Tensor>& ref, const std::vector<Tensor>& cand,
                              const std::vector<int64_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size());
  QKV_CHECK(T >= 2, "the text has ", T, " token", T == 1 ? "" : "s", "; comparing next-token predictions needs at ",
            "least 2");
  QKV_CHECK(ref.size() == cand.size(), "the reference's logits come in ", ref.size(), " windows, the candidate's in ",
            cand.size(), "; expected the same windows of the same text");
  LogitTally tally;
  int64_t t = 0;
  for (size_t w = 0; w < ref.size(); ++w) {
    const Tensor &r = ref[w], &c = cand[w];
    QKV_CHECK(r.dim() == 3 && r.shape() == c.shape() && r.size(0) == 1, "window ", w, ": the reference's logits are ",
              shape_str(r.shape()), ", the candidate's ", shape_str(c.shape()), "; expected the same (1, t, V)");
    const int64_t n = r.size(1), V = r.size(2);
    for (int64_t i = 0; i < n; ++i, ++t) {
      QKV_CHECK(t < T, "the logits cover more positions than the text's ", T, " tokens");
      tally.add(r.data() + i * V, c.data() + i * V, V, t + 1 < T ? ids[static_cast<size_t>(t + 1)] : -1);
    }
  }
  QKV_CHECK(t == T, "the logits cover ", t, " positions; the text has ", T, " tokens");
  return tally.result();
}

LogitAgreement compare_on_text(LanguageModel& ref, LanguageModel& cand, const std::vector<int64_t>& ids) {
  QKV_CHECK(ref.vocab_size() == cand.vocab_size(), "the reference has a vocabulary of ", ref.vocab_size(),
            " tokens, the candidate ", cand.vocab_size(), "; expected the same");
  return compare_logits(logits_over(ref, ids), logits_over(cand, ids), ids);
}

}  // namespace qkv
