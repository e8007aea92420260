// Ctrl-C (SIGINT) and SIGTERM as a flag a long command reads between its steps (qkv train's steps,
// qkv generate's tokens), so it can stop cleanly: write what it has, exit 128 + the signal.
#pragma once

#include <csignal>

namespace qkv::cli {

// SIGINT and SIGTERM set a flag Trainer::run reads between steps; the previous handlers come back
// when the steps end, so a second Ctrl-C during the final writes is not swallowed forever.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  static const volatile std::sig_atomic_t* flag();  // the signal's number once one came, else 0

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};

}  // namespace qkv::cli
