// qkv/kernels/delta_rule_step.h - one token of the gated delta rule on one head's state, in one
// pass over the state: the recurrent (decoding) form of Qwen3.5's linear attention and of the
// book's GatedDeltaNet.
//
// Legend: Dk key width, Dv value width, S (Dk, Dv) the head's state in double or float, row-major.
//
//   m     = S^T k                                (Dv)
//   delta = (v - alpha m) * beta                 (Dv; beta one number, or one per channel)
//   S     = alpha S + k delta^T                  (in place)
//   y     = S^T q                                (Dv, rounded to float)
//
// which is the reference's S = alpha S; delta = (v - S^T k) beta; S += k delta^T; y = S^T q with
// alpha applied to the sum instead of to each term. The step's arithmetic is the state's type: a
// state of doubles (the training forward's) in double, within a few double ulps of the reference;
// a state of floats (a decoding cache's) in float, as PyTorch's recurrent form runs, within what
// float arithmetic allows its sums (tests/kernels/delta_rule_step_test.cc derives the bound). A
// decoding step's cost is moving S (Dk Dv floats in a decoding cache, 64 KiB for 128 x 128): in
// double each float would be widened and rounded back at half the lanes, and the step took 1.5x
// as long as in float on an Intel Xeon (AVX-512 and AVX2). The kernel takes S's columns in blocks
// of 128 bytes a row (32 floats: 2 vectors on AVX-512, 4 on AVX2): it reads the block's part of
// every row for m, with the block's sums held in registers, then updates the same part from L1
// for S and y, so S crosses the memory bus once each way (the definition's form passes over it
// four times). While it updates a block it asks the memory for the next block's rows (the next
// state's first block after the last one), which arrive while the arithmetic runs. Highway picks
// the vector width at run time; columns past the last whole vector take a vector's part, with the
// same operations, so a column's bits do not depend on where it is.

#pragma once

#include <cstdint>

namespace qkv::kernels {

// q, k (Dk); v, y (Dv); beta (1 or Dv numbers: beta_width); S (Dk, Dv) updated in place.
// next_state: the state of the same shape the caller steps next, or null; the kernel asks the
// memory for its first rows while it works on S's last columns (a hint: never read or written).
void delta_rule_step(const float* q, const float* k, const float* v, double alpha, const float* beta,
                     int64_t beta_width, int64_t Dk, int64_t Dv, double* S, float* y,
                     const double* next_state = nullptr);
// The same on a state kept in float (a decoding cache's: half the bytes to move), in float (alpha
// rounded to float).
void delta_rule_step(const float* q, const float* k, const float* v, double alpha, const float* beta,
                     int64_t beta_width, int64_t Dk, int64_t Dv, float* S, float* y,
                     const float* next_state = nullptr);

// The same, written as the definition reads: the naive form the kernel is tested against (on a
// float state: the double form on its widened copy, rounded back once).
void delta_rule_step_reference(const float* q, const float* k, const float* v, double alpha, const float* beta,
                               int64_t beta_width, int64_t Dk, int64_t Dv, double* S, float* y);
void delta_rule_step_reference(const float* q, const float* k, const float* v, double alpha, const float* beta,
                               int64_t beta_width, int64_t Dk, int64_t Dv, float* S, float* y);

}  // namespace qkv::kernels
