// mpirun -np N qkv bench --module ring-attention --seq-len T [--num-heads H] [--head-dim D]
//   [--backward] [--split contiguous|zigzag] [--window W] [--alibi] [--softcap C] [--json]
// Every rank checks the flags and its configuration against rank 0's (one message, from rank 0,
// if they differ); rank 0 prints the table and, with --json, one JSON object as the last line.
#include "bench_flags.h"

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
std::string flags_problem(const BenchFlags& f) {
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

std::string describe(const BenchFlags& f) {
  const kernels::AttentionSpec& a = f.attention;
  std::ostringstream s;
  s << "--batch " << f.batch << " --seq-len " << f.seq_len << " --num-heads " << a.heads << " --num-kv-heads "
    << a.kv_heads << " --head-dim " << a.head_dim << " --split " << f.split << (f.backward ? " --backward" : "")
    << (a.causal ? "" : " --no-mask") << " --dropout " << a.dropout << " --window " << a.window
    << (a.alibi ? " --alibi" : "") << " --softcap " << a.softcap << " --iters " << f.iters << " --warmup " << f.warmup;
  return s.str();
}

int run(BenchFlags f, const mpi::Communicator& comm) {
  if (f.attention.head_dim == 0) f.attention.head_dim = 64;
  mpi::check_agreement(comm, "qkv bench --module ring-attention", describe(f), flags_problem(f));
  if (f.threads > 0) set_default_thread_count(f.threads);
  mpi::RingBenchShape shape;
  shape.batch = f.batch;
  shape.seq_len = f.seq_len;
  shape.attention = f.attention;
  shape.backward = f.backward;
  shape.split = mpi::parse_split(f.split);
  const mpi::RingBenchReport r = mpi::run_ring_bench(comm, shape, f.iters, f.warmup, default_pool());
  if (comm.rank() != 0) return 0;
  std::cout << mpi::report_text(r);
  if (f.json) std::cout << mpi::report_json(r).dump() << "\n";
  return 0;
}

}  // namespace

int run_ring_bench(const BenchFlags& flags) {
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
