// qkv/io/heatmap_svg.h - an attention matrix drawn as an SVG heatmap, labelled with tokens.
//
// weights (T, S): row i = query token i, column j = key token j. Cells are shaded from white (0)
// to dark blue (the largest weight, or 1 if that is larger), each cell printed with its value;
// masked cells (weight exactly 0 above the diagonal of a causal matrix) are drawn hatched grey.
#pragma once

#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

struct HeatmapOptions {
  std::string title;
  std::vector<std::string> row_labels;  // queries; defaults to 0, 1, ...
  std::vector<std::string> col_labels;  // keys; defaults to the row labels
  bool causal = false;                  // hatch the cells above the diagonal
};

std::string heatmap_svg(const Tensor& weights, const HeatmapOptions& options);

}  // namespace qkv
