// Warm-up and cosine decay. See include/qkv/train/lr_schedule.h.
#include "qkv/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace qkv {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace qkv
