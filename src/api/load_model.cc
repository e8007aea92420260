// The front door's loader. See include/qkv/qkv.h.
#include "qkv/qkv.h"

#include <sys/stat.h>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/models/attention_lm.h"
#include "qkv/models/gpt_weights.h"
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

namespace {

// GPT-2's tokenizer for a model of its vocabulary.
std::unique_ptr<Tokenizer> gpt_tokenizer(const LanguageModel& m, const LoadOptions& o, std::optional<int64_t>& eos) {
  QKV_CHECK(m.vocab_size() == 50257, "the model's vocabulary has ", m.vocab_size(), " tokens, not GPT-2's 50,257: ",
            "qkv has no tokenizer for it");
  auto t = std::make_unique<Gpt2Tokenizer>(load_gpt2(o.vocab_dir));
  eos = t->encoding().eot_token();
  return t;
}

void apply_dtype(GPTConfig& c, const LoadOptions& o) {
  if (!o.dtype) return;
  c.attention.dtype = *o.dtype;
  if (*o.dtype == Dtype::kBF16 && c.path == AttentionPath::kAuto) c.path = AttentionPath::kFused;
}

LoadedModel load_gpt(const std::string& path, const LoadOptions& options) {
  GptWeights w = read_gpt_weights(path, options.num_heads);
  apply_dtype(w.config, options);
  LoadedModel m;
  m.generator = std::make_unique<Generator>();
  std::unique_ptr<GPTModel> model = gpt_model_from(w, *m.generator);
  if (w.config.attention.dtype == Dtype::kBF16) model->keep_bf16_weights();  // decoding reads bf16
  m.description = str(model->describe(), " from ", excerpt(path), " (", gpt_layout_name(w.layout), " layout)");
  m.tokenizer = gpt_tokenizer(*model, options, m.eos_id);
  m.model = std::move(model);
  return m;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

LoadedModel make_model(const std::string& preset, uint64_t seed, const LoadOptions& options) {
  GPTConfig c = gpt_preset(preset);
  apply_dtype(c, options);
  LoadedModel m;
  m.generator = std::make_unique<Generator>(seed);
  auto model = std::make_unique<GPTModel>(c, *m.generator);  // torch.manual_seed(seed); GPTModel(cfg)
  model->eval();
  if (c.attention.dtype == Dtype::kBF16) model->keep_bf16_weights();  // decoding reads bf16
  m.description = str("untrained ", preset, " (seed ", seed, "): ", model->describe());
  m.tokenizer = gpt_tokenizer(*model, options, m.eos_id);
  m.model = std::move(model);
  return m;
}

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  if (is_directory(path)) return load_gpt(path, options);
  {
    const MappedSafetensors header(path);  // the header only: the tensors are read when loaded
    const auto kind = header.metadata().find("qkv");
    const bool checkpoint = kind != header.metadata().end() && kind->second.rfind("train-checkpoint", 0) == 0;
    if (!checkpoint && is_gpt_weights(header)) return load_gpt(path, options);
  }
  Checkpoint c = load_checkpoint(path);
  TrainOptions& o = c.options;
  if (options.dtype) {
    o.model.attention.dtype = *options.dtype;
    // generation runs in eval mode, where auto is the fused path (dropout is off)
    if (*options.dtype == Dtype::kBF16 && o.model.path == AttentionPath::kAuto) o.model.path = AttentionPath::kFused;
  }
  LoadedModel m;
  m.tokenizer = checkpoint_tokenizer(c, path, options.vocab_dir);
  m.generator = std::make_unique<Generator>(o.seed);
  auto model = std::make_unique<AttentionLM>(o.model, *m.generator);
  model->load_state_dict(c.model, /*strict=*/true);
  model->eval();
  m.description = str("attention LM (", o.model.num_layers, " layers x ", o.model.attention.heads, " heads, ",
                      train_task_name(o.task), ", step ", c.step, ")");
  if (is_builtin_task(o.task)) m.default_new_tokens = o.task_length;
  m.model = std::move(model);
  return m;
}

}  // namespace qkv
