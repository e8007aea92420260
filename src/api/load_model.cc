// The front door's loader. See include/qkv/qkv.h.
#include "qkv/qkv.h"

#include <sys/stat.h>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/models/attention_lm.h"
#include "qkv/models/gpt_weights.h"
#include "qkv/models/llama_weights.h"
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

// The family's end tokens that the tokenizer has, the first of them the end-of-text token.
void set_end_ids(const LlamaConfig& c, const HfTokenizer& t, LoadedModel& m) {
  const std::vector<const char*> ends = c.family == LlamaFamily::kQwen3
                                            ? std::vector<const char*>{"<|im_end|>", "<|endoftext|>"}
                                            : std::vector<const char*>{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
  for (const char* end : ends)
    if (const auto id = t.added_token(end); id && *id < m.model->vocab_size()) m.end_ids.push_back(*id);
  if (!m.end_ids.empty()) m.eos_id = m.end_ids.front();
}

void set_llama_tokenizer(const LlamaConfig& c, HfTokenizer t, const std::string& source, LoadedModel& m) {
  QKV_CHECK(t.vocab_size() <= m.model->vocab_size(), source, " has ", t.vocab_size(), " tokens but the model's ",
            "vocabulary has ", m.model->vocab_size());
  set_end_ids(c, t, m);
  m.chat_format = c.family == LlamaFamily::kQwen3 ? ChatFormat::kQwen3 : ChatFormat::kLlama3;
  m.tokenizer = std::make_unique<HfTextTokenizer>(std::move(t), source);
}

LoadedModel load_llama(const std::string& dir, const LoadOptions& options) {
  const LlamaWeights w = read_llama_weights(dir);
  const Dtype dtype = options.dtype.value_or(w.stored_dtype == "F32" ? Dtype::kF32 : Dtype::kBF16);
  LoadedModel m;
  m.generator = std::make_unique<Generator>();
  // bf16 products: the weights kept in bf16 only (decoding reads bf16; the model in about its file's size)
  std::unique_ptr<LlamaModel> model =
      llama_model_from(w, dtype, AttentionPath::kFused, *m.generator, /*bf16_only=*/dtype == Dtype::kBF16);
  m.description = str(model->describe(), " from ", excerpt(dir), " (", w.stored_dtype, " weights, ",
                      dtype_name(dtype), " products)");
  const LlamaConfig c = model->config;
  m.model = std::move(model);
  const std::string tokenizer = (dir.back() == '/' ? dir : dir + "/") + "tokenizer.json";
  struct stat st {};
  if (::stat(tokenizer.c_str(), &st) == 0) set_llama_tokenizer(c, HfTokenizer::load(tokenizer), excerpt(tokenizer), m);
  return m;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = gpt_preset_names();
    for (const std::string& l : llama_preset_names()) n.push_back(l);
    return n;
  }();
  return names;
}

LoadedModel make_model(const std::string& preset, uint64_t seed, const LoadOptions& options) {
  for (const std::string& name : llama_preset_names()) {
    if (name != preset) continue;
    LlamaConfig c = llama_preset(preset);
    c.dtype = options.dtype.value_or(Dtype::kF32);
    c.path = AttentionPath::kFused;
    LoadedModel m;
    m.generator = std::make_unique<Generator>(seed);
    auto model = std::make_unique<LlamaModel>(c, *m.generator);
    model->eval();
    if (c.dtype == Dtype::kBF16) model->keep_bf16_weights();
    m.description = str("untrained ", preset, " (seed ", seed, "): ", model->describe());
    m.model = std::move(model);
    const std::string vocab = c.family == LlamaFamily::kQwen3 ? "qwen3" : "llama3";
    set_llama_tokenizer(c, HfTokenizer::load(vocab), vocab + "'s installed tokenizer.json", m);
    return m;
  }
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
  if (is_llama_directory(path)) return load_llama(path, options);
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
