// qkv/kernels/norm_rows.h - the row computations of LayerNorm and RMSNorm, forward and backward, on
// raw rows: the modules (modules/layer_norm.h), the models' cached steps and the attention's
// QK-norm (kernels/mha.h) share them.
//
//   LayerNorm  y = scale * (x - mean) / sqrt(var + eps) + shift      x (N, E), var biased (over E)
//   RMSNorm    y = weight * x / sqrt(mean(x^2) + eps)
//
// Statistics are accumulated in double (eight partial sums a row, added pairwise); y and the
// gradients are float32. Rows are split over the pool (null: the default pool) in fixed blocks: the
// same bits on any thread count.
#pragma once

#include <cstdint>

#include "qkv/core/thread_pool.h"

namespace qkv::kernels {

// x (N, E) -> y (N, E); norm (N, E) and inv_std (N), when not null, receive the normalised rows and
// 1 / sqrt(var + eps) (what the backward needs). y may be x.
void layer_norm_rows(const float* x, int64_t N, int64_t E, const float* scale, const float* shift, double eps,
                     float* y, float* norm = nullptr, float* inv_std = nullptr, ThreadPool* pool = nullptr);
// RMSNorm's: norm = x / sqrt(mean(x^2) + eps), inv_std = 1 / sqrt(mean(x^2) + eps). y may be x.
void rms_norm_rows(const float* x, int64_t N, int64_t E, const float* weight, double eps, float* y,
                   float* norm = nullptr, float* inv_std = nullptr, ThreadPool* pool = nullptr);

// The backwards, from dy (N, E) and the forward's norm and inv_std:
//   dnorm = dy * scale;  dx = (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * inv_std   (LayerNorm)
//   dnorm = dy * weight; dx = (dnorm - norm * mean(dnorm * norm)) * inv_std                 (RMSNorm)
// adding sum(dy * norm) into dscale / dweight (and sum(dy) into dshift). dx may be dy.
void layer_norm_rows_backward(const float* dy, const float* norm, const float* inv_std, int64_t N, int64_t E,
                              const float* scale, float* dscale, float* dshift, float* dx);
void rms_norm_rows_backward(const float* dy, const float* norm, const float* inv_std, int64_t N, int64_t E,
                            const float* weight, float* dweight, float* dx);

}  // namespace qkv::kernels
