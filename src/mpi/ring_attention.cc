// Ring attention, forward and backward (qkv/mpi/ring_attention.h): key/value blocks travel round
// the ring while the fused kernel works on the block in hand; partial results merge by the
// log-sum-exp rule; in the backward the blocks' dk, dv accumulators travel behind them to their
// owners.
//
// Legend: B batch, H query heads, G key/value heads, Tr this rank's tokens, Tx the tokens of the
// block's owner x, Hp and Gp the heads of the group in flight, D, Dv head dims.
#include "qkv/mpi/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "mpi/ring_step.h"

namespace qkv::mpi {
namespace {

using kernels::AttentionOptions;
using kernels::ConstHeads;
using kernels::MutableHeads;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int kTagBlock = 11, kTagGrads = 12;  // k/v blocks; dk/dv accumulators

// Heads [h0, h0 + n) of x.
template <typename F>
kernels::Heads<F> heads_of(kernels::Heads<F> x, int64_t h0, int64_t n) {
  x.data += h0 * x.stride_h;
  x.heads = n;
  return x;
}
// Tokens [t0, t0 + n) of x.
template <typename F>
kernels::Heads<F> tokens_of(kernels::Heads<F> x, int64_t t0, int64_t n) {
  x.data += t0 * x.stride_n;
  x.tokens = n;
  return x;
}

// What a call computes on, checked alike on every rank (check_agreement).
struct Ring {
  Ring(const Communicator& c, SequenceSplit s) : comm(c), split(s) {}
  const Communicator& comm;
  SequenceSplit split;
  int64_t B = 0, H = 0, G = 0, D = 0, Dv = 0, Tr = 0, Tmax = 0;
  int64_t group = 1;  // key/value heads per group in flight
  int steps = 1;      // ring steps with work for some rank (N, or fewer when a window hides the rest)
  AttentionOptions attention;
  std::vector<Run> mine;  // this rank's runs

