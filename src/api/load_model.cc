// The front door's loader. See include/qkv/qkv.h.
#include "qkv/qkv.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/models/attention_lm.h"
#include "qkv/text/vocab_files.h"
#include "qkv/train/checkpoint.h"

namespace qkv {
namespace {

// The tokenizer a checkpoint's model reads and writes: the task's letters, GPT-2's tokens of the
// training text, or none (fixed batches of ids).
std::unique_ptr<Tokenizer> checkpoint_tokenizer(const Checkpoint& c, const std::string& path,
                                                const std::string& vocab_dir) {
  const TrainOptions& o = c.options;
  if (is_builtin_task(o.task)) return std::make_unique<LetterTokenizer>(o.task_symbols);
  if (o.task == TrainTask::kText) {
    QKV_CHECK(!c.vocab.empty(), excerpt(path), " is a text model but holds no vocabulary (data.vocab)");
    return std::make_unique<VocabularyTokenizer>(load_gpt2(vocab_dir), c.vocab, excerpt(o.text_file));
  }
  return nullptr;
}

}  // namespace

std::vector<int64_t> LoadedModel::encode(const std::string& text) const {
  QKV_CHECK(tokenizer != nullptr, description, " has no tokenizer to read text with (it was trained on fixed ",
            "batches of ids)");
  return tokenizer->encode(text);
}

std::string LoadedModel::decode(const std::vector<int64_t>& ids) const {
  QKV_CHECK(tokenizer != nullptr, description, " has no tokenizer to write text with (it was trained on fixed ",
            "batches of ids)");
  return tokenizer->decode(ids);
}

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  Checkpoint c = load_checkpoint(path);
  TrainOptions& o = c.options;
  if (options.dtype) {
    o.model.attention.dtype = *options.dtype;
    // generation runs in eval mode, where auto is the fused path (dropout is off)
    if (*options.dtype == Dtype::kBF16 && o.model.path == AttentionPath::kAuto) o.model.path = AttentionPath::kFused;
  }
  LoadedModel m;
  m.tokenizer = checkpoint_tokenizer(c, path, options.vocab_dir);
  Generator gen(o.seed);
  auto model = std::make_unique<AttentionLM>(o.model, gen);
  model->load_state_dict(c.model, /*strict=*/true);
  model->eval();
  m.description = str("attention LM (", o.model.num_layers, " layers x ", o.model.attention.heads, " heads, ",
                      train_task_name(o.task), ", step ", c.step, ")");
  if (is_builtin_task(o.task)) m.default_new_tokens = o.task_length;
  m.model = std::move(model);
  return m;
}

}  // namespace qkv
