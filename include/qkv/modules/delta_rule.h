// qkv/modules/delta_rule.h - the gated delta rule token by token, forward and backward: the
// reference form of the linear attention in the book's GatedDeltaNet and Qwen3.5's linear layers,
// and the L2 normalisation both apply to their queries and keys.
//
// Legend: B batch, T tokens, H heads, Dk key width, Dv value width. Per sequence and head a state
// S (Dk x Dv), S_0 = 0; per token t:
//   S = alpha_t S;  delta = (v_t - S^T k_t) * beta_t;  S = S + k_t delta^T;  y_t = S^T q_t
//   q, k (B, T, H, Dk); v, y (B, T, H, Dv); alpha (B, T, H);
//   beta (B, T, H, Dv) per channel (the book's class) or (B, T, H) per head (Qwen3.5)
// The state and its sums are carried in double, so that the float32 rounding of the inputs is all
// that separates the result from a float64 computation. The forward keeps the state after every
// token (B, H, T, Dk, Dv doubles) for the backward. Sequences and heads run in parallel on the
// default pool (each one's sums in the same order whatever the threads). The fast form for
// prompts and training is modules/delta_rule_chunked.h's, tested against this one.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"

namespace qkv {

// A decoding state of floats (delta_rule_run's float overload, delta_rule_chunked_forward's
// `state`, a model's cache) keeps each head's S (Dk x Dv) in blocks of kDeltaStateColumns columns:
// block c holds columns [64 c, 64 c + w_c), w_c = min(64, Dv - 64 c), as a (Dk, w_c) row-major
// matrix at float 64 c Dk of the head's Dk Dv (for Dv <= 64, the rows' layout). A decoding step
// reads each block front to back as one stream, where the rows' layout gave it 256 of every 512
// bytes (a step of 18 layers of 16 heads of 128 after a flush: 0.66-0.68 -> 0.51-0.55 ms on a Zen 5,
// emulated). States of doubles keep the rows' layout.
constexpr int64_t kDeltaStateColumns = 64;
// Where S[i][j] of a head's float state lies, counted from the head's first float.
inline int64_t delta_state_index(int64_t Dk, int64_t Dv, int64_t i, int64_t j) {
  const int64_t c0 = j / kDeltaStateColumns * kDeltaStateColumns;
  const int64_t w = Dv - c0 < kDeltaStateColumns ? Dv - c0 : kDeltaStateColumns;
  return c0 * Dk + i * w + (j - c0);
}

struct DeltaRuleShape {
  int64_t batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0;
  bool beta_per_channel = false;
  int64_t rows() const { return batch * tokens * heads; }  // (b, t, h) rows
  int64_t beta_width() const { return beta_per_channel ? value_dim : 1; }
};

// The inputs (as laid out above), and their gradients (written, same layouts).
struct DeltaRuleInputs {
  const float *q, *k, *v, *beta, *alpha;
};
struct DeltaRuleGrads {
  float *q, *k, *v, *beta, *alpha;
};

// y (B, T, H, Dv) = the recurrence; states resized and written (B, H, T, Dk, Dv).
void delta_rule_forward(const DeltaRuleShape& s, const DeltaRuleInputs& in, std::vector<double>& states, float* y);

// The same y from a given state, keeping none (inference: a prompt, or one decoding step): `state`
// (B, H, Dk, Dv) is the state before the first token (zeros for a sequence's start) and becomes the
// state after the last. A state of another size is an error naming both sizes. Each token is one
// pass over the state (kernels/delta_rule_step.h: within a few double ulps of the forward's sums).
void delta_rule_run(const DeltaRuleShape& s, const DeltaRuleInputs& in, std::vector<double>& state, float* y);
// The same on a state the caller holds: (B, H, Dk, Dv) doubles at `state`, or floats in column
// blocks (a decoding cache's, delta_state_index: the step in float, as the state, within the bound
// float arithmetic allows its sums; kernels/delta_rule_step.h).
void delta_rule_run(const DeltaRuleShape& s, const DeltaRuleInputs& in, double* state, float* y);
void delta_rule_run(const DeltaRuleShape& s, const DeltaRuleInputs& in, float* state, float* y);

// The gradients of the inputs given dy = dL/dy (B, T, H, Dv), from the inputs and states of the
// forward. Every gradient is written (not accumulated).
void delta_rule_backward(const DeltaRuleShape& s, const DeltaRuleInputs& in, const std::vector<double>& states,
                         const float* dy, const DeltaRuleGrads& grad);

// The same y in chunks of `chunk` tokens (beta per head only): within a chunk, with g_t the sum of
// log alpha up to t and S_0 the state at the chunk's start, the update of token s is
//   u_s = beta_s (v_s - e^{g_s} S_0^T k_s - sum_{r<s} e^{g_s - g_r} (k_s . k_r) u_r)
// a lower-triangular system (I + L) U = diag(beta) (V - diag(e^g) K S_0) solved by substitution, and
//   Y = diag(e^g) Q S_0 + (Q K^T o E o lower) U,   S_C = e^{g_C} S_0 + K^T diag(e^{g_C - g}) U
// with E_ts = e^{g_t - g_s}: products of (C x Dk), (C x C) and (C x Dv) matrices instead of C
// rank-1 updates. final_state, if given, receives the state after the last token (B, H, Dk, Dv).
void delta_rule_forward_chunked(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t chunk, float* y,
                                std::vector<double>* final_state = nullptr);

// The exact linear map the recurrence applies to the values from a zero state (what the explorer
// shows in place of softmax weights): y_t[c] = sum_{s <= t} A[b][h][w][t][s] v_s[c], A (B, H, W, T, T)
// lower-triangular, W = s.beta_width() (one map per head when beta is per head; one per value
// channel c = w when it is per channel, each channel corrected by its own beta). With
// M_t = alpha_t (I - beta_t k_t k_t^T): A[t][s] = q_t . (M_t ... M_{s+1} beta_s k_s), in double.
// Not softmax weights: a row need not sum to 1 and may be negative.
Tensor delta_rule_map(const DeltaRuleShape& s, const DeltaRuleInputs& in);

// l2norm(u) = u / sqrt(sum u^2 + eps) over rows of `width`, times `scale`: out (rows, width) and
// r (rows) = 1 / sqrt(sum u^2 + eps).
void l2norm_rows(const float* u, int64_t rows, int64_t width, float eps, float scale, float* out, float* r);

// du given dout for l2norm_rows' output: r (dout - n <n, dout>) * scale with n = u r. Written as
// r (dout - h <h, dout>) + r h <h, dout> eps r^2 with h = u / |u| (1 - |n|^2 = eps r^2 exactly): the
// part along u is tiny when |u|^2 >> eps, and so it is not the difference of two nearly equal
// numbers (with a width of 1 it is all there is).
void l2norm_rows_backward(const float* u, const float* r, const float* dout, int64_t rows, int64_t width, float eps,
                          float scale, float* du);

// The decay both compute, over n = rows x H values of a (head = index % H):
//   a += dt_bias[h] (in place);  alpha = exp(log_alpha),  log_alpha = -exp(A_log[h]) * softplus(a)
// (log_alpha written when not null: what the chunked form takes).
void decay_forward(float* a, const float* dt_bias, const float* A_log, int64_t n, int64_t H, float* alpha,
                   float* log_alpha = nullptr);
// da written; ddt_bias and dA_log (H) accumulated, given dalpha and forward's a (with dt_bias) and alpha.
void decay_backward(const float* a, const float* alpha, const float* dalpha, const float* A_log, int64_t n, int64_t H,
                    float* da, float* ddt_bias, float* dA_log);
// The same given log alpha's gradient instead (the chunked form's).
void decay_log_backward(const float* a, const float* dlog_alpha, const float* A_log, int64_t n, int64_t H, float* da,
                        float* ddt_bias, float* dA_log);
// A_log's initial values: log(torch.empty(H).uniform_(0, 16)), drawn when the generator draws, with
// torch.log's own float32 results (core/torch_math.h).
Tensor drawn_a_log(int64_t H, Generator& gen);

// softplus (beta 1, threshold 20) of one value, computed in double and rounded once (sigmoid's:
// core/ops.h's sigmoid_value).
float softplus_value(float x);

// The gated RMSNorm both apply to the recurrence's output, per row of `width`:
//   out = y r w silu(z),  r = 1 / sqrt(mean(y^2) + eps)
// (rows split over the default pool, silu as core/pointwise.h computes it)
void gated_rms_norm_rows(const float* y, const float* z, const float* w, int64_t rows, int64_t width, double eps,
                         float* out);
// dy and dz written, dw (width) accumulated, given dout. dy = r (g - n <n, g> / width) with g = dout w
// silu(z) and n = y r, written as l2norm_rows_backward is: the part along y is r h <h, g> eps r^2
// (1 - mean(y^2) r^2 = eps r^2), not a difference of nearly equal numbers.
void gated_rms_norm_rows_backward(const float* y, const float* z, const float* w, const float* dout, int64_t rows,
                                  int64_t width, double eps, float* dy, float* dz, float* dw);

}  // namespace qkv
