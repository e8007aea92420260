// The fast multi-head attention pipeline: fused QKV GEMM, fused attention, output GEMM, and the
// same three steps backwards. See include/qkv/kernels/mha.h.
#include "qkv/kernels/mha.h"
#include "kernels/mha_testing.h"

#include <algorithm>
#include <utility>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/gemm.h"
#include "qkv/core/linear.h"
#include "qkv/kernels/norm_rows.h"

namespace qkv::kernels {
namespace {

void check(const MhaShape& s, const MhaWeights& w) {
  QKV_CHECK(s.batch >= 0 && s.tokens >= 0 && s.d_in >= 1, "mha: bad shape (batch ", s.batch, ", tokens ", s.tokens,
            ", d_in ", s.d_in, ")");
  validate_attention_spec(s.attention, "mha");
  QKV_CHECK(w.w_qkv != nullptr, "mha: w_qkv is null");
  QKV_CHECK(!s.attention.qk_norm || (w.q_norm != nullptr && w.k_norm != nullptr),
            "mha: the spec asks for QK-norm but q_norm or k_norm is null");
  QKV_CHECK(s.out_dim >= 0 && (w.w_out != nullptr || s.out_width() == s.d_out()), "mha: out_dim (", s.out_dim,
            ") needs an output projection and must not be negative");
}

// QK-norm's forward on the split float heads: q (B, H, T, D) and k (B, G, T, D), the first two parts,
// normalised in place; norm and inv_rms (saved for the backward) or null.
void qk_norm_forward(const MhaShape& s, const MhaWeights& w, float* heads, float* norm, float* inv_rms,
                     ThreadPool* pool) {
  const int64_t D = s.head_dim(), q_rows = s.batch * s.heads() * s.tokens, k_rows = s.batch * s.groups() * s.tokens;
  const double eps = s.attention.qk_norm_eps;
  rms_norm_rows(heads, q_rows, D, w.q_norm, eps, heads, norm, inv_rms, pool);
  rms_norm_rows(heads + q_rows * D, k_rows, D, w.k_norm, eps, heads + q_rows * D, norm ? norm + q_rows * D : nullptr,
                inv_rms ? inv_rms + q_rows : nullptr, pool);
}

// Offset (in floats) of the split copy's region holding head `part` of the QKV product's columns
// (part in [0, H + 2G): H query heads, G key heads, G value heads), and the head within it.
struct SplitPart {
  int64_t region_heads;  // H or G: the region is (B, region_heads, T, D)
  int64_t head;          // within the region
  int64_t region_offset; // floats before the region
};
SplitPart split_part_of(const MhaShape& s, int64_t part) {
  const int64_t H = s.heads(), G = s.groups(), BTD = s.batch * s.tokens * s.head_dim();
  if (part < H) return {H, part, 0};
  if (part < H + G) return {G, part - H, H * BTD};
  return {G, part - H - G, (H + G) * BTD};
}

// Rows of the token dimension per copy task: the source rows are read whole and in order (which
// the hardware prefetchers follow), the destinations written as (H + 2G) sequential streams.
constexpr int64_t kCopyRows = 32;

// heads (q, k, v regions) <- rows [first, first + count) of qkv (B*T, Q), given as `rows`
// ((count, Q), row 0 = global row `first`). In the (B*T, Q) layout consecutive tokens of a head
// are Q floats apart (9 KB at GPT-2's size): a kernel reading a head there crosses a page every
// row, and measured 20-40% slower than on contiguous heads.
// heads: float, or bf16 (rounded as they are copied: bf16 mode).
void copy_head_row(const float* src, int64_t D, float* dst) { std::memcpy(dst, src, static_cast<size_t>(D) * sizeof(float)); }
void copy_head_row(const float* src, int64_t D, uint16_t* dst) { floats_to_bf16(src, dst, static_cast<size_t>(D)); }

template <typename T>
void split_heads(const MhaShape& s, const float* rows, int64_t first, int64_t count, T* heads, ThreadPool& pool) {
  const int64_t Tk = s.tokens, D = s.head_dim(), Q = s.qkv_width(), parts = Q / D;
  pool.parallel_for((count + kCopyRows - 1) / kCopyRows, [&](int64_t task, int) {
    const int64_t r0 = task * kCopyRows, r1 = std::min(count, r0 + kCopyRows);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = (first + r) / Tk, t = (first + r) % Tk;
      const float* row = rows + r * Q;
      for (int64_t part = 0; part < parts; ++part) {  // at column part * D
        const SplitPart sp = split_part_of(s, part);
        copy_head_row(row + part * D, D, heads + sp.region_offset + ((b * sp.region_heads + sp.head) * Tk + t) * D);
      }
    }
  });
}

// n floats to bf16, split over the pool.
void round_to_bf16(const float* src, uint16_t* dst, int64_t n, ThreadPool& pool) {
  const int64_t chunk = int64_t{1} << 16;
  pool.parallel_for((n + chunk - 1) / chunk, [&](int64_t t, int) {
    const int64_t i0 = t * chunk;
    floats_to_bf16(src + i0, dst + i0, static_cast<size_t>(std::min(chunk, n - i0)));
  });
}

std::atomic<bool> g_reference_attention{false};  // mha_use_reference_attention

// Rows of x projected per QKV product. The product's output (rows, 3C) is only a staging area
// for the split into heads, so past 256 MB it is made in equal chunks of rows and the whole
// (B*T, 3C) matrix never exists (at T = 65,536 and C = 768 it would be 600 MB). Below that it is
// one product: each chunk re-packs W_qkv for every panel, and five 16 MB chunks at B = 8, T = 1024
// measured 6% slower than one product (bench/ab.sh, the MHA forward).
int64_t qkv_chunk_rows(const MhaShape& s) {
  const int64_t rows = s.batch * s.tokens;
  const int64_t budget_rows = std::max<int64_t>(512, (int64_t{64} << 20) / s.qkv_width());  // 256 MB of floats
  const int64_t chunks = (rows + budget_rows - 1) / budget_rows;
  return chunks <= 1 ? rows : (rows + chunks - 1) / chunks;
}

}  // namespace

