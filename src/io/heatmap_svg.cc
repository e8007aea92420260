// SVG heatmaps of attention weights. See include/qkv/io/heatmap_svg.h.
#include "qkv/io/heatmap_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "qkv/core/error.h"

namespace qkv {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// White to the colour of the book's figures (a dark blue), linear in the weight.
std::string shade(double t) {
  t = std::clamp(t, 0.0, 1.0);
  int r = static_cast<int>(std::lround(255 + t * (8 - 255)));
  int g = static_cast<int>(std::lround(255 + t * (48 - 255)));
  int b = static_cast<int>(std::lround(255 + t * (107 - 255)));
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

}  // namespace

std::string heatmap_svg(const Tensor& weights, const HeatmapOptions& o) {
  QKV_CHECK(weights.dim() == 2, "heatmap: weights must be (queries, keys), got ", weights.describe());
  const int64_t T = weights.size(0), S = weights.size(1);
  auto labels = [](std::vector<std::string> given, int64_t n) {
    for (int64_t i = static_cast<int64_t>(given.size()); i < n; ++i) given.push_back(std::to_string(i));
    return given;
  };
  std::vector<std::string> rows = labels(o.row_labels, T);
  std::vector<std::string> cols = labels(o.col_labels.empty() ? o.row_labels : o.col_labels, S);
  size_t longest = 1;
  for (const auto& s : rows) longest = std::max(longest, s.size());
  for (const auto& s : cols) longest = std::max(longest, s.size());

  const int cell = 56, left = static_cast<int>(longest) * 8 + 16, top = static_cast<int>(longest) * 8 + 48;
  const int width = std::max(left + static_cast<int>(S) * cell + 20, static_cast<int>(o.title.size()) * 8 + 40);
  const int height = top + static_cast<int>(T) * cell + 20;
  std::vector<float> w = weights.to_vector();
  float hi = 1.0f;
  for (float x : w)
    if (std::isfinite(x)) hi = std::max(hi, x);

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\">\n"
      << "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
         "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#eeeeee\"/>"
         "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#bbbbbb\" stroke-width=\"2\"/></pattern></defs>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!o.title.empty())
    svg << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
        << escape(o.title) << "</text>\n";
  for (int64_t j = 0; j < S; ++j) {  // key labels, rotated above the columns
    int x = left + static_cast<int>(j) * cell + cell / 2, y = top - 8;
    svg << "<text x=\"" << x << "\" y=\"" << y << "\" font-size=\"13\" transform=\"rotate(-45 " << x << ' ' << y
        << ")\">" << escape(cols[j]) << "</text>\n";
  }
  for (int64_t i = 0; i < T; ++i) {
    int y = top + static_cast<int>(i) * cell;
    svg << "<text x=\"" << left - 8 << "\" y=\"" << y + cell / 2 + 5 << "\" text-anchor=\"end\" font-size=\"13\">"
        << escape(rows[i]) << "</text>\n";
    for (int64_t j = 0; j < S; ++j) {
      int x = left + static_cast<int>(j) * cell;
      float v = w[static_cast<size_t>(i * S + j)];
      bool hidden = o.causal && j > i;
      svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell << "\" height=\"" << cell
          << "\" fill=\"" << (hidden ? "url(#hatch)" : shade(std::isfinite(v) ? v / hi : 0.0))
          << "\" stroke=\"white\"><title>" << escape(rows[i]) << " -> " << escape(cols[j]) << ": " << v
          << "</title></rect>\n";
      if (!hidden) {
        char num[32];
        std::snprintf(num, sizeof num, "%.2f", static_cast<double>(v));
        svg << "<text x=\"" << x + cell / 2 << "\" y=\"" << y + cell / 2 + 5
            << "\" text-anchor=\"middle\" font-size=\"12\" fill=\"" << (v / hi > 0.55 ? "white" : "#222222")
            << "\">" << num << "</text>\n";
      }
    }
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace qkv
