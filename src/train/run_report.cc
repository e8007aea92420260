// What a training run says of itself. See include/qkv/train/run_report.h.
#include "qkv/train/run_report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/read_file.h"
#include "qkv/text/vocab_files.h"
#include "qkv/train/data.h"

namespace qkv {

std::string rate_text(double tokens_per_s) {
  char buf[32];
  if (tokens_per_s >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", tokens_per_s / 1e6);
  else if (tokens_per_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", tokens_per_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", tokens_per_s);
  return buf;
}

std::string percent_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * x);
  return buf;
}

std::string variants_text(const LMConfig& m) {
  const kernels::AttentionSpec& a = m.attention;
  std::string t;
  if (a.kv_heads > 0 && a.kv_heads != a.heads) t += str(", ", a.kv_heads, " kv heads");
  if (a.rope != kernels::RopeLayout::kNone)
    t += str(", rope ", kernels::rope_layout_name(a.rope), " (base ", a.rope_base, ")");
  if (a.window > 0) t += str(", window ", a.window);
  if (a.alibi) t += ", alibi";
  if (a.softcap > 0) t += str(", softcap ", a.softcap);
  if (a.dtype == Dtype::kBF16) t += ", bf16 mixed precision (bf16 products, fp32 master weights)";
  return t;
}

std::string run_plan_text(Trainer& trainer, int ranks) {
  const TrainOptions& o = trainer.options();
  const LMConfig& m = o.model;
  std::ostringstream out;
  out << "qkv train: " << trainer.data().describe() << "\n  model: attention-only LM, vocab " << m.vocab_size
      << ", d_model " << m.d_model << ", " << m.attention.heads << " heads, " << m.num_layers << " layers, context "
      << m.context_length << ", dropout " << m.attention.dropout << variants_text(m) << " ("
      << trainer.model().num_parameters() << " parameters)\n  " << optimizer_kind_name(o.optimizer) << ", lr " << o.lr
      << " -> " << o.min_lr << " (warm-up " << o.warmup << ", cosine), batch " << o.batch_size << ", clip " << o.clip
      << ", seed " << o.seed << "\n";
  if (ranks > 1) {
    const int64_t least = o.batch_size / ranks, most = (o.batch_size + ranks - 1) / ranks;
    out << "  data-parallel over " << ranks << " ranks: batch " << o.batch_size << ", "
        << (least == most ? str(least, " per rank") : str(least, " or ", most, " per rank")) << "\n";
  }
  return out.str();
}

RunSummary summarize_run(const Trainer& t, const RunResult& r, double seconds, const std::string& checkpoint,
                         const std::string& loss_curve, int ranks) {
  RunSummary s;
  s.steps = t.steps_done();
  s.steps_this_run = r.steps_run;
  s.seconds = seconds;
  s.tokens_per_s = seconds > 0 ? static_cast<double>(r.tokens) / seconds : 0.0;
  s.final_loss = t.losses().empty() ? NAN : t.losses().back();
  if (t.has_eval() && !t.evals().empty()) {
    s.accuracy = t.evals().back().accuracy;
    s.accuracy_step = t.evals().back().step;
  }
  s.finished = t.steps_done() >= t.options().steps;
  s.task = train_task_name(t.options().task);
  s.checkpoint = checkpoint;
  s.loss_curve = loss_curve;
  s.ranks = ranks;
  return s;
}

std::string summary_line(const RunSummary& s) {
  char line[256];
  std::snprintf(line, sizeof line, "%s %lld steps (%lld in this run) in %.1f s, %s tokens/s",
                s.finished ? "trained" : "stopped after", static_cast<long long>(s.steps),
                static_cast<long long>(s.steps_this_run), s.seconds, rate_text(s.tokens_per_s).c_str());
  std::string out = line;
  // (a loss only after a step: none when --steps is 0)
  if (std::isnan(s.final_loss)) {
    out += "; no loss (no step taken)";
  } else {
    char loss[48];
    std::snprintf(loss, sizeof loss, "; final loss %.4f", static_cast<double>(s.final_loss));
    out += loss;
  }
  if (s.ranks > 0) out += str(", ", s.ranks, " ranks");
  if (s.accuracy) {
    out += ", held-out accuracy " + percent_text(*s.accuracy);
    if (s.accuracy_step != s.steps) out += str(" at step ", s.accuracy_step);  // a run stopped between evaluations
  }
  return out;
}

nlohmann::json summary_json(const RunSummary& s) {
  nlohmann::json j = {{"steps", s.steps},
                      {"steps_this_run", s.steps_this_run},
                      {"final_loss", s.final_loss},
                      {"accuracy", s.accuracy ? nlohmann::json(*s.accuracy) : nlohmann::json(nullptr)},
                      {"accuracy_step", s.accuracy ? nlohmann::json(s.accuracy_step) : nlohmann::json(nullptr)},
                      {"tokens_per_s", s.tokens_per_s},
                      {"seconds", s.seconds},
                      {"task", s.task},
                      {"finished", s.finished},
                      {"checkpoint", s.checkpoint},
                      {"loss_curve", s.loss_curve}};
  if (s.ranks > 0) j["ranks"] = s.ranks;
  return j;
}

std::unique_ptr<TrainingData> text_run_data(TrainOptions& o, const std::string& vocab_dir, std::vector<int64_t>& vocab) {
  QKV_CHECK(!o.text_file.empty(), "--task text needs --text-file FILE");
  if (o.model.context_length == 0) o.model.context_length = 64;
  try {
    TextData d = text_training_data(read_file(o.text_file), load_gpt2(vocab_dir), o.model.context_length, o.seed + 1,
                                    excerpt(o.text_file));
    vocab = std::move(d.vocab);
    return std::move(d.windows);
  } catch (const Error& e) {  // the windows are context_length long: say which option sets it
    const std::string what = e.what();
    if (what.find("training window") == std::string::npos) throw;
    fail(what, " (--context-length ", o.model.context_length, ")");
  }
}

}  // namespace qkv
