// The gated delta rule in chunks, float32 products. See include/qkv/modules/delta_rule_chunked.h.
#include "qkv/modules/delta_rule_chunked.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"
#include "qkv/kernels/delta_chunk.h"
#include "qkv/kernels/small_gemm.h"

namespace qkv {

namespace {

constexpr int64_t kC = kDeltaRuleChunk;
// What a chunk's own matrices add to their row strides: rows of 128 or 256 floats fall in the same
// few sets of L1, and a product reading B's rows in place (kernels/small_gemm.h) then misses on
// them; 16 more floats spread them (on a Zen 3, one thread, 64 x 128 x 128: 73-80% of the FMA peak
// with rows of 128, 88-97% with 144).
constexpr int64_t kPad = 16;

// One (b, h)'s rows: row t of q at q + t * ldk (ldk = H Dk), of v and y at t * ldv (ldv = H Dv), of
// beta and log alpha at t * H.
struct HeadRows {
  const float *q, *k, *v, *beta, *log_alpha;
  int64_t ldk, ldv, H;
  HeadRows from(int64_t t0) const {  // the rows from token t0 on
    return {q + t0 * ldk, k + t0 * ldk, v + t0 * ldv, beta + t0 * H, log_alpha + t0 * H, ldk, ldv, H};
  }
};

HeadRows head_rows(const DeltaRuleShape& s, const DeltaRuleLogInputs& in, int64_t b, int64_t h) {
  const int64_t H = s.heads, first = b * s.tokens * H + h;
  return {in.q + first * s.key_dim, in.k + first * s.key_dim, in.v + first * s.value_dim, in.beta + first,
          in.log_alpha + first, H * s.key_dim, H * s.value_dim, H};
}

// C (M, N) = alpha op(A) op(B) + beta C, on this thread (each task one head's chunk): a chunk's
// products are small and in cache, and run unpacked (kernels/small_gemm.h); op(B) = B^T is first
// copied transposed (kernels::transpose), in a padded scratch.
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (tb) {  // B (N, K) -> B^T (K, N)
    thread_local std::vector<float> bt;
    const int64_t ld = N + kPad;
    if (static_cast<int64_t>(bt.size()) < K * ld) bt.resize(static_cast<size_t>(K * ld));
    kernels::transpose(N, K, B, ldb, bt.data(), ld);
    B = bt.data();
    ldb = ld;
  }
  kernels::small_gemm(ta, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The order a chunk's BH head tasks are handed out in, for P threads: the heads in P runs of
// ceil(BH / P), one from each run in turn, so that the tasks running at once are heads far apart.
// Claimed in order (0, 1, 2, ...), two threads always ran neighbouring heads, whose rows of y and of
// the gradients meet in a shared cache line wherever a tensor is not 64-byte aligned (a std::vector's
// 16): that line then went back and forth between the cores.
std::vector<int64_t> task_order(int64_t BH, int64_t P) {
  const int64_t run = (BH + P - 1) / P;
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(BH));
  for (int64_t j = 0; j < run; ++j)
    for (int64_t p = 0; p < P; ++p)
      if (p * run + j < BH) order.push_back(p * run + j);
  return order;
}

// Y (C, N) = L X + beta Y for L (C, C, row stride kC) lower-triangular, or L^T X with `transposed`:
// in blocks of kTriangleRows rows, each multiplying only the columns of L (or L^T) it has (at C = 64:
// 62% of the whole product's work; halves did 75%).
constexpr int64_t kTriangleRows = 16;
void triangular_product(bool transposed, int64_t C, int64_t N, const float* L, const float* X, int64_t ldx, float beta,
                        float* Y, int64_t ldy) {
  for (int64_t r0 = 0; r0 < C; r0 += kTriangleRows) {
    const int64_t rows = std::min(kTriangleRows, C - r0);
    if (!transposed)  // L's rows [r0, r0 + rows) have nothing past column r0 + rows
      product(false, false, rows, N, r0 + rows, 1.0f, L + r0 * kC, kC, X, ldx, beta, Y + r0 * ldy, ldy);
    else  // L^T's rows [r0, r0 + rows) have nothing before column r0
      product(true, false, rows, N, C - r0, 1.0f, L + r0 * kC + r0, kC, X + r0 * ldx, ldx, beta, Y + r0 * ldy, ldy);
  }
}

// A chunk's decays from its C log alphas: g (C, double), gamma = e^g, tail_r = e^{g_{C-1} - g_r}, and
// E (C, C, row stride kC) = e^{g_t - g_r} on and below the diagonal, 0 above. When the chunk's whole
// decay is at most e^-80, E = (e^{g_t - g_0}) (e^{g_0 - g_r}), two exps per token instead of one per
// pair, neither factor leaving float's range; else one exp per pair (0 once below float's range).
struct Decays {
  double g[kC];
  float gamma[kC], tail[kC], E[kC * kC];
  void compute(const float* log_alpha, int64_t H, int64_t C) {
    double sum = 0;
    for (int64_t t = 0; t < C; ++t) g[t] = sum += log_alpha[t * H];
    for (int64_t t = 0; t < C; ++t) {
      gamma[t] = static_cast<float>(std::exp(g[t]));
      tail[t] = std::exp(static_cast<float>(g[C - 1] - g[t]));
    }
    if (g[0] - g[C - 1] <= 80.0) {
      float lead[kC], back[kC];
      for (int64_t t = 0; t < C; ++t) {
        lead[t] = std::exp(static_cast<float>(g[t] - g[0]));
        back[t] = std::exp(static_cast<float>(g[0] - g[t]));
      }
      kernels::decay_matrix(C, lead, back, E, kC);
      return;
    }
    for (int64_t t = 0; t < C; ++t) {
      float* row = E + t * kC;
      std::fill(row, row + C, 0.0f);
      for (int64_t r = t; r >= 0 && g[t] - g[r] > -104.0; --r) row[r] = std::exp(static_cast<float>(g[t] - g[r]));
    }
  }
};

// What one chunk's forward computes before its state is needed, and its update U.
struct ChunkWork {
  Decays d;
  // K K^T and Q K^T on and below the diagonal (0 above), A, P = lower(Q K^T o E) and (I + A)^-1,
  // (C, C) each
  float kk[kC * kC], a[kC * kC], qk[kC * kC], tm[kC * kC];
  // kq: the chunk's [K; Q] rows (2C, Dk); x: [diag(beta) V | diag(beta gamma) K] (C, Dv + Dk);
  // uw: [U0 -> U | W] (C, Dv + Dk), U in its first Dv columns; x's and uw's rows padded to ldu;
  // kt: diag(tail) K (C, Dk), rows at ldt (read down its columns: padded, as kT); kT: K^T (Dk, C),
  // rows at kC + kPad
  int64_t ldu, ldt;
  std::vector<float> kq, x, uw, kt, kT;
  ChunkWork(int64_t Dk, int64_t Dv)
      : ldu(Dv + Dk + kPad), ldt(Dk + kPad), kq(2 * kC * Dk), x(kC * ldu), uw(x.size()), kt(kC * ldt),
        kT(Dk * (kC + kPad)) {}

