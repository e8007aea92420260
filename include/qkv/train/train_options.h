// qkv/train/train_options.h - the options of a training run, declared once: the struct, and one
// listing of its fields (visit_fields, see option_fields.h) from which its JSON (in checkpoints)
// and the flags of `qkv train` derive.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/models/attention_lm.h"
#include "qkv/models/option_fields.h"

namespace qkv {

// What to train on (TrainTask, models/attention_lm.h: it decides the model's tokenizer): a built-in
// task (copy, reverse), a text file, or fixed batches from a file.

enum class OptimizerKind { kAdamW, kSgd };
OptimizerKind parse_optimizer_kind(const std::string& name);  // "adamw" | "sgd"
const char* optimizer_kind_name(OptimizerKind kind);
const std::vector<std::string>& optimizer_kind_names();

inline nlohmann::json option_to_json(OptimizerKind v) { return optimizer_kind_name(v); }
void read_option(const nlohmann::json& j, OptimizerKind& out, const std::string& key);

struct TrainOptions {
  // What to train on: text needs text_file, data needs data_file.
  TrainTask task = TrainTask::kCopy;
  int64_t task_length = 16;   // symbols before the separator (built-in tasks)
  int64_t task_symbols = 16;  // alphabet size (built-in tasks)
  std::string text_file, data_file;
  // The model. vocab_size comes from the data; context_length 0 means the data's sequence length.
  LMConfig model;
  // Optimisation.
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  int64_t steps = 500, batch_size = 32, warmup = 50;
  double lr = 3e-3, min_lr = 3e-4;
  double weight_decay = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW (weight_decay: SGD too)
  double momentum = 0.0, dampening = 0.0;                               // SGD
  bool nesterov = false;
  double clip = 1.0;  // max global gradient norm; 0 = no clipping
  uint64_t seed = 123;
  // Evaluation on held-out sequences (built-in tasks).
  int64_t eval_every = 50, eval_sequences = 512;
};

// TrainOptions' fields, once, in the order `qkv train --help` lists them. JSON keys are those of
// the checkpoints' "options" (the model's under "model"); every key may be absent (its default
// stays) except the model's.
template <typename V, typename... O>
  requires(std::same_as<std::remove_const_t<O>, TrainOptions> && ...)
void visit_fields(V&& v, O&... o) {
  v(OptionField{"task", "--task", "copy | reverse (built in), text (with --text-file), data (with --data)"}, o.task...);
  v(OptionField{"task_length", "--length", "Built-in task: symbols before the separator"}.at_least(1), o.task_length...);
  v(OptionField{"task_symbols", "--symbols", "Built-in task: alphabet size (2..26)"}.within(2, 26), o.task_symbols...);
  v(OptionField{"text_file", "--text-file", "Next-token prediction on this text, GPT-2 tokens (sets --task text)",
                false},
    o.text_file...);
  v(OptionField{"data_file", "--data",
                "Fixed batches: a safetensors file with (N, T) 'inputs' and 'targets' token ids, integers (I64, ...) "
                "or whole floats (sets --task data)", false},
    o.data_file...);
  visit_fields(
      [&v](OptionField f, auto&... m) {
        f.section = "model";
        v(f, m...);
      },
      o.model...);
  v(OptionField{"optimizer", "--optimizer", "adamw | sgd"}, o.optimizer...);
  v(OptionField{"steps", "--steps", "Optimisation steps in all"}.at_least(0), o.steps...);
  v(OptionField{"batch_size", "--batch-size", "Sequences per step"}.at_least(1), o.batch_size...);
  v(OptionField{"lr", "--lr", "Peak learning rate"}.at_least(0), o.lr...);
  v(OptionField{"min_lr", "--min-lr", "Learning rate at the end of the cosine decay"}.at_least(0), o.min_lr...);
  v(OptionField{"warmup", "--warmup", "Steps of linear warm-up"}.at_least(0), o.warmup...);
  v(OptionField{"weight_decay", "--weight-decay", "Weight decay (decoupled for AdamW)"}.at_least(0), o.weight_decay...);
  v(OptionField{"beta1", "--beta1", "AdamW beta1"}.within(0, 1, true), o.beta1...);
  v(OptionField{"beta2", "--beta2", "AdamW beta2"}.within(0, 1, true), o.beta2...);
  v(OptionField{"eps", "--eps", "AdamW eps"}.at_least(0), o.eps...);
  v(OptionField{"momentum", "--momentum", "SGD momentum"}.at_least(0), o.momentum...);
  v(OptionField{"dampening", "--dampening", "SGD dampening"}, o.dampening...);
  v(OptionField{"nesterov", "--nesterov", "SGD: Nesterov momentum", false}, o.nesterov...);
  v(OptionField{"clip", "--clip", "Clip the global gradient norm to this (0: no clipping)"}.at_least(0), o.clip...);
  v(OptionField{"seed", "--seed", "Seed: weights and dropout as torch.manual_seed(S), data from S + 1"}, o.seed...);
  v(OptionField{"eval_every", "--eval-every", "Built-in task: held-out accuracy every N steps (0: only at the end)"}
        .at_least(0),
    o.eval_every...);
  v(OptionField{"eval_sequences", "--eval-sequences", "Built-in task: held-out sequences"}.at_least(0),
    o.eval_sequences...);
}

nlohmann::json to_json(const TrainOptions& o);
// Throws qkv::Error naming a missing, unknown or ill-typed key, or a value outside its range.
TrainOptions train_options_from_json(const nlohmann::json& j);
// The options' ranges (visit_fields: check_option_ranges) and min_lr <= lr: an OptionError naming
// the flag, which a command line reports as a usage error.
void check_train_options(const TrainOptions& o);

}  // namespace qkv
