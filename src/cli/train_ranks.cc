// qkv train under mpirun: MPI start-up, the configuration check and the data-parallel sums
// (train_ranks.h).
#include "train_ranks.h"

#include <cstdlib>
#include <exception>

#include "qkv/mpi/communicator.h"
#include "qkv/mpi/data_parallel.h"

namespace qkv::cli {
namespace {

class MpiTrainRanks : public TrainRanks {
 public:
  explicit MpiTrainRanks(const mpi::Communicator& comm) : comm_(comm), dp_(comm) {}
  int rank() const override { return comm_.rank(); }
  int ranks() const override { return comm_.size(); }
  DataParallel& data_parallel() override { return dp_; }
  void check_agreement(const std::string& description, const std::string& problem) override {
    mpi::check_agreement(comm_, "qkv train", description, problem);
  }

 private:
  const mpi::Communicator& comm_;
  mpi::RankDataParallel dp_;
};

}  // namespace

bool started_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v && *v) return true;
  return false;
}

int with_train_ranks(const std::function<int(TrainRanks&)>& body) {
  mpi::Session session(nullptr, nullptr);
  const mpi::Communicator comm;
  MpiTrainRanks ranks(comm);
  try {
    return body(ranks);
  } catch (const mpi::AgreementError&) {
    if (comm.rank() == 0) throw;  // every rank has it: rank 0 says it
    return 1;
  } catch (const AllRanksError&) {
    if (comm.rank() == 0) throw;
    return 1;
  } catch (const std::exception& e) {  // this rank's alone: the others would wait for it
    comm.abort(e.what());
  }
}

}  // namespace qkv::cli
