// A ring attention job in which one rank fails on purpose, for tests/mpi/fault_test.sh:
//   qkv_mpi_fault die     rank 1 kills itself (SIGKILL) on the third run: mpirun ends the others
//   qkv_mpi_fault stall   rank 1 sleeps instead of its third run: the others' bounded waits
//                         (QKV_MPI_TIMEOUT) end the job with "a rank died or stalled"
// The other ranks run ring attention 20 times; the script checks that the job ends, with an
// error, long before it would if they waited forever.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "qkv/mpi/communicator.h"
#include "qkv/mpi/ring_attention.h"

int main(int argc, char** argv) {
  qkv::mpi::Session session(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "die" && mode != "stall") {
    std::cerr << "usage: qkv_mpi_fault die|stall\n";
    return 2;
  }
  const qkv::mpi::Communicator comm;
  qkv::mpi::RingAttentionOptions opt;
  opt.seq_len = 64 * comm.size();
  opt.attention.mask = qkv::kernels::AttentionMask::causal();
  const int64_t B = 1, H = 2, T = 64, D = 8;
  std::vector<float> q(B * H * T * D, 0.5f), o(q.size()), lse(B * H * T);
  const auto in = qkv::kernels::ConstHeads::contiguous(q.data(), B, H, T, D);
  for (int run = 0; run < 20; ++run) {
    if (comm.rank() == 1 && run == 2) {
      if (mode == "die") raise(SIGKILL);
      sleep(120);
    }
    qkv::mpi::ring_attention_forward(comm, in, in, in, qkv::kernels::MutableHeads::contiguous(o.data(), B, H, T, D),
                                     lse.data(), opt);
  }
  std::cout << "rank " << comm.rank() << ": all 20 runs done (the fault did not happen)\n";
  return 0;
}
