// The ring's two costs, measured apart: the fused kernel on one (query block, key block) pair, and
// one key/value block's message between two ranks. bench/ring_scaling_model.py turns them into the
// README's scaling model (when communication hides behind computation, and the time for long T).
//
//   mpirun -np 2 build/bench/qkv_ring_block_bench [--blocks 256,512,1024,2048,4096] [--heads 12]
//          [--dim 64] [--threads 2] [--iters 5] [--json out.json]
//
// Legend: H heads, L a block's tokens (one run of a rank), D head dim (Dv = D).
// Computation (rank 0 alone; the other ranks sleep in a polled barrier):
//   full: q (1, H, L, D) against k, v (1, H, L, D) at positions wholly before the queries
//         (query_offset L, key_offset 0, causal): every pair visible - an off-diagonal ring pair
//   diag: the same positions for both (causal, offsets 0): the diagonal pair, half the pairs
//   forward and backward of each, median of --iters after one warm-up.
// Messages (ranks 0 and 1; over whatever links them: shared memory here, a network between hosts):
//   one_way: half the round trip of a ping-pong of the k/v block, L H 2D floats (median)
//   exchange: both ranks send the block to each other at once (a ring step's traffic, median)
//   latency: one_way of 8 bytes.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention.h"

namespace {

using Clock = std::chrono::steady_clock;
using qkv::kernels::ConstHeads;
using qkv::kernels::MutableHeads;

double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count(); }

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// A barrier that sleeps between polls: the waiting ranks leave the cores to rank 0's kernel.
void quiet_barrier() {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  for (int done = 0; !done;) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

struct Flags {
  std::vector<long> blocks = {256, 512, 1024, 2048, 4096};
  long heads = 12, dim = 64;
  int threads = 2, iters = 5;
  std::string json;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "qkv_ring_block_bench: " << why
            << "\nusage: mpirun -np 2 qkv_ring_block_bench [--blocks 256,512,...] [--heads 12] [--dim 64] "
               "[--threads 2] [--iters 5] [--json FILE]\n";
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

long positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 1) usage(flag + " " + text + ": expected a whole number >= 1");
  return v;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + ": needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--blocks") {
      f.blocks.clear();
      std::stringstream s(value);
      for (std::string item; std::getline(s, item, ',');) f.blocks.push_back(positive(flag, item));
    } else if (flag == "--heads") {
      f.heads = positive(flag, value);
    } else if (flag == "--dim") {
      f.dim = positive(flag, value);
    } else if (flag == "--threads") {
      f.threads = static_cast<int>(positive(flag, value));
    } else if (flag == "--iters") {
      f.iters = static_cast<int>(positive(flag, value));
    } else if (flag == "--json") {
      f.json = value;
    } else {
      usage("unknown flag " + flag);
    }
  }
  return f;
}

// Milliseconds of the forward and the backward of one pair, median of iters after a warm-up.
struct PairTimes {
  double forward_ms = 0, backward_ms = 0;
};
PairTimes time_pair(long L, long H, long D, bool diagonal, int iters, qkv::ThreadPool& pool) {
  const size_t n = static_cast<size_t>(H * L * D);
  std::vector<float> q(n), k(n), v(n), o(n), d_o(n), dq(n), dk(n), dv(n), lse(static_cast<size_t>(H * L));
  uint64_t s = 12345;
  for (std::vector<float>* x : {&q, &k, &v, &d_o})
    for (float& e : *x) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      e = static_cast<float>(static_cast<double>(s >> 40) / 8388608.0 - 1.0);
    }
  qkv::kernels::AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(static_cast<float>(D));
  opt.mask = qkv::kernels::AttentionMask::causal();
  opt.query_offset = diagonal ? 0 : L;  // off the diagonal: every key before every query
  opt.pool = &pool;
  const auto heads = [&](std::vector<float>& x) { return MutableHeads::contiguous(x.data(), 1, H, L, D); };
  std::vector<double> fwd, bwd;
  for (int it = 0; it <= iters; ++it) {
    double t0 = now_ms();
    qkv::kernels::attention_forward(heads(q), heads(k), heads(v), heads(o), lse.data(), opt);
    double t1 = now_ms();
    qkv::kernels::attention_backward(heads(q), heads(k), heads(v), heads(o), heads(d_o), lse.data(), heads(dq),
                                     heads(dk), heads(dv), opt);
    double t2 = now_ms();
    if (it == 0) continue;  // warm-up
    fwd.push_back(t1 - t0);
    bwd.push_back(t2 - t1);
  }
  return {median(fwd), median(bwd)};
}

