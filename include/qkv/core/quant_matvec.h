// qkv/core/quant_matvec.h - nn.Linear with ggml-quantized weights, for a few rows: the decoding
// step's product read straight from a GGUF file's blocks, never dequantized to memory.
//
//   y (M, N) = x (M, K) W^T           W (N, K): N rows of quant blocks, row n at W + n quant_bytes(t, K)
//
// As llama.cpp does it: each row of x is quantized once per call to int8 with one float scale per
// block (the "activation" formats below), then every block of W meets it in an integer dot product
// (exact, int32), and only the block's result is scaled in float:
//   Q8_0 x BlockQ8     sum_b dw_b dx_b sum_i qw_i qx_i
//   Q4_0 x BlockQ8     sum_b dw_b dx_b sum_i (nibble_i - 8) qx_i
//   Q4_K x BlockQ8K    sum_B dx_B (d_B sum_j s_j sum_i q_i qx_i - dmin_B sum_j m_j sum_i qx_i)
//                      (8 sub-blocks j of 32; the second sum is what the bsums are for)
//   Q6_K x BlockQ8K    sum_B dx_B d_B sum_g sc_g sum_i (q_i - 32) qx_i   (16 groups g of 16)
// so y differs from x W^T (W dequantized) by the activations' rounding only: |error| <= sum_i
// |w_i| dx_b(i) / 2 (plus float rounding of the block sums), where dx_b is the scale of the
// activation block holding i.
//
// The weights are streamed once per call whatever M, split over the pool by blocks of W's rows: for
// a few rows of x (decoding), tiles of W's rows meet them in cache; from 8 rows on (a prompt), Q8_0
// and Q4_0 weights are packed per call into panels of 16 rows that one instruction multiplies at
// once (src/core/quant_gemm.h). A model keeps its Q8_0, Q4_0, Q4_K and Q6_K weights stored in
// panels of 16 rows of its own (qkv/core/quant_panels.h: the file's bytes reordered, scales first, the
// nibbles still packed), which a decoding step reads as stored and a prompt unpacks per call: the
// QuantView overload below. Each output's sum has one fixed order, the same in both kernels and
// for every thread count: a row of y has the same bits whatever M is and whichever threads ran it.
// The integer dot products use AVX2's vpmaddubsw + vpmaddwd, or AVX-512 VNNI's vpdpbusd where the
// CPU has it (Highway's AVX3_DL target), picked at run time; other targets run the reference's
// scalar block sums.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/quant_blocks.h"
#include "qkv/core/thread_pool.h"

namespace qkv {

// 32 activations: x[i] ~ d q[i], d = max|x| / 127, q[i] = round(x[i] 127 / max|x|) in [-127, 127]
// (computed in double, halves away from zero; an all-zero block: d = 0, q = 0). llama.cpp's Q8_0
// with a float scale.
struct BlockQ8 {
  float d;
  int8_t q[32];
};

// 256 activations: as BlockQ8 with one scale, plus bsums[g] = sum of q[16 g .. 16 g + 15]
// (llama.cpp's Q8_K; the K-quants' mins and offsets need the sums of x's quants).
struct BlockQ8K {
  float d;
  int8_t q[256];
  int16_t bsums[16];
};

// x (K values, finite) into K / 32 blocks; K not a multiple of 32 is a qkv::Error.
void quantize_activations_q8(const float* x, int64_t K, BlockQ8* out);
// x (K values, finite) into K / 256 blocks; K not a multiple of 256 is a qkv::Error.
void quantize_activations_q8_k(const float* x, int64_t K, BlockQ8K* out);

// "Q8_0, Q4_0, Q4_K, Q6_K": the weight types quant_matvec multiplies.
std::string quant_matvec_types();

// y (M, N) = x (M, K) W^T, W (N, K) in type t (see the top). M >= 1, N >= 0, K a positive multiple
// of t's block; y is
// overwritten. Errors: a type not listed above (the message lists those that are), K not whole
// blocks of t (naming K and the block).
void quant_matvec(const QuantType& t, const uint8_t* W, int64_t N, int64_t K, const float* x, int64_t M, float* y,
                  ThreadPool* pool = nullptr);

// The same for W given as a view: in the rows' layout as above, or stored in panels
// (qkv/core/quant_panels.h: Q8_0, Q4_0, Q4_K and Q6_K), read as stored for fewer than 8 rows of x (one stream
// of W, no packing) and unpacked panel by panel for more, with the same bits as the rows' layout
// gives. Errors as above; a view without a type.
void quant_matvec(const QuantView& W, int64_t N, int64_t K, const float* x, int64_t M, float* y,
                  ThreadPool* pool = nullptr);

// The naive reference, kept beside it: the same activations, each block's integer sum exactly
// (int64, one value at a time), the same float combination per block, blocks added in order in
// float. If `magnitude` is given, magnitude[m N + n] is the sum over the blocks of the |terms|
// the float combination rounds (|d| |q_w| |q_x| summed per block; Q4_K adds dmin m |q_x|): the scale
// of the float rounding error, for tests.
void quant_matvec_reference(const QuantType& t, const uint8_t* W, int64_t N, int64_t K, const float* x, int64_t M,
                            float* y, float* magnitude = nullptr);

// The SIMD targets quant_matvec was compiled for that this CPU runs, best first, as Highway's
// target bits (for kernels::force_simd_target and simd_target_name; this list has AVX3_DL, the
// VNNI target, which the other kernels are not compiled for). Ask while no target is forced.
std::vector<int64_t> quant_matvec_simd_targets();

}  // namespace qkv
