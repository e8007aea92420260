// The fused attention's front door: argument checks, weights on demand, FLOP counts. The SIMD
// kernels are in flash_attention.cc, the references in attention_reference.cc.
#include "qkv/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/attention_problem.h"
#include "qkv/core/error.h"
#include "qkv/kernels/philox.h"

namespace qkv::kernels {
namespace {

template <typename F>
std::string describe(const char* name, const Heads<F>& x) {
  return str(name, " (", x.batch, ", ", x.heads, ", ", x.tokens, ", ", x.dim, ")");
}

template <typename F>
void check_view(const char* what, const char* name, const Heads<F>& x) {
  QKV_CHECK(x.batch >= 0 && x.heads >= 0 && x.tokens >= 0 && x.dim >= 0, what, ": ", describe(name, x),
            " has a negative size");
  QKV_CHECK(x.tokens < (int64_t{1} << 31), what, ": ", describe(name, x), " has more than 2^31 - 1 positions");
  QKV_CHECK(x.data != nullptr || x.batch * x.heads * x.tokens * x.dim == 0, what, ": ", describe(name, x),
            " has no data");
}

template <typename F>
void check_shape(const char* what, const char* name, const Heads<F>& x, int64_t B, int64_t H, int64_t N,
                 int64_t D) {
  check_view(what, name, x);
  QKV_CHECK(x.batch == B && x.heads == H && x.tokens == N && x.dim == D, what, ": ", describe(name, x),
            " should be (", B, ", ", H, ", ", N, ", ", D, ")");
}

}  // namespace

template <typename T>
AttentionProblem make_problem(const char* what, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                              const AttentionOptions& options) {
  check_view(what, "q", q);
  check_view(what, "k", k);
  check_view(what, "v", v);
  QKV_CHECK(q.dim >= 1 && v.dim >= 1, what, ": head dims must be at least 1, got ", describe("q", q), " and ",
            describe("v", v));
  QKV_CHECK(k.heads >= 1 || q.heads == 0, what, ": ", describe("k", k), " has no heads for ", describe("q", q));
  QKV_CHECK(k.heads == 0 || q.heads % k.heads == 0, what, ": the key/value heads of ", describe("k", k),
            " must divide the query heads of ", describe("q", q), " (grouped-query attention)");
  check_shape(what, "k", k, q.batch, k.heads, k.tokens, q.dim);
  check_shape(what, "v", v, q.batch, k.heads, k.tokens, v.dim);
  QKV_CHECK(options.query_offset >= 0 && options.query_offset < (int64_t{1} << 31), what,
            ": query_offset must be in [0, 2^31), got ", options.query_offset);
  QKV_CHECK(options.key_offset >= 0 && options.key_offset < (int64_t{1} << 31), what,
            ": key_offset must be in [0, 2^31), got ", options.key_offset);
  QKV_CHECK(options.head_offset >= 0 && options.head_offset < (int64_t{1} << 31), what,
            ": head_offset must be in [0, 2^31), got ", options.head_offset);
  QKV_CHECK(options.batch_offset >= 0 && options.batch_offset + q.batch <= (int64_t{1} << 31), what,
            ": batch_offset ", options.batch_offset, " with ", q.batch, " sequences puts sequences beyond 2^31 - 1");
  QKV_CHECK(options.window >= 0, what, ": the window must be positive (or 0 for none), got ", options.window);
  QKV_CHECK(std::isfinite(options.softcap) && options.softcap >= 0.0f, what,
            ": softcap must be positive (or 0 for none), got ", options.softcap);
  if (options.alibi_slopes)
    for (int64_t h = 0; h < q.heads; ++h)
      QKV_CHECK(std::isfinite(options.alibi_slopes[h]), what, ": ALiBi slope ", h, " must be finite, got ",
                options.alibi_slopes[h]);
  QKV_CHECK(std::isfinite(options.scale), what, ": scale must be finite, got ", options.scale);
  QKV_CHECK(options.dropout_p >= 0.0f && options.dropout_p < 1.0f, what, ": dropout p must be in [0, 1), got ",
            options.dropout_p);
  const AttentionMask& m = options.mask;
  if (m.kind == AttentionMask::Kind::kAdditive || m.kind == AttentionMask::Kind::kBlocked) {
    QKV_CHECK(m.values != nullptr || q.tokens * k.tokens == 0, what, ": the mask has no values");
    QKV_CHECK(m.row_stride >= k.tokens, what, ": the mask's row stride (", m.row_stride,
              ") is smaller than the number of keys (", k.tokens, ")");
  }
  AttentionProblem p;
  // bf16 inputs: shapes and strides only (the bf16 kernel reads its own views of the data)
  const auto view = [](const Heads<const T>& x) {
    const float* data = nullptr;
    if constexpr (std::is_same_v<T, float>) data = x.data;
    return ConstHeads{data, x.batch, x.heads, x.tokens, x.dim, x.stride_b, x.stride_h, x.stride_n, x.stride_d};
  };
  p.q = view(q);
  p.k = view(k);
  p.v = view(v);
  p.B = q.batch;
  p.H = q.heads;
  p.G = k.heads;
  p.T = q.tokens;
  p.S = k.tokens;
  p.D = q.dim;
  p.Dv = v.dim;
  p.scale = options.scale;
  p.mask = m;
  p.dropout = options.dropout_p > 0.0f;
  p.seed = options.dropout_seed;
  p.threshold = dropout_threshold(options.dropout_p);
  p.keep_scale = p.dropout ? 1.0f / (1.0f - options.dropout_p) : 1.0f;
  p.pool = options.pool ? options.pool : &default_pool();
  p.query_offset = options.query_offset;
  p.key_offset = options.key_offset;
  p.head_offset = options.head_offset;
  p.batch_offset = options.batch_offset;
  p.window = options.window;
  p.alibi = options.alibi_slopes;
  p.softcap = options.softcap;
  p.lse_low = options.lse_low;
  p.partial_keys = options.partial_keys;
  return p;
}

template AttentionProblem make_problem(const char*, ConstHeads, ConstHeads, ConstHeads, const AttentionOptions&);
template AttentionProblem make_problem(const char*, Heads<const uint16_t>, Heads<const uint16_t>,
                                       Heads<const uint16_t>, const AttentionOptions&);

template <typename T>
AttentionProblem make_forward_problem(const char* what, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                      ConstHeads o, const float* lse, const AttentionOptions& options) {
  const AttentionProblem p = make_problem(what, q, k, v, options);
  check_shape(what, "o", o, p.B, p.H, p.T, p.Dv);
  QKV_CHECK(lse != nullptr || p.B * p.H * p.T == 0, what, ": lse (", p.B, ", ", p.H, ", ", p.T, ") is null");
  return p;
}
template AttentionProblem make_forward_problem(const char*, ConstHeads, ConstHeads, ConstHeads, ConstHeads,
                                               const float*, const AttentionOptions&);
template AttentionProblem make_forward_problem(const char*, Heads<const uint16_t>, Heads<const uint16_t>,
                                               Heads<const uint16_t>, ConstHeads, const float*,
                                               const AttentionOptions&);

template <typename T>
AttentionProblem make_backward_problem(const char* what, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                       ConstHeads o, ConstHeads d_o, const float* lse, ConstHeads dq,
                                       ConstHeads dk, ConstHeads dv, const AttentionOptions& options) {
  const AttentionProblem p = make_problem(what, q, k, v, options);
  check_shape(what, "o", o, p.B, p.H, p.T, p.Dv);
  check_shape(what, "d_o", d_o, p.B, p.H, p.T, p.Dv);
  check_shape(what, "dq", dq, p.B, p.H, p.T, p.D);
  check_shape(what, "dk", dk, p.B, p.G, p.S, p.D);
  check_shape(what, "dv", dv, p.B, p.G, p.S, p.Dv);
  QKV_CHECK(lse != nullptr || p.B * p.H * p.T == 0, what, ": lse (", p.B, ", ", p.H, ", ", p.T, ") is null");
  return p;
}
template AttentionProblem make_backward_problem(const char*, ConstHeads, ConstHeads, ConstHeads, ConstHeads,
                                                ConstHeads, const float*, ConstHeads, ConstHeads, ConstHeads,
                                                const AttentionOptions&);
template AttentionProblem make_backward_problem(const char*, Heads<const uint16_t>, Heads<const uint16_t>,
                                                Heads<const uint16_t>, ConstHeads, ConstHeads, const float*,
                                                ConstHeads, ConstHeads, ConstHeads, const AttentionOptions&);

void attention_forward(ConstHeads q, ConstHeads k, ConstHeads v, MutableHeads o, float* lse,
                       const AttentionOptions& options) {
  const AttentionProblem p = make_forward_problem("attention_forward", q, k, v, o, lse, options);
  if (p.B * p.H * p.T == 0) return;
  flash_attention_forward(p, o, lse);
}

void attention_backward(ConstHeads q, ConstHeads k, ConstHeads v, ConstHeads o, ConstHeads d_o,
                        const float* lse, MutableHeads dq, MutableHeads dk, MutableHeads dv,
                        const AttentionOptions& options) {
  const AttentionProblem p = make_backward_problem("attention_backward", q, k, v, o, d_o, lse, dq, dk, dv, options);
  if (p.B * p.H == 0) return;
  flash_attention_backward(p, o, d_o, lse, dq, dk, dv);
}

void attention_weights(ConstHeads q, ConstHeads k, const float* lse, const AttentionOptions& options,
                       int64_t b, int64_t h, int64_t row_begin, int64_t row_end, bool after_dropout,
                       float* out, int64_t out_row_stride) {
  const char* what = "attention_weights";
  const AttentionProblem p = make_problem(what, q, k, k, options);
  QKV_CHECK(b >= 0 && b < p.B && h >= 0 && h < p.H, what, ": head (", b, ", ", h, ") is outside (", p.B, ", ",
            p.H, ")");
  QKV_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= p.T, what, ": rows [", row_begin, ", ",
            row_end, ") are outside [0, ", p.T, ")");
  QKV_CHECK(out_row_stride >= p.S, what, ": the output row stride (", out_row_stride,
            ") is smaller than the number of keys (", p.S, ")");
  if (row_begin == row_end) return;
  QKV_CHECK(lse != nullptr && out != nullptr, what, ": lse and out must not be null");
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> s(static_cast<size_t>(p.S));  // one score row, the references' (score_row)
  for (int64_t i = row_begin; i < row_end; ++i) {
    float* w = out + (i - row_begin) * out_row_stride;
    const int64_t at = (b * p.H + h) * p.T + i;
    const double l = lse[at] == -inf || !p.lse_low ? lse[at] : double{lse[at]} + p.lse_low[at];
    score_row(p, b, h, i, s.data());
    for (int64_t j = 0; j < p.S; ++j) {
      const double sj = s[static_cast<size_t>(j)];
      double weight = (l == -inf || sj == -inf) ? 0.0 : std::exp(sj - l);
      if (after_dropout && p.dropout)
        weight = dropout_kept(p.seed, p.threshold, p.batch_offset + b, p.head_offset + h, p.pos(i), p.key_pos(j)) ? weight * p.keep_scale : 0.0;
      w[j] = static_cast<float>(weight);
    }
  }
}