// One-way time (half a ping-pong's round trip) and a simultaneous exchange's time, in ms.
struct MessageTimes {
  double one_way_ms = 0, exchange_ms = 0;
};
MessageTimes time_message(size_t floats, int iters, int rank) {
  std::vector<float> out(std::max<size_t>(floats, 1), 1.0f), in(std::max<size_t>(floats, 1));
  const int count = static_cast<int>(floats), peer = 1 - rank;
  std::vector<double> one_way, exchange;
  for (int it = 0; it <= iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Request r[2];
    double t0 = now_ms();
    if (rank == 0) {
      MPI_Isend(out.data(), count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &r[0]);
      MPI_Wait(&r[0], MPI_STATUS_IGNORE);
      MPI_Irecv(in.data(), count, MPI_FLOAT, peer, 2, MPI_COMM_WORLD, &r[1]);
      MPI_Wait(&r[1], MPI_STATUS_IGNORE);
    } else {
      MPI_Irecv(in.data(), count, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &r[1]);
      MPI_Wait(&r[1], MPI_STATUS_IGNORE);
      MPI_Isend(out.data(), count, MPI_FLOAT, peer, 2, MPI_COMM_WORLD, &r[0]);
      MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    }
    const double round_trip = now_ms() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_ms();
    MPI_Irecv(in.data(), count, MPI_FLOAT, peer, 3, MPI_COMM_WORLD, &r[1]);
    MPI_Isend(out.data(), count, MPI_FLOAT, peer, 3, MPI_COMM_WORLD, &r[0]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    const double both = now_ms() - t0;
    if (it == 0) continue;
    one_way.push_back(round_trip / 2);
    exchange.push_back(both);
  }
  return {median(one_way), median(exchange)};
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Flags f = parse(argc, argv);
  if (size < 2) usage("needs 2 ranks (mpirun -np 2), got " + std::to_string(size));
  qkv::ThreadPool pool(f.threads);
  std::ostringstream json;
  json << "{\"heads\": " << f.heads << ", \"dim\": " << f.dim << ", \"threads\": " << f.threads
       << ", \"iters\": " << f.iters << ", \"ranks\": " << size << ", \"blocks\": [";
  if (rank == 0)
    std::printf("%8s %12s %12s %12s %12s %12s %12s %12s\n", "L", "fwd_full_ms", "fwd_diag_ms", "bwd_full_ms",
                "bwd_diag_ms", "kv_MiB", "one_way_ms", "exchange_ms");
  // The first messages between two ranks set up their channel (milliseconds): not timed.
  if (rank < 2) (void)time_message(static_cast<size_t>(f.blocks.back() * f.heads * 2 * f.dim), 3, rank);
  else for (int it = 0; it <= 2 * 3 + 1; ++it) MPI_Barrier(MPI_COMM_WORLD);
  for (size_t b = 0; b < f.blocks.size(); ++b) {
    const long L = f.blocks[b];
    PairTimes full, diag;
    if (rank == 0) {
      full = time_pair(L, f.heads, f.dim, false, f.iters, pool);
      diag = time_pair(L, f.heads, f.dim, true, f.iters, pool);
    }
    quiet_barrier();
    const size_t floats = static_cast<size_t>(L * f.heads * 2 * f.dim);  // k and v of the block
    MessageTimes m;
    if (rank < 2) m = time_message(floats, std::max(f.iters, 11), rank);
    else for (int it = 0; it <= 2 * std::max(f.iters, 11) + 1; ++it) MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      const double mib = static_cast<double>(floats) * 4 / 1048576.0;
      std::printf("%8ld %12.3f %12.3f %12.3f %12.3f %12.2f %12.4f %12.4f\n", L, full.forward_ms, diag.forward_ms,
                  full.backward_ms, diag.backward_ms, mib, m.one_way_ms, m.exchange_ms);
      json << (b ? ", " : "") << "{\"tokens\": " << L << ", \"fwd_full_ms\": " << full.forward_ms
           << ", \"fwd_diag_ms\": " << diag.forward_ms << ", \"bwd_full_ms\": " << full.backward_ms
           << ", \"bwd_diag_ms\": " << diag.backward_ms << ", \"kv_bytes\": " << floats * 4
           << ", \"one_way_ms\": " << m.one_way_ms << ", \"exchange_ms\": " << m.exchange_ms << "}";
    }
  }
  MessageTimes small;
  if (rank < 2) small = time_message(2, 101, rank);
  else for (int it = 0; it <= 2 * 101 + 1; ++it) MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("latency (8 bytes, one way): %.2f us\n", small.one_way_ms * 1e3);
    json << "], \"latency_us\": " << small.one_way_ms * 1e3 << "}";
    if (!f.json.empty()) {
      std::ofstream out(f.json);
      out << json.str() << "\n";
      if (!out) std::fprintf(stderr, "qkv_ring_block_bench: could not write %s\n", f.json.c_str());
    }
    std::printf("%s\n", json.str().c_str());
  }
  MPI_Finalize();
  return 0;
}
