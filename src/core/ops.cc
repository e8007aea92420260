// Reference tensor operations. See include/qkv/core/ops.h.
#include "qkv/core/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/linear.h"

namespace qkv {
namespace {

int wrap(int d, int rank, const char* op) {
  int w = d < 0 ? d + rank : d;
  QKV_CHECK(w >= 0 && w < rank, op, ": dimension ", d, " is out of range for rank ", rank);
  return w;
}

template <typename F>
Tensor unary(const Tensor& a, F f) {
  Tensor src = a.contiguous();
  Tensor out = Tensor::empty(a.shape());
  const float* x = src.data();
  float* y = out.data();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) y[i] = f(x[i]);
  return out;
}

template <typename F>
Tensor binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  a.check_defined(op);
  b.check_defined(op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape);
  if (out.numel() == 0) return out;
  Tensor ea = a.expand(shape), eb = b.expand(shape);
  float* y = out.data();
  const float* pa = ea.data();
  const float* pb = eb.data();
  if (shape.empty()) {
    y[0] = f(pa[0], pb[0]);
    return out;
  }
  // Rows of the last dimension in a plain strided loop; TensorIter walks the rest.
  const int64_t n = shape.back(), sa = ea.strides().back(), sb = eb.strides().back();
  const Shape outer(shape.begin(), shape.end() - 1);
  TensorIter ia(outer, Shape(ea.strides().begin(), ea.strides().end() - 1));
  TensorIter ib(outer, Shape(eb.strides().begin(), eb.strides().end() - 1));
  for (; !ia.done(); ia.next(), ib.next(), y += n) {
    const float* ra = pa + ia.offset();
    const float* rb = pb + ib.offset();
    for (int64_t j = 0; j < n; ++j) y[j] = f(ra[j * sa], rb[j * sb]);
  }
  return out;
}

// Calls f(in, out, n, stride) for every 1-D lane of `a` along dim, with `out` the matching lane
// of a tensor shaped like a (stride in elements, both contiguous).
template <typename F>
Tensor along(const Tensor& a, int dim, F f) {
  Tensor src = a.contiguous();
  Tensor out = Tensor::empty(a.shape());
  int d = wrap(dim, a.dim(), "softmax");
  int64_t n = a.shape()[d];
  int64_t inner = 1, outer = 1;
  for (int i = d + 1; i < a.dim(); ++i) inner *= a.shape()[i];
  for (int i = 0; i < d; ++i) outer *= a.shape()[i];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      f(src.data() + o * n * inner + i, out.data() + o * n * inner + i, n, inner);
  return out;
}

template <typename F>
Tensor reduce(const Tensor& a, int dim, bool keepdim, const char* op, float init, F f) {
  a.check_defined(op);
  QKV_CHECK(a.dim() > 0, op, ": cannot reduce a 0-dimensional tensor along dimension ", dim);
  int d = wrap(dim, a.dim(), op);
  Tensor src = a.contiguous();
  Shape shape = a.shape();
  int64_t n = shape[d];
  shape[d] = 1;
  Tensor out = Tensor::empty(shape);
  int64_t inner = 1, outer = 1;
  for (int i = d + 1; i < a.dim(); ++i) inner *= a.shape()[i];
  for (int i = 0; i < d; ++i) outer *= a.shape()[i];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      float acc = init;
      const float* x = src.data() + o * n * inner + i;
      for (int64_t k = 0; k < n; ++k) acc = f(acc, x[k * inner]);
      out.data()[o * inner + i] = acc;
    }
  return keepdim ? out : out.squeeze(d);
}

// How a strided (rows, cols) matrix is handed to gemm: as stored (row stride ld, unit column
// stride), transposed (unit row stride, column stride ld), or not at all (other strides: copy).
struct GemmOperand {
  bool ok = false, trans = false;
  int64_t ld = 0;
};

GemmOperand as_gemm_operand(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= std::max<int64_t>(cols, 1)))
    return {true, false, rows == 1 ? std::max<int64_t>(cols, 1) : s0};
  if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= std::max<int64_t>(rows, 1)))
    return {true, true, cols == 1 ? std::max<int64_t>(rows, 1) : s1};
  return {};
}