namespace {
// Part `first_part` onwards of the split heads: q (part 0, H heads), k (part H, G heads) or v (part H + G).
template <typename T>
Heads<const T> heads_from(const MhaShape& s, const T* heads, int64_t first_part) {
  const SplitPart sp = split_part_of(s, first_part);
  return Heads<const T>::contiguous(heads + sp.region_offset, s.batch, sp.region_heads, s.tokens, s.head_dim());
}
}  // namespace

ConstHeads mha_queries(const MhaShape& s, const float* heads) { return heads_from(s, heads, 0); }
ConstHeads mha_keys(const MhaShape& s, const float* heads) { return heads_from(s, heads, s.heads()); }
ConstHeads mha_values(const MhaShape& s, const float* heads) { return heads_from(s, heads, s.heads() + s.groups()); }
ConstHeadsBF16 mha_queries(const MhaShape& s, const uint16_t* heads) { return heads_from(s, heads, 0); }
ConstHeadsBF16 mha_keys(const MhaShape& s, const uint16_t* heads) { return heads_from(s, heads, s.heads()); }
ConstHeadsBF16 mha_values(const MhaShape& s, const uint16_t* heads) { return heads_from(s, heads, s.heads() + s.groups()); }

bool mha_use_reference_attention(bool on) {
  return g_reference_attention.exchange(on);
}

namespace mha_detail {
template <typename T>
void Buffer<T>::reserve(size_t n) {
  if (size >= n) return;
  data.reset(new T[n]);
  size = n;
}
template struct Buffer<float>;
template struct Buffer<uint16_t>;
}  // namespace mha_detail