  int64_t tokens(int x) const { return split.tokens(x); }
  // Run starts of rank x within its concatenated tokens.
  std::vector<int64_t> starts(int x) const {
    std::vector<int64_t> s;
    int64_t at = 0;
    for (const Run& r : split.runs(x)) {
      s.push_back(at);
      at += r.length;
    }
    return s;
  }
  // Whether the causal mask or the window hides every key of run kr from every query of run qr:
  // causal, the first key after the last query; window w, the last key at or before the first
  // query's position - w.
  bool hidden(const Run& qr, const Run& kr) const {
    if (qr.length == 0 || kr.length == 0) return true;
    const int64_t last_q = qr.begin + qr.length - 1, last_k = kr.begin + kr.length - 1;
    if (attention.mask.kind == kernels::MaskKind::kCausal && kr.begin > last_q) return true;
    return attention.window > 0 && last_k <= qr.begin - attention.window;
  }
  // Whether some query of rank a sees some key of rank x.
  bool sees(int a, int x) const {
    for (const Run& qr : split.runs(a))
      for (const Run& kr : split.runs(x))
        if (!hidden(qr, kr)) return true;
    return false;
  }
  // The kernel's options for queries of run qr against keys of run kr, heads from h0: global
  // positions and the head offset, so masks, ALiBi's distances and dropout keys are the
  // single-process kernel's; the slopes from head h0 on, as the kernel reads slope h for its head h.
  AttentionOptions pair_options(const Run& qr, const Run& kr, int64_t h0) const {
    AttentionOptions opt = attention;
    opt.query_offset = qr.begin;
    opt.key_offset = kr.begin;
    opt.head_offset = h0;
    if (attention.alibi_slopes) opt.alibi_slopes = attention.alibi_slopes + h0;
    return opt;
  }
};

// 1 + the last step at which some rank sees the block in hand (rank a holds rank a - s's block at
// step s): past it every pair is hidden, so the blocks need not go on. Under a causal mask or none
// that is N; with a window and the contiguous split it is about 1 + w / (T / N).
int ring_steps(const Ring& r) {
  const int N = r.comm.size();
  int steps = 1;
  for (int s = 1; s < N; ++s)
    for (int a = 0; a < N; ++a)
      if (r.sees(a, (a - s + N) % N)) steps = s + 1;
  return steps;
}

std::string describe_options(const RingAttentionOptions& o, int64_t B, int64_t H, int64_t G, int64_t D, int64_t Dv,
                             int ranks) {
  std::ostringstream s;
  s << "B=" << B << " H=" << H << " G=" << G << " D=" << D << " Dv=" << Dv << " T=" << o.seq_len
    << " split=" << split_name(o.split) << " ranks=" << ranks
    << " mask=" << (o.attention.mask.kind == kernels::MaskKind::kCausal ? "causal" : "none") << " scale="
    << std::hexfloat << o.attention.scale << std::defaultfloat << " dropout=" << o.attention.dropout_p
    << " seed=" << o.attention.dropout_seed << " window=" << o.attention.window << " softcap=" << std::hexfloat
    << o.attention.softcap << std::defaultfloat << " alibi=";
  if (o.attention.alibi_slopes && H > 0) {  // the H slopes' bits, by their digest (a list would drown the message)
    const std::string bits(reinterpret_cast<const char*>(o.attention.alibi_slopes), static_cast<size_t>(H) * sizeof(float));
    s << H << " slopes #" << std::hex << digest(bits) << std::dec;
  } else {
    s << "none";
  }
  s << " block_bytes=" << o.max_block_bytes;
  return s.str();
}

// The options a ring can run, or what is wrong with them ("" if nothing). H: the query heads (the
// ALiBi slopes' count). The variants' checks are the fused kernel's, in its words.
std::string options_problem(const RingAttentionOptions& o, int64_t H) {
  const AttentionOptions& a = o.attention;
  if (o.seq_len < 0) return str("the sequence length (", o.seq_len, ") must not be negative");
  if (a.mask.kind != kernels::MaskKind::kNone && a.mask.kind != kernels::MaskKind::kCausal)
    return "the mask must be none or causal (an additive or boolean (T, S) mask is not split over the ranks)";
  if (a.query_offset != 0 || a.key_offset != 0 || a.head_offset != 0)
    return str("query_offset, key_offset and head_offset (", a.query_offset, ", ", a.key_offset, ", ", a.head_offset,
               ") must be 0: the ring sets them");
  if (a.window < 0) return str("the window must be positive (or 0 for none), got ", a.window);
  if (!(std::isfinite(a.softcap) && a.softcap >= 0.0f))
    return str("softcap must be positive (or 0 for none), got ", a.softcap);
  if (a.alibi_slopes)
    for (int64_t h = 0; h < H; ++h)
      if (!std::isfinite(a.alibi_slopes[h])) return str("ALiBi slope ", h, " must be finite, got ", a.alibi_slopes[h]);
  if (!(a.dropout_p >= 0.0f && a.dropout_p < 1.0f)) return str("dropout p must be in [0, 1), got ", a.dropout_p);
  if (!std::isfinite(a.scale)) return str("scale must be finite, got ", a.scale);
  if (o.max_block_bytes < 1) return str("max_block_bytes (", o.max_block_bytes, ") must be positive");
  return "";
}

template <typename F>
std::string shape_problem(const char* name, const kernels::Heads<F>& x, int64_t B, int64_t H, int64_t T, int64_t D) {
  if (x.batch == B && x.heads == H && x.tokens == T && x.dim == D && (x.data || B * H * T * D == 0)) return "";
  return str(name, " (", x.batch, ", ", x.heads, ", ", x.tokens, ", ", x.dim, ") should be (", B, ", ", H, ", ", T,
             ", ", D, ")", x.data ? "" : " with data");
}

// Checks the call on every rank together and fills the ring. extra: this rank's further shape problems.
Ring make_ring(const char* what, const Communicator& comm, ConstHeads q, ConstHeads k, ConstHeads v,
               const RingAttentionOptions& options, const std::vector<std::string>& extra) {
  Ring r(comm, SequenceSplit(options.split, std::max<int64_t>(options.seq_len, 0), comm.size()));
  r.B = q.batch;
  r.H = q.heads;
  r.G = k.heads;
  r.D = q.dim;
  r.Dv = v.dim;
  r.attention = options.attention;
  std::string problem = options_problem(options, std::max<int64_t>(r.H, 0));
  if (problem.empty()) {
    r.Tr = r.tokens(comm.rank());
    const std::string split = str(" (rank ", comm.rank(), " holds ", r.Tr, " of T = ", options.seq_len, ", split ",
                                  split_name(options.split), " over ", comm.size(), " ranks)");
    if (r.B < 0 || r.H < 1 || r.G < 1 || r.D < 1 || r.Dv < 1 || r.H % r.G != 0)
      problem = str("q (", q.batch, ", ", q.heads, ", ", q.tokens, ", ", q.dim, "), k heads ", k.heads, ", v dim ",
                    v.dim, ": need heads >= 1, head dims >= 1 and k's heads dividing q's");
    for (const std::string& p : {shape_problem("q", q, r.B, r.H, r.Tr, r.D), shape_problem("k", k, r.B, r.G, r.Tr, r.D),
                                 shape_problem("v", v, r.B, r.G, r.Tr, r.Dv)})
      if (problem.empty() && !p.empty()) problem = p + split;
    for (const std::string& p : extra)
      if (problem.empty() && !p.empty()) problem = p + split;
  }
  check_agreement(comm, what, describe_options(options, r.B, r.H, r.G, r.D, r.Dv, comm.size()), problem);
  for (int x = 0; x < comm.size(); ++x) r.Tmax = std::max(r.Tmax, r.tokens(x));
  r.mine = r.split.runs(comm.rank());
  r.steps = ring_steps(r);
  const double head_bytes = 4.0 * static_cast<double>(r.B * r.Tmax * (r.D + r.Dv)) * 2.0;  // k, v and their grads
  r.group = std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(options.max_block_bytes) / std::max(head_bytes, 1.0)),
                                1, r.G);
  QKV_CHECK(head_bytes / 8.0 * static_cast<double>(r.group) < 2147483647.0, what, ": one key/value head's block (",
            head_bytes / 8.0, " floats) is more than an MPI message of 2^31 - 1 elements");
  return r;
}

