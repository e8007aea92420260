// qkv/modules/delta_rule_chunked.h - the gated delta rule in chunks, in float32 with matrix
// products: the fast form of modules/delta_rule.h's recurrence (its reference) for prompts and
// training, with beta per head (Qwen3.5's linear layers).
//
// Legend as in delta_rule.h: B batch, T tokens, H heads, Dk key width, Dv value width; q, k
// (B, T, H, Dk), v and y (B, T, H, Dv), beta and log_alpha (B, T, H). Per sequence and head, the
// tokens in chunks of C = kDeltaRuleChunk (the last may be shorter); in a chunk, with S_0 the state
// at its start, g_t = sum of log alpha_i for i <= t (from the chunk's start), gamma = e^g and
// E_tr = e^{g_t - g_r} (r <= t):
//   A        = strict_lower(diag(beta) (K K^T o E))                    (C, C)
//   [U0 | W] = (I + A)^-1 [diag(beta) V | diag(beta gamma) K]         (C, Dv), (C, Dk)
//   U        = U0 - W S_0                                              (C, Dv): each token's update
//   Y        = diag(gamma) Q S_0 + (lower(Q K^T) o E) U                (C, Dv)
//   S_C      = gamma_{C-1} S_0 + (diag(e^{g_{C-1} - g}) K)^T U          (Dk, Dv)
// (the recurrence S = alpha S + k u^T, u = beta (v - alpha S^T k), summed over the chunk). Each
// line is a few (C x Dk) by (Dk x Dv) or (C x C) products (core/gemm.h) instead of C rank-one
// updates; sequences and heads run in parallel on the pool. The decay enters as log alpha (finite:
// Qwen3.5's -exp(A_log) softplus(a + dt_bias)), so no ratio of two underflowed decays is formed.
// The state is float32 (the recurrence's is double): y differs from it by float32's rounding.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/modules/delta_rule.h"

namespace qkv {

inline constexpr int64_t kDeltaRuleChunk = 64;

// The chunked form's inputs and gradients: the recurrence's, with the decay as log alpha.
struct DeltaRuleLogInputs {
  const float *q, *k, *v, *beta, *log_alpha;
};
struct DeltaRuleLogGrads {
  float *q, *k, *v, *beta, *log_alpha;
};

// The number of chunks a sequence of T tokens is cut into.
inline int64_t delta_rule_chunks(int64_t tokens) { return (tokens + kDeltaRuleChunk - 1) / kDeltaRuleChunk; }

// y (B, T, H, Dv). `state` (B, H, Dk, Dv) in column blocks (a decoding state, delta_state_index in
// modules/delta_rule.h) or null: the state before the first token (null: zeros), overwritten with
// the state after the last. `chunk_states` or null: resized and written with the
// state at each chunk's start, (B, H, chunks, Dk, Dv), what delta_rule_chunked_backward needs.
// Beta per channel is an error (the book's GatedDeltaNet runs the recurrence).
void delta_rule_chunked_forward(const DeltaRuleShape& s, const DeltaRuleLogInputs& in, float* y, float* state = nullptr,
                                std::vector<float>* chunk_states = nullptr, ThreadPool* pool = nullptr);

// Every gradient written given dy (B, T, H, Dv), from the inputs and the chunk states of the
// forward from zeros. The chunks are run backwards, each recomputing its forward's products.
void delta_rule_chunked_backward(const DeltaRuleShape& s, const DeltaRuleLogInputs& in,
                                 const std::vector<float>& chunk_states, const float* dy, const DeltaRuleLogGrads& grad,
                                 ThreadPool* pool = nullptr);

// The products' FLOPs of a forward (false) or backward (true) of shape s, counting the triangular
// products' halves only: what the benchmarks divide by the time.
double delta_rule_chunked_flops(const DeltaRuleShape& s, bool backward);

}  // namespace qkv