  // Everything of the chunk's C rows up to U = U0 - W S_0 (S: Dk x Dv, rows at lds).
  void run(const HeadRows& r, int64_t C, int64_t Dk, int64_t Dv, const float* S, int64_t lds) {
    d.compute(r.log_alpha, r.H, C);
    // v's rows are read after the inverse: asked for now, as k's and q's are read (each row's lines
    // H Dv floats from the last row's: the hardware's prefetchers do not follow)
    for (int64_t t = 0; t < C; ++t) {
      for (int64_t j = 0; j < Dv; j += 16) __builtin_prefetch(r.v + t * r.ldv + j);
      std::copy_n(r.k + t * r.ldk, Dk, &kq[t * Dk]);
      std::copy_n(r.q + t * r.ldk, Dk, &kq[(C + t) * Dk]);
    }
    // K K^T and Q K^T by blocks of rows, each as far as its last row's diagonal, against K^T
    const int64_t ldT = kC + kPad;
    kernels::transpose(C, Dk, kq.data(), Dk, kT.data(), ldT);
    for (int64_t r0 = 0; r0 < C; r0 += kTriangleRows) {
      const int64_t rows = std::min(kTriangleRows, C - r0), cols = r0 + rows;
      product(false, false, rows, cols, Dk, 1.0f, &kq[r0 * Dk], Dk, kT.data(), ldT, 0.0f, kk + r0 * kC, kC);
      product(false, false, rows, cols, Dk, 1.0f, &kq[(C + r0) * Dk], Dk, kT.data(), ldT, 0.0f, qk + r0 * kC, kC);
    }
    // kk = lower(K K^T), A = strict_lower(diag(beta) K K^T o E), P = lower(Q K^T o E); (I + A)^-1
    kernels::chunk_triangles(C, r.beta, r.H, d.E, kk, a, qk, kC);
    kernels::unit_lower_inverse(C, a, tm, kC);
    // [U0 | W] = (I + A)^-1 [diag(beta) V | diag(beta gamma) K]
    const int64_t n = Dv + Dk, ld = ldu;
    for (int64_t t = 0; t < C; ++t) {
      const float beta = r.beta[t * r.H], bg = beta * d.gamma[t];
      for (int64_t j = 0; j < Dv; ++j) x[t * ld + j] = beta * r.v[t * r.ldv + j];
      for (int64_t i = 0; i < Dk; ++i) x[t * ld + Dv + i] = bg * kq[t * Dk + i];
    }
    triangular_product(false, C, n, tm, x.data(), ld, 0.0f, uw.data(), ld);
    product(false, false, C, Dv, Dk, -1.0f, uw.data() + Dv, ld, S, lds, 1.0f, uw.data(), ldu);  // U = U0 - W S_0
    for (int64_t t = 0; t < C; ++t)
      for (int64_t i = 0; i < Dk; ++i) kt[t * ldt + i] = d.tail[t] * kq[t * Dk + i];
  }
};

}  // namespace

void delta_rule_chunked_forward(const DeltaRuleShape& s, const DeltaRuleLogInputs& in, float* y, float* state,
                                std::vector<float>* chunk_states, ThreadPool* pool) {
  QKV_CHECK(!s.beta_per_channel, "delta_rule_chunked_forward: beta per head only (this shape has beta per channel)");
  if (!pool) pool = &default_pool();
  const int64_t T = s.tokens, H = s.heads, Dk = s.key_dim, Dv = s.value_dim, KV = Dk * Dv, n = delta_rule_chunks(T);
  const int64_t BH = s.batch * H;
  // every chunk's state is written below: resized, not filled (64 MiB at T 4,096 and 16 heads of 128,
  // a training step's memset otherwise)
  if (chunk_states) chunk_states->resize(static_cast<size_t>(BH * n * KV));
  // Every head's state, its rows padded to lds (and a chunk's y computed in a worker's yw, rows at
  // lds, then copied out)
  const int64_t lds = Dv + kPad;
  std::vector<float> states(static_cast<size_t>(BH * Dk * lds), 0.0f);
  auto rows_of_state = [&](int64_t bh, float* to, bool out) {  // head bh's S <-> Dk x Dv contiguous
    float* S = &states[static_cast<size_t>(bh * Dk * lds)];
    for (int64_t i = 0; i < Dk; ++i)
      if (out) std::copy_n(S + i * lds, Dv, to + i * Dv);
      else std::copy_n(to + i * Dv, Dv, S + i * lds);
  };
  auto decoding_state = [&](int64_t bh, bool out) {  // head bh's S <-> the caller's column blocks
    float* S = &states[static_cast<size_t>(bh * Dk * lds)];
    float* to = state + bh * KV;
    for (int64_t i = 0; i < Dk; ++i)
      for (int64_t j = 0; j < Dv; ++j) {
        float& blocked = to[delta_state_index(Dk, Dv, i, j)];
        if (out) blocked = S[i * lds + j];
        else S[i * lds + j] = blocked;
      }
  };
  if (state)
    for (int64_t bh = 0; bh < BH; ++bh) decoding_state(bh, false);
  struct Worker {
    ChunkWork work;
    std::vector<float> yw;
  };
  std::vector<Worker> workers;
  for (int i = 0; i < pool->num_threads(); ++i)
    workers.push_back({ChunkWork(Dk, Dv), std::vector<float>(static_cast<size_t>(kC * lds))});
  const std::vector<int64_t> order = task_order(BH, pool->num_threads());
  // Chunk by chunk, every head of a chunk in parallel: a chunk's rows of q, k, v and y for all heads
  // are contiguous (B, T, H, D), so each worker streams through its heads' share of each row
  // instead of reading one head's row at H D floats from the next (a cache miss per row: on a
  // Zen 3 a fifth of the forward's time when each head ran all its chunks in turn).
  for (int64_t c = 0; c < n; ++c) {
    const int64_t t0 = c * kC, C = std::min(kC, T - t0);
    pool->parallel_for(BH, [&](int64_t task, int worker) {
      const int64_t bh = order[static_cast<size_t>(task)];
      ChunkWork& work = workers[static_cast<size_t>(worker)].work;
      float* yw = workers[static_cast<size_t>(worker)].yw.data();
      const int64_t b = bh / H, h = bh % H;
      float* S = &states[static_cast<size_t>(bh * Dk * lds)];
      if (chunk_states) rows_of_state(bh, chunk_states->data() + (bh * n + c) * KV, true);
      const HeadRows r = head_rows(s, in, b, h).from(t0);
      work.run(r, C, Dk, Dv, S, lds);
      // Y = diag(gamma) Q S_0 + P U
      product(false, false, C, Dv, Dk, 1.0f, work.kq.data() + C * Dk, Dk, S, lds, 0.0f, yw, lds);
      for (int64_t t = 0; t < C; ++t)
        for (int64_t j = 0; j < Dv; ++j) yw[t * lds + j] *= work.d.gamma[t];
      triangular_product(false, C, Dv, work.qk, work.uw.data(), work.ldu, 1.0f, yw, lds);
      float* yc = y + ((b * T + t0) * H + h) * Dv;
      for (int64_t t = 0; t < C; ++t) std::copy_n(yw + t * lds, Dv, yc + t * r.ldv);
      // S_C = gamma_{C-1} S_0 + (diag(tail) K)^T U
      product(true, false, Dk, Dv, C, 1.0f, work.kt.data(), work.ldt, work.uw.data(), work.ldu, work.d.gamma[C - 1], S,
              lds);
    });
  }
  if (state)
    for (int64_t bh = 0; bh < BH; ++bh) decoding_state(bh, true);
}

void delta_rule_chunked_backward(const DeltaRuleShape& s, const DeltaRuleLogInputs& in,
                                 const std::vector<float>& chunk_states, const float* dy, const DeltaRuleLogGrads& grad,
                                 ThreadPool* pool) {
  QKV_CHECK(!s.beta_per_channel, "delta_rule_chunked_backward: beta per head only (this shape has beta per channel)");
  if (!pool) pool = &default_pool();
  const int64_t T = s.tokens, H = s.heads, Dk = s.key_dim, Dv = s.value_dim, KV = Dk * Dv, n = delta_rule_chunks(T);
  QKV_CHECK(static_cast<int64_t>(chunk_states.size()) == s.batch * H * n * KV, "delta_rule_chunked_backward: ",
            chunk_states.size(), " chunk-state numbers; expected batch x heads x chunks x Dk x Dv = ",
            s.batch * H * n * KV);
  const int64_t BH = s.batch * H;
  // dS = dL/dS_C of each head, carried from chunk to chunk backwards. Chunk by chunk (the last
  // first), every head of a chunk in parallel, as the forward runs (its rows streamed). Per chunk,
  // stacked where two products share an operand: dU (C, Dv); RY = [dR; dY] (2C, Dv); G =
  // [-diag(beta gamma) dR; diag(gamma) dY] (2C, Dv); Z = [dR S_0^T; dQ; dK] (3C, Dk); U dS^T (C, Dk);
  // AP = [-dA; dP] = RY U^T (2C, C); dQK and dKK + dKK^T (C, C) stacked as (2C, C): a worker's.
  // dS, dS_0 and G have padded rows (at lds): the products read them down their columns (as B), where
  // rows of 128 floats would fall in the same few sets of L1
  const int64_t lds = Dv + kPad, KVp = Dk * lds;
  std::vector<std::vector<float>> dSs(static_cast<size_t>(BH), std::vector<float>(static_cast<size_t>(KVp), 0.0f));
  struct Worker {
    ChunkWork work;
    std::vector<float> dS0, dU, RY, G, Z, dKt, AP, QS;
  };
  std::vector<Worker> workers;
  const auto zeros = [](int64_t count) { return std::vector<float>(static_cast<size_t>(count)); };
  for (int i = 0; i < pool->num_threads(); ++i)
    workers.push_back({ChunkWork(Dk, Dv), zeros(KVp), zeros(kC * Dv), zeros(2 * kC * Dv), zeros(2 * kC * lds),
                       zeros(3 * kC * Dk), zeros(kC * Dk), zeros(2 * kC * kC), zeros(2 * kC * kC)});
  const std::vector<int64_t> order = task_order(BH, pool->num_threads());
  // beta's and log alpha's gradients, (B H, T): a head's own rows, scattered into (B, T, H) at the
  // end (written in place, every head's value of a token shares one cache line across the threads)
  std::vector<float> dbeta(static_cast<size_t>(BH * T)), dlog_alpha(dbeta.size());
  for (int64_t c = n - 1; c >= 0; --c) {
    const int64_t t0 = c * kC, C = std::min(kC, T - t0);
    pool->parallel_for(BH, [&](int64_t task, int worker) {
      const int64_t bh = order[static_cast<size_t>(task)];
      Worker& wk = workers[static_cast<size_t>(worker)];
      ChunkWork& work = wk.work;
      std::vector<float>& dS = dSs[static_cast<size_t>(bh)];
      std::vector<float>&dS0 = wk.dS0, &dU = wk.dU, &RY = wk.RY, &G = wk.G, &Z = wk.Z, &dKt = wk.dKt;
      std::vector<float>&AP = wk.AP, &QS = wk.QS;
      double dg[kC], dgamma[kC], dtail[kC];
      const int64_t b = bh / H, h = bh % H;
      const float* S0 = &chunk_states[(bh * n + c) * KV];
      const HeadRows r = head_rows(s, in, b, h).from(t0);
      work.run(r, C, Dk, Dv, S0, Dv);
      const Decays& d = work.d;
      const float* U = work.uw.data();
      const int64_t ldu = work.ldu;
      const int64_t first = (b * T + t0) * H + h;  // the chunk's first row (b, t0, h)
      const float* dyc = dy + first * Dv;
      float *dR = RY.data(), *M0 = Z.data(), *dQ = M0 + C * Dk, *dK = dQ + C * Dk, *dA = AP.data();
      float *dP = dA + C * kC, *dQK = QS.data(), *sym = dQK + C * kC;
      for (int64_t t = 0; t < C; ++t) std::copy_n(dyc + t * r.ldv, Dv, &RY[(C + t) * Dv]);
      // U's gradient: from Y = ... + P U and S_C = ... + (diag(tail) K)^T U; then R's, (I + A) U = R
      triangular_product(true, C, Dv, work.qk, &RY[C * Dv], Dv, 0.0f, dU.data(), Dv);
      product(false, false, C, Dv, Dk, 1.0f, work.kt.data(), work.ldt, dS.data(), lds, 1.0f, dU.data(), Dv);
      triangular_product(true, C, Dv, work.tm, dU.data(), Dv, 0.0f, dR, Dv);
      product(false, true, 2 * C, C, Dv, 1.0f, RY.data(), Dv, U, ldu, 0.0f, AP.data(), kC);  // [dR; dY] U^T
      product(false, true, 2 * C, Dk, Dv, 1.0f, RY.data(), Dv, S0, Dv, 0.0f, Z.data(), Dk);  // [dR; dY] S_0^T
      product(false, true, C, Dk, Dv, 1.0f, U, ldu, dS.data(), lds, 0.0f, dKt.data(), Dk);    // U dS^T
      // R = diag(beta) (V - diag(gamma) K S_0) and Y's diag(gamma) Q S_0, row by row; A's, P's and E's
      // gradients; dKK made symmetric (kernels/delta_chunk.h)
      kernels::delta_chunk_rows({.C = C, .Dk = Dk, .Dv = Dv, .ld = kC, .beta = r.beta, .beta_stride = H,
                                 .gamma = d.gamma, .tail = d.tail, .k = work.kq.data(), .q = work.kq.data() + C * Dk,
                                 .m0 = M0, .dkt = dKt.data(), .dq = dQ, .dk = dK, .v = r.v, .dr = dR,
                                 .dy = &RY[C * Dv], .ldv = r.ldv, .dv = grad.v + first * Dv, .lddv = H * Dv,
                                 .G = G.data(), .ldg = lds, .dA = dA, .dP = dP, .E = d.E, .kk = work.kk, .a = work.a,
                                 .p = work.qk, .sym = sym, .dQK = dQK, .dgamma = dgamma, .dtail = dtail, .dg = dg,
                                 .dbeta = &dbeta[static_cast<size_t>(bh * T + t0)]});
      // [dQ; dK] += [dQK; dKK + dKK^T] K, dK += dQK^T Q
      const float *kc = work.kq.data(), *qc = kc + C * Dk;
      product(false, false, 2 * C, Dk, C, 1.0f, dQK, kC, kc, Dk, 1.0f, dQ, Dk);
      product(true, false, C, Dk, C, 1.0f, dQK, kC, qc, Dk, 1.0f, dK, Dk);
      // dS_0 = gamma_{C-1} dS + Q^T diag(gamma) dY - K^T diag(beta gamma) dR
      double last = 0;
      for (int64_t i = 0; i < Dk; ++i) last += kernels::lane_dot16(&dS[i * lds], S0 + i * Dv, Dv);
      for (int64_t i = 0; i < KVp; ++i) dS0[i] = d.gamma[C - 1] * dS[i];
      product(true, false, Dk, Dv, 2 * C, 1.0f, kc, Dk, G.data(), lds, 1.0f, dS0.data(), lds);  // [K; Q]^T G
      std::swap(dS, dS0);
      // g's gradient: gamma_t = e^{g_t}, tail_t = e^{g_{C-1} - g_t}, gamma_{C-1} in S_C; then log alpha's
      for (int64_t t = 0; t < C; ++t) {
        dg[t] += dgamma[t] * d.gamma[t];
        if (t == C - 1) continue;  // tail_{C-1} = e^0
        dg[t] -= dtail[t] * d.tail[t];
        dg[C - 1] += dtail[t] * d.tail[t];
      }
      dg[C - 1] += last * d.gamma[C - 1];
      double suffix = 0;
      for (int64_t t = C - 1; t >= 0; --t) {
        suffix += dg[t];
        dlog_alpha[static_cast<size_t>(bh * T + t0 + t)] = static_cast<float>(suffix);
        std::copy_n(&dQ[t * Dk], Dk, grad.q + (first + t * H) * Dk);
        std::copy_n(&dK[t * Dk], Dk, grad.k + (first + t * H) * Dk);
      }
    });
  }
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t at = ((bh / H) * T + t) * H + bh % H;  // (b, t, h)
      grad.beta[at] = dbeta[static_cast<size_t>(bh * T + t)];
      grad.log_alpha[at] = dlog_alpha[static_cast<size_t>(bh * T + t)];
    }
}

