// A layer's attention weights as the explore page computes them from float16 queries and keys,
// and the cells it must store because that differs from qkv's. See include/qkv/explore/explore.h.
#include <cmath>
#include <limits>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
#include "qkv/explore/explore.h"
#include "qkv/explore/page_encoding.h"

namespace qkv {

// page.html's computeHead for one row: dot = q . k in double (four sums over d mod 4, then
// (s0 + s1) + (s2 + s3)); what softmax
// reads as logit() computes it; m = the row's largest; e = exp(x - m); w = e / sum, as float32.
void explore_page_weights(const ExploreLayer& layer, bool causal, const std::vector<float>& q16,
                          const std::vector<float>& k16, int64_t h, int64_t i, float* out) {
  const int64_t T = layer.queries.size(1), D = layer.queries.size(2);
  const float* q = q16.data() + (h * T + i) * D;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> x(static_cast<size_t>(T));
  double m = neg_inf;
  for (int64_t j = 0; j < T; ++j) {
    double v;
    if ((causal && j > i) || (layer.window > 0 && j <= i - layer.window)) {
      v = neg_inf;
    } else {
      const float* k = k16.data() + (h * T + j) * D;
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // page.html's order: four sums over d mod 4
      int64_t d = 0;
      for (; d + 4 <= D; d += 4) {
        s0 += static_cast<double>(q[d]) * static_cast<double>(k[d]);
        s1 += static_cast<double>(q[d + 1]) * static_cast<double>(k[d + 1]);
        s2 += static_cast<double>(q[d + 2]) * static_cast<double>(k[d + 2]);
        s3 += static_cast<double>(q[d + 3]) * static_cast<double>(k[d + 3]);
      }
      for (; d < D; ++d) s0 += static_cast<double>(q[d]) * static_cast<double>(k[d]);
      const double dot = (s0 + s1) + (s2 + s3);
      v = dot / static_cast<double>(layer.scale);
      if (layer.softcap > 0) v = static_cast<double>(layer.softcap) * std::tanh(v / static_cast<double>(layer.softcap));
      if (!layer.alibi.empty()) v -= static_cast<double>(layer.alibi[static_cast<size_t>(h)]) * static_cast<double>(i - j);
    }
    x[static_cast<size_t>(j)] = v;
    if (v > m) m = v;
  }
  double sum = 0;
  for (int64_t j = 0; j < T; ++j) {
    const double e = x[static_cast<size_t>(j)] == neg_inf ? 0.0 : std::exp(x[static_cast<size_t>(j)] - m);
    x[static_cast<size_t>(j)] = e;
    sum += e;
  }
  for (int64_t j = 0; j < T; ++j) out[j] = static_cast<float>(x[static_cast<size_t>(j)] / sum);
}

ExploreCorrections explore_corrections(const ExploreLayer& layer, bool causal, double tolerance) {
  const Tensor w = layer.weights.contiguous(), q = layer.queries.contiguous(), k = layer.keys.contiguous();
  QKV_CHECK(w.dim() == 3 && q.dim() == 3 && k.dim() == 3 && q.size(0) == w.size(0) && k.size(0) == w.size(0) &&
                q.size(1) == w.size(1) && k.size(1) == w.size(1) && w.size(1) == w.size(2) && q.size(2) == k.size(2),
            "explore: a computed layer needs weights (H, T, T), queries and keys (H, T, D); got ", w.describe(), ", ",
            q.describe(), ", ", k.describe());
  const int64_t H = w.size(0), T = w.size(1);
  const int64_t per = causal ? T * (T + 1) / 2 : T * T;
  QKV_CHECK(H * per <= std::numeric_limits<int32_t>::max(), "explore: ", H, " heads of ", T, " x ", T,
            " weights are too many cells to index in 32 bits");
  auto to_half = [](const Tensor& t) {  // as the page stores it
    std::vector<float> out(t.data(), t.data() + t.numel());
    if (fits_half(out.data(), out.size()))
      for (float& x : out) x = half_to_float(float_to_half(x));
    return out;
  };
  const std::vector<float> q16 = to_half(q), k16 = to_half(k);
  std::vector<ExploreCorrections> per_head(static_cast<size_t>(H));
  default_pool().parallel_for(H, [&](int64_t h, int) {
    ExploreCorrections& c = per_head[static_cast<size_t>(h)];
    std::vector<float> row(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) {
      explore_page_weights(layer, causal, q16, k16, h, i, row.data());
      const float* exact = w.data() + (h * T + i) * T;
      const int64_t jn = causal ? i + 1 : T, base = h * per + (causal ? i * (i + 1) / 2 : i * T);
      for (int64_t j = 0; j < jn; ++j) {
        const double diff = std::fabs(static_cast<double>(row[static_cast<size_t>(j)]) - exact[j]);
        if (diff > tolerance || std::isnan(diff)) {
          c.index.push_back(static_cast<int32_t>(base + j));
          c.value.push_back(exact[j]);
        } else if (diff > c.largest_uncorrected) {
          c.largest_uncorrected = diff;
        }
      }
      if (causal)  // what the page takes as zero above the diagonal must be zero
        for (int64_t j = jn; j < T; ++j)
          QKV_CHECK(exact[j] == 0.0f, "explore: causal weights with ", exact[j], " at (", h, ", ", i, ", ", j, ")");
    }
  });
  ExploreCorrections out;
  out.head_start.push_back(0);
  for (const ExploreCorrections& c : per_head) {
    out.index.insert(out.index.end(), c.index.begin(), c.index.end());
    out.value.insert(out.value.end(), c.value.begin(), c.value.end());
    out.head_start.push_back(static_cast<int64_t>(out.index.size()));
    out.largest_uncorrected = std::max(out.largest_uncorrected, c.largest_uncorrected);
  }
  return out;
}

}  // namespace qkv

namespace qkv {

const ExploreCorrections& explore_layer_corrections(const ExploreLayer& layer, bool causal) {
  if (!layer.corrections)
    layer.corrections = std::make_shared<const ExploreCorrections>(
        explore_corrections(layer, causal, kExploreComputedTolerance));
  return *layer.corrections;
}

}  // namespace qkv