// The forwards' access to MhaSaved's buffers.
struct MhaSavedWriter {
  // float_heads: keep float heads in bf16 mode too (the cached forward's, which decodes from them)
  static void reserve(MhaSaved& saved, const MhaShape& s, bool float_heads) {
    const auto rows = static_cast<size_t>(s.batch * s.tokens), C = static_cast<size_t>(s.d_out());
    const auto Q = static_cast<size_t>(s.qkv_width());
    const bool bf16 = s.dtype() == Dtype::kBF16;
    // bf16 mode keeps float heads only to rotate them (RoPE) before rounding, or for the reference
    const bool qk_norm = s.attention.qk_norm;
    if (float_heads || !bf16 || qk_norm || s.attention.rope != RopeLayout::kNone || g_reference_attention)
      saved.heads_.reserve(rows * Q);
    if (qk_norm && !float_heads) {  // the backward's (the cached forward, which has none, keeps float heads)
      const auto qk_rows = rows * static_cast<size_t>(s.heads() + s.groups());
      saved.qk_norm_.reserve(qk_rows * static_cast<size_t>(s.head_dim()));
      saved.qk_inv_rms_.reserve(qk_rows);
    }
    if (bf16) saved.heads16_.reserve(rows * Q);
    saved.ctx_.reserve(rows * C);
    saved.lse_.reserve(2 * static_cast<size_t>(s.batch * s.heads() * s.tokens));  // lse, then its low part
  }
  static float* heads(MhaSaved& saved) { return saved.heads_.get(); }
  static uint16_t* heads16(MhaSaved& saved) { return saved.heads16_.get(); }
  static float* ctx(MhaSaved& saved) { return saved.ctx_.get(); }
  static float* lse(MhaSaved& saved) { return saved.lse_.get(); }
  static float* qk_norm(MhaSaved& saved) { return saved.qk_norm_.get(); }
  static float* qk_inv_rms(MhaSaved& saved) { return saved.qk_inv_rms_.get(); }
  // Marks saved as holding a forward of shape s that has not finished (id 0), then, by `filled`,
  // as that forward's (a fresh id): a forward that throws leaves no id a backward could accept.
  static void begin(MhaSaved& saved, const MhaShape& s) {
    saved.id_ = 0;
    saved.shape_ = s;
  }
  static void filled(MhaSaved& saved) {
    static std::atomic<uint64_t> next{1};
    saved.id_ = next.fetch_add(1);
  }
};

size_t MhaSaved::bytes() const {
  return (heads_.size + ctx_.size + lse_.size + qk_norm_.size + qk_inv_rms_.size) * sizeof(float) +
         heads16_.size * sizeof(uint16_t);
}

void MhaWorkspace::reserve_forward(const MhaShape& s) {
  qkv_.reserve(static_cast<size_t>(qkv_chunk_rows(s)) * static_cast<size_t>(s.qkv_width()));
}

void MhaWorkspace::reserve_backward(const MhaShape& s) {
  const auto rows = static_cast<size_t>(s.batch * s.tokens), C = static_cast<size_t>(s.d_out());
  dctx_.reserve(rows * C);
  dqkv_.reserve(rows * static_cast<size_t>(s.qkv_width()));
  if (s.attention.qk_norm) dqk_.reserve(rows * static_cast<size_t>((s.heads() + s.groups()) * s.head_dim()));
}

size_t MhaWorkspace::bytes() const {
  return (qkv_.size + dctx_.size + dqkv_.size + dqk_.size) * sizeof(float) + (rope_ ? rope_->bytes() : 0);
}

const RopeTable& MhaWorkspace::rope_table(int64_t positions, int64_t rotary_dim, double base, int64_t position_offset,
                                          const RopeScaling& scaling) {
  if (!rope_ || !rope_->is(positions, rotary_dim, base, position_offset, scaling))
    rope_.emplace(positions, rotary_dim, base, position_offset, scaling);
  return *rope_;
}

AttentionOptions mha_options(const MhaShape& s, const MhaCall& call) {
  AttentionOptions o = kernel_options(s.attention, {});
  o.pool = call.pool;
  o.alibi_slopes = call.alibi_slopes;
  if (call.mask) o.mask = *call.mask;
  if (!call.dropout) o.dropout_p = 0.0f;
  o.dropout_seed = call.dropout_seed;
  o.batch_offset = call.batch_offset;
  return o;
}

