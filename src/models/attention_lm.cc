// The attention-lm family: chapter 3's attention-only LM as a DecoderSpec, its tasks, its registry
// entry. See include/qkv/models/attention_lm.h; its checkpoints are lm_checkpoint.cc's.
#include "qkv/models/attention_lm.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"
#include "qkv/models/lm_checkpoint.h"
#include "qkv/text/vocab_files.h"
#include "models/families.h"

namespace qkv {
namespace {

// The spec's fields as LMConfig's JSON keys name them.
std::string lm_key(DecoderField f) {
  switch (f) {
    case DecoderField::kVocabSize: return "vocab_size";
    case DecoderField::kContextLength: return "context_length";
    case DecoderField::kWidth: return "d_model";
    case DecoderField::kLayers: return "num_layers";
    case DecoderField::kFfWidth: return "ff_width";
    case DecoderField::kNormEps: return "norm_eps";
    default: return spec_names().field(f);  // (no linear-attention layers in this family)
  }
  return "?";
}
const DecoderNames kLmKeys{lm_key, attention_config_name};

std::string describe_lm(const DecoderSpec& s) {
  return str("attention LM: ", s.layers, " layers x ", s.attention.heads, " heads, d_model ", s.width, ", vocab ",
             s.vocab_size, ", context ", s.context_length);
}

DecoderSpec read_lm(const nlohmann::json& j, const std::string& where) {
  LMConfig c;
  fields_from_json(j, c, where);
  set_head_dim(c);
  validate_lm_config(c);
  return lm_spec(c);
}

nlohmann::json write_lm(const DecoderSpec& s) { return to_json(lm_config_of(s)); }

// A checkpoint qkv train wrote: its model, and the tokenizer of what it was trained on.
LoadedModel load_lm(const std::string& path, const LoadOptions& options) {
  LmCheckpoint c = read_lm_checkpoint(path);
  LMConfig& o = c.config;
  if (options.dtype) {
    o.attention.dtype = *options.dtype;
    // generation runs in eval mode, where auto is the fused path (dropout is off)
    if (*options.dtype == Dtype::kBF16 && o.path == AttentionPath::kAuto) o.path = AttentionPath::kFused;
  }
  LoadedModel m;
  m.no_tokenizer = "it was trained on fixed batches of ids";
  if (is_builtin_task(c.task)) m.default_new_tokens = c.task_length;
  if (options.tokenizer && is_builtin_task(c.task)) {
    m.tokenizer = std::make_unique<LetterTokenizer>(c.task_symbols);
  } else if (options.tokenizer && c.task == TrainTask::kText) {
    QKV_CHECK(!c.vocab.empty(), excerpt(path), " is a text model but holds no vocabulary (data.vocab)");
    m.tokenizer = std::make_unique<VocabularyTokenizer>(load_gpt2(options.vocab_dir), c.vocab, excerpt(c.text_file));
  }
  // torch.manual_seed(seed); model = AttentionLM(...); model.load_state_dict(...)
  m.generator = std::make_unique<Generator>(c.seed);
  m.model = build_model(lm_spec(o), *m.generator);
  m.model->load_state_dict(c.model, /*strict=*/true);
  m.model->eval();
  m.description = str("attention LM (", o.num_layers, " layers x ", o.attention.heads, " heads, ",
                      train_task_name(c.task), ", step ", c.step, ")");
  return m;
}

}  // namespace

void set_head_dim(LMConfig& c) {
  const int64_t H = c.attention.heads;
  QKV_CHECK(H > 0 && c.d_model % H == 0, "AttentionLM: d_model (", c.d_model, ") must be divisible by ",
            attention_config_name(kernels::SpecField::kHeads), " (", H, ")");
  c.attention.head_dim = c.d_model / H;
}

void validate_lm_config(const LMConfig& c) {
  validate_decoder_spec(lm_spec(c), "AttentionLM", kLmKeys);
  const kernels::AttentionSpec& a = c.attention;
  QKV_CHECK(a.width() == c.d_model, "AttentionLM: ", attention_config_name(kernels::SpecField::kHeads), " (", a.heads,
            ") x head_dim (", a.head_dim, ") must be d_model (", c.d_model, ")");
}

nlohmann::json to_json(const LMConfig& c) { return fields_to_json(c); }

LMConfig lm_config_from_json(const nlohmann::json& j) {
  LMConfig c;
  fields_from_json(j, c, "the model configuration");
  set_head_dim(c);
  return c;
}

DecoderSpec lm_spec(const LMConfig& c) {
  DecoderSpec s;
  s.family = "attention-lm";
  s.vocab_size = c.vocab_size;
  s.context_length = c.context_length;
  s.width = c.d_model;
  s.layers = c.num_layers;
  s.norm = NormKind::kNone;
  s.ff = FeedForwardKind::kNone;
  s.learned_positions = true;
  s.tied_head = false;
  s.qkv_bias = c.qkv_bias;
  s.out_bias = true;
  s.head_bias = true;
  s.head_f32 = true;
  s.shortcut_dropout = false;
  s.path = c.path;
  s.attention = c.attention;
  return s;
}

LMConfig lm_config_of(const DecoderSpec& s) {
  QKV_CHECK(s.family == "attention-lm", "an attention LM's configuration from a ", s.family, " model's spec");
  LMConfig c;
  c.vocab_size = s.vocab_size;
  c.context_length = s.context_length;
  c.d_model = s.width;
  c.num_layers = s.layers;
  c.qkv_bias = s.qkv_bias;
  c.path = s.path;
  c.attention = s.attention;
  return c;
}

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

void read_option(const nlohmann::json& j, TrainTask& out, const std::string& key) {
  QKV_CHECK(j.is_string(), "'", key, "' must be one of \"copy\", \"reverse\", \"text\", \"data\", not ", json_excerpt(j));
  try {
    out = parse_train_task(j.get<std::string>());
  } catch (const Error& e) {
    fail("'", key, "': ", e.what());
  }
}

namespace models_detail {

const ModelFamily& attention_lm_family() {
  static const ModelFamily f = [] {
    ModelFamily g;
    g.name = "attention-lm";
    g.title = "attention LM";
    g.names = {.embed = "tok_emb.", .positions = "pos_emb.", .blocks = "blocks.",
               .norm1 = "", .attention = "", .norm2 = "", .ff = "",
               .q = "W_query.", .k = "W_key.", .v = "W_value.", .o = "out_proj.", .q_norm = "q_norm.", .k_norm = "k_norm.", .linear = "",
               .final_norm = "", .head = "out_head.", .mask = true, .norms_last = false};
    g.words = {.projection_note = "", .attention = "", .layer = "block", .show_weights = true};
    g.keys = kLmKeys;
    g.read_config = read_lm;
    g.write_config = write_lm;
    g.describe = describe_lm;
    g.load = load_lm;
    g.checkpoint_kind = "qkv train's checkpoint";
    return g;
  }();
  return f;
}

}  // namespace models_detail
}  // namespace qkv