// One key/value block of Gp heads of owner x: k (B, Gp, Tx, D) then v (B, Gp, Tx, Dv), contiguous.
// The backward's dk, dv accumulators have the same layout.
struct Block {
  std::vector<float> data;
  int64_t B = 0, Gp = 0, Tx = 0, D = 0, Dv = 0;
  void shape(const Ring& r, int64_t gp, int owner) {
    B = r.B;
    Gp = gp;
    Tx = r.tokens(owner);
    D = r.D;
    Dv = r.Dv;
    data.resize(static_cast<size_t>(std::max<int64_t>(count(), 1)));
  }
  int64_t count() const { return B * Gp * Tx * (D + Dv); }
  float* kdata() { return data.data(); }
  float* vdata() { return data.data() + B * Gp * Tx * D; }
  MutableHeads k() { return MutableHeads::contiguous(kdata(), B, Gp, Tx, D); }
  MutableHeads v() { return MutableHeads::contiguous(vdata(), B, Gp, Tx, Dv); }
};

// Copies heads [g0, g0 + Gp) of x into y (same shape but heads).
void copy_heads(ConstHeads x, int64_t g0, MutableHeads y) {
  for (int64_t b = 0; b < y.batch; ++b)
    for (int64_t g = 0; g < y.heads; ++g)
      for (int64_t n = 0; n < y.tokens; ++n) {
        const float* s = x.row(b, g0 + g, n);
        float* d = y.row(b, g, n);
        for (int64_t c = 0; c < y.dim; ++c) d[c * y.stride_d] = s[c * x.stride_d];
      }
}