void mha_forward(const MhaShape& s, const MhaWeights& w, const float* x, float* y, MhaSaved& saved,
                 MhaWorkspace& ws, const MhaCall& call) {
  check(s, w);
  MhaSavedWriter::begin(saved, s);
  const int64_t rows = s.batch * s.tokens, C = s.d_out(), D = s.head_dim(), Q = s.qkv_width();
  const RopeLayout rope = s.attention.rope;
  if (rows > 0) {
    ws.reserve_forward(s);
    MhaSavedWriter::reserve(saved, s, /*float_heads=*/false);
    AttentionOptions options = mha_options(s, call);
    options.lse_low = const_cast<float*>(saved.lse_low());  // written here, read by the backward
    ThreadPool* pool = call.pool;
    ThreadPool& workers = pool ? *pool : default_pool();
    const bool bf16 = s.dtype() == Dtype::kBF16, reference = g_reference_attention;
    // bf16 mode rounds the heads as it splits them, unless they are normalised (QK-norm) or rotated
    // (RoPE) first or the reference attention (float32) reads them
    const bool split_to_bf16 = bf16 && rope == RopeLayout::kNone && !s.attention.qk_norm && !reference;
    float* heads = MhaSavedWriter::heads(saved);
    uint16_t* heads16 = MhaSavedWriter::heads16(saved);
    float* ctx_data = MhaSavedWriter::ctx(saved);
    float* lse = MhaSavedWriter::lse(saved);
    // qkv = x W_qkv^T + b_qkv                                    (B*T, Q), a chunk of rows at a time
    // heads = split(qkv): q (B, H, T, D), k, v (B, G, T, D), contiguous
    const int64_t chunk = qkv_chunk_rows(s);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t n = std::min(chunk, rows - r0);
      linear(x + r0 * s.d_in, n, s.d_in, w.w_qkv, w.b_qkv, Q, ws.qkv(), pool, s.dtype(), w.w_qkv16);
      if (split_to_bf16) split_heads(s, ws.qkv(), r0, n, heads16, workers);
      else split_heads(s, ws.qkv(), r0, n, heads, workers);
    }
    // q, k = norm(q), norm(k)                                    QK-norm, in place
    if (s.attention.qk_norm)
      qk_norm_forward(s, w, heads, MhaSavedWriter::qk_norm(saved), MhaSavedWriter::qk_inv_rms(saved), pool);
    // q, k = rope(q), rope(k)                                    in place, positions offset + t
    if (rope != RopeLayout::kNone) {
      const RopeTable table(s.tokens, s.attention.rotary_dim(), s.attention.rope_base, s.position_offset,
                            s.attention.rope_scaling);
      rope_rotate(MutableHeads::contiguous(heads, s.batch, s.heads(), s.tokens, D), table, rope, false, pool);
      rope_rotate(MutableHeads::contiguous(heads + split_part_of(s, s.heads()).region_offset, s.batch, s.groups(),
                                           s.tokens, D),
                  table, rope, false, pool);
    }
    if (bf16 && !split_to_bf16) {
      round_to_bf16(heads, heads16, rows * Q, workers);
      if (reference) bf16_to_floats(heads16, heads, static_cast<size_t>(rows * Q));  // the values bf16 keeps
    }
    // ctx[:, h*D:(h+1)*D] = attention(q_h, k_g(h), v_g(h))        (B*T, C)
    // (kept in `saved` even without an output projection: the backward needs it)
    const MutableHeads ctx = MutableHeads::interleaved(ctx_data, s.batch, s.heads(), s.tokens, D, C);
    if (reference) {
      attention_forward_reference(mha_queries(s, heads), mha_keys(s, heads), mha_values(s, heads), ctx, lse, options);
    } else if (bf16) {
      attention_forward_bf16(mha_queries(s, heads16), mha_keys(s, heads16), mha_values(s, heads16), ctx, lse, options);
    } else {
      attention_forward(mha_queries(s, heads), mha_keys(s, heads), mha_values(s, heads), ctx, lse, options);
    }
    // y = ctx W_out^T + b_out                                    (B*T, C_o)
    if (w.w_out) {
      linear(ctx_data, rows, C, w.w_out, w.b_out, s.out_width(), y, pool, s.dtype(), w.w_out16);
    } else {
      std::copy(ctx_data, ctx_data + rows * C, y);
    }
  }
  MhaSavedWriter::filled(saved);
}

