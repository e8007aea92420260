// The options of a training run. See include/qkv/train/train_options.h.
#include "qkv/train/train_options.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"

namespace qkv {

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
  try {
    check_train_options(o);
  } catch (const OptionError& e) {
    fail("the training options: ", e.what());
  }
  set_head_dim(o.model);
  return o;
}

void check_train_options(const TrainOptions& o) {
  check_option_ranges(o);
  if (!(o.min_lr <= o.lr))
    throw OptionError("--min-lr", str("min_lr (--min-lr) is ", o.min_lr, "; expected at most lr (--lr), ", o.lr));
  if (o.optimizer == OptimizerKind::kSgd && o.nesterov && !(o.momentum > 0 && o.dampening == 0))
    throw OptionError("--nesterov", str("nesterov (--nesterov) needs momentum (--momentum) above 0 and dampening ",
                                        "(--dampening) 0, as PyTorch's SGD does; momentum is ", o.momentum,
                                        " and dampening ", o.dampening));
}

}  // namespace qkv
