// qkv train's progress on the terminal: a bar that redraws in place on a terminal (a line per
// tenth of the run otherwise), the evaluations between, and the numbers' formats.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "qkv/train/trainer.h"
#include "stop_signals.h"

namespace qkv::cli {

std::string clock_time(double seconds);   // "1:05", "2:03:07"; "?" when unknown

class Progress {
 public:
  Progress(bool enabled, int64_t first_step, int64_t total);
  void update(const StepStats& s, double elapsed, int64_t tokens, bool force);
  void message(const std::string& text);  // a line of its own, the bar redrawn after it
  void finish();

 private:
  bool enabled_, tty_;
  int64_t first_, total_;
  double last_ = -1;
  bool dirty_ = false;
};

// Prints the run as it goes: the progress bar, evaluations; remembers the last checkpoint and when
// the steps ended (the time reported), and gives the signals back then.
class ProgressObserver : public RunObserver {
 public:
  ProgressObserver(Progress& progress, int64_t total, std::optional<StopSignals>& signals)
      : progress_(progress), total_(total), signals_(signals) {}

  void on_step(const StepStats& s, int64_t tokens) override;
  void on_eval(const EvalStats& e) override;
  void on_checkpoint(const std::string&, int64_t step) override { last_saved = step; }
  void on_steps_end(const RunResult&) override;

  std::optional<int64_t> last_saved;  // the step of the last checkpoint written
  double elapsed = 0;                 // seconds from the start to the end of the steps

 private:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

  Progress& progress_;
  int64_t total_;
  std::optional<StopSignals>& signals_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace qkv::cli
