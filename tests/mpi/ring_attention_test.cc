// Ring attention against the single-process fused kernel, run by ctest under
// `mpirun --oversubscribe -np N` for N = 2, 3 and 4 (tests/CMakeLists.txt). Every rank makes the
// whole sequence's inputs from the same seed, runs the fused kernel on all of it, then ring
// attention on its own positions, and compares its share: o, lse, dq, dk, dv within 1e-6 relative
// (||ring - fused|| / ||fused||, per tensor; element-wise within 4e-6 of the largest), for both splits, causal and not, with dropout,
// grouped-query heads, T from 1 (fewer tokens than ranks) up and T not divisible by N; and with
// today's variants (sliding windows, ALiBi, softcap), alone and with dropout and each other.
//
// Legend: B batch, H query heads, G key/value heads, T positions, Tr this rank's, D head dim.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/kernels/attention.h"
#include "qkv/mpi/communicator.h"
#include "qkv/mpi/ring_attention.h"
#include "qkv/mpi/sequence_split.h"

namespace qkv::mpi {
namespace {

using kernels::ConstHeads;
using kernels::MutableHeads;
constexpr float kInf = std::numeric_limits<float>::infinity();

const Communicator& world() {
  static const Communicator comm;
  return comm;
}

// A contiguous (B, H, N, D) array.
struct Array {
  int64_t B = 0, H = 0, N = 0, D = 0;
  std::vector<float> x;
  Array(int64_t b, int64_t h, int64_t n, int64_t d, float fill = 0.0f)
      : B(b), H(h), N(n), D(d), x(static_cast<size_t>(std::max<int64_t>(b * h * n * d, 1)), fill) {}
  MutableHeads view() { return MutableHeads::contiguous(x.data(), B, H, N, D); }
  ConstHeads in() const { return ConstHeads::contiguous(x.data(), B, H, N, D); }
  float& at(int64_t b, int64_t h, int64_t n, int64_t d) { return x[static_cast<size_t>(((b * H + h) * N + n) * D + d)]; }
  float at(int64_t b, int64_t h, int64_t n, int64_t d) const {
    return x[static_cast<size_t>(((b * H + h) * N + n) * D + d)];
  }
};

Array random_array(int64_t B, int64_t H, int64_t N, int64_t D, std::mt19937& rng) {
  Array a(B, H, N, D);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& e : a.x) e = normal(rng);
  return a;
}

// This rank's positions of a whole-sequence array: its runs, concatenated.
Array local_part(const Array& whole, const SequenceSplit& split, int rank) {
  Array a(whole.B, whole.H, split.tokens(rank), whole.D);
  int64_t at = 0;
  for (const Run& r : split.runs(rank))
    for (int64_t n = 0; n < r.length; ++n, ++at)
      for (int64_t b = 0; b < whole.B; ++b)
        for (int64_t h = 0; h < whole.H; ++h)
          for (int64_t d = 0; d < whole.D; ++d) a.at(b, h, at, d) = whole.at(b, h, r.begin + n, d);
  return a;
}

// How far got is from want: the norm-wise relative error ||got - want||_2 / ||want||_2 (the
// target's "1e-6 relative") and the element-wise max |got - want| / max |want| (0 / 0 = 0);
// infinities must match exactly (else both are 1).
struct Error2 {
  double l2 = 0.0, max = 0.0;
};
Error2 relative_error(const Array& got, const Array& want) {
  double diff2 = 0.0, norm2 = 0.0, diff = 0.0, scale = 0.0;
  const auto n = static_cast<size_t>(want.B * want.H * want.N * want.D);  // not the padding of empty arrays
  for (size_t i = 0; i < n; ++i) {
    if (std::isinf(want.x[i])) {
      if (got.x[i] != want.x[i]) return {1.0, 1.0};
      continue;
    }
    const double d = std::fabs(static_cast<double>(got.x[i]) - want.x[i]), w = std::fabs(static_cast<double>(want.x[i]));
    diff2 += d * d;
    norm2 += w * w;
    diff = std::max(diff, d);
    scale = std::max(scale, w);
  }
  if (!std::isfinite(diff2)) return {1.0, 1.0};
  return {norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2), scale > 0 ? diff / scale : diff};
}