// This rank's own keys and values of heads [g0, g0 + Gp), the block its ring starts with.
void load_own_block(const Ring& r, ConstHeads k, ConstHeads v, int64_t g0, int64_t Gp, int me, Block& cur) {
  cur.shape(r, Gp, me);
  copy_heads(k, g0, cur.k());
  copy_heads(v, g0, cur.v());
}

// The times a call reports into (the caller's, or `local` when it wants none), cleared.
RingTimes& start_times(RingTimes* times, RingTimes& local, const Ring& r) {
  RingTimes& t = times ? *times : local;
  t = {};
  t.steps = r.steps;
  return t;
}

MPI_Request post_recv(const Communicator& comm, Block& b, int from, int tag) {
  MPI_Request r;
  MPI_Irecv(b.data.data(), static_cast<int>(b.count()), MPI_FLOAT, from, tag, comm.comm(), &r);
  return r;
}
MPI_Request post_send(const Communicator& comm, Block& b, int to, int tag) {
  MPI_Request r;
  MPI_Isend(b.data.data(), static_cast<int>(b.count()), MPI_FLOAT, to, tag, comm.comm(), &r);
  return r;
}

// The forward's running (o, lse) of one head group, in double: o (B, Hp, Tr, Dv), lse (B, Hp, Tr).
struct ForwardAccumulator {
  std::vector<double> o, lse;
  std::vector<float> o_part, lse_part;  // one pair's kernel output (B, Hp, Lq, Dv), (B, Hp, Lq)
};

// Merges a pair's (o_p, lse_p) of query rows [t0, t0 + Lq) into the accumulator:
//   lse = log(exp(lse) + exp(lse_p)),  o = o exp(lse_old - lse) + o_p exp(lse_p - lse)
void merge(ForwardAccumulator& acc, int64_t B, int64_t Hp, int64_t Tr, int64_t Dv, int64_t t0, int64_t Lq) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hp; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const double lp = acc.lse_part[static_cast<size_t>((b * Hp + h) * Lq + i)];
        if (lp == kNegInf) continue;  // no key of this block is visible to this query
        double& l = acc.lse[static_cast<size_t>((b * Hp + h) * Tr + t0 + i)];
        const double merged = l == kNegInf ? lp : std::max(l, lp) + std::log1p(std::exp(-std::fabs(l - lp)));
        const double keep = l == kNegInf ? 0.0 : std::exp(l - merged), add = std::exp(lp - merged);
        double* o = acc.o.data() + ((b * Hp + h) * Tr + t0 + i) * Dv;
        const float* op = acc.o_part.data() + ((b * Hp + h) * Lq + i) * Dv;
        for (int64_t c = 0; c < Dv; ++c) o[c] = o[c] * keep + add * op[c];
        l = merged;
      }
}

// This rank's queries of head group [h0, h0 + Hp) against the block of owner x.
void forward_step(const Ring& r, ConstHeads q, Block& blk, int owner, int64_t h0, int64_t Hp, ForwardAccumulator& acc) {
  const std::vector<Run> theirs = r.split.runs(owner);
  const std::vector<int64_t> my_starts = r.starts(r.comm.rank()), their_starts = r.starts(owner);
  for (size_t a = 0; a < r.mine.size(); ++a)
    for (size_t c = 0; c < theirs.size(); ++c) {
      const Run &qr = r.mine[a], &kr = theirs[c];
      if (r.hidden(qr, kr)) continue;
      const AttentionOptions opt = r.pair_options(qr, kr, h0);
      const int64_t Lq = qr.length;
      acc.o_part.resize(static_cast<size_t>(r.B * Hp * Lq * r.Dv));
      acc.lse_part.resize(static_cast<size_t>(r.B * Hp * Lq));
      kernels::attention_forward(tokens_of(heads_of(q, h0, Hp), my_starts[a], Lq),
                                 tokens_of(ConstHeads(blk.k()), their_starts[c], kr.length),
                                 tokens_of(ConstHeads(blk.v()), their_starts[c], kr.length),
                                 MutableHeads::contiguous(acc.o_part.data(), r.B, Hp, Lq, r.Dv), acc.lse_part.data(), opt);
      merge(acc, r.B, Hp, r.Tr, r.Dv, my_starts[a], Lq);
    }
}

