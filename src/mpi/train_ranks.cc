// A training run under mpirun. See include/qkv/mpi/train_ranks.h.
#include "qkv/mpi/train_ranks.h"

#include <cstdlib>
#include <exception>

#include "qkv/mpi/communicator.h"
#include "qkv/mpi/rank_data_parallel.h"

namespace qkv::mpi {
namespace {

class MpiTrainRanks : public TrainRanks {
 public:
  explicit MpiTrainRanks(const Communicator& comm) : comm_(comm), dp_(comm) {}
  int rank() const override { return comm_.rank(); }
  int ranks() const override { return comm_.size(); }
  DataParallel& data_parallel() override { return dp_; }
  void check_agreement(const std::string& description, const std::string& problem) override {
    mpi::check_agreement(comm_, "qkv train", description, problem);
  }

 private:
  const Communicator& comm_;
  RankDataParallel dp_;
};

}  // namespace

bool started_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v && *v) return true;
  return false;
}

int with_train_ranks(const std::function<int(TrainRanks&)>& body,
                     const std::function<std::string(const std::string&)>& error_line) {
  Session session(nullptr, nullptr);
  // An error every rank has: rank 0 says it here, and every rank waits until it has been said
  // (mpi::say_once). Said later, by main, it could be lost: mpirun ends the job, rank 0 too, as soon
  // as another rank has exited with an error.
  const auto said_once = [&](const Communicator& comm, const std::exception& e) {
    say_once(comm, error_line(e.what()));  // as the command's own errors read
    return 1;
  };
  double timeout = 0;
  try {
    timeout = default_timeout_seconds();  // QKV_MPI_TIMEOUT, the same on every rank
  } catch (const Error& e) {
    return said_once(Communicator(MPI_COMM_WORLD, 600), e);  // the default bound
  }
  const Communicator comm(MPI_COMM_WORLD, timeout);
  MpiTrainRanks ranks(comm);
  try {
    return body(ranks);
  } catch (const AgreementError& e) {
    return said_once(comm, e);
  } catch (const AllRanksError& e) {
    return said_once(comm, e);
  } catch (const std::exception& e) {  // this rank's alone: the others would wait for it
    comm.abort(e.what());
  }
}

}  // namespace qkv::mpi
