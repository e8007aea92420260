// mpirun -np N qkv bench --module ring-attention --seq-len T [--num-heads H] [--head-dim D]
//   [--backward] [--split contiguous|zigzag] [--window W] [--alibi] [--softcap C] [--json]
// Every rank checks the flags and its configuration against rank 0's (one message, from rank 0,
// if they differ); rank 0 prints the table and, with --json, one JSON object as the last line.
#include "bench_ring.h"

#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"
#include "qkv/mpi/communicator.h"
#include "qkv/mpi/ring_bench.h"
#include "flags.h"

namespace qkv::cli {
namespace {

// What is wrong with the flags ("" if nothing); every rank checks its own.
std::string flags_problem(const RingBenchFlags& f) {
  if (f.seq_len < 1) return str("--seq-len ", f.seq_len, ": must be at least 1");
  if (f.batch < 1) return str("--batch ", f.batch, ": must be at least 1");
  try {
    kernels::validate_attention_spec(f.attention, "", attention_flag_name);
  } catch (const kernels::AttentionSpecError& e) {
    return e.what();
  }
  if (f.split != "contiguous" && f.split != "zigzag") return str("--split ", f.split, ": expected contiguous or zigzag");
  if (f.iters < 1) return str("--iters ", f.iters, ": must be at least 1");
  if (f.warmup < 0) return str("--warmup ", f.warmup, ": must be at least 0");
  if (f.threads < 0) return str("--threads ", f.threads, ": must be at least 1 (or 0: the default)");
  return "";
}

std::string describe(const RingBenchFlags& f) {
  const kernels::AttentionSpec& a = f.attention;
  std::ostringstream s;
  s << "--batch " << f.batch << " --seq-len " << f.seq_len << " --num-heads " << a.heads << " --num-kv-heads "
    << a.kv_heads << " --head-dim " << a.head_dim << " --split " << f.split << (f.backward ? " --backward" : "")
    << (a.causal ? "" : " --no-mask") << " --dropout " << a.dropout << " --window " << a.window
    << (a.alibi ? " --alibi" : "") << " --softcap " << a.softcap << " --iters " << f.iters << " --warmup " << f.warmup;
  return s.str();
}

int run(const RingBenchFlags& f, const mpi::Communicator& comm) {
  mpi::check_agreement(comm, "qkv bench --module ring-attention", describe(f), flags_problem(f));
  if (f.threads > 0) set_default_thread_count(f.threads);
  mpi::RingBenchShape shape;
  shape.batch = f.batch;
  shape.seq_len = f.seq_len;
  shape.attention = f.attention;
  shape.backward = f.backward;
  shape.split = mpi::parse_split(f.split);
  const kernels::AttentionSpec& a = shape.attention;
  const mpi::RingBenchReport r = mpi::run_ring_bench(comm, shape, f.iters, f.warmup, default_pool());
  if (comm.rank() != 0) return 0;
  std::cout << "qkv bench: ring-attention " << (f.backward ? "forward+backward" : "forward") << ", B=" << f.batch
            << " T=" << f.seq_len << " H=" << a.heads << " G=" << a.groups() << " D=" << a.head_dim
            << (a.causal ? " causal" : " no mask") << (a.dropout > 0 ? " dropout " + std::to_string(a.dropout) : "")
            << (a.window > 0 ? " window " + std::to_string(a.window) : "") << (a.alibi ? " ALiBi" : "")
            << (a.softcap > 0 ? " softcap " + std::to_string(a.softcap) : "")
            << ", split " << f.split << ", " << r.ranks << " rank" << (r.ranks == 1 ? "" : "s") << " x " << r.threads
            << " thread" << (r.threads == 1 ? "" : "s") << "\n";
  std::cout << std::fixed << std::setprecision(1) << "  rank   tokens     run ms  compute ms     comm ms     wait ms"
            << "  hidden  max RSS MiB\n";
  for (size_t x = 0; x < r.per_rank.size(); ++x) {
    const mpi::RankReport& e = r.per_rank[x];
    const double hidden = e.comm_ms > 0 ? 1.0 - e.wait_ms / e.comm_ms : 1.0;
    std::cout << std::setw(6) << x << std::setw(9) << e.tokens << std::setw(11) << e.run_ms << std::setw(12)
              << e.compute_ms << std::setw(12) << e.comm_ms << std::setw(12) << e.wait_ms << std::setw(8)
              << std::setprecision(2) << hidden << std::setprecision(1) << std::setw(13) << e.max_rss_mib << "\n";
  }
  double fastest = 1e300, slowest = 0;
  for (const mpi::RankReport& e : r.per_rank) {
    fastest = std::min(fastest, e.compute_ms);
    slowest = std::max(slowest, e.compute_ms);
  }
  std::cout << std::setprecision(2) << "  median " << r.median_ms << " ms (min " << r.min_ms << ", max " << r.max_ms
            << ", " << r.iters << " runs; the slowest rank's)  " << std::setprecision(1) << r.flops / 1e9
            << " GFLOP -> " << r.gflops << " GFLOP/s\n"
            << "  ring steps " << r.steps << " of " << r.ranks << std::setprecision(3) << "; communication hidden "
            << r.comm_hidden << "; slowest rank's compute / fastest's "
            << (fastest > 0 ? slowest / fastest : 0.0) << "; max RSS of a rank " << std::setprecision(1)
            << r.max_rank_rss_mib << " MiB\n";
  if (f.json) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const mpi::RankReport& e : r.per_rank)
      ranks.push_back({{"tokens", e.tokens}, {"run_ms", e.run_ms}, {"compute_ms", e.compute_ms},
                       {"comm_ms", e.comm_ms}, {"wait_ms", e.wait_ms}, {"max_rss_mib", e.max_rss_mib}});
    nlohmann::json j = {{"module", "ring-attention"}, {"backward", f.backward}, {"batch", f.batch},
                        {"seq_len", f.seq_len},      {"num_heads", a.heads},   {"num_kv_heads", a.groups()},
                        {"head_dim", a.head_dim},    {"causal", a.causal},     {"dropout", a.dropout},
                        {"window", a.window},        {"alibi", a.alibi},       {"softcap", a.softcap},
                        {"split", f.split},          {"ranks", r.ranks},       {"threads", r.threads},
                        {"iters", r.iters},          {"median_ms", r.median_ms}, {"min_ms", r.min_ms},
                        {"times_ms", r.times_ms},    {"gflop", r.flops / 1e9}, {"gflops", r.gflops},
                        {"comm_hidden", r.comm_hidden}, {"steps", r.steps}, {"max_rank_rss_mib", r.max_rank_rss_mib},
                        {"compute_slowest_over_fastest", fastest > 0 ? slowest / fastest : 0.0},
                        {"per_rank", ranks}};
    std::cout << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

int run_ring_bench(const RingBenchFlags& flags) {
  mpi::Session session(nullptr, nullptr);
  const mpi::Communicator comm;
  try {
    return run(flags, comm);
  } catch (const mpi::AgreementError& e) {  // every rank has it: rank 0 says it, as main would
    mpi::say_once(comm, std::string("qkv: error: ") + e.what() + limit_hint(e.what()));
    return 1;
  }
}

}  // namespace qkv::cli
