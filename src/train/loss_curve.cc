// The loss curve as SVG. See include/qkv/train/loss_curve.h.
#include "qkv/train/loss_curve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace qkv {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

std::string num(double v, const char* fmt = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// 0.5, 2, 10 as they are; 1e-3, 5e-4 below 0.01 and 1e3 above 999.
std::string tick_label(double v) {
  char buf[32];
  if (v >= 0.01 && v < 1000) {
    std::snprintf(buf, sizeof buf, "%g", v);
  } else {
    const int e = static_cast<int>(std::floor(std::log10(v) + 1e-9));
    std::snprintf(buf, sizeof buf, "%.0fe%d", v / std::pow(10.0, e), e);
  }
  return buf;
}

}  // namespace

std::string loss_curve_svg(const std::vector<float>& losses, const std::vector<EvalStats>& evals,
                           const LossCurveOptions& o) {
  const double left = 70, right = 20, top = 40, bottom = 50;
  const double W = o.width, H = o.height, pw = W - left - right, ph = H - top - bottom;
  std::vector<double> ys;
  for (float l : losses)
    if (std::isfinite(l) && l > 0) ys.push_back(l);
  double lo = ys.empty() ? 0.1 : *std::min_element(ys.begin(), ys.end());
  double hi = ys.empty() ? 10 : *std::max_element(ys.begin(), ys.end());
  for (const EvalStats& e : evals)
    if (std::isfinite(e.loss) && e.loss > 0) lo = std::min(lo, static_cast<double>(e.loss)), hi = std::max(hi, static_cast<double>(e.loss));
  double ylo = std::floor(std::log10(lo)), yhi = std::ceil(std::log10(hi));
  if (yhi <= ylo) yhi = ylo + 1;
  const double n = std::max<double>(1.0, static_cast<double>(losses.size()));
  auto X = [&](double step) { return left + pw * (n <= 1 ? 0.5 : (step - 1) / (n - 1)); };
  auto Y = [&](double loss) { return top + ph * (yhi - std::log10(std::max(loss, 1e-30))) / (yhi - ylo); };

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << o.height
    << "\" viewBox=\"0 0 " << o.width << " " << o.height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape(o.title) << "</text>\n";
  // Grid at 1, 2, 5 x 10^k; labels on all of them for up to three decades, else on 10^k only.
  const bool few_decades = yhi - ylo <= 3;
  for (double e = ylo; e <= yhi; e += 1)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (std::log10(v) > yhi + 1e-9) continue;
      const double y = Y(v);
      s << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << num(y) << "\" y2=\"" << num(y)
        << "\" stroke=\"" << (m == 1.0 ? "#cccccc" : "#eeeeee") << "\"/>\n";
      if (m == 1.0 || few_decades)
        s << "<text x=\"" << left - 6 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">" << tick_label(v)
          << "</text>\n";
    }
  // x ticks: about 6, at round numbers.
  const double raw = n / 6, mag = std::pow(10.0, std::floor(std::log10(std::max(raw, 1.0))));
  double stride = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      stride = m * mag;
      break;
    }
  for (double t = 0; t <= n; t += stride) {
    const double x = X(std::max(1.0, t));
    s << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << top << "\" y2=\"" << top + ph
      << "\" stroke=\"#eeeeee\"/>\n";
    s << "<text x=\"" << num(x) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">" << num(t, "%.0f") << "</text>\n";
  }
  s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#444444\"/>\n";
  s << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">step</text>\n";
  s << "<text transform=\"translate(16 " << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << "cross-entropy loss (log scale)</text>\n";
  // Raw losses, then their moving average - of the log of the loss, as the axis is logarithmic
  // (a plain average of values spanning decades would trail far behind the curve).
  auto polyline = [&](const std::vector<std::pair<double, double>>& pts, const char* style) {
    if (pts.empty()) return;
    s << "<polyline fill=\"none\" " << style << " points=\"";
    for (const auto& [x, y] : pts) s << num(X(x)) << "," << num(Y(y)) << " ";
    s << "\"/>\n";
  };
  std::vector<std::pair<double, double>> raw_pts, avg_pts;
  double avg = 0;
  bool first = true;
  for (size_t i = 0; i < losses.size(); ++i) {
    const double l = losses[i];
    if (!std::isfinite(l) || l <= 0) continue;
    avg = first ? std::log(l) : 0.95 * avg + 0.05 * std::log(l);
    first = false;
    raw_pts.push_back({static_cast<double>(i + 1), l});
    avg_pts.push_back({static_cast<double>(i + 1), std::exp(avg)});
  }
  polyline(raw_pts, "stroke=\"#9ecae1\" stroke-width=\"1\"");
  polyline(avg_pts, "stroke=\"#08306b\" stroke-width=\"2\"");
  for (const EvalStats& e : evals) {
    if (!std::isfinite(e.loss) || e.loss <= 0 || e.step < 1) continue;
    s << "<circle cx=\"" << num(X(static_cast<double>(e.step))) << "\" cy=\"" << num(Y(e.loss))
      << "\" r=\"3.5\" fill=\"#e6550d\"><title>step " << e.step << ": held-out loss " << e.loss
      << (std::isfinite(e.accuracy) ? ", accuracy " + num(100 * e.accuracy, "%.2f") + "%" : std::string()) << "</title></circle>\n";
  }
  // Legend.
  const double lx = left + pw - 250, ly = top + 14;
  s << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << ly << "\" y2=\"" << ly
    << "\" stroke=\"#9ecae1\"/><text x=\"" << lx + 30 << "\" y=\"" << ly + 4 << "\">loss of each step</text>\n";
  s << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << ly + 18 << "\" y2=\"" << ly + 18
    << "\" stroke=\"#08306b\" stroke-width=\"2\"/><text x=\"" << lx + 30 << "\" y=\"" << ly + 22
    << "\">moving average (0.95, geometric)</text>\n";
  if (!evals.empty())
    s << "<circle cx=\"" << lx + 12 << "\" cy=\"" << ly + 36 << "\" r=\"3.5\" fill=\"#e6550d\"/><text x=\"" << lx + 30
      << "\" y=\"" << ly + 40 << "\">held-out loss</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace qkv
