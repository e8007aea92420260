// The ring attention benchmark harness (qkv/mpi/ring_bench.h).
#include "qkv/mpi/ring_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <vector>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/kernels/attention.h"

namespace qkv::mpi {
namespace {

using Clock = std::chrono::steady_clock;

double max_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// Uniform values in [-1, 1) from a 64-bit LCG: cheap for the hundreds of millions of floats of a
// long sequence, different on every rank.
void fill(std::vector<float>& x, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (float& e : x) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    e = static_cast<float>(static_cast<double>(s >> 40) / 8388608.0 - 1.0);
  }
}

}  // namespace

RingBenchReport run_ring_bench(const Communicator& comm, const RingBenchShape& shape, int iters, int warmup,
                               ThreadPool& pool) {
  QKV_CHECK(iters >= 1 && warmup >= 0, "run_ring_bench: iters (", iters, ") must be >= 1 and warmup (", warmup, ") >= 0");
  const kernels::AttentionSpec& a = shape.attention;
  kernels::validate_attention_spec(a, "run_ring_bench");
  QKV_CHECK(a.rope == kernels::RopeLayout::kNone && a.dtype == Dtype::kF32,
            "run_ring_bench: ring attention runs without RoPE (rotate q and k first), in f32");
  const SequenceSplit split(shape.split, shape.seq_len, comm.size());
  const int64_t B = shape.batch, H = a.heads, G = a.groups(), D = a.head_dim;
  const int64_t Tr = split.tokens(comm.rank());
  // This rank's q, o, k, v and lse (and d_o, dq, dk, dv for the backward), checked before any is made.
  const char* what = "run_ring_bench: this rank's inputs and outputs";
  const int64_t per_token = checked_add(checked_mul(checked_add(H, G, what), checked_mul(2, D, what), what), H, what);
  const int64_t floats = checked_mul(checked_product({B, Tr, per_token}, what), shape.backward ? 2 : 1, what);
  check_memory_request(checked_mul(floats, int64_t{sizeof(float)}, what), what);
  const auto n = [](int64_t w, int64_t x, int64_t y, int64_t z) { return static_cast<size_t>(std::max<int64_t>(w * x * y * z, 1)); };
  std::vector<float> q(n(B, H, Tr, D)), k(n(B, G, Tr, D)), v(n(B, G, Tr, D)), o(n(B, H, Tr, D)), lse(n(B, H, Tr, 1));
  std::vector<float> d_o, dq, dk, dv;
  fill(q, 3 * static_cast<uint64_t>(comm.rank()) + 1);
  fill(k, 3 * static_cast<uint64_t>(comm.rank()) + 2);
  fill(v, 3 * static_cast<uint64_t>(comm.rank()) + 3);
  if (shape.backward) {
    d_o.resize(o.size());
    fill(d_o, 1000 + static_cast<uint64_t>(comm.rank()));
    dq.resize(q.size());
    dk.resize(k.size());
    dv.resize(v.size());
  }
  using kernels::ConstHeads;
  using kernels::MutableHeads;
  RingAttentionOptions opt;
  opt.seq_len = shape.seq_len;
  opt.split = shape.split;
  const std::vector<float> slopes = kernels::spec_alibi_slopes(a);
  opt.attention = kernels::kernel_options(a, slopes);
  opt.attention.dropout_seed = 1234;
  opt.attention.pool = &pool;
  const auto qh = ConstHeads::contiguous(q.data(), B, H, Tr, D), kh = ConstHeads::contiguous(k.data(), B, G, Tr, D),
             vh = ConstHeads::contiguous(v.data(), B, G, Tr, D);
  const auto oh = MutableHeads::contiguous(o.data(), B, H, Tr, D);

  RingBenchReport r;
  r.shape = shape;
  r.ranks = comm.size();
  r.threads = pool.num_threads();
  r.iters = iters;
  RankReport mine;
  mine.tokens = Tr;
  for (int it = 0; it < warmup + iters; ++it) {
    comm.barrier("ring bench: the barrier before a run");
    const Clock::time_point t0 = Clock::now();
    RingTimes fwd, bwd;
    ring_attention_forward(comm, qh, kh, vh, oh, lse.data(), opt, &fwd);
    if (shape.backward)
      ring_attention_backward(comm, qh, kh, vh, oh, ConstHeads::contiguous(d_o.data(), B, H, Tr, D), lse.data(),
                              MutableHeads::contiguous(dq.data(), B, H, Tr, D),
                              MutableHeads::contiguous(dk.data(), B, G, Tr, D),
                              MutableHeads::contiguous(dv.data(), B, G, Tr, D), opt, &bwd);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    r.steps = fwd.steps;
    if (it < warmup) continue;
    mine.run_ms += ms / iters;
    mine.compute_ms += 1e3 * (fwd.compute + bwd.compute) / iters;
    mine.comm_ms += 1e3 * (fwd.comm + bwd.comm) / iters;
    mine.wait_ms += 1e3 * (fwd.wait + bwd.wait) / iters;
    double slowest = 0;
    std::vector<MPI_Request> req(1);
    MPI_Iallreduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm.comm(), &req[0]);
    comm.wait_all(req, "ring bench: the slowest rank's time");
    r.times_ms.push_back(slowest);
  }
  mine.max_rss_mib = max_rss_mib();
  // Every rank's report to rank 0, as doubles.
  const double row[6] = {static_cast<double>(mine.tokens), mine.run_ms, mine.compute_ms, mine.comm_ms, mine.wait_ms,
                         mine.max_rss_mib};
  std::vector<double> rows(6 * static_cast<size_t>(comm.size()));
  std::vector<MPI_Request> req(1);
  MPI_Igather(row, 6, MPI_DOUBLE, rows.data(), 6, MPI_DOUBLE, 0, comm.comm(), &req[0]);
  comm.wait_all(req, "ring bench: gathering the ranks' reports");
  std::vector<double> sorted = r.times_ms;
  std::sort(sorted.begin(), sorted.end());
  r.median_ms = sorted[sorted.size() / 2];
  r.min_ms = sorted.front();
  r.max_ms = sorted.back();
  const bool causal = a.causal;
  const int64_t T = shape.seq_len;
  r.flops = kernels::attention_forward_flops(B, H, T, T, D, D, causal, 0, a.window) +
            (shape.backward ? kernels::attention_backward_flops(B, H, T, T, D, D, causal, 0, a.window) : 0.0);
  r.gflops = r.flops / (r.median_ms * 1e6);
  if (comm.rank() == 0) {
    double wait = 0, transfer = 0;
    for (int x = 0; x < comm.size(); ++x) {
      const double* e = rows.data() + 6 * x;
      r.per_rank.push_back({static_cast<int64_t>(e[0]), e[1], e[2], e[3], e[4], e[5]});
      wait += e[4];
      transfer += e[3];
      r.max_rank_rss_mib = std::max(r.max_rank_rss_mib, e[5]);
    }
    r.comm_hidden = transfer > 0 ? 1.0 - wait / transfer : 1.0;
  }
  return r;
}

