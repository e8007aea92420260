// qkv/train/book_training.h - chapter 5's training of the GPT model on a text, as the book's
// train_model_simple runs it, draw for draw.
//
//   split_idx = int(train_ratio * len(text)); train_text, val_text = text[:split_idx], text[split_idx:]
//                                                  (len and the split in characters, not bytes)
//   train_loader = windows of context_length tokens, stride context_length, batch_size, shuffled,
//                  drop_last;  val_loader = the same in order, keeping a last short batch
//   model (drawn from the generator, or loaded), AdamW(lr, weight_decay)
//   tokens_seen, global_step = 0, -1
//   for epoch in range(epochs):
//     model.train()
//     for input, target in train_loader:                   # draws the loader's seeds
//       zero_grad; loss = cross_entropy(model(input), target); backward; step
//       tokens_seen += input.numel(); global_step += 1
//       if global_step % eval_freq == 0:                   # eval mode, no dropout:
//         train_loss = the mean of the first eval_iter batches' losses of a pass over train_loader
//         val_loss   = the same over val_loader            # (each pass draws its loader's seeds)
//     sample: greedy, sample_tokens new tokens after start_context, context = the model's
//             (one that cannot be made - non-finite logits - is "(no sample: why)"; training goes on)
//
// Every random draw (the loaders' seeds, the dropouts) comes from one generator, as PyTorch's global
// one after torch.manual_seed(seed); GPTModel(cfg): so the losses are PyTorch's up to float32 sums.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include <nlohmann/json.hpp>

#include "qkv/models/option_fields.h"

#include "qkv/models/language_model.h"
#include "qkv/models/tokenizer.h"
#include "qkv/train/data_parallel.h"

namespace qkv {

struct BookTrainingOptions {
  int64_t context_length = 0;  // the windows' length; 0: the model's context (the book's GPT: 256)
  double train_ratio = 0.90;
  int64_t batch_size = 2;
  int64_t epochs = 10;
  int64_t eval_freq = 5;  // evaluate after steps 0, eval_freq, 2 eval_freq, ...
  int64_t eval_iter = 5;  // batches of each loader per evaluation
  double lr = 4e-4, weight_decay = 0.1;  // torch.optim.AdamW with its other defaults
  std::string start_context = "Every effort moves you";
  int64_t sample_tokens = 50;
};

// The options chapter 5's run takes from qkv train's flags (the rest: the run's own, batch_size,
// lr and weight_decay, share TrainOptions' flags), declared once (models/option_fields.h).
template <typename V, typename... O>
  requires(std::same_as<std::remove_const_t<O>, BookTrainingOptions> && ...)
void visit_fields(V&& v, O&... o) {
  v(OptionField{"epochs", "--epochs", "--model gpt|llama|qwen3: passes over the training text"}.at_least(0),
    o.epochs...);
  v(OptionField{"eval_freq", "--eval-freq", "--model gpt|llama|qwen3: evaluate every N steps"}.at_least(1),
    o.eval_freq...);
  v(OptionField{"eval_iter", "--eval-iter", "--model gpt|llama|qwen3: batches of each set per evaluation"}.at_least(1),
    o.eval_iter...);
  v(OptionField{"train_ratio", "--train-ratio",
                "--model gpt|llama|qwen3: the share of the text's characters for training (the rest validates)"}
        .between(0, 1),
    o.train_ratio...);
  v(OptionField{"start_context", "--start-context", "--model gpt|llama|qwen3: the text each epoch's sample continues"},
    o.start_context...);
  v(OptionField{"sample_tokens", "--sample-tokens", "--model gpt|llama|qwen3: tokens of each sample"}.at_least(0),
    o.sample_tokens...);
}

struct BookEval {
  int64_t epoch = 0;  // 1-based, as the book prints it
  int64_t step = 0;   // global_step
  int64_t tokens_seen = 0;
  double train_loss = 0, val_loss = 0;
};

// The book's line for an evaluation, "Ep 1 (Step 000000): Train loss 9.817, Val loss 9.924", and
// qkv train --json's object for it ({epoch, step, tokens_seen, train_loss, val_loss}).
std::string book_eval_line(const BookEval& e);
nlohmann::json book_eval_json(const BookEval& e);

struct BookTrainingReport {
  std::vector<BookEval> evals;
  std::vector<std::string> samples;  // one per epoch
  int64_t steps = 0, tokens_seen = 0;
  int64_t train_batches = 0, val_batches = 0, train_tokens = 0, val_tokens = 0;
  bool stopped = false;  // the stop flag ended it (after the step in progress)
};

struct BookTrainingCallbacks {
  std::function<void(const BookEval&)> on_eval;
  std::function<void(int64_t epoch, const std::string& text)> on_sample;
  std::function<void(int64_t step, float loss)> on_step;
  const volatile std::sig_atomic_t* stop_flag = nullptr;  // non-zero: stop after the step in progress
};

// Trains `model` (the book's GPTModel, or any LanguageModel: Llama 3, Qwen3) on `text` (read with `tokenizer`), drawing from `gen` (the generator the model
// was built from, continuing). Throws qkv::Error on options out of range, or a text too short
// for one batch of either loader (the book's loaders would have no batch: it says which and how
// many tokens each half has).
//
// With `ranks` (data-parallel, qkv/train/data_parallel.h), every rank runs this with the same
// model, generator and text: each draws every batch, takes its slice (batch_slice; dropout masks
// as the whole batch's), adds its share of the batch's mean loss to the gradients, which are then
// summed over the ranks, and steps alike; evaluations and samples run whole on every rank. The
// losses are the single process's up to the order of float32 sums; a stop flag on any rank stops
// all after the same step. batch_size must be at least the number of ranks.
BookTrainingReport train_like_the_book(LanguageModel& model, Generator& gen, const Tokenizer& tokenizer,
                                       const std::string& text, const BookTrainingOptions& options,
                                       const BookTrainingCallbacks& callbacks = {}, DataParallel* ranks = nullptr);

// The number of characters (code points) of UTF-8 text, and the byte offset of character n.
int64_t utf8_length(const std::string& text);
size_t utf8_offset(const std::string& text, int64_t n);

}  // namespace qkv