// X (rows, cols) with strides (s0, s1) as gemm takes it; when gemm cannot take those strides, X
// is first copied row-major into `copy` and `x` is pointed at it.
GemmOperand gemm_operand_or_copy(int64_t rows, int64_t cols, const float*& x, int64_t s0, int64_t s1,
                                 std::vector<float>& copy) {
  const GemmOperand op = as_gemm_operand(rows, cols, s0, s1);
  if (op.ok) return op;
  copy.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) copy[static_cast<size_t>(i * cols + j)] = x[i * s0 + j * s1];
  x = copy.data();
  return {true, false, std::max<int64_t>(cols, 1)};
}

// C (M, N) = A (M, K) @ B (K, N), A and B strided, C contiguous. The product runs in gemm (the
// fast kernel, with the naive loop of gemm_reference as its reference); operands whose strides
// gemm cannot take (broadcast rows, say) are copied to contiguous scratch first.
void matmul_2d(const float* A, int64_t as0, int64_t as1, const float* B, int64_t bs0, int64_t bs1,
               float* C, int64_t M, int64_t K, int64_t N) {
  std::vector<float> a_copy, b_copy;
  const GemmOperand a = gemm_operand_or_copy(M, K, A, as0, as1, a_copy);
  const GemmOperand b = gemm_operand_or_copy(K, N, B, bs0, bs1, b_copy);
  gemm(a.trans, b.trans, M, N, K, A, a.ld, B, b.ld, C, std::max<int64_t>(N, 1));
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    QKV_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
              " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  a.check_defined("matmul");
  b.check_defined("matmul");
  QKV_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dimension, got ",
            shape_str(a.shape()), " and ", shape_str(b.shape()));
  // Promote 1-D operands as Python does, and remember to drop the added dimension.
  // (..., M, K) @ (K, N) with contiguous leading dims is one (... * M, K) @ (K, N) product.
  if (a.dim() > 2 && b.dim() == 2 && a.is_contiguous() && a.numel() > 0 && a.size(-1) == b.size(0)) {
    Shape out_shape = a.shape();
    out_shape.back() = b.size(1);
    return matmul(a.view({-1, a.size(-1)}), b).view(out_shape);
  }
  Tensor A = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor B = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t M = A.size(-2), K = A.size(-1), N = B.size(-1);
  QKV_CHECK(B.size(-2) == K, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
            " cannot be multiplied (", K, " != ", B.size(-2), ")");
  Shape batch_a(A.shape().begin(), A.shape().end() - 2);
  Shape batch_b(B.shape().begin(), B.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {M, K});
  eb.insert(eb.end(), {K, N});
  A = A.expand(ea);
  B = B.expand(eb);
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {M, N});
  Tensor out = Tensor::empty(out_shape);
  const int64_t nb = numel_of(batch);
  if (nb > 0 && M * N > 0) {
    // Offsets of each batch matrix, walked in row-major batch order.
    Shape sa(A.strides().begin(), A.strides().end() - 2), sb(B.strides().begin(), B.strides().end() - 2);
    TensorIter ia(batch, sa), ib(batch, sb);
    const int r = static_cast<int>(out_shape.size());
    for (int64_t i = 0; i < nb; ++i, ia.next(), ib.next()) {
      matmul_2d(A.data() + ia.offset(), A.strides()[r - 2], A.strides()[r - 1], B.data() + ib.offset(),
                B.strides()[r - 2], B.strides()[r - 1], out.data() + i * M * N, M, K, N);
    }
  } else {
    std::fill(out.data(), out.data() + out.numel(), 0.0f);
  }
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias, Dtype dtype, const uint16_t* w16) {
  x.check_defined("linear");
  w.check_defined("linear");
  QKV_CHECK(w.dim() == 2, "linear: weight must be (out, in), got ", w.describe());
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input ", x.describe(),
            " has last dimension ", x.dim() ? x.size(-1) : 0, " but the weight ", w.describe(),
            " expects ", w.size(1));
  Tensor b;
  if (bias != nullptr) {
    bias->check_defined("linear");
    QKV_CHECK(bias->dim() == 1 && bias->size(0) == w.size(0), "linear: bias ", bias->describe(),
              " does not match weight ", w.describe());
    b = bias->contiguous();
  }
  // (..., K) @ (N, K)^T + bias as one (M, K) product, M = every leading dim together.
  const int64_t N = w.size(0), K = w.size(1);
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = Tensor::empty(out_shape);
  const int64_t M = numel_of(Shape(out_shape.begin(), out_shape.end() - 1));
  linear(xc.data(), M, K, wc.data(), bias ? b.data() : nullptr, N, y.data(), nullptr,
         w16 ? Dtype::kBF16 : dtype, w16);
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, "add", [](float x, float y) { return x + y; }); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, "sub", [](float x, float y) { return x - y; }); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, "mul", [](float x, float y) { return x * y; }); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(a, b, "div", [](float x, float y) { return x / y; }); }
Tensor add(const Tensor& a, float s) { return unary(a, [s](float x) { return x + s; }); }
Tensor mul(const Tensor& a, float s) { return unary(a, [s](float x) { return x * s; }); }
Tensor div(const Tensor& a, float s) { return unary(a, [s](float x) { return x / s; }); }
Tensor exp(const Tensor& a) { return unary(a, [](float x) { return std::exp(x); }); }
Tensor sqrt(const Tensor& a) { return unary(a, [](float x) { return std::sqrt(x); }); }
Tensor neg(const Tensor& a) { return unary(a, [](float x) { return -x; }); }
Tensor sigmoid(const Tensor& a) { return unary(a, sigmoid_value); }

