// One step of a ring: the computation on the block in hand runs on a second thread while this
// thread (the one that talks to MPI) drives the step's transfers to completion. Not installed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qkv/mpi/communicator.h"
#include "qkv/mpi/ring_attention.h"

namespace qkv::mpi {

// Runs compute() while polling `requests` until they complete; adds the compute time, the
// transfers' time (from this call to their completion) and the time spent waiting on them after
// compute() returned to `times`. Past the communicator's timeout after compute() returned, aborts
// naming `what`. An exception from compute() is rethrown after the transfers complete.
void run_step(const Communicator& comm, std::vector<MPI_Request>& requests, const std::function<void()>& compute,
              const std::string& what, RingTimes& times);

}  // namespace qkv::mpi