// The backward's state of one head group: dq (B, Hp, Tr, D) in double, one pair's outputs.
struct BackwardScratch {
  std::vector<double> dq;
  std::vector<float> lse_part, dq_part, dk_part, dv_part;
};

// This rank's queries of head group [h0, h0 + Hp) against the block of owner x: dq += their
// share; grads (the block's layout) = this rank's share of the block's dk, dv.
void backward_step(const Ring& r, ConstHeads q, ConstHeads o, ConstHeads d_o, const float* lse, Block& blk, Block& grads,
                   int owner, int64_t h0, int64_t Hp, BackwardScratch& s) {
  std::fill(grads.data.begin(), grads.data.end(), 0.0f);
  const std::vector<Run> theirs = r.split.runs(owner);
  const std::vector<int64_t> my_starts = r.starts(r.comm.rank()), their_starts = r.starts(owner);
  const int64_t Gp = blk.Gp;
  for (size_t a = 0; a < r.mine.size(); ++a)
    for (size_t c = 0; c < theirs.size(); ++c) {
      const Run &qr = r.mine[a], &kr = theirs[c];
      if (r.hidden(qr, kr)) continue;
      AttentionOptions opt = r.pair_options(qr, kr, h0);
      opt.partial_keys = true;  // D_i from the whole o: these keys are one block of them
      const int64_t Lq = qr.length, Lk = kr.length, t0 = my_starts[a], j0 = their_starts[c];
      s.lse_part.resize(static_cast<size_t>(r.B * Hp * Lq));
      for (int64_t b = 0; b < r.B; ++b)
        for (int64_t h = 0; h < Hp; ++h)
          std::copy_n(lse + (b * r.H + h0 + h) * r.Tr + t0, Lq, s.lse_part.data() + (b * Hp + h) * Lq);
      s.dq_part.resize(static_cast<size_t>(r.B * Hp * Lq * r.D));
      s.dk_part.resize(static_cast<size_t>(r.B * Gp * Lk * r.D));
      s.dv_part.resize(static_cast<size_t>(r.B * Gp * Lk * r.Dv));
      const auto mine_of = [&](ConstHeads x) { return tokens_of(heads_of(x, h0, Hp), t0, Lq); };
      kernels::attention_backward(mine_of(q), tokens_of(ConstHeads(blk.k()), j0, Lk),
                                  tokens_of(ConstHeads(blk.v()), j0, Lk), mine_of(o), mine_of(d_o), s.lse_part.data(),
                                  MutableHeads::contiguous(s.dq_part.data(), r.B, Hp, Lq, r.D),
                                  MutableHeads::contiguous(s.dk_part.data(), r.B, Gp, Lk, r.D),
                                  MutableHeads::contiguous(s.dv_part.data(), r.B, Gp, Lk, r.Dv), opt);
      for (int64_t b = 0; b < r.B; ++b)
        for (int64_t h = 0; h < Hp; ++h)
          for (int64_t i = 0; i < Lq; ++i) {
            double* acc = s.dq.data() + ((b * Hp + h) * r.Tr + t0 + i) * r.D;
            const float* part = s.dq_part.data() + ((b * Hp + h) * Lq + i) * r.D;
            for (int64_t d = 0; d < r.D; ++d) acc[d] += part[d];
          }
      const MutableHeads gk = grads.k(), gv = grads.v();
      for (int64_t b = 0; b < r.B; ++b)
        for (int64_t g = 0; g < Gp; ++g)
          for (int64_t j = 0; j < Lk; ++j) {
            float* dk = gk.row(b, g, j0 + j);
            float* dv = gv.row(b, g, j0 + j);
            const float* pk = s.dk_part.data() + ((b * Gp + g) * Lk + j) * r.D;
            const float* pv = s.dv_part.data() + ((b * Gp + g) * Lk + j) * r.Dv;
            for (int64_t d = 0; d < r.D; ++d) dk[d] += pk[d];
            for (int64_t d = 0; d < r.Dv; ++d) dv[d] += pv[d];
          }
    }
}

}  // namespace