struct Case {
  int64_t B = 2, H = 4, G = 2, T = 1, D = 16;
  SplitKind split = SplitKind::kContiguous;
  bool causal = true;
  float dropout = 0.0f;
  int64_t block_bytes = int64_t{32} << 20;
  int64_t window = 0;
  float alibi = 0.0f;    // != 0: ALiBi with the paper's slopes times this (negative: slopes < 0)
  float softcap = 0.0f;
  // Scores far from 0 (ALiBi with no mask: slope x distance reaches tens) leave float32 a few ulps
  // of lse, and two correct summation orders then differ by more than 1e-6: for such cases the
  // ring must be as close to the exact answer (the double reference) as the fused kernel is.
  bool versus_exact = false;
  std::string name() const {
    return str("B=", B, " H=", H, " G=", G, " T=", T, " D=", D, " split=", split_name(split),
               causal ? " causal" : " no mask", " p=", dropout, " block_bytes=", block_bytes, " window=", window,
               " alibi=", alibi, " softcap=", softcap);
  }
};

double worst_l2 = 0.0, worst_max = 0.0;  // over every case and tensor, this rank's
double worst_ring_exact = 0.0, worst_fused_exact = 0.0;  // versus_exact cases: distances from the exact answer

// Returns the ring steps the forward took (RingTimes::steps).
int check_case(const Case& c) {
  SCOPED_TRACE(c.name());
  const Communicator& comm = world();
  std::mt19937 rng(static_cast<uint32_t>(c.T * 131 + c.D));
  const Array q = random_array(c.B, c.H, c.T, c.D, rng), k = random_array(c.B, c.G, c.T, c.D, rng),
              v = random_array(c.B, c.G, c.T, c.D, rng), d_o = random_array(c.B, c.H, c.T, c.D, rng);
  kernels::AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  opt.mask = c.causal ? kernels::AttentionMask::causal() : kernels::AttentionMask::none();
  opt.dropout_p = c.dropout;
  opt.dropout_seed = 0xabcdef0123ULL;
  opt.window = c.window;
  opt.softcap = c.softcap;
  std::vector<float> slopes(static_cast<size_t>(c.H));
  if (c.alibi != 0.0f) {
    kernels::alibi_default_slopes(c.H, slopes.data());
    for (float& s : slopes) s *= c.alibi;
    opt.alibi_slopes = slopes.data();
  }
  // The single-process fused kernel on the whole sequence.
  Array o(c.B, c.H, c.T, c.D), lse(c.B, c.H, c.T, 1), dq(c.B, c.H, c.T, c.D), dk(c.B, c.G, c.T, c.D),
      dv(c.B, c.G, c.T, c.D);
  kernels::attention_forward(q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
  // D_i = d_o . o for every row, as the ring's ranks, which each hold part of the keys, take it
  // (with every key, rows of at most 64 keys would sum D_i from their own weights instead)
  kernels::AttentionOptions as_the_ring = opt;
  as_the_ring.partial_keys = true;
  kernels::attention_backward(q.in(), k.in(), v.in(), o.in(), d_o.in(), lse.x.data(), dq.view(), dk.view(), dv.view(),
                              as_the_ring);
  // The ring on this rank's positions.
  const SequenceSplit split(c.split, c.T, comm.size());
  const int me = comm.rank();
  const int64_t Tr = split.tokens(me);
  const Array ql = local_part(q, split, me), kl = local_part(k, split, me), vl = local_part(v, split, me),
              dol = local_part(d_o, split, me);
  Array ro(c.B, c.H, Tr, c.D, kInf), rlse(c.B, c.H, Tr, 1, kInf), rdq(c.B, c.H, Tr, c.D, kInf),
      rdk(c.B, c.G, Tr, c.D, kInf), rdv(c.B, c.G, Tr, c.D, kInf);
  RingAttentionOptions ring;
  ring.seq_len = c.T;
  ring.split = c.split;
  ring.attention = opt;
  ring.max_block_bytes = c.block_bytes;
  RingTimes times;
  ring_attention_forward(comm, ql.in(), kl.in(), vl.in(), ro.view(), rlse.x.data(), ring, &times);
  ring_attention_backward(comm, ql.in(), kl.in(), vl.in(), ro.in(), dol.in(), rlse.x.data(), rdq.view(), rdk.view(),
                          rdv.view(), ring);
  const std::pair<const char*, Error2> errors[] = {
      {"o", relative_error(ro, local_part(o, split, me))},   {"lse", relative_error(rlse, local_part(lse, split, me))},
      {"dq", relative_error(rdq, local_part(dq, split, me))}, {"dk", relative_error(rdk, local_part(dk, split, me))},
      {"dv", relative_error(rdv, local_part(dv, split, me))}};
  if (c.versus_exact) {
    Array xo(c.B, c.H, c.T, c.D), xlse(c.B, c.H, c.T, 1), xdq(c.B, c.H, c.T, c.D), xdk(c.B, c.G, c.T, c.D),
        xdv(c.B, c.G, c.T, c.D);
    kernels::attention_forward_reference(q.in(), k.in(), v.in(), xo.view(), xlse.x.data(), opt);
    kernels::attention_backward_reference(q.in(), k.in(), v.in(), d_o.in(), xdq.view(), xdk.view(), xdv.view(), opt);
    const struct {
      const char* name;
      const Array &fused, &ring, &exact;
    } against[] = {{"o", o, ro, xo}, {"lse", lse, rlse, xlse}, {"dq", dq, rdq, xdq}, {"dk", dk, rdk, xdk}, {"dv", dv, rdv, xdv}};
    for (const auto& x : against) {
      const Array exact = local_part(x.exact, split, me);
      const double fused = relative_error(local_part(x.fused, split, me), exact).l2;
      const double ringed = relative_error(x.ring, exact).l2;
      EXPECT_LE(ringed, std::max(1e-6, 1.5 * fused)) << x.name << " on rank " << me << ": the ring's distance from the "
                                                   << "exact answer against the fused kernel's (" << fused << ")";
      worst_ring_exact = std::max(worst_ring_exact, ringed);
      worst_fused_exact = std::max(worst_fused_exact, fused);
    }
  }
  for (const auto& [name, e] : errors) {
    if (c.versus_exact) {  // two float32 answers each ~2e-6 from the exact one
      EXPECT_LE(e.l2, 5e-6) << name << " on rank " << me << " (norm-wise)";
      continue;
    }
    EXPECT_LE(e.l2, 1e-6) << name << " on rank " << me << " (norm-wise)";
    // Element by element, float32's rounding in two summation orders (the fused kernel's over all
    // keys, the ring's block by block) reaches about 1.5e-6 of the largest element at T = 301; a
    // wrong element or row would be far beyond this.
    EXPECT_LE(e.max, 4e-6) << name << " on rank " << me << " (element-wise, of the largest)";
    worst_l2 = std::max(worst_l2, e.l2);
    worst_max = std::max(worst_max, e.max);
  }
  return times.steps;
}

TEST(SequenceSplit, EveryPositionOnceInOrderAndZigzagBalanced) {
  for (SplitKind kind : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (int n : {1, 2, 3, 4, 7})
      for (int64_t T : {0, 1, 2, 5, 8, 13, 100}) {
        const SequenceSplit s(kind, T, n);
        std::vector<int> seen(static_cast<size_t>(T), 0);
        int64_t most = 0, least = T;
        for (int r = 0; r < n; ++r) {
          int64_t last = -1;
          for (const qkv::mpi::Run& run : s.runs(r)) {
            if (run.length == 0) continue;
            EXPECT_GT(run.begin, last) << "runs out of order, T=" << T << " n=" << n;
            last = run.begin + run.length - 1;
            for (int64_t p = run.begin; p < run.begin + run.length; ++p) ++seen[static_cast<size_t>(p)];
          }
          most = std::max(most, s.tokens(r));
          least = std::min(least, s.tokens(r));
        }
        for (int64_t p = 0; p < T; ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], 1) << "position " << p;
        EXPECT_LE(most - least, kind == SplitKind::kZigzag ? 2 : 1) << "T=" << T << " n=" << n;
      }
  // Zigzag pairs run r with run 2N - 1 - r: rank 0 holds the first and the last.
  const SequenceSplit z(SplitKind::kZigzag, 16, 4);
  EXPECT_EQ(z.runs(0)[0].begin, 0);
  EXPECT_EQ(z.runs(0)[1].begin, 14);
  EXPECT_EQ(z.runs(3)[0].begin, 6);
  EXPECT_EQ(z.runs(3)[1].begin, 8);
  std::string message;
  try {
    parse_split("striped");
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "split 'striped': expected contiguous or zigzag");
}

TEST(RingAttention, EqualsTheFusedKernel) {
  std::vector<Case> cases;
  for (SplitKind split : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (bool causal : {true, false})
      for (float p : {0.0f, 0.3f})
        for (int64_t T : {1, 2, 3, 5, 7, 10, 33, 67}) {
          Case c;
          c.T = T;
          c.split = split;
          c.causal = causal;
          c.dropout = p;
          cases.push_back(c);
        }
  for (const Case& c : cases) check_case(c);
}

// D = 64 (the kernel's unrolled path), one key/value head per block in flight (head groups, with
// the dropout mask keyed by the layer's head), longer sequences that span several kernel blocks.
TEST(RingAttention, HeadGroupsAndLongerSequencesEqualTheFusedKernel) {
  for (SplitKind split : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (bool causal : {true, false}) {
      Case c;
      c.B = 1;
      c.H = 6;
      c.G = 3;
      c.T = 301;
      c.D = 64;
      c.split = split;
      c.causal = causal;
      c.dropout = 0.2f;
      c.block_bytes = 1;  // one head per group
      check_case(c);
    }
}

// Sliding windows, ALiBi (slopes > 0 and < 0) and the softcap, alone and together, with dropout,
// causal and not: the kernel gets global positions, so windows and ALiBi's distances span ranks.
TEST(RingAttention, WindowsAlibiAndSoftcapEqualTheFusedKernel) {
  struct Variant {
    int64_t window;
    float alibi, softcap, dropout;
  };
  const Variant variants[] = {{1, 0, 0, 0},     {3, 0, 0, 0},       {20, 0, 0, 0.3f},   {0, 1, 0, 0},
                              {0, -0.5f, 5, 0.3f}, {0, 0, 2, 0},    {9, 1, 5, 0.3f},    {100, 1, 0, 0}};
  for (SplitKind split : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (bool causal : {true, false})
      for (const Variant& x : variants)
        for (int64_t T : {1, 2, 3, 5, 7, 10, 33, 67}) {
          Case c;
          c.T = T;
          c.split = split;
          c.causal = causal;
          c.window = x.window;
          c.alibi = x.alibi;
          c.softcap = x.softcap;
          c.dropout = x.dropout;
          check_case(c);
        }
}

// D = 64, one head per group, T = 301 (several kernel blocks per rank), windows shorter than a
// rank's run and longer than the sequence, with every variant at once.
TEST(RingAttention, VariantsOnLongerSequencesEqualTheFusedKernel) {
  for (SplitKind split : {SplitKind::kContiguous, SplitKind::kZigzag})
    for (bool causal : {true, false})
      for (int64_t window : {int64_t{50}, int64_t{1000}}) {
        Case c;
        c.B = 1;
        c.H = 6;
        c.G = 3;
        c.T = 301;
        c.D = 64;
        c.split = split;
        c.causal = causal;
        c.dropout = 0.2f;
        c.block_bytes = 1;
        c.window = window;
        c.alibi = 1.0f;
        c.softcap = 8.0f;
        // With no mask, ALiBi adds slope x (pos_j - pos_i) up to 0.5 x 300 to later keys' scores:
        // lse ~ 150, whose float32 ulp is 1.5e-5 (see Case::versus_exact).
        c.versus_exact = !causal;
        check_case(c);
      }
}

// A causal window shorter than a rank's run: under the contiguous split every rank sees only its
// own and its left neighbour's keys, so the ring stops after 2 steps; under zigzag the late runs
// need their right neighbour's, N - 1 steps away, so it takes all N; with no window, N.
TEST(RingAttention, AWindowEndsTheRingEarlyWhereNoRankSeesFurther) {
  const int N = world().size();
  Case c;
  c.T = 40 * N;
  c.window = 10;
  EXPECT_EQ(check_case(c), std::min(N, 2)) << "contiguous, window 10, 40 tokens a rank";
  c.causal = false;  // a window hides only keys too far back: with no mask every later block is seen
  EXPECT_EQ(check_case(c), N) << "contiguous, no mask, window 10";
  c.split = SplitKind::kZigzag;
  c.causal = true;
  EXPECT_EQ(check_case(c), N) << "zigzag, window 10";
  c.split = SplitKind::kContiguous;
  c.window = 0;
  EXPECT_EQ(check_case(c), N) << "contiguous, no window";
  c.window = 45;  // reaches two blocks back for the first queries of a run
  EXPECT_EQ(check_case(c), std::min(N, 3)) << "contiguous, window 45";
}

// Variants the kernel refuses: every rank throws, with the kernel's words, naming the value.
TEST(RingAttention, BadVariantsAreRefusedOnEveryRankWithTheKernelsMessage) {
  const Communicator& comm = world();
  const std::string n = std::to_string(comm.size());
  Array q(1, 2, 3, 4), k(1, 2, 3, 4), v(1, 2, 3, 4), o(1, 2, 3, 4), lse(1, 2, 3, 1);
  const auto message_of = [&](const RingAttentionOptions& opt) {
    std::string message;
    try {
      ring_attention_forward(comm, q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
    } catch (const AgreementError& e) {
      message = e.what();
    }
    return message;
  };
  RingAttentionOptions opt;
  opt.seq_len = 3 * comm.size();
  opt.attention.window = -2;
  EXPECT_EQ(message_of(opt), "ring_attention_forward: rank 0 of " + n + ": the window must be positive (or 0 for none), got -2");
  opt.attention.window = 0;
  opt.attention.softcap = -1.0f;
  EXPECT_EQ(message_of(opt), "ring_attention_forward: rank 0 of " + n + ": softcap must be positive (or 0 for none), got -1");
  opt.attention.softcap = kInf;
  EXPECT_EQ(message_of(opt), "ring_attention_forward: rank 0 of " + n + ": softcap must be positive (or 0 for none), got inf");
  opt.attention.softcap = 0.0f;
  // One rank's slope 1 is NaN: every rank throws, naming that rank and the slope.
  const int bad = comm.size() - 1;
  float slopes[2] = {0.5f, comm.rank() == bad ? std::numeric_limits<float>::quiet_NaN() : 0.25f};
  opt.attention.alibi_slopes = slopes;
  EXPECT_EQ(message_of(opt), "ring_attention_forward: rank " + std::to_string(bad) + " of " + n +
                                 ": ALiBi slope 1 must be finite, got nan");
  // Finite slopes that differ between ranks: a configuration different from rank 0's.
  slopes[1] = comm.rank() == bad ? 0.125f : 0.25f;
  const std::string differs = message_of(opt);
  if (comm.size() > 1) {
    EXPECT_NE(differs.find("was started with a configuration different from rank 0's"), std::string::npos) << differs;
    EXPECT_NE(differs.find("alibi=2 slopes #"), std::string::npos) << differs;
  }
  // An additive mask cannot be split over the ranks.
  slopes[1] = 0.25f;
  const float mask[1] = {0.0f};
  opt.attention.mask = kernels::AttentionMask::additive(mask, 1);
  EXPECT_EQ(message_of(opt), "ring_attention_forward: rank 0 of " + n +
                                 ": the mask must be none or causal (an additive or boolean (T, S) mask is not split "
                                 "over the ranks)");
}

TEST(RingAttention, RanksThatDisagreeAllThrowTheSameError) {
  const Communicator& comm = world();
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int last = comm.size() - 1;
  Array q(1, 2, 3, 4), k(1, 2, 3, 4), v(1, 2, 3, 4), o(1, 2, 3, 4), lse(1, 2, 3, 1);
  // Every rank holds 3 tokens of T = 3N (contiguous) - except the last, which says T = 3N + 1.
  RingAttentionOptions opt;
  opt.seq_len = 3 * comm.size() + (comm.rank() == last ? 1 : 0);
  std::string message;
  try {
    ring_attention_forward(comm, q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
  } catch (const AgreementError& e) {
    message = e.what();
  }
  const std::string n = std::to_string(comm.size());
  const std::string expected = "ring_attention_forward: rank " + std::to_string(last) + " of " + n +
                               " was started with a configuration different from rank 0's: rank 0 has {B=1 H=2 G=2 "
                               "D=4 Dv=4 T=" + std::to_string(3 * comm.size()) + " ";
  EXPECT_EQ(message.substr(0, expected.size()), expected);
  EXPECT_NE(message.find("T=" + std::to_string(3 * comm.size() + 1)), std::string::npos) << message;
  // One rank's shapes wrong: every rank throws, naming that rank and the shape.
  opt.seq_len = 3 * comm.size();
  Array q_short(1, 2, 2, 4);
  message.clear();
  try {
    ring_attention_forward(comm, comm.rank() == 1 ? q_short.in() : q.in(), k.in(), v.in(), o.view(), lse.x.data(), opt);
  } catch (const AgreementError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "ring_attention_forward: rank 1 of " + n + ": q (1, 2, 2, 4) should be (1, 2, 3, 4) (rank 1 holds 3 of T = " +
                         std::to_string(3 * comm.size()) + ", split contiguous over " + n + " ranks)");
}

}  // namespace
}  // namespace qkv::mpi

int main(int argc, char** argv) {
  qkv::mpi::Session session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const qkv::mpi::Communicator& comm = qkv::mpi::world();
  if (comm.rank() != 0) GTEST_FLAG_SET(brief, true);  // the other ranks print their failures only
  const int failed = RUN_ALL_TESTS();
  if (comm.rank() == 0)
    std::cout << "rank 0's worst relative error: norm-wise " << qkv::mpi::worst_l2 << ", element-wise (of the largest) "
              << qkv::mpi::worst_max << "; with ALiBi and no mask (T = 301), the worst norm-wise distance from the exact answer: ring "
              << qkv::mpi::worst_ring_exact << ", fused kernel " << qkv::mpi::worst_fused_exact << "\n";
  // Every rank's verdict: the test fails if any rank's did (each rank's exit status also counts).
  int any = failed, all = 0;
  MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return all != 0 ? 1 : 0;
}
