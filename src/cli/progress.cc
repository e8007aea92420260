// qkv train's progress display. See progress.h.
#include "progress.h"

#include "qkv/train/run_report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

namespace qkv::cli {
std::string clock_time(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

Progress::Progress(bool enabled, int64_t first_step, int64_t total)
    : enabled_(enabled), tty_(::isatty(2) == 1), first_(first_step), total_(total) {}

void Progress::update(const StepStats& s, double elapsed, int64_t tokens, bool force) {
  if (!enabled_) return;
  const bool milestone = total_ >= 10 ? s.step % (total_ / 10) == 0 : true;
  if (tty_ ? !force && elapsed - last_ < 0.1 : !(milestone || force)) return;
  last_ = elapsed;
  const int64_t done = s.step - first_;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - s.step) : -1;
  const int width = 24;
  const int fill = total_ > 0 ? static_cast<int>(width * s.step / total_) : width;
  char line[256];
  std::snprintf(line, sizeof line, "step %*lld/%lld [%s%s] loss %.4f", static_cast<int>(std::to_string(total_).size()),
                static_cast<long long>(s.step), static_cast<long long>(total_), std::string(static_cast<size_t>(fill), '#').c_str(),
                std::string(static_cast<size_t>(width - fill), '-').c_str(), static_cast<double>(s.loss));
  std::string text = line;
  if (s.counted > 0) {
    std::snprintf(line, sizeof line, "  acc %5.1f%%", 100.0 * static_cast<double>(s.correct) / static_cast<double>(s.counted));
    text += line;
  }
  text += "  " + rate_text(elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0) + " tok/s  left " + clock_time(eta);
  if (tty_) std::cerr << "\r" << text << "\033[K" << std::flush;
  else std::cerr << text << "\n";
  dirty_ = tty_;
}

void Progress::message(const std::string& text) {
  if (!enabled_) return;
  if (dirty_) std::cerr << "\r\033[K";
  std::cerr << text << "\n";
  dirty_ = false;
  last_ = -1;
}

void Progress::finish() {
  if (dirty_) std::cerr << "\n";
  dirty_ = false;
}

void ProgressObserver::on_step(const StepStats& s, int64_t tokens) {
  progress_.update(s, seconds(), tokens, s.step == total_);
}

void ProgressObserver::on_eval(const EvalStats& e) {
  char line[160];
  std::snprintf(line, sizeof line, "step %lld: held-out loss %.4f, accuracy %s", static_cast<long long>(e.step),
                static_cast<double>(e.loss), percent_text(e.accuracy).c_str());
  progress_.message(line);
}

void ProgressObserver::on_steps_end(const RunResult&) {
  elapsed = seconds();
  signals_.reset();  // a second Ctrl-C during the final writes is not swallowed
}

}  // namespace qkv::cli
