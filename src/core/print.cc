// PyTorch-style printing. See include/qkv/core/print.h.
#include "qkv/core/print.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace qkv {
namespace {

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string scientific(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", precision, v);
  return buf;
}

// Python prints infinities and NaN as "inf", "-inf", "nan".
std::string nonfinite(double v) { return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"); }

// PyTorch's _Formatter in fixed-point mode: every element padded to one width.
class Formatter {
 public:
  Formatter(const std::vector<float>& values, int precision) : precision_(precision) {
    std::vector<double> shown;
    for (float v : values)
      if (std::isfinite(v) && v != 0.0f) shown.push_back(v);
    if (shown.empty()) return;
    int_mode_ = std::all_of(shown.begin(), shown.end(), [](double v) { return v == std::ceil(v); });
    double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
    for (double v : shown) {
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
    }
    // PyTorch sizes the column as if it were printing in scientific notation whenever the
    // range is wide, even though sci_mode=False then prints fixed-point; we follow it.
    const bool wide = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
    for (double v : shown) {
      size_t len = wide ? scientific(v, precision_).size()
                        : int_mode_ ? fixed(v, 0).size() + 1 : fixed(v, precision_).size();
      width_ = std::max(width_, len);
    }
  }
  size_t width() const { return width_; }
  std::string format(float value) const {
    double v = value;
    std::string s;
    if (!std::isfinite(v)) s = nonfinite(v);
    else if (int_mode_) s = fixed(v, 0) + ".";
    else s = fixed(v, precision_);
    if (s.size() < width_) s.insert(0, width_ - s.size(), ' ');
    return s;
  }

 private:
  int precision_;
  bool int_mode_ = true;
  size_t width_ = 1;
};

// The values PyTorch looks at to choose the format when it summarises: the edges only.
void summarized_values(const Tensor& t, bool summarize, int edge, std::vector<float>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item());
    return;
  }
  int64_t n = t.size(0);
  bool cut = summarize && n > 2 * edge;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == edge) i = n - edge;
    if (t.dim() == 1) out.push_back(t.data()[i * t.strides()[0]]);
    else summarized_values(t.select(0, i), summarize, edge, out);
  }
}

std::string body(const Tensor& t, int indent, bool summarize, const Formatter& f, const PrintOptions& o) {
  if (t.dim() == 0) return f.format(t.item());
  const int64_t n = t.size(0);
  const bool cut = summarize && n > 2 * o.edgeitems;
  if (t.dim() == 1) {
    size_t element_length = f.width() + 2;
    size_t per_line = std::max<size_t>(1, static_cast<size_t>(std::max(0, o.linewidth - indent)) / element_length);
    std::vector<std::string> items;
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == o.edgeitems) {
        items.push_back(" ...");
        i = n - o.edgeitems;
      }
      items.push_back(f.format(t.data()[i * t.strides()[0]]));
    }
    std::string s = "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i % per_line == 0 && i) s.append(",\n").append(static_cast<size_t>(indent + 1), ' ');
      else if (i) s += ", ";
      s += items[i];
    }
    return s + "]";
  }
  std::string sep = ",";
  sep.append(static_cast<size_t>(t.dim() - 1), '\n').append(static_cast<size_t>(indent + 1), ' ');
  std::string s = "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i) s += sep;
    if (cut && i == o.edgeitems) {
      s += "..." + sep;
      i = n - o.edgeitems;
    }
    s += body(t.select(0, i), indent + 1, summarize, f, o);
  }
  return s + "]";
}

}  // namespace

std::string to_string(const Tensor& t, const PrintOptions& o) {
  const std::string prefix = "tensor(";
  if (!t.defined()) return "tensor(undefined)";
  if (t.numel() == 0) {
    if (t.dim() == 1) return "tensor([])";
    return "tensor([], size=" + shape_str(t.shape()) + ")";
  }
  const bool summarize = t.numel() > o.threshold;
  std::vector<float> values;
  summarized_values(t, summarize, o.edgeitems, values);
  Formatter f(values, o.precision);
  return prefix + body(t, static_cast<int>(prefix.size()), summarize, f, o) + ")";
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << to_string(t); }

}  // namespace qkv
