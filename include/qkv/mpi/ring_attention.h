// qkv/mpi/ring_attention.h - sequence-parallel attention over MPI ranks (ring attention, Liu et
// al. 2023), equal to the single-process fused kernel (qkv/kernels/attention.h) up to rounding.
//
// Legend: B batch, H query heads, G key/value heads (G divides H), T the whole sequence, Tr this
// rank's tokens (SequenceSplit::tokens(rank): its runs, in position order, concatenated), D
// query/key dim, Dv value dim.
//
//   q (B, H, Tr, D), k (B, G, Tr, D), v (B, G, Tr, Dv)  ->  o (B, H, Tr, Dv), lse (B, H, Tr)
//
// Forward. Each rank keeps its queries; the key/value blocks travel round the ring: at step s
// (0 .. N-1) rank r holds the block of rank r - s (mod N), sends it on to r + 1 and receives the
// next from r - 1 with MPI_Isend / MPI_Irecv while a second thread runs the fused kernel on the
// block in hand (query_offset and key_offset: the runs' global positions, so the causal mask and
// dropout's Philox keys (b, h, pos_i, pos_j) are the whole sequence's). Each (query run, key run)
// pair gives (o_p, lse_p); they merge by the log-sum-exp rule, in double:
//   lse = log(exp(lse) + exp(lse_p)),  o = o exp(lse_old - lse) + o_p exp(lse_p - lse)
// Pairs the causal mask or the window hides wholly are skipped, and with a window the blocks stop
// travelling after the last step at which any rank sees the block in hand (contiguous split: about
// 1 + w / (T / N) steps rather than N; zigzag: every rank's late run needs its right neighbour's,
// N - 1 steps away, so all N steps). The window, ALiBi (distances pos_i - pos_j) and the softcap
// are the kernel's, on global positions. Heads go round in groups (a group's block stays
// under max_block_bytes), so memory is q, k, v, o plus a few blocks, not a second copy of k and v.
// Backward. Given the forward's o and lse, the same ring: each rank adds its queries' share of
// dq for the block in hand, and its share of that block's dk and dv to an accumulator that
// travels one step behind the block and, after the last step with work (N, or fewer with a
// window), goes to the block's owner.
//
// Collective: every rank of the communicator calls with the same options (checked: a digest of
// them and of the shapes against rank 0's; any difference, or one rank's bad shapes, throws the
// same mpi::AgreementError on every rank).
#pragma once

#include <cstdint>

#include "qkv/kernels/attention.h"
#include "qkv/mpi/communicator.h"
#include "qkv/mpi/sequence_split.h"

namespace qkv::mpi {

struct RingAttentionOptions {
  int64_t seq_len = 0;                     // T, the whole sequence
  SplitKind split = SplitKind::kContiguous;
  // scale, mask (none or causal), dropout p and seed, window, ALiBi slopes (H of them, the whole
  // layer's, the same on every rank), softcap, pool: checked as the fused kernel checks them. Its
  // offsets must be 0 (the ring sets them) and it may have no additive or boolean mask.
  kernels::AttentionOptions attention;
  // Key/value heads go round in groups whose block (k, v and, backward, their gradients) stays
  // under this many bytes, one head at least: memory beyond q, k, v, o is a few such blocks.
  int64_t max_block_bytes = int64_t{32} << 20;
};

// Where a call spent its time on this rank, in seconds.
struct RingTimes {
  double compute = 0;  // the kernels and the merges, on the compute thread
  double comm = 0;     // each step's messages, from posting to completion, summed
  double wait = 0;     // this rank waiting for messages after its computation of the step ended
  int steps = 0;       // ring steps per head group: N, or fewer when a window hides the later blocks
  // Of the messages' time, the share that overlapped the computation: 1 - wait / comm (1 if no
  // messages).
  double hidden() const { return comm > 0 ? 1.0 - wait / comm : 1.0; }
};

void ring_attention_forward(const Communicator& comm, kernels::ConstHeads q, kernels::ConstHeads k,
                            kernels::ConstHeads v, kernels::MutableHeads o, float* lse,
                            const RingAttentionOptions& options, RingTimes* times = nullptr);

// dq (B, H, Tr, D), dk (B, G, Tr, D), dv (B, G, Tr, Dv), overwritten. o and lse are the forward's.
void ring_attention_backward(const Communicator& comm, kernels::ConstHeads q, kernels::ConstHeads k,
                             kernels::ConstHeads v, kernels::ConstHeads o, kernels::ConstHeads d_o, const float* lse,
                             kernels::MutableHeads dq, kernels::MutableHeads dk, kernels::MutableHeads dv,
                             const RingAttentionOptions& options, RingTimes* times = nullptr);

}  // namespace qkv::mpi