namespace {
bool same_shape(const MhaShape& a, const MhaShape& b) {
  const AttentionSpec &x = a.attention, &y = b.attention;
  return a.batch == b.batch && a.tokens == b.tokens && a.d_in == b.d_in && a.position_offset == b.position_offset &&
         x.heads == y.heads && x.groups() == y.groups() && x.head_dim == y.head_dim && x.causal == y.causal &&
         x.window == y.window && x.rope == y.rope && x.rope_base == y.rope_base && x.rope_scaling == y.rope_scaling &&
         x.rope_dim == y.rope_dim && x.qk_norm == y.qk_norm && x.qk_norm_eps == y.qk_norm_eps &&
         a.out_dim == b.out_dim && x.softcap == y.softcap && x.dropout == y.dropout && x.dtype == y.dtype;
}
}  // namespace

namespace {
// Copies between a view's rows and contiguous (B, heads, T, D) rows; to_view: back into the view.
void gather_heads(const MutableHeads& view, float* rows, bool to_view) {
  const size_t bytes = static_cast<size_t>(view.dim) * sizeof(float);
  for (int64_t b = 0; b < view.batch; ++b)
    for (int64_t h = 0; h < view.heads; ++h)
      for (int64_t t = 0; t < view.tokens; ++t) {
        float* packed = rows + ((b * view.heads + h) * view.tokens + t) * view.dim;
        if (to_view) std::memcpy(view.row(b, h, t), packed, bytes);
        else std::memcpy(packed, view.row(b, h, t), bytes);
      }
}

void qk_norm_backward(const MhaShape& s, const MhaWeights& w, const MhaGradients& grads, const MhaSaved& saved,
                      const MutableHeads& dq, const MutableHeads& dk, float* rows) {
  const int64_t D = s.head_dim(), q_rows = s.batch * s.heads() * s.tokens, k_rows = s.batch * s.groups() * s.tokens;
  std::vector<float> dq_norm(static_cast<size_t>(D), 0.0f), dk_norm(static_cast<size_t>(D), 0.0f);
  gather_heads(dq, rows, false);
  gather_heads(dk, rows + q_rows * D, false);
  rms_norm_rows_backward(rows, saved.qk_norm(), saved.qk_inv_rms(), q_rows, D, w.q_norm, dq_norm.data(), rows);
  rms_norm_rows_backward(rows + q_rows * D, saved.qk_norm() + q_rows * D, saved.qk_inv_rms() + q_rows, k_rows, D,
                         w.k_norm, dk_norm.data(), rows + q_rows * D);
  gather_heads(dq, rows, true);
  gather_heads(dk, rows + q_rows * D, true);
  for (int64_t i = 0; i < D; ++i) {
    if (grads.dq_norm) grads.dq_norm[i] = (grads.accumulate ? grads.dq_norm[i] : 0.0f) + dq_norm[i];
    if (grads.dk_norm) grads.dk_norm[i] = (grads.accumulate ? grads.dk_norm[i] : 0.0f) + dk_norm[i];
  }
}
}  // namespace

