// qkv/core/ops.h - tensor operations with PyTorch's semantics (the textbook, reference path).
//
// Every op returns a new contiguous tensor and accepts strided inputs (views). Binary ops
// broadcast as PyTorch does (trailing dimensions aligned; size-1 dimensions stretched).
// These are the reference implementations the fast kernels are tested against; they favour
// clarity and the same arithmetic order as PyTorch's CPU kernels where the numbers depend on it.
#pragma once

#include <cmath>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/tensor.h"

namespace qkv {

// --- matrix product ---------------------------------------------------------------------------
// matmul(a, b) is Python's `a @ b`:
//   (K) @ (K) -> ()            (M, K) @ (K) -> (M)          (K) @ (K, N) -> (N)
//   (..., M, K) @ (..., K, N) -> (broadcast(...), M, N)   batch dimensions broadcast
Tensor matmul(const Tensor& a, const Tensor& b);
// linear(x, w, bias) = x @ w.T + bias, with w (out, in) as nn.Linear stores it; bias may be null.
// Runs core/linear.h's linear (the fused pipeline's too): the bias starts each row, as addmm.
// dtype kBF16: bf16 mode (x and w rounded to bf16, float32 sums). w16: w's values in bf16
// (w.numel() of them, w's layout) read instead of rounding w (weights kept in bf16 for
// generation; bf16 mode then); w is still checked for the shapes.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias, Dtype dtype = Dtype::kF32,
              const uint16_t* w16 = nullptr);

// --- elementwise, broadcasting -------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor div(const Tensor& a, float s);
Tensor exp(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor neg(const Tensor& a);
Tensor sigmoid(const Tensor& a);  // 1 / (1 + exp(-a)), computed in double
// The same of one value: in double (sigmoid_double), rounded once (within an ulp of torch.sigmoid's
// float32).
inline double sigmoid_double(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline float sigmoid_value(float x) { return static_cast<float>(sigmoid_double(x)); }
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(const Tensor& a, float s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, float s) { return div(a, s); }

// Shape that a and b broadcast to; throws naming both shapes if they do not.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// --- reductions along a dimension --------------------------------------------------------------
Tensor sum(const Tensor& a, int dim, bool keepdim = false);
Tensor max(const Tensor& a, int dim, bool keepdim = false);
Tensor mean(const Tensor& a, int dim, bool keepdim = false);
float sum_all(const Tensor& a);  // accumulated in double
bool all_finite(const Tensor& a);  // no NaN, no infinity

// --- softmax and friends ---------------------------------------------------------------------
// Numerically stable: exp(x - max) / sum. A row whose entries are all -inf (every key masked)
// gives all-zero weights instead of PyTorch's NaN, so the context vector of such a row is zero.
Tensor softmax(const Tensor& a, int dim);
// The gradient of y = softmax(x, dim) given y and dL/dy: dx = y * (dy - sum(y * dy, dim)).
// Rows where softmax gave all zeros (every entry masked) get a zero gradient, consistent with
// their constant output. y and dy have the same shape.
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int dim);
// The notebooks' softmax_naive: exp(x) / exp(x).sum(dim). Overflows for large inputs by design.
Tensor softmax_naive(const Tensor& a, int dim);
// x / x.sum(dim, keepdim=True): the notebooks' first normalisation.
Tensor normalize_sum(const Tensor& a, int dim);
// cosine(a, b) = (a / (|a| + eps)) . (b / (|b| + eps)) along the last dim, as notebook 003 writes it.
Tensor cosine_similarity(const Tensor& a, const Tensor& b, float eps = 1e-8f);

// --- masks ------------------------------------------------------------------------------------
// Where mask != 0 (mask broadcast to a), the result holds value; elsewhere a.
Tensor masked_fill(const Tensor& a, const Tensor& mask, float value);
Tensor tril(const Tensor& a, int64_t diagonal = 0);  // keeps j <= i + diagonal (last two dims)
Tensor triu(const Tensor& a, int64_t diagonal = 0);  // keeps j >= i + diagonal

// --- joining ----------------------------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& parts, int dim);
Tensor stack(const std::vector<Tensor>& parts, int dim);

// --- gradients ---------------------------------------------------------------------------------
// The gradient of x.expand(g.shape()) with respect to x: g summed over every dimension that
// broadcasting added or stretched, back to `shape` (which must broadcast to g's shape).
Tensor sum_to(const Tensor& g, const Shape& shape);
// dst += src elementwise (same shape; dst contiguous): how gradients accumulate, like `.grad`.
void accumulate(Tensor& dst, const Tensor& src);

// --- comparison -------------------------------------------------------------------------------
// Largest |a - b| (NaN if the shapes differ or either has a NaN where the other does not).
// Two undefined tensors (both absent) differ by 0; an undefined and a defined one by NaN.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace qkv
