// qkv/mpi/ring_bench.h - times ring attention on random inputs across the ranks (the harness
// behind `mpirun -np N qkv bench --module ring-attention`).
//
// Each timed run starts at a barrier; its time is the slowest rank's (the ring finishes when the
// last rank does). Per rank: the computation, the transfers (posting to completion) and the wait
// for them after the computation - averaged over the timed runs - and the peak memory (max RSS).
// comm_hidden = 1 - (sum of waits) / (sum of transfer times) over the ranks: the share of the
// messages' time that overlapped computation.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/kernels/attention_spec.h"
#include "qkv/mpi/communicator.h"
#include "qkv/mpi/ring_attention.h"

namespace qkv::mpi {

struct RingBenchShape {
  int64_t batch = 1, seq_len = 0;  // B, T (the whole sequence, split over the ranks)
  bool backward = false;
  // H, G, D, causal, dropout, window, alibi, softcap (kernels/attention_spec.h; no RoPE, f32)
  kernels::AttentionSpec attention = {.heads = 12, .head_dim = 64};
  SplitKind split = SplitKind::kContiguous;
};

struct RankReport {
  int64_t tokens = 0;
  double run_ms = 0;      // this rank's time per run, barrier to return
  double compute_ms = 0;  // RingTimes per run, in milliseconds
  double comm_ms = 0;
  double wait_ms = 0;
  double max_rss_mib = 0;
};

struct RingBenchReport {
  RingBenchShape shape;
  int ranks = 1, threads = 1, iters = 0;
  std::vector<double> times_ms;  // per timed run: the slowest rank's
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double flops = 0, gflops = 0;  // the whole sequence's work (causal: the visible pairs only)
  double comm_hidden = 1;
  int steps = 0;  // ring steps per head group (N, or fewer when a window hides the later blocks)
  double max_rank_rss_mib = 0;
  std::vector<RankReport> per_rank;  // filled on rank 0 only
};

// Collective: every rank calls with the same shape (checked). The report is complete on rank 0.
RingBenchReport run_ring_bench(const Communicator& comm, const RingBenchShape& shape, int iters, int warmup,
                               ThreadPool& pool);

// Rank 0's report for people (a row per rank: its tokens, compute, communication and the share of
// it hidden) and for machines (qkv bench --json's object).
std::string report_text(const RingBenchReport& r);
nlohmann::json report_json(const RingBenchReport& r);

}  // namespace qkv::mpi
