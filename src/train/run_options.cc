// A run's options, fresh or resumed. See include/qkv/train/run_options.h.
#include "qkv/train/run_options.h"

#include <set>

#include "qkv/core/excerpt.h"

namespace qkv {
TrainOptions run_options(const TrainOptions* resumed, const TrainOptions& given, const FieldGiven& is_given,
                         const std::string& file) {
  TrainOptions o = given;
  if (resumed) {
    static const std::set<std::string> fixed = {"num_heads", "num_kv_heads", "rope", "rope_base",
                                                "window",    "alibi",        "softcap"};
    visit_fields(
        [&](const OptionField& field, const auto& saved, const auto& now) {
          if (fixed.count(field.key) == 0 || !is_given(field) || saved == now) return;
          throw OptionError(field.flag, str(field.flag, ": ", option_text(now), " disagrees with the checkpoint ",
                                            excerpt(file), ", whose model was trained with ", field.key, " ",
                                            option_text(saved), " (leave the flag out to keep it)"));
        },
        resumed->model, given.model);
    o = *resumed;
    visit_fields([&](const OptionField& field, auto& to, const auto& now) {
      if (is_given(field)) to = now;
    }, o, given);
  }
  visit_fields([&](const OptionField& field, const auto&) {
    if (!is_given(field)) return;
    if (std::string(field.key) == "text_file") o.task = TrainTask::kText;
    if (std::string(field.key) == "data_file") o.task = TrainTask::kData;
  }, given);
  check_option_ranges(o);  // d_model and num_heads at least 1 before the head width is derived from them
  set_head_dim(o.model);
  return o;
}

}  // namespace qkv
