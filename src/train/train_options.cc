// The options of a training run. See include/qkv/train/train_options.h.
#include "qkv/train/train_options.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/json_read.h"

namespace qkv {

TrainTask parse_train_task(const std::string& name) {
  if (name == "copy") return TrainTask::kCopy;
  if (name == "reverse") return TrainTask::kReverse;
  if (name == "text") return TrainTask::kText;
  if (name == "data") return TrainTask::kData;
  fail("unknown task ", excerpt(name), "; expected copy, reverse, text or data");
}

const char* train_task_name(TrainTask task) {
  switch (task) {
    case TrainTask::kCopy: return "copy";
    case TrainTask::kReverse: return "reverse";
    case TrainTask::kText: return "text";
    case TrainTask::kData: return "data";
  }
  return "?";
}

const std::vector<std::string>& train_task_names() {
  static const std::vector<std::string> names = {"copy", "reverse", "text", "data"};
  return names;
}

bool is_builtin_task(TrainTask task) { return task == TrainTask::kCopy || task == TrainTask::kReverse; }

OptimizerKind parse_optimizer_kind(const std::string& name) {
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "sgd") return OptimizerKind::kSgd;
  fail("unknown optimizer ", excerpt(name), "; expected adamw or sgd");
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kSgd: return "sgd";
  }
  return "?";
}

const std::vector<std::string>& optimizer_kind_names() {
  static const std::vector<std::string> names = {"adamw", "sgd"};
  return names;
}

void read_option(const nlohmann::json& j, TrainTask& out, const std::string& key) {
  QKV_CHECK(j.is_string(), "'", key, "' must be one of \"copy\", \"reverse\", \"text\", \"data\", not ", json_excerpt(j));
  try {
    out = parse_train_task(j.get<std::string>());
  } catch (const Error& e) {
    fail("'", key, "': ", e.what());
  }
}

void read_option(const nlohmann::json& j, OptimizerKind& out, const std::string& key) {
  QKV_CHECK(j.is_string(), "'", key, "' must be \"adamw\" or \"sgd\", not ", json_excerpt(j));
  try {
    out = parse_optimizer_kind(j.get<std::string>());
  } catch (const Error& e) {
    fail("'", key, "': ", e.what());
  }
}

nlohmann::json to_json(const TrainOptions& o) { return fields_to_json(o); }

TrainOptions train_options_from_json(const nlohmann::json& j) {
  TrainOptions o;
  fields_from_json(j, o, "the training options");
  set_head_dim(o.model);
  return o;
}

}  // namespace qkv
