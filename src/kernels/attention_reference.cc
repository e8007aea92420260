// The naive references of the fused attention kernels: plain loops in double, three passes per
// query (scores with the mask, softmax, weighted sum), the same conventions and dropout mask.
// Kept forever: tests/kernels/attention_test.cc compares the fused kernels with these.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention_problem.h"
#include "qkv/core/bf16.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/philox.h"

namespace qkv::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void scores_row(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, std::vector<double>& s,
                std::vector<double>* dcap = nullptr) {
  s.resize(static_cast<size_t>(p.S));
  if (dcap) dcap->resize(static_cast<size_t>(p.S));
  score_row(p, b, h, i, s.data(), dcap ? dcap->data() : nullptr);
}

// softmax in place; returns the log-sum-exp. All -inf: zeros and -inf (no NaN). A NaN score
// makes the whole row NaN (as PyTorch's softmax does), even when every other key is blocked.
double softmax_row(std::vector<double>& s) {
  double m = -kInf;
  for (double x : s) m = (std::isnan(m) || std::isnan(x)) ? std::nan("") : std::max(m, x);
  if (m == -kInf) {
    for (double& x : s) x = 0.0;
    return -kInf;
  }
  double l = 0.0;
  for (double& x : s) l += (x = std::exp(x - m));
  for (double& x : s) x /= l;
  return m + std::log(l);
}

// z[i, j]: 1 / (1 - p) where kept, 0 where dropped; 1 without dropout.
double dropout_factor(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!p.dropout) return 1.0;
  return dropout_kept(p.seed, p.threshold, p.batch_offset + b, p.head_offset + h, p.pos(i), p.key_pos(j)) ? static_cast<double>(p.keep_scale) : 0.0;
}

}  // namespace

void score_row(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, double* s, double* dcap) {
  const float* qi = p.q.row(b, h, i);
  const int64_t g = p.kv_head(h);
  const int64_t begin = p.visible_begin(i), end = p.visible_end(i);
  const double cap = p.softcap;
  for (int64_t j = 0; j < p.S; ++j) {
    s[j] = -kInf;
    if (dcap) dcap[j] = 0.0;
  }
  for (int64_t j = begin; j < end; ++j) {
    const float* kj = p.k.row(b, g, j);
    double dot = 0.0;
    for (int64_t c = 0; c < p.D; ++c) dot += static_cast<double>(qi[c * p.q.stride_d]) * kj[c * p.k.stride_d];
    double x = static_cast<double>(p.scale) * dot;
    double dx = 1.0;
    if (cap > 0.0) {
      const double t = std::tanh(x / cap);
      x = cap * t;
      dx = 1.0 - t * t;
    }
    if (p.mask.kind == AttentionMask::Kind::kAdditive) x += p.mask.values[i * p.mask.row_stride + j];
    if (p.alibi) x -= static_cast<double>(p.alibi[h]) * static_cast<double>(p.pos(i) - p.key_pos(j));
    if (p.mask.kind == AttentionMask::Kind::kBlocked && p.mask.values[i * p.mask.row_stride + j] != 0.0f) x = -kInf;
    s[j] = x;
    if (dcap) dcap[j] = dx;
  }
}

void attention_forward_reference(ConstHeads q, ConstHeads k, ConstHeads v, MutableHeads o, float* lse,
                                 const AttentionOptions& options) {
  const AttentionProblem p = make_problem("attention_forward_reference", q, k, v, options);
  std::vector<double> w, acc;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.T; ++i) {
        scores_row(p, b, h, i, w);                                   // pass 1: scores
        lse[(b * p.H + h) * p.T + i] = static_cast<float>(softmax_row(w));  // pass 2: softmax
        acc.assign(static_cast<size_t>(p.Dv), 0.0);                  // pass 3: sum_j w z v_j
        for (int64_t j = 0; j < p.S; ++j) {
          const double wz = w[static_cast<size_t>(j)] * dropout_factor(p, b, h, i, j);
          const float* vj = v.row(b, p.kv_head(h), j);
          for (int64_t c = 0; c < p.Dv; ++c) acc[static_cast<size_t>(c)] += wz * vj[c * v.stride_d];
        }
        float* out = o.row(b, h, i);
        for (int64_t c = 0; c < p.Dv; ++c) out[c * o.stride_d] = static_cast<float>(acc[static_cast<size_t>(c)]);
      }
}