double attention_visible_pairs(int64_t T, int64_t S, bool causal, int64_t query_offset, int64_t window) {
  if (!causal && window <= 0) return static_cast<double>(T) * static_cast<double>(S);
  double pairs = 0.0;  // one row at a time: exact for every offset and window
  for (int64_t i = 0; i < T; ++i) {
    const int64_t pos = query_offset + i;
    const int64_t end = causal ? std::min(pos + 1, S) : S;
    const int64_t begin = window > 0 ? std::clamp<int64_t>(pos - window + 1, 0, S) : 0;
    if (end > begin) pairs += static_cast<double>(end - begin);
  }
  return pairs;
}

double attention_forward_flops(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                               int64_t query_offset, int64_t window) {
  return 2.0 * static_cast<double>(B * H) * attention_visible_pairs(T, S, causal, query_offset, window) *
         static_cast<double>(D + Dv);
}

double attention_backward_flops(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                                int64_t query_offset, int64_t window) {
  return 2.0 * static_cast<double>(B * H) * attention_visible_pairs(T, S, causal, query_offset, window) *
         static_cast<double>(3 * D + 2 * Dv);
}

void alibi_default_slopes(int64_t H, float* slopes) {
  QKV_CHECK(H >= 0, "alibi_default_slopes: the number of heads must not be negative, got ", H);
  // The slopes of n = 2^k heads: 2^(-8 (i + 1) / n), i = 0 .. n - 1.
  auto power_of_two = [](int64_t n, int64_t i) { return std::exp2(-8.0 * static_cast<double>(i + 1) / static_cast<double>(n)); };
  int64_t n = 1;
  while (n * 2 <= H) n *= 2;
  for (int64_t i = 0; i < std::min(n, H); ++i) slopes[i] = static_cast<float>(power_of_two(n, i));
  for (int64_t i = n; i < H; ++i) slopes[i] = static_cast<float>(power_of_two(2 * n, 2 * (i - n)));
}

}  // namespace qkv::kernels
