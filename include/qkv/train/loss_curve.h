// qkv/train/loss_curve.h - a training run's loss curve as an SVG line chart.
//
// x: step (1..steps); y: loss on a log scale (ticks at 1, 2, 5 times powers of ten). The loss of
// every step is drawn as a thin light line and its exponential moving average (0.95, of log(loss):
// a geometric mean, which follows a curve falling through decades) as a thick dark one; held-out evaluations, when given, are dots labelled with their accuracy.
#pragma once

#include <string>
#include <vector>

#include "qkv/train/trainer.h"

namespace qkv {

struct LossCurveOptions {
  std::string title = "training loss";
  int width = 720, height = 400;
};

std::string loss_curve_svg(const std::vector<float>& losses, const std::vector<EvalStats>& evals,
                           const LossCurveOptions& options = {});

}  // namespace qkv