void ring_attention_forward(const Communicator& comm, ConstHeads q, ConstHeads k, ConstHeads v, MutableHeads o,
                            float* lse, const RingAttentionOptions& options, RingTimes* times) {
  const char* what = "ring_attention_forward";
  const int64_t Tr = q.tokens;
  const Ring r = make_ring(what, comm, q, k, v, options,
                           {shape_problem("o", o, q.batch, q.heads, Tr, v.dim),
                            lse || q.batch * q.heads * Tr == 0 ? "" : "lse is null"});
  RingTimes local;
  RingTimes& t = start_times(times, local, r);
  const int N = comm.size(), me = comm.rank();
  const int64_t per = r.H / r.G;
  Block cur, next;
  ForwardAccumulator acc;
  for (int64_t g0 = 0; g0 < r.G; g0 += r.group) {
    const int64_t Gp = std::min(r.group, r.G - g0), h0 = g0 * per, Hp = Gp * per;
    load_own_block(r, k, v, g0, Gp, me, cur);
    acc.o.assign(static_cast<size_t>(r.B * Hp * r.Tr * r.Dv), 0.0);
    acc.lse.assign(static_cast<size_t>(r.B * Hp * r.Tr), kNegInf);
    for (int s = 0; s < r.steps; ++s) {
      const int owner = (me - s + N) % N;
      std::vector<MPI_Request> requests;
      if (s + 1 < r.steps) {  // the next block, from the previous rank, while this one is computed on
        next.shape(r, Gp, (owner - 1 + N) % N);
        requests.push_back(post_recv(comm, next, comm.previous(), kTagBlock));
        requests.push_back(post_send(comm, cur, comm.next(), kTagBlock));
      }
      run_step(comm, requests, [&] { forward_step(r, q, cur, owner, h0, Hp, acc); },
               str(what, ": step ", s, " (the key/value block of rank ", (owner - 1 + N) % N, " from rank ",
                   comm.previous(), ")"),
               t);
      std::swap(cur, next);
    }
    for (int64_t b = 0; b < r.B; ++b)
      for (int64_t h = 0; h < Hp; ++h)
        for (int64_t i = 0; i < r.Tr; ++i) {
          const size_t row = static_cast<size_t>((b * Hp + h) * r.Tr + i);
          lse[(b * r.H + h0 + h) * r.Tr + i] = static_cast<float>(acc.lse[row]);
          float* out = o.row(b, h0 + h, i);
          for (int64_t c = 0; c < r.Dv; ++c) out[c * o.stride_d] = static_cast<float>(acc.o[row * static_cast<size_t>(r.Dv) + static_cast<size_t>(c)]);
        }
  }
}

