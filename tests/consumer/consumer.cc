// qkv_consumer: runs the fused attention of an installed qkv through its public header and checks
// it against attention written out here, in double, the textbook way:
//   s[i, j] = scale * q[i] . k[j]   (-inf where j > i when causal)
//   w[i, :] = softmax(s[i, :]),  o[i] = sum_j w[i, j] v[j],  lse[i] = log(sum_j exp(s[i, j]))
// Exit status 0 when every case matches, 1 otherwise (with the case and the largest difference).
//
// Legend: B batch, H heads, T queries, S keys, D query/key dim, Dv value dim.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include <qkv/core/error.h>
#include <qkv/core/thread_pool.h>
#include <qkv/kernels/attention.h>

namespace {

struct Case {
  const char* name;
  int64_t B, H, T, S, D, Dv;
  bool causal;
};

// Deterministic inputs in [-1, 1) from a 64-bit LCG (no dependence on qkv's generator).
std::vector<float> random_values(size_t n, uint64_t seed) {
  std::vector<float> out(n);
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float& x : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(state >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
  return out;
}

// Returns the largest |fused - naive| over o and lse, or infinity on a non-finite result.
double run_case(const Case& c, qkv::ThreadPool& pool) {
  std::vector<float> q = random_values(static_cast<size_t>(c.B * c.H * c.T * c.D), 1);  // (B, H, T, D)
  std::vector<float> k = random_values(static_cast<size_t>(c.B * c.H * c.S * c.D), 2);  // (B, H, S, D)
  std::vector<float> v = random_values(static_cast<size_t>(c.B * c.H * c.S * c.Dv), 3); // (B, H, S, Dv)
  std::vector<float> o(static_cast<size_t>(c.B * c.H * c.T * c.Dv));                    // (B, H, T, Dv)
  std::vector<float> lse(static_cast<size_t>(c.B * c.H * c.T));                         // (B, H, T)

  qkv::kernels::AttentionOptions options;
  options.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D)));
  options.mask = c.causal ? qkv::kernels::AttentionMask::causal() : qkv::kernels::AttentionMask::none();
  options.pool = &pool;
  using qkv::kernels::ConstHeads;
  using qkv::kernels::MutableHeads;
  qkv::kernels::attention_forward(ConstHeads::contiguous(q.data(), c.B, c.H, c.T, c.D),
                                  ConstHeads::contiguous(k.data(), c.B, c.H, c.S, c.D),
                                  ConstHeads::contiguous(v.data(), c.B, c.H, c.S, c.Dv),
                                  MutableHeads::contiguous(o.data(), c.B, c.H, c.T, c.Dv), lse.data(), options);

  double max_diff = 0.0;
  std::vector<double> s(static_cast<size_t>(c.S));
  for (int64_t bh = 0; bh < c.B * c.H; ++bh) {
    const float* qh = q.data() + bh * c.T * c.D;
    const float* kh = k.data() + bh * c.S * c.D;
    const float* vh = v.data() + bh * c.S * c.Dv;
    for (int64_t i = 0; i < c.T; ++i) {
      const int64_t visible = c.causal ? std::min(i + 1, c.S) : c.S;  // keys 0 .. visible - 1
      double row_max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < c.D; ++d) dot += static_cast<double>(qh[i * c.D + d]) * kh[j * c.D + d];
        s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(c.D));
        row_max = std::max(row_max, s[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < visible; ++j) sum += std::exp(s[static_cast<size_t>(j)] - row_max);
      const double row_lse = row_max + std::log(sum);
      const double got_lse = lse[static_cast<size_t>(bh * c.T + i)];
      if (!std::isfinite(got_lse)) return std::numeric_limits<double>::infinity();
      max_diff = std::max(max_diff, std::fabs(got_lse - row_lse));
      for (int64_t e = 0; e < c.Dv; ++e) {
        double acc = 0.0;
        for (int64_t j = 0; j < visible; ++j) acc += std::exp(s[static_cast<size_t>(j)] - row_lse) * vh[j * c.Dv + e];
        const double got = o[static_cast<size_t>((bh * c.T + i) * c.Dv + e)];
        if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
        max_diff = std::max(max_diff, std::fabs(got - acc));
      }
    }
  }
  return max_diff;
}

}  // namespace

int main() {
  // float32 kernels against double: rows of up to 70 terms of size ~1 agree to a few 1e-7.
  constexpr double kTolerance = 1e-5;
  const Case cases[] = {
      {"causal, D = 64 (GPT-2's heads), T = S = 37", 2, 3, 37, 37, 64, 64, true},
      {"not causal, D = 24, Dv = 40, T = 19, S = 70", 1, 2, 19, 70, 24, 40, false},
      {"causal, T = 70 > S = 23, D = 8", 1, 1, 70, 23, 8, 8, true},
  };
  qkv::ThreadPool pool(2);
  int failures = 0;
  for (const Case& c : cases) {
    const double diff = run_case(c, pool);
    const bool ok = diff <= kTolerance;
    std::printf("%s  %s: max |fused - naive| = %.3g (tolerance %.1g)\n", ok ? "ok  " : "FAIL", c.name, diff, kTolerance);
    failures += ok ? 0 : 1;
  }

  // Errors cross the library boundary as qkv::Error.
  bool threw = false;
  try {
    std::vector<float> x(8);
    qkv::kernels::AttentionOptions options;
    options.dropout_p = 1.5f;  // outside [0, 1)
    auto heads = qkv::kernels::MutableHeads::contiguous(x.data(), 1, 1, 2, 4);
    std::vector<float> lse(2);
    qkv::kernels::attention_forward(heads, heads, heads, heads, lse.data(), options);
  } catch (const qkv::Error& e) {
    threw = true;
    std::printf("ok    a bad dropout_p throws qkv::Error: %s\n", e.what());
  }
  if (!threw) {
    std::printf("FAIL  a bad dropout_p did not throw qkv::Error\n");
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}