Tensor sum(const Tensor& a, int dim, bool keepdim) {
  return reduce(a, dim, keepdim, "sum", 0.0f, [](float acc, float x) { return acc + x; });
}

Tensor max(const Tensor& a, int dim, bool keepdim) {
  QKV_CHECK(a.dim() == 0 || a.size(dim) > 0, "max: ", a.describe(), " is empty along dimension ", dim);
  return reduce(a, dim, keepdim, "max", -std::numeric_limits<float>::infinity(),
                [](float acc, float x) { return (x > acc || std::isnan(x)) ? x : acc; });
}

Tensor mean(const Tensor& a, int dim, bool keepdim) {
  int64_t n = a.size(dim);
  return div(sum(a, dim, keepdim), static_cast<float>(n));
}

float sum_all(const Tensor& a) {
  double acc = 0.0;
  for (float x : a.to_vector()) acc += x;
  return static_cast<float>(acc);
}

bool all_finite(const Tensor& a) {
  const Tensor c = a.contiguous();
  const float* p = c.data();
  for (int64_t i = 0, n = c.numel(); i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

Tensor softmax(const Tensor& a, int dim) {
  return along(a, dim, [](const float* x, float* y, int64_t n, int64_t s) {
    // The largest entry, NaN if any is (as torch.softmax: a NaN makes the whole row NaN, where
    // std::max would pass over it and a row of NaN and -inf would pass for a masked one)
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < n; ++k) m = x[k * s] > m || std::isnan(x[k * s]) ? x[k * s] : m;
    if (m == -std::numeric_limits<float>::infinity()) {  // every entry masked: no key to attend to
      for (int64_t k = 0; k < n; ++k) y[k * s] = 0.0f;
      return;
    }
    // The sum in double: in float, each small weight added to the largest (1) loses its rounding
    // at 1's size, and a saturated row's weights then carry its sum's error, which the backward
    // amplifies (docs/developing.md#accuracy-on-every-simd-path).
    double total = 0.0;
    for (int64_t k = 0; k < n; ++k) total += (y[k * s] = std::exp(x[k * s] - m));
    for (int64_t k = 0; k < n; ++k) y[k * s] = static_cast<float>(y[k * s] / total);
  });
}

Tensor softmax_backward(const Tensor& y, const Tensor& dy, int dim) {
  check_same_shape("softmax_backward", y, dy);
  Tensor yc = y.contiguous(), g = dy.contiguous();
  // `along` hands out lanes of yc (contiguous, so not copied); dy's lane sits at the same offset.
  const float* y0 = yc.data();
  const float* g0 = g.data();
  return along(yc, dim, [y0, g0](const float* yl, float* dx, int64_t n, int64_t s) {
    const float* gy = g0 + (yl - y0);  // yl: a lane of y
    // dx = y * (dy - sum(y * dy)): the Jacobian of softmax applied to dy. Where y is 0 (masked
    // keys, and every key of a fully masked row) dx is 0. The sum and dy - sum in double: where
    // the weights sit on one key, dy there and the sum are nearly equal, and a float sum's
    // rounding (at dy's size) would be most of their difference.
    double dot = 0.0;
    for (int64_t k = 0; k < n; ++k) dot += static_cast<double>(yl[k * s]) * gy[k * s];
    for (int64_t k = 0; k < n; ++k) dx[k * s] = static_cast<float>(yl[k * s] * (gy[k * s] - dot));
  });
}

Tensor softmax_naive(const Tensor& a, int dim) {
  return along(a, dim, [](const float* x, float* y, int64_t n, int64_t s) {
    float total = 0.0f;
    for (int64_t k = 0; k < n; ++k) total += (y[k * s] = std::exp(x[k * s]));
    for (int64_t k = 0; k < n; ++k) y[k * s] /= total;
  });
}

Tensor normalize_sum(const Tensor& a, int dim) { return div(a, sum(a, dim, true)); }

Tensor cosine_similarity(const Tensor& a, const Tensor& b, float eps) {
  auto unit = [eps](const Tensor& v) {
    Tensor norm = sqrt(sum(mul(v, v), -1, true));
    return div(v, add(norm, eps));
  };
  return sum(mul(unit(a), unit(b)), -1);
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, float value) {
  mask.check_defined("masked_fill");
  Tensor m = mask.expand(a.shape());
  return binary(a, m, "masked_fill", [value](float x, float keep) { return keep != 0.0f ? value : x; });
}

namespace {
Tensor triangle(const Tensor& a, int64_t diagonal, bool lower) {
  QKV_CHECK(a.dim() >= 2, lower ? "tril" : "triu", ": needs at least 2 dimensions, got ", a.describe());
  Tensor out = a.clone();
  const int64_t rows = a.size(-2), cols = a.size(-1);
  const int64_t mats = rows * cols == 0 ? 0 : out.numel() / (rows * cols);
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
        if (!keep) out.data()[(m * rows + i) * cols + j] = 0.0f;
      }
  return out;
}
}  // namespace