void ring_attention_backward(const Communicator& comm, ConstHeads q, ConstHeads k, ConstHeads v, ConstHeads o,
                             ConstHeads d_o, const float* lse, MutableHeads dq, MutableHeads dk, MutableHeads dv,
                             const RingAttentionOptions& options, RingTimes* times) {
  const char* what = "ring_attention_backward";
  const int64_t B = q.batch, H = q.heads, G = k.heads, Tr = q.tokens, D = q.dim, Dv = v.dim;
  const Ring r = make_ring(what, comm, q, k, v, options,
                           {shape_problem("o", o, B, H, Tr, Dv), shape_problem("d_o", d_o, B, H, Tr, Dv),
                            shape_problem("dq", dq, B, H, Tr, D), shape_problem("dk", dk, B, G, Tr, D),
                            shape_problem("dv", dv, B, G, Tr, Dv), lse || B * H * Tr == 0 ? "" : "lse is null"});
  RingTimes local;
  RingTimes& t = start_times(times, local, r);
  const int N = comm.size(), me = comm.rank();
  const int64_t per = r.H / r.G;
  Block cur, next, grads, incoming, outgoing;  // grads: this rank's share; incoming/outgoing: the accumulators
  BackwardScratch s;
  for (int64_t g0 = 0; g0 < r.G; g0 += r.group) {
    const int64_t Gp = std::min(r.group, r.G - g0), h0 = g0 * per, Hp = Gp * per;
    load_own_block(r, k, v, g0, Gp, me, cur);
    s.dq.assign(static_cast<size_t>(r.B * Hp * r.Tr * r.D), 0.0);
    std::vector<MPI_Request> sending;  // the accumulator sent last step
    const int steps = r.steps;
    for (int step = 0; step < steps; ++step) {
      const int owner = (me - step + N) % N;
      std::vector<MPI_Request> requests = sending;
      sending.clear();
      if (step + 1 < steps) {
        next.shape(r, Gp, (owner - 1 + N) % N);
        requests.push_back(post_recv(comm, next, comm.previous(), kTagBlock));
        requests.push_back(post_send(comm, cur, comm.next(), kTagBlock));
      }
      if (step > 0) {  // the owner's block's accumulator, from the rank that had the block last step
        incoming.shape(r, Gp, owner);
        requests.push_back(post_recv(comm, incoming, comm.previous(), kTagGrads));
      }
      grads.shape(r, Gp, owner);
      run_step(comm, requests, [&] { backward_step(r, q, o, d_o, lse, cur, grads, owner, h0, Hp, s); },
               str(what, ": step ", step, " (the key/value block of rank ", (owner - 1 + N) % N, " and the gradients of rank ",
                   owner, "'s from rank ", comm.previous(), ")"),
               t);
      // outgoing = incoming + this rank's share, in ring order from the owner on
      outgoing.shape(r, Gp, owner);
      for (size_t e = 0; e < outgoing.data.size(); ++e)
        outgoing.data[e] = step > 0 ? incoming.data[e] + grads.data[e] : grads.data[e];
      // On to the next rank; after the last step with work, home to the owner (the next rank
      // when steps = N: the accumulator has gone all the way round).
      if (step + 1 < steps) sending.push_back(post_send(comm, outgoing, comm.next(), kTagGrads));
      else if (steps > 1) sending.push_back(post_send(comm, outgoing, owner, kTagGrads));
      std::swap(cur, next);
    }
    Block* mine = &outgoing;  // with one step, its own share is the whole
    if (steps > 1) {  // this rank's block's accumulator, after every rank that sees it added its share
      incoming.shape(r, Gp, me);
      sending.push_back(post_recv(comm, incoming, (me + steps - 1) % N, kTagGrads));
      run_step(comm, sending, [] {},
               str(what, ": the gradients of this rank's keys and values from rank ", (me + steps - 1) % N), t);
      mine = &incoming;
    }
    const MutableHeads gk = mine->k(), gv = mine->v();
    for (int64_t b = 0; b < r.B; ++b) {
      for (int64_t g = 0; g < Gp; ++g)
        for (int64_t j = 0; j < r.Tr; ++j) {
          for (int64_t c = 0; c < r.D; ++c) dk.row(b, g0 + g, j)[c * dk.stride_d] = gk.row(b, g, j)[c];
          for (int64_t c = 0; c < r.Dv; ++c) dv.row(b, g0 + g, j)[c * dv.stride_d] = gv.row(b, g, j)[c];
        }
      for (int64_t h = 0; h < Hp; ++h)
        for (int64_t i = 0; i < r.Tr; ++i)
          for (int64_t c = 0; c < r.D; ++c)
            dq.row(b, h0 + h, i)[c * dq.stride_d] =
                static_cast<float>(s.dq[static_cast<size_t>(((b * Hp + h) * r.Tr + i) * r.D + c)]);
    }
  }
}

}  // namespace qkv::mpi
