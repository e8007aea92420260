// qkv/mpi/train_ranks.h - a training run under mpirun: MPI started and ended around it, its ranks
// (train/ranks.h) over MPI_COMM_WORLD, and the errors every rank has said once.
#pragma once

#include <functional>
#include <string>

#include "qkv/train/ranks.h"

namespace qkv::mpi {

// Whether mpirun (Open MPI, or a PMI launcher) started this process: only then does a command start
// MPI; run alone, nothing changes.
bool started_by_mpirun();

// Starts MPI, runs `body` with the ranks, ends MPI; returns body's exit status. An error every rank
// has (the configuration check, an AllRanksError, a bad QKV_MPI_TIMEOUT) is written by rank 0 alone
// as error_line(what) gives it, and every rank returns 1; any other error ends the job (MPI_Abort)
// with the rank's message.
int with_train_ranks(const std::function<int(TrainRanks&)>& body,
                     const std::function<std::string(const std::string&)>& error_line);

}  // namespace qkv::mpi
