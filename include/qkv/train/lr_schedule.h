// qkv/train/lr_schedule.h - the learning rate of each step: linear warm-up, then cosine decay.
//
//   step < warmup:  lr = max_lr * (step + 1) / warmup
//   after:          progress = (step - warmup) / max(1, total - warmup)   (clamped to [0, 1])
//                   lr = min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2
// `step` counts updates from 0. With min_lr == max_lr and warmup 0 the rate is constant.
#pragma once

#include <cstdint>

namespace qkv {

struct LrSchedule {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  double at(int64_t step) const;
};

}  // namespace qkv