Tensor tril(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, true); }
Tensor triu(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, false); }

Tensor cat(const std::vector<Tensor>& parts, int dim) {
  QKV_CHECK(!parts.empty(), "cat: needs at least one tensor");
  int d = wrap(dim, parts[0].dim(), "cat");
  Shape shape = parts[0].shape();
  shape[d] = 0;
  for (const Tensor& p : parts) {
    p.check_defined("cat");
    Shape s = p.shape();
    QKV_CHECK(p.dim() == parts[0].dim(), "cat: ", p.describe(), " and ", parts[0].describe(),
              " differ in rank");
    for (int i = 0; i < p.dim(); ++i)
      QKV_CHECK(i == d || s[i] == parts[0].shape()[i], "cat: ", p.describe(), " does not match ",
                parts[0].describe(), " outside dimension ", d);
    shape[d] += s[d];
  }
  Tensor out = Tensor::empty(shape);
  int64_t at = 0;
  for (const Tensor& p : parts) {
    out.slice(d, at, at + p.size(d)).copy_from(p);
    at += p.size(d);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& parts, int dim) {
  QKV_CHECK(!parts.empty(), "stack: needs at least one tensor");
  std::vector<Tensor> lifted;
  for (const Tensor& p : parts) {
    check_same_shape("stack", p, parts[0]);
    lifted.push_back(p.unsqueeze(dim));
  }
  return cat(lifted, dim);
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const Shape& gs = g.shape();
  QKV_CHECK(shape.size() <= gs.size() && broadcast_shapes(shape, gs, "sum_to") == gs, "sum_to: ",
            shape_str(shape), " does not broadcast to the gradient's shape ", shape_str(gs));
  Tensor out = Tensor::zeros(shape);
  // Walk g in row-major order and add each element into the out element it was broadcast from.
  Tensor target = out.expand(gs);  // zero strides where out was stretched
  Tensor src = g.contiguous();
  const float* x = src.data();
  float* y = out.data();
  int64_t i = 0;
  for (TensorIter it(target.shape(), target.strides()); !it.done(); it.next()) y[it.offset()] += x[i++];
  return out;
}

void accumulate(Tensor& dst, const Tensor& src) {
  dst.check_defined("accumulate");
  src.check_defined("accumulate");
  check_same_shape("accumulate", dst, src);
  QKV_CHECK(dst.is_contiguous(), "accumulate: the destination ", dst.describe(), " must be contiguous");
  Tensor s = src.contiguous();
  float* d = dst.data();
  const float* x = s.data();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] += x[i];
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined() ? 0.0 : std::nan("");
  if (a.shape() != b.shape()) return std::nan("");
  std::vector<float> x = a.to_vector(), y = b.to_vector();
  double m = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;  // covers equal infinities
    double d = std::fabs(static_cast<double>(x[i]) - y[i]);
    if (std::isnan(d)) return std::nan("");
    m = std::max(m, d);
  }
  return m;
}

}  // namespace qkv