void mha_backward(const MhaShape& s, const MhaWeights& w, const float* x, const float* dy, float* dx,
                  const MhaGradients& grads, const MhaSaved& saved, uint64_t forward_id, MhaWorkspace& ws,
                  const MhaCall& call) {
  check(s, w);
  QKV_CHECK(forward_id != 0 && saved.id() == forward_id, "mha_backward: the saved state is not the forward's ",
            "(it holds forward ", saved.id(), ", the gradients asked for are forward ", forward_id,
            "'s): another forward overwrote it, or it was never filled");
  QKV_CHECK(same_shape(saved.shape(), s), "mha_backward: the saved forward ran on another shape or spec");
  const int64_t rows = s.batch * s.tokens, C = s.d_out(), D = s.head_dim(), Q = s.qkv_width();
  if (rows == 0) {  // no token: every gradient is zero (written, unless added to)
    if (!grads.accumulate)
      for (const auto& [g, n] : {std::pair{grads.dw_qkv, Q * s.d_in}, {grads.db_qkv, Q}, {grads.dw_out, s.out_width() * C},
                                 {grads.db_out, s.out_width()}, {grads.dq_norm, D}, {grads.dk_norm, D}})
        if (g != nullptr) std::fill(g, g + n, 0.0f);
    return;
  }
  ws.reserve_backward(s);
  AttentionOptions options = mha_options(s, call);
  options.lse_low = const_cast<float*>(saved.lse_low());  // the forward's; only read here
  ThreadPool* pool = call.pool;
  // y = ctx W_out^T + b_out  ->  dW_out, db_out, dctx
  const float* dctx = dy;
  if (w.w_out) {
    linear_backward(saved.ctx(), dy, rows, C, w.w_out, s.out_width(), ws.dctx(), grads.dw_out, grads.db_out, pool,
                    grads.accumulate, s.dtype(), w.w_out16);
    dctx = ws.dctx();
  }
  // ctx = attention(q, k, v)  ->  dq, dk, dv, written into their columns of dqkv
  // (reading the split heads the forward made, after RoPE; dq, dk, dv are written once per row,
  // straight into their columns of dqkv: dq at 0, dk at C, dv at C + G D)
  const float* heads = saved.heads();
  const int64_t G = s.groups();
  const MutableHeads dq = MutableHeads::interleaved(ws.dqkv(), s.batch, s.heads(), s.tokens, D, Q);
  const MutableHeads dk = MutableHeads::interleaved(ws.dqkv() + C, s.batch, G, s.tokens, D, Q);
  const MutableHeads dv = MutableHeads::interleaved(ws.dqkv() + C + G * D, s.batch, G, s.tokens, D, Q);
  const ConstHeads ctx = ConstHeads::interleaved(saved.ctx(), s.batch, s.heads(), s.tokens, D, C);
  const ConstHeads d_ctx = ConstHeads::interleaved(dctx, s.batch, s.heads(), s.tokens, D, C);
  if (g_reference_attention) {  // on the float heads (in bf16 mode, the forward left the bf16 values there)
    attention_backward_reference(mha_queries(s, heads), mha_keys(s, heads), mha_values(s, heads), d_ctx, dq, dk, dv,
                                 options);
  } else if (s.dtype() == Dtype::kBF16) {
    const uint16_t* h16 = saved.heads16();
    attention_backward_bf16(mha_queries(s, h16), mha_keys(s, h16), mha_values(s, h16), ctx, d_ctx, saved.lse(), dq,
                            dk, dv, options);
  } else {
    attention_backward(mha_queries(s, heads), mha_keys(s, heads), mha_values(s, heads), ctx, d_ctx, saved.lse(), dq,
                       dk, dv, options);
  }
  // q, k = rope(q), rope(k)  ->  dq, dk = R^T dq, R^T dk (the rotation by -theta), in place
  const RopeLayout rope = s.attention.rope;
  if (rope != RopeLayout::kNone) {
    const RopeTable table(s.tokens, s.attention.rotary_dim(), s.attention.rope_base, s.position_offset,
                          s.attention.rope_scaling);
    rope_rotate(dq, table, rope, true, pool);
    rope_rotate(dk, table, rope, true, pool);
  }
  // q, k = norm(q), norm(k)  ->  dq, dk through RMSNorm's backward (gathered from dqkv's columns
  // into (B, H + G, T, D) rows and back); q_norm's and k_norm's gradients
  if (s.attention.qk_norm) qk_norm_backward(s, w, grads, saved, dq, dk, ws.dqk());
  // qkv = x W_qkv^T + b_qkv  ->  dW_qkv, db_qkv, dx
  linear_backward(x, ws.dqkv(), rows, s.d_in, w.w_qkv, Q, dx, grads.dw_qkv, grads.db_qkv, pool, grads.accumulate,
                  s.dtype(), w.w_qkv16);
}