void attention_backward_reference(ConstHeads q, ConstHeads k, ConstHeads v, ConstHeads d_o,
                                   MutableHeads dq, MutableHeads dk, MutableHeads dv,
                                   const AttentionOptions& options, Dtype rounding) {
  const AttentionProblem p = make_problem("attention_backward_reference", q, k, v, options);
  // bf16: the values the bf16 kernel rounds before a product (d_o, P z, scale dS), rounded here
  // too (through float32, which a double this close to a float32 survives unchanged).
  const bool bf16 = rounding == Dtype::kBF16;
  const auto r16 = [&](double x) { return bf16 ? static_cast<double>(bf16_to_float(float_to_bf16(static_cast<float>(x)))) : x; };
  const auto grad_out = [&](int64_t b, int64_t h, int64_t i, int64_t c) { return r16(d_o.row(b, h, i)[c * d_o.stride_d]); };
  const size_t T = static_cast<size_t>(p.T), S = static_cast<size_t>(p.S);
  // dk and dv sum over the query heads of a group, in double, written once at the end.
  std::vector<double> P(T * S), Z(T * S), C(T * S), dS(T * S), row, cap_row;
  std::vector<double> gk(S * static_cast<size_t>(p.D)), gv(S * static_cast<size_t>(p.Dv));
  const int64_t group = p.G > 0 ? p.H / p.G : 1;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t g = 0; g < p.G; ++g) {
      std::fill(gk.begin(), gk.end(), 0.0);
      std::fill(gv.begin(), gv.end(), 0.0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        // P = softmax(scores), Z = dropout factors, C = d score / d (scale q.k) (the softcap's)
        for (int64_t i = 0; i < p.T; ++i) {
          scores_row(p, b, h, i, row, &cap_row);
          softmax_row(row);
          for (int64_t j = 0; j < p.S; ++j) {
            const size_t ij = static_cast<size_t>(i) * S + static_cast<size_t>(j);
            P[ij] = row[static_cast<size_t>(j)];
            Z[ij] = dropout_factor(p, b, h, i, j);
            C[ij] = cap_row[static_cast<size_t>(j)];
          }
        }
        // o = (P * Z) v  ->  dv = (P * Z)^T d_o;  dP = (d_o v^T) * Z;  dS = P * (dP - rowsum(P * dP))
        for (int64_t i = 0; i < p.T; ++i) {
          double dot_sum = 0.0;
          for (int64_t j = 0; j < p.S; ++j) {
            const size_t ij = static_cast<size_t>(i) * S + static_cast<size_t>(j);
            const float* vj = v.row(b, g, j);
            double dp = 0.0;
            for (int64_t c = 0; c < p.Dv; ++c) dp += grad_out(b, h, i, c) * vj[c * v.stride_d];
            dS[ij] = dp * Z[ij];  // dP for now
            dot_sum += P[ij] * dS[ij];
          }
          // through the softcap: d(scale q.k) = dS * C
          for (int64_t j = 0; j < p.S; ++j) {
            const size_t ij = static_cast<size_t>(i) * S + static_cast<size_t>(j);
            dS[ij] = P[ij] * (dS[ij] - dot_sum) * C[ij];
            if (bf16) dS[ij] = r16(p.scale * dS[ij]);  // the scale folded in, as the bf16 kernel does
          }
        }
        for (int64_t j = 0; j < p.S; ++j) {
          for (int64_t c = 0; c < p.Dv; ++c) {
            double acc = 0.0;
            for (int64_t i = 0; i < p.T; ++i) {
              const size_t ij = static_cast<size_t>(i) * S + static_cast<size_t>(j);
              acc += r16(P[ij] * Z[ij]) * grad_out(b, h, i, c);
            }
            gv[static_cast<size_t>(j * p.Dv + c)] += acc;
          }
          for (int64_t c = 0; c < p.D; ++c) {  // dk = scale dS^T q
            double acc = 0.0;
            for (int64_t i = 0; i < p.T; ++i)
              acc += dS[static_cast<size_t>(i) * S + static_cast<size_t>(j)] * q.row(b, h, i)[c * q.stride_d];
            gk[static_cast<size_t>(j * p.D + c)] += (bf16 ? 1.0 : p.scale) * acc;
          }
        }
        for (int64_t i = 0; i < p.T; ++i) {  // dq = scale dS k
          float* gq = dq.row(b, h, i);
          for (int64_t c = 0; c < p.D; ++c) {
            double acc = 0.0;
            for (int64_t j = 0; j < p.S; ++j)
              acc += dS[static_cast<size_t>(i) * S + static_cast<size_t>(j)] * k.row(b, g, j)[c * k.stride_d];
            gq[c * dq.stride_d] = static_cast<float>((bf16 ? 1.0 : p.scale) * acc);
          }
        }
      }
      for (int64_t j = 0; j < p.S; ++j) {
        for (int64_t c = 0; c < p.Dv; ++c)
          dv.row(b, g, j)[c * dv.stride_d] = static_cast<float>(gv[static_cast<size_t>(j * p.Dv + c)]);
        for (int64_t c = 0; c < p.D; ++c)
          dk.row(b, g, j)[c * dk.stride_d] = static_cast<float>(gk[static_cast<size_t>(j * p.D + c)]);
      }
    }
}

}  // namespace qkv::kernels
