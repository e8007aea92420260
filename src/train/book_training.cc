// Chapter 5's training loop. See include/qkv/train/book_training.h.
#include "qkv/train/book_training.h"

#include <cmath>
#include <cstdio>

#include "qkv/core/error.h"
#include "qkv/models/decoder.h"
#include "qkv/models/generation.h"
#include "qkv/text/data_loader.h"
#include "qkv/train/loss.h"
#include "qkv/train/optimizer.h"
#include "qkv/train/trainer.h"

namespace qkv {
namespace {

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// calc_loss_batch: cross_entropy(model(input).flatten(0, 1), target.flatten())
float batch_loss(LanguageModel& model, CrossEntropyLoss& loss, const WindowBatch& b) {
  return loss.forward(model.forward(b.inputs, b.batch, b.length), b.targets);
}

// calc_loss_loader(loader, model, num_batches): one pass (drawing the loader's seeds), the mean of
// the first num_batches batches' losses (a Python float sum of float32 items).
double loader_loss(LanguageModel& model, DataLoader& loader, int64_t num_batches) {
  CrossEntropyLoss loss;
  const std::vector<WindowBatch> batches = loader.epoch();
  const int64_t n = std::min<int64_t>(num_batches, static_cast<int64_t>(batches.size()));
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += batch_loss(model, loss, batches[static_cast<size_t>(i)]);
  return total / static_cast<double>(n);
}

}  // namespace

int64_t utf8_length(const std::string& text) {
  int64_t n = 0;
  for (char c : text) n += continuation_byte(c) ? 0 : 1;
  return n;
}

size_t utf8_offset(const std::string& text, int64_t n) {
  size_t i = 0;
  for (int64_t seen = 0; i < text.size(); ++i) {
    if (!continuation_byte(text[i])) {
      if (seen == n) return i;
      ++seen;
    }
  }
  return text.size();
}

BookTrainingReport train_like_the_book(LanguageModel& model, Generator& gen, const Tokenizer& tokenizer,
                                       const std::string& text, const BookTrainingOptions& o,
                                       const BookTrainingCallbacks& cb, DataParallel* ranks) {
  QKV_CHECK(o.train_ratio > 0 && o.train_ratio < 1, "train: train_ratio (", o.train_ratio, ") must be in (0, 1)");
  QKV_CHECK(o.batch_size >= 1, "train: batch_size (", o.batch_size, ") must be at least 1");
  QKV_CHECK(o.epochs >= 0, "train: epochs (", o.epochs, ") must not be negative");
  QKV_CHECK(o.eval_freq >= 1, "train: eval_freq (", o.eval_freq, ") must be at least 1");
  QKV_CHECK(o.eval_iter >= 1, "train: eval_iter (", o.eval_iter, ") must be at least 1");
  QKV_CHECK(std::isfinite(o.lr) && o.lr >= 0, "train: lr (", o.lr, ") must be finite and >= 0");
  QKV_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "train: weight_decay (", o.weight_decay,
            ") must be finite and >= 0");
  QKV_CHECK(o.sample_tokens >= 0, "train: sample_tokens (", o.sample_tokens, ") must not be negative");
  QKV_CHECK(o.context_length >= 0 && o.context_length <= model.context_length(), "train: context_length (",
            o.context_length, ") must be in [1, ", model.context_length(), "] (the model's), or 0 for the model's");
  const int64_t ctx = o.context_length > 0 ? o.context_length : model.context_length();
  // split_idx = int(train_ratio * len(text_data)), in characters
  const auto split = static_cast<int64_t>(o.train_ratio * static_cast<double>(utf8_length(text)));
  const size_t at = utf8_offset(text, split);
  const std::vector<int64_t> train_ids = tokenizer.encode(text.substr(0, at));
  const std::vector<int64_t> val_ids = tokenizer.encode(text.substr(at));
  BookTrainingReport r;
  r.train_tokens = static_cast<int64_t>(train_ids.size());
  r.val_tokens = static_cast<int64_t>(val_ids.size());
  auto windows = [&](const std::vector<int64_t>& ids) {  // range(0, len(ids) - max_length, stride)
    return std::max<int64_t>(0, (static_cast<int64_t>(ids.size()) - ctx + ctx - 1) / ctx);
  };
  const int64_t train_windows = windows(train_ids), val_windows = windows(val_ids);
  r.train_batches = train_windows / o.batch_size;                       // drop_last
  r.val_batches = (val_windows + o.batch_size - 1) / o.batch_size;       // keeps a short one
  QKV_CHECK(r.train_batches > 0 && r.val_batches > 0, "train: the text is too short for the book's loaders: ",
            "the training part has ", r.train_tokens, " tokens (", train_windows, " window(s) of context_length ", ctx,
            " + 1, so ", r.train_batches, " batch(es) of ", o.batch_size, ") and the validation part ", r.val_tokens,
            " tokens (", val_windows, " window(s)); each loader needs a batch: use a longer text, a smaller ",
            "context_length or batch_size, or another train_ratio");
  const SlidingWindowDataset train_set(train_ids, ctx, ctx), val_set(val_ids, ctx, ctx);
  DataLoader train_loader(train_set, o.batch_size, /*shuffle=*/true, /*drop_last=*/true, &gen);
  DataLoader val_loader(val_set, o.batch_size, /*shuffle=*/false, /*drop_last=*/false, &gen);

  AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  const std::vector<Param> params = parameters_of(model);
  AdamW optimizer(params, o.lr, adam);
  CrossEntropyLoss loss;
  // A data-parallel rank's sequences of each (whole, drop_last) training batch.
  const BatchSlice slice = ranks ? batch_slice(o.batch_size, ranks->rank(), ranks->ranks()) : BatchSlice{0, o.batch_size};
  if (ranks) model.set_batch_slice(slice.begin, o.batch_size);  // dropout masks as the whole batch's
  std::vector<float> scratch;
  int64_t global_step = -1;
  for (int64_t epoch = 0; epoch < o.epochs && !r.stopped; ++epoch) {
    model.train();
    for (const WindowBatch& b : train_loader.epoch()) {
      optimizer.zero_grad();
      float l = 0;
      // A loss that is not finite (weights that hold a NaN, an overflow) stops the run before the
      // step changes anything, naming the first tensor that is not finite: no checkpoint of it.
      auto check_loss = [&] {
        if (!std::isfinite(l))
          throw NonFiniteError(global_step + 1, "the training loss is " + number_text(l),
                               first_non_finite(model, b.inputs, b.batch, b.length));
      };
      if (!ranks) {
        l = batch_loss(model, loss, b);
        check_loss();
        model.backward(loss.backward());
      } else {
        WindowBatch mine;
        mine.batch = slice.end - slice.begin;
        mine.length = b.length;
        const auto row = [&](int64_t i) { return static_cast<std::ptrdiff_t>(i * b.length); };
        mine.inputs.assign(b.inputs.begin() + row(slice.begin), b.inputs.begin() + row(slice.end));
        mine.targets.assign(b.targets.begin() + row(slice.begin), b.targets.begin() + row(slice.end));
        batch_loss(model, loss, mine);
        double totals[2] = {loss.total(), static_cast<double>(loss.count())};  // the whole batch's
        ranks->sum_doubles(totals, 2);
        l = static_cast<float>(totals[0] / totals[1]);
        check_loss();
        model.backward(loss.backward_over(static_cast<int64_t>(totals[1])));  // this slice's share
        sum_gradients(*ranks, params, scratch);
      }
      optimizer.step();
      r.tokens_seen += b.batch * b.length;
      ++global_step;
      if (cb.on_step) cb.on_step(global_step, l);
      if (global_step % o.eval_freq == 0) {
        model.eval();
        BookEval e;
        e.epoch = epoch + 1;
        e.step = global_step;
        e.tokens_seen = r.tokens_seen;
        e.train_loss = loader_loss(model, train_loader, o.eval_iter);
        e.val_loss = loader_loss(model, val_loader, o.eval_iter);
        model.train();
        r.evals.push_back(e);
        if (cb.on_eval) cb.on_eval(e);
      }
      const int stop = cb.stop_flag ? static_cast<int>(*cb.stop_flag) : 0;
      if (ranks ? ranks->max_int(stop) != 0 : stop != 0) {
        r.stopped = true;
        break;
      }
    }
    if (r.stopped) break;
    // generate_and_print_sample: greedy, the model's whole context
    model.eval();
    SamplingOptions greedy;
    greedy.max_new_tokens = o.sample_tokens;
    greedy.temperature = 0.0;
    greedy.kv_cache = false;  // the book's generate_text_simple runs the whole window each token
    // A sample that cannot be made (weights gone non-finite, an id the tokenizer lacks) is said in
    // its place: the epochs go on and the run's checkpoint is written all the same.
    std::string sample;
    try {
      const std::vector<int64_t> start = tokenizer.encode(o.start_context);
      std::vector<int64_t> all = start;
      if (!start.empty()) {
        const std::vector<int64_t> out = generate(model, start, greedy);
        all.insert(all.end(), out.begin(), out.end());
      }
      sample = tokenizer.decode(all);
    } catch (const Error& e) {
      sample = str("(no sample: ", e.what(), ")");
    }
    for (char& c : sample)
      if (c == '\n') c = ' ';
    r.samples.push_back(sample);
    if (cb.on_sample) cb.on_sample(epoch + 1, sample);
    model.train();
  }
  r.steps = global_step + 1;
  model.eval();
  return r;
}

std::string book_eval_line(const BookEval& e) {
  char line[160];
  std::snprintf(line, sizeof line, "Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f",
                static_cast<long long>(e.epoch), static_cast<long long>(e.step), e.train_loss, e.val_loss);
  return line;
}

nlohmann::json book_eval_json(const BookEval& e) {
  return {{"epoch", e.epoch}, {"step", e.step}, {"tokens_seen", e.tokens_seen}, {"train_loss", e.train_loss},
          {"val_loss", e.val_loss}};
}

}  // namespace qkv