void mha_forward_cached(const MhaShape& s, const MhaWeights& w, const float* x, float* y, KvCache& cache,
                        int64_t layer, MhaSaved& scratch, MhaWorkspace& ws, const MhaCall& call) {
  check(s, w);
  const int64_t B = s.batch, Tn = s.tokens, C = s.d_out(), D = s.head_dim(), G = s.groups(), Q = s.qkv_width();
  QKV_CHECK(cache.batch() == B && cache.kv_heads() == G && cache.head_dim() == D && cache.value_dim() == D,
            "mha_forward_cached: the cache holds (batch ", cache.batch(), ", kv_heads ", cache.kv_heads(),
            ", head_dim ", cache.head_dim(), ", value_dim ", cache.value_dim(), ") but the attention needs (batch ", B,
            ", kv_heads ", G, ", head_dim ", D, ", value_dim ", D, ")");
  QKV_CHECK(layer >= 0 && layer < cache.layers(), "mha_forward_cached: layer ", layer, " is outside the cache's ",
            cache.layers(), " layers");
  QKV_CHECK(!cache.appended(layer), "mha_forward_cached: layer ", layer,
            " already appended in the cache's step in progress (", cache.pending(),
            " positions; commit() the step before the next one)");
  QKV_CHECK(s.attention.causal && call.mask == nullptr, "mha_forward_cached: the attention must be causal");
  QKV_CHECK(!call.dropout, "mha_forward_cached: dropout is for training; a cached forward is inference");
  const int64_t P = cache.length();
  QKV_CHECK(P + Tn <= cache.capacity(), "mha_forward_cached: ", Tn, " new positions after ", P,
            " overflow the cache's capacity of ", cache.capacity());
  MhaSavedWriter::begin(scratch, s);  // scratch only: never a backward's state
  if (B * Tn == 0) return;
  ws.reserve_forward(s);
  MhaSavedWriter::reserve(scratch, s, /*float_heads=*/true);
  ThreadPool* pool = call.pool;
  // qkv = x W_qkv^T + b_qkv, heads = split(qkv): q (B, H, Tn, D), k, v (B, G, Tn, D)
  const int64_t rows = B * Tn, chunk = qkv_chunk_rows(s);
  float* heads = MhaSavedWriter::heads(scratch);
  float* ctx_data = MhaSavedWriter::ctx(scratch);
  float* lse = MhaSavedWriter::lse(scratch);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    linear(x + r0 * s.d_in, n, s.d_in, w.w_qkv, w.b_qkv, Q, ws.qkv(), pool, s.dtype(), w.w_qkv16, w.w_qkv_q);
    split_heads(s, ws.qkv(), r0, n, heads, pool ? *pool : default_pool());
  }
  const MutableHeads q = MutableHeads::contiguous(heads, B, s.heads(), Tn, D);
  const MutableHeads k = MutableHeads::contiguous(heads + split_part_of(s, s.heads()).region_offset, B, G, Tn, D);
  // q, k = norm(q), norm(k)                                    QK-norm, in place
  if (s.attention.qk_norm) qk_norm_forward(s, w, heads, nullptr, nullptr, pool);
  // q, k = rope(q), rope(k)                                    at positions P + t
  const RopeLayout rope = s.attention.rope;
  if (rope != RopeLayout::kNone) {
    const RopeTable& table = ws.rope_table(Tn, s.attention.rotary_dim(), s.attention.rope_base, P,
                                           s.attention.rope_scaling);
    rope_rotate(q, table, rope, false, pool);
    rope_rotate(k, table, rope, false, pool);
  }
  // cache.append(layer, k, v): the layer sees P + Tn positions
  cache.append(layer, mha_keys(s, heads), mha_values(s, heads));
  // ctx[:, h*D:(h+1)*D] = attention(q_h, cache k_g(h), cache v_g(h)), query i at position P + i
  AttentionOptions o = mha_options(s, call);
  o.query_offset = P;
  const MutableHeads ctx = MutableHeads::interleaved(ctx_data, B, s.heads(), Tn, D, C);
  auto flash = [&](ConstHeads qv, ConstHeads keys, ConstHeads values, MutableHeads out, float* lse_out,
                   const AttentionOptions& opts) {
    if (g_reference_attention) {
      attention_forward_reference(qv, keys, values, out, lse_out, opts);
    } else {
      attention_forward(qv, keys, values, out, lse_out, opts);
    }
  };
  if (Tn < 64) {
    decode_attention(q, cache, layer, ctx, lse, o, &ws.decode());
  } else if (cache.dtype() == CacheDtype::kF32) {
    // a prefill: the flash kernel over the cache's fp32 view of its P + Tn positions
    flash(q, cache.keys(layer), cache.values(layer), ctx, lse, o);
  } else if (P == 0) {
    // a bf16 cache's first prefill: the flash kernel over this step's own keys and values, rounded
    // as the cache holds them (its positions are exactly these; the decode kernel would read them
    // so, widened exactly). k then v: (B, G, Tn, D) each, one after the other
    float* kv = heads + split_part_of(s, s.heads()).region_offset;
    const int64_t n = 2 * B * G * Tn * D;
    uint16_t bits[4096];
    for (int64_t i = 0; i < n; i += 4096) {
      const auto m = static_cast<size_t>(std::min<int64_t>(4096, n - i));
      floats_to_bf16(kv + i, bits, m);
      bf16_to_floats(bits, kv + i, m);
    }
    flash(q, ConstHeads::contiguous(kv, B, G, Tn, D), ConstHeads::contiguous(kv + B * G * Tn * D, B, G, Tn, D), ctx,
          lse, o);
  } else {
    // a later prefill on a bf16 cache (a chat's next turn): one key/value head at a time, its P + Tn
    // cached positions widened to fp32 (exactly) into scratch kept per thread (one head's, not the
    // layer's: 2 (P + Tn) D floats a sequence), and the flash kernel for that head's query heads
    const int64_t N = P + Tn, per = s.heads() / G;
    thread_local std::vector<float> widened;
    if (widened.size() < static_cast<size_t>(2 * B * N * D)) widened.resize(static_cast<size_t>(2 * B * N * D));
    float* wk = widened.data();
    float* wv = wk + B * N * D;
    // (B, per, Tn) lse rows of one group: with B = 1 they are the (B, H, Tn) scratch's own rows
    std::vector<float> lse_rows(B > 1 ? static_cast<size_t>(B * per * Tn) : 0);
    for (int64_t g = 0; g < G; ++g) {
      cache.copy_keys(layer, MutableHeads::contiguous(wk, B, 1, N, D), g);
      cache.copy_values(layer, MutableHeads::contiguous(wv, B, 1, N, D), g);
      // query heads [g per, (g + 1) per) of every sequence; their lse lands in lse's own rows
      ConstHeads qg = q;
      qg.data += g * per * q.stride_h;
      qg.heads = per;
      MutableHeads cg = ctx;
      cg.data += g * per * ctx.stride_h;
      cg.heads = per;
      AttentionOptions og = o;
      og.head_offset += g * per;
      float* lse_g = B > 1 ? lse_rows.data() : lse + g * per * Tn;
      flash(qg, ConstHeads::contiguous(wk, B, 1, N, D), ConstHeads::contiguous(wv, B, 1, N, D), cg, lse_g, og);
    }
  }
  // y = ctx W_out^T + b_out                                    (B*Tn, C_o)
  if (w.w_out) {
    linear(ctx_data, rows, C, w.w_out, w.b_out, s.out_width(), y, pool, s.dtype(), w.w_out16, w.w_out_q);
  } else {
    std::copy(ctx_data, ctx_data + rows * C, y);
  }
}

double mha_forward_flops(const MhaShape& s, bool has_out_proj) {
  const int64_t rows = s.batch * s.tokens, C = s.d_out(), D = s.head_dim();
  double f = gemm_flops(rows, s.qkv_width(), s.d_in) + attention_forward_flops(s.batch, s.heads(), s.tokens, s.tokens,
                                                                               D, D, s.attention.causal, 0,
                                                                               s.attention.window);
  if (has_out_proj) f += gemm_flops(rows, s.out_width(), C);
  return f;
}

double mha_backward_flops(const MhaShape& s, bool has_out_proj) {
  const int64_t rows = s.batch * s.tokens, C = s.d_out(), D = s.head_dim();
  double f = 2.0 * gemm_flops(rows, s.qkv_width(), s.d_in) +
             attention_backward_flops(s.batch, s.heads(), s.tokens, s.tokens, D, D, s.attention.causal, 0,
                                      s.attention.window);
  if (has_out_proj) f += 2.0 * gemm_flops(rows, s.out_width(), C);
  return f;
}

}  // namespace qkv::kernels
