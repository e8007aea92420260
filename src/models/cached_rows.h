// src/models/cached_rows.h - what the models' cached steps share (GPTModel's, LlamaModel's): working
// rows that grow to the largest step and no further, the residual add, a Linear on raw rows in its
// precision (or reading its weights' bf16 copy), and a weight's bf16 copy.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/quant_blocks.h"
#include "qkv/core/tensor.h"
#include "qkv/modules/layers.h"

namespace qkv::models_detail {

// v resized only when a step needs more than any before: n floats.
float* rows_of(std::vector<float>& v, int64_t n);
// x[i] += a[i], i < n.
void add_into(float* x, const float* a, int64_t n);
// y (N, out) = x (N, in) W^T (+ b) through the Linear in its precision, reading its bf16 weight w16
// or its quantized weight wq when given; `model` names the caller when the Linear's tensors are
// not contiguous.
void linear_rows(const char* model, const float* x, int64_t N, const Linear& l, const uint16_t* w16, float* y,
                 QuantView wq = {});
// w's values rounded to bf16 (nearest even), row-major.
WeightVector<uint16_t> bf16_copy(const Tensor& w);

}  // namespace qkv::models_detail