namespace {
// The slowest rank's compute over the fastest's (1: balanced).
double imbalance(const RingBenchReport& r) {
  double fastest = 1e300, slowest = 0;
  for (const RankReport& e : r.per_rank) {
    fastest = std::min(fastest, e.compute_ms);
    slowest = std::max(slowest, e.compute_ms);
  }
  return fastest > 0 && !r.per_rank.empty() ? slowest / fastest : 0.0;
}
}  // namespace

std::string report_text(const RingBenchReport& r) {
  const RingBenchShape& s = r.shape;
  const kernels::AttentionSpec& a = s.attention;
  std::ostringstream out;
  out << "qkv bench: ring-attention " << (s.backward ? "forward+backward" : "forward") << ", B=" << s.batch
      << " T=" << s.seq_len << " H=" << a.heads << " G=" << a.groups() << " D=" << a.head_dim
      << (a.causal ? " causal" : " no mask") << (a.dropout > 0 ? " dropout " + std::to_string(a.dropout) : "")
      << (a.window > 0 ? " window " + std::to_string(a.window) : "") << (a.alibi ? " ALiBi" : "")
      << (a.softcap > 0 ? " softcap " + std::to_string(a.softcap) : "") << ", split " << split_name(s.split) << ", "
      << r.ranks << " rank" << (r.ranks == 1 ? "" : "s") << " x " << r.threads << " thread"
      << (r.threads == 1 ? "" : "s") << "\n";
  out << std::fixed << std::setprecision(1) << "  rank   tokens     run ms  compute ms     comm ms     wait ms"
      << "  hidden  max RSS MiB\n";
  for (size_t x = 0; x < r.per_rank.size(); ++x) {
    const RankReport& e = r.per_rank[x];
    const double hidden = e.comm_ms > 0 ? 1.0 - e.wait_ms / e.comm_ms : 1.0;
    out << std::setw(6) << x << std::setw(9) << e.tokens << std::setw(11) << e.run_ms << std::setw(12) << e.compute_ms
        << std::setw(12) << e.comm_ms << std::setw(12) << e.wait_ms << std::setw(8) << std::setprecision(2) << hidden
        << std::setprecision(1) << std::setw(13) << e.max_rss_mib << "\n";
  }
  out << std::setprecision(2) << "  median " << r.median_ms << " ms (min " << r.min_ms << ", max " << r.max_ms << ", "
      << r.iters << " runs; the slowest rank's)  " << std::setprecision(1) << r.flops / 1e9 << " GFLOP -> "
      << r.gflops << " GFLOP/s\n"
      << "  ring steps " << r.steps << " of " << r.ranks << std::setprecision(3) << "; communication hidden "
      << r.comm_hidden << "; slowest rank's compute / fastest's " << imbalance(r) << "; max RSS of a rank "
      << std::setprecision(1) << r.max_rank_rss_mib << " MiB\n";
  return out.str();
}

nlohmann::json report_json(const RingBenchReport& r) {
  const RingBenchShape& s = r.shape;
  const kernels::AttentionSpec& a = s.attention;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankReport& e : r.per_rank)
    ranks.push_back({{"tokens", e.tokens}, {"run_ms", e.run_ms}, {"compute_ms", e.compute_ms},
                     {"comm_ms", e.comm_ms}, {"wait_ms", e.wait_ms}, {"max_rss_mib", e.max_rss_mib}});
  return {{"module", "ring-attention"}, {"backward", s.backward}, {"batch", s.batch},
          {"seq_len", s.seq_len},      {"num_heads", a.heads},   {"num_kv_heads", a.groups()},
          {"head_dim", a.head_dim},    {"causal", a.causal},     {"dropout", a.dropout},
          {"window", a.window},        {"alibi", a.alibi},       {"softcap", a.softcap},
          {"split", split_name(s.split)}, {"ranks", r.ranks},    {"threads", r.threads},
          {"iters", r.iters},          {"median_ms", r.median_ms}, {"min_ms", r.min_ms},
          {"times_ms", r.times_ms},    {"gflop", r.flops / 1e9}, {"gflops", r.gflops},
          {"comm_hidden", r.comm_hidden}, {"steps", r.steps}, {"max_rank_rss_mib", r.max_rank_rss_mib},
          {"compute_slowest_over_fastest", imbalance(r)},
          {"per_rank", ranks}};
}

}  // namespace qkv::mpi
