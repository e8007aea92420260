// LayerNorm's and RMSNorm's rows. See include/qkv/kernels/norm_rows.h.
#include "qkv/kernels/norm_rows.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qkv::kernels {
namespace {

// sum over i < n of term(i) in double, in eight interleaved partial sums (i mod 8) added pairwise,
// then the tail: independent chains the compiler keeps in vectors, where one running sum waits a
// double add's latency per element (a decoding step's norms, ~5,000 elements a layer, ran on the
// calling thread at that pace while the pool's thread waited).
template <typename Term>
double sum_of(int64_t n, const Term& term) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += term(i + j);
  double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; i < n; ++i) s += term(i);
  return s;
}

// One normalisation of rows, LayerNorm's (centered: x - mean over var) or RMSNorm's (x over the
// mean of squares), statistics in double; y = scale * norm (+ shift when there is one).
void norm_rows(const float* x, int64_t N, int64_t E, const float* scale, const float* shift, double eps, bool centered,
               float* y, float* norm, float* inv_std, ThreadPool* pool_arg) {
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * E;
      const double mean =
          centered ? sum_of(E, [row](int64_t i) { return static_cast<double>(row[i]); }) / static_cast<double>(E) : 0.0;
      // biased: over E, as x.var(unbiased=False); RMSNorm: x.pow(2).mean()
      const double var = sum_of(E, [row, mean](int64_t i) { return (row[i] - mean) * (row[i] - mean); }) /
                         static_cast<double>(E);
      const double inv = 1.0 / std::sqrt(var + eps);
      if (inv_std) inv_std[r] = static_cast<float>(inv);
      float* out = y + r * E;  // may be row itself: each element is read before it is written
      for (int64_t i = 0; i < E; ++i) {
        const float v = static_cast<float>((row[i] - mean) * inv);
        if (norm) norm[r * E + i] = v;
        out[i] = shift ? scale[i] * v + shift[i] : scale[i] * v;
      }
    }
  };
  // About 16 K elements a task: a decoding step's one row stays on the calling thread.
  const int64_t per_task = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(E, 1));
  const int64_t tasks = (N + per_task - 1) / per_task;
  if (tasks <= 1) {
    rows(0, N);
    return;
  }
  ThreadPool& pool = pool_arg ? *pool_arg : default_pool();
  pool.parallel_for(tasks, [&](int64_t t, int) { rows(t * per_task, std::min(N, (t + 1) * per_task)); });
}

// Their backward, from the forward's normalised rows and 1 / sqrt(var + eps):
//   dnorm = dy * scale;  dx = (dnorm - [mean(dnorm) if centered] - norm * mean(dnorm * norm)) * inv_std
// adding into dscale (and dshift when not null). Fixed blocks of rows (not one per thread), each
// summing its own parameter gradients in double, then added in block order: the same bits on any
// thread count.
void norm_rows_backward(const float* d, const float* n, const float* inv_std, int64_t N, int64_t E, const float* g,
                        bool centered, float* dg, float* db, float* out) {
  const int64_t per_task = std::max<int64_t>(1, (int64_t{1} << 15) / E), tasks = (N + per_task - 1) / per_task;
  std::vector<double> sums(static_cast<size_t>(std::max<int64_t>(tasks, 1) * 2 * E), 0.0);
  auto rows = [&](int64_t task) {
    double* dscale_sum = sums.data() + task * 2 * E;
    double* dshift_sum = dscale_sum + E;
    for (int64_t r = task * per_task; r < std::min(N, (task + 1) * per_task); ++r) {
      const float *dr = d + r * E, *nr = n + r * E;
      double mean_dn = 0, mean_dn_n = 0;
      for (int64_t i = 0; i < E; ++i) {
        dscale_sum[i] += static_cast<double>(dr[i]) * nr[i];
        dshift_sum[i] += dr[i];
        const double dn = static_cast<double>(dr[i]) * g[i];
        mean_dn += dn;
        mean_dn_n += dn * nr[i];
      }
      mean_dn = centered ? mean_dn / static_cast<double>(E) : 0.0;
      mean_dn_n /= static_cast<double>(E);
      const double inv = inv_std[r];
      for (int64_t i = 0; i < E; ++i)
        out[r * E + i] = static_cast<float>((static_cast<double>(dr[i]) * g[i] - mean_dn - nr[i] * mean_dn_n) * inv);
    }
  };
  if (tasks <= 1) {
    if (tasks == 1) rows(0);
  } else {
    default_pool().parallel_for(tasks, [&](int64_t t, int) { rows(t); });
  }
  for (int64_t i = 0; i < E; ++i) {
    double dscale_total = 0, dshift_total = 0;
    for (int64_t t = 0; t < tasks; ++t) {
      dscale_total += sums[static_cast<size_t>(t * 2 * E + i)];
      dshift_total += sums[static_cast<size_t>(t * 2 * E + E + i)];
    }
    dg[i] += static_cast<float>(dscale_total);
    if (db) db[i] += static_cast<float>(dshift_total);
  }
}

}  // namespace

void layer_norm_rows(const float* x, int64_t N, int64_t E, const float* scale, const float* shift, double eps,
                     float* y, float* norm, float* inv_std, ThreadPool* pool) {
  norm_rows(x, N, E, scale, shift, eps, true, y, norm, inv_std, pool);
}

void rms_norm_rows(const float* x, int64_t N, int64_t E, const float* weight, double eps, float* y, float* norm,
                   float* inv_std, ThreadPool* pool) {
  norm_rows(x, N, E, weight, nullptr, eps, false, y, norm, inv_std, pool);
}

void layer_norm_rows_backward(const float* dy, const float* norm, const float* inv_std, int64_t N, int64_t E,
                              const float* scale, float* dscale, float* dshift, float* dx) {
  norm_rows_backward(dy, norm, inv_std, N, E, scale, true, dscale, dshift, dx);
}

void rms_norm_rows_backward(const float* dy, const float* norm, const float* inv_std, int64_t N, int64_t E,
                            const float* weight, float* dweight, float* dx) {
  norm_rows_backward(dy, norm, inv_std, N, E, weight, false, dweight, nullptr, dx);
}


}  // namespace qkv::kernels
