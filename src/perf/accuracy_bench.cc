#include "qkv/perf/accuracy_bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/io/gguf.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/hf_folder.h"
#include "qkv/qkv.h"

namespace qkv::perf {
namespace {

bool is_float_type(const std::string& name) { return name == "F32" || name == "F16" || name == "BF16"; }

// Matrices' types by their share of the values, most first ("Q4_K+Q6_K"), and their bits per weight.
struct FileMatrices {
  std::string types;
  double bits_per_weight = 0;
};
class MatrixTally {
 public:
  void add(const std::string& type, int64_t values, double bits) {
    values_[type] += values;
    bits_ += bits;
    count_ += static_cast<double>(values);
  }
  FileMatrices summary() const {
    std::vector<std::pair<int64_t, std::string>> by_share;
    for (const auto& [name, n] : values_) by_share.push_back({-n, name});
    std::sort(by_share.begin(), by_share.end());
    FileMatrices m;
    for (const auto& [n, name] : by_share) m.types += (m.types.empty() ? "" : "+") + name;
    m.bits_per_weight = count_ > 0 ? bits_ / count_ : 0.0;
    return m;
  }

 private:
  std::map<std::string, int64_t> values_;
  double bits_ = 0, count_ = 0;
};

// A GGUF file's matrices (its 2-D tensors); no types for a float file's.
FileMatrices quantized_matrices(const std::string& path) {
  const GgufFile file(path);
  MatrixTally tally;
  bool quantized = false;
  for (const GgufTensor& t : file.tensors()) {
    if (t.shape.size() != 2) continue;
    tally.add(t.type->name, t.numel(), 8.0 * static_cast<double>(t.bytes));
    quantized = quantized || !is_float_type(t.type->name);
  }
  return quantized ? tally.summary() : FileMatrices{};
}

// A float model's matrices as --quantize t keeps them: each 2-D weight in fitting_quant_type(t, its
// row length) - the loaders' rule - so Q8_0 where t's blocks do not fit a row and BF16 where not
// even Q8_0's do ("Q4_K+Q8_0": the fallbacks named, not only t).
FileMatrices quantized_as(const std::string& path, const QuantType& t) {
  MatrixTally tally;
  auto add = [&](int64_t rows, int64_t cols) {
    const QuantType& q = fitting_quant_type(t, cols);
    const bool kept = std::string(q.name) == "F16";  // (stays bf16)
    const double per = kept ? 16.0 : 8.0 * static_cast<double>(q.block_bytes) / static_cast<double>(q.block);
    tally.add(kept ? "BF16" : q.name, rows * cols, per * static_cast<double>(rows * cols));
  };
  if (is_gguf_file(path)) {
    const GgufFile file(path);
    for (const GgufTensor& g : file.tensors())
      if (g.shape.size() == 2) add(g.shape[0], g.shape[1]);
  } else {
    const HfFolder w = read_hf_folder(path);
    for (const auto& [name, i] : w.file_of) {
      const Shape& s = w.files[i]->shape(name);
      if (s.size() == 2) add(s[0], s[1]);
    }
  }
  return tally.summary();
}

}  // namespace

AccuracyBenchReport run_accuracy_bench(const AccuracyBenchOptions& o) {
  QKV_CHECK(o.seq_len >= 2, "seq_len ", o.seq_len, ": must be at least 2 (a next-token prediction needs two tokens)");
  const FileMatrices file = is_gguf_file(o.weights) ? quantized_matrices(o.weights) : FileMatrices{};
  std::vector<std::string> types;  // the candidates' LoadOptions::quantize ("": the file as it is)
  if (!o.quantize.empty()) {
    types = {o.quantize};  // a quantized file refuses it as the candidate loads, first (models/gguf_model.h)
  } else if (!file.types.empty()) {
    types = {""};
  } else {
    types = product_quant_names();
  }
  AccuracyBenchReport r;
  r.text_name = o.text_name;
  std::vector<int64_t> ids;
  auto take_tokens = [&](const LoadedModel& m) {  // the first model loaded reads the text
    ids = m.encode(o.text);
    r.text_tokens = static_cast<int64_t>(ids.size());
    QKV_CHECK(ids.size() >= 2, "text ", excerpt(o.text_name), ": ", ids.size(), " token", ids.size() == 1 ? "" : "s",
              " with the model's tokenizer; expected at least 2 (a next-token prediction needs two)");
    if (static_cast<int64_t>(ids.size()) > o.seq_len) ids.resize(static_cast<size_t>(o.seq_len));
    r.tokens = static_cast<int64_t>(ids.size());
    r.context = m.model->context_length();
    r.windows = (r.tokens + r.context - 1) / r.context;
  };
  LoadOptions ref_options;
  ref_options.dtype = Dtype::kF32;
  ref_options.dequantize = true;
  auto reference_logits = [&](bool first) {
    ref_options.tokenizer = first;
    LoadedModel m = load_model(o.weights, ref_options);
    if (first) take_tokens(m);
    r.reference = m.description;
    return logits_over(*m.model, ids);
  };
  auto candidate = [&](const std::string& type, bool first, std::vector<Tensor>& logits) {
    LoadOptions c;
    c.quantize = type;
    c.tokenizer = first;
    LoadedModel m = load_model(o.weights, c);
    if (first) take_tokens(m);
    logits = logits_over(*m.model, ids);
    AccuracyRow row;
    if (type.empty()) {
      row.type = file.types;
      row.bits_per_weight = file.bits_per_weight;
    } else {
      const QuantType& t = product_quant_type(type);
      const FileMatrices as = quantized_as(o.weights, t);  // fallbacks counted and named
      row.type = as.types == t.name ? as.types : str(t.name, " as ", as.types);
      row.bits_per_weight = as.bits_per_weight;
    }
    row.candidate = m.description;
    return row;
  };
  if (types.size() == 1) {  // the candidate first: a quantize its file refuses is said before any run
    std::vector<Tensor> cand;
    AccuracyRow row = candidate(types[0], true, cand);
    row.agreement = compare_logits(reference_logits(false), cand, ids);
    r.rows.push_back(row);
  } else {
    const std::vector<Tensor> ref = reference_logits(true);
    for (const std::string& type : types) {
      std::vector<Tensor> cand;
      AccuracyRow row = candidate(type, false, cand);
      row.agreement = compare_logits(ref, cand, ids);
      r.rows.push_back(row);
    }
  }
  return r;
}

std::string report_text(const AccuracyBenchReport& r) {
  std::ostringstream out;
  out << "qkv bench: accuracy of quantized weights on " << r.tokens << " tokens of " << r.text_name;
  if (r.tokens < r.text_tokens) out << " (of its " << r.text_tokens << ")";
  out << ", " << r.windows << " window" << (r.windows == 1 ? "" : "s") << " of up to " << r.context << "\n";
  out << "  reference: " << r.reference << "\n";
  for (const AccuracyRow& row : r.rows) out << "  " << row.type << ": " << row.candidate << "\n";
  char line[512];
  int width = 10;  // the type column: as wide as its longest ("Q4_K as Q4_K+Q8_0")
  for (const AccuracyRow& row : r.rows) width = std::max(width, static_cast<int>(std::min<size_t>(row.type.size(), 200)));
  std::snprintf(line, sizeof line, "  %-*s %11s %10s %10s %8s %10s %10s %12s\n", width, "type", "bits/weight",
                "mean KL", "max KL", "top-1", "PPL ref", "PPL cand", "ln PPL ratio");
  out << line;
  for (const AccuracyRow& row : r.rows) {
    const LogitAgreement& a = row.agreement;
    std::snprintf(line, sizeof line, "  %-*s %11.4g %10.3e %10.3e %7.2f%% %10.4g %10.4g %12.3e\n", width, row.type.c_str(),
                  row.bits_per_weight, a.mean_kl, a.max_kl, 100 * a.top1, a.ref_perplexity, a.cand_perplexity,
                  a.cand_nll - a.ref_nll);
    out << line;
  }
  out << "  KL(p_ref || p_cand) in nats per position; top-1: positions whose most likely token is the same;\n"
         "  PPL: exp(mean -log p(next token)) over the "
      << (r.rows.empty() ? 0 : r.rows[0].agreement.predictions)
      << " predictions; ln PPL ratio: ln(PPL cand / PPL ref), the difference of the means\n";
  return out.str();
}

nlohmann::json report_json(const AccuracyBenchReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const AccuracyRow& row : r.rows) {
    const LogitAgreement& a = row.agreement;
    rows.push_back({{"type", row.type},
                    {"bits_per_weight", row.bits_per_weight},
                    {"candidate", row.candidate},
                    {"positions", a.positions},
                    {"predictions", a.predictions},
                    {"mean_kl", a.mean_kl},
                    {"max_kl", a.max_kl},
                    {"top1", a.top1},
                    {"ref_nll", a.ref_nll},
                    {"cand_nll", a.cand_nll},
                    {"ref_perplexity", a.ref_perplexity},
                    {"cand_perplexity", a.cand_perplexity}});
  }
  return {{"module", "accuracy"}, {"reference", r.reference}, {"text", r.text_name}, {"text_tokens", r.text_tokens},
          {"tokens", r.tokens},     {"context", r.context},     {"windows", r.windows},  {"rows", rows}};
}

}  // namespace qkv::perf