double delta_rule_chunked_flops(const DeltaRuleShape& s, bool backward) {
  // per chunk of C tokens: C^2 Dk each for K K^T (strict lower) and Q K^T (lower); C^2 (Dk + Dv)
  // for the inverse's products; C^2 Dv for P U; 2 C Dk Dv each for W S_0, Q S_0 and the state.
  // The backward: the forward's products but Q S_0 and the state's, then 13 more (see below).
  const double Dk = static_cast<double>(s.key_dim), Dv = static_cast<double>(s.value_dim);
  double total = 0;
  for (int64_t t0 = 0; t0 < s.tokens; t0 += kC) {
    const double C = static_cast<double>(std::min(kC, s.tokens - t0));
    const double sq = C * C, cube = 2 * C * Dk * Dv;
    const double forward = sq * Dk * 2 + sq * (Dk + Dv) + sq * Dv + 3 * cube;
    // backward: the recomputation (forward less Q S_0, P U and the state's product) and dU (P^T dY
    // and diag(tail) K dS), dR, dA, dR S_0^T, dS_0's two, dY S_0^T, dP, dQK K, dQK^T Q, sym K, U dS^T
    const double again = sq * Dk * 2 + sq * (Dk + Dv) + cube;
    const double grads = sq * Dv + cube + sq * Dv + sq * Dv + cube + 2 * cube + cube + sq * Dv + 2 * sq * Dk +
                         2 * sq * Dk + cube;
    total += backward ? again + grads : forward;
  }
  return total * static_cast<double>(s.batch * s.heads);
}

}  // namespace qkv
