// The GPT family: the book's cfg dict, GPT-2's presets, its registry entry. See
// include/qkv/models/gpt.h; its files are gpt_weights.cc's.
#include "qkv/models/gpt.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/family.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/gpt_weights.h"
#include "qkv/models/option_fields.h"
#include "qkv/text/vocab_files.h"
#include "models/families.h"

namespace qkv {
namespace {

// The spec's fields as the book's GPT_CONFIG dict names them.
std::string gpt_key(DecoderField f) {
  switch (f) {
    case DecoderField::kVocabSize: return "vocab_size";
    case DecoderField::kContextLength: return "context_length";
    case DecoderField::kWidth: return "emb_dim";
    case DecoderField::kLayers: return "n_layers";
    case DecoderField::kFfWidth: return "4 * emb_dim";
    case DecoderField::kNormEps: return "the LayerNorm's eps";
    default: return spec_names().field(f);  // (no linear-attention layers in this family)
  }
  return "?";
}
std::string gpt_attention_key(kernels::SpecField f) {
  return f == kernels::SpecField::kHeads ? "n_heads" : f == kernels::SpecField::kDropout ? "drop_rate"
                                                                                       : kernels::spec_field_name(f);
}
const DecoderNames kGptKeys{gpt_key, gpt_attention_key};

// The book's cfg dict, read and written through option_fields.h (its keys, once).
struct BookCfg {
  int64_t vocab_size = 50257, context_length = 1024, emb_dim = 768, n_heads = 12, n_layers = 12;
  double drop_rate = 0.1;
  bool qkv_bias = false, tied_head = false;
  AttentionPath attention = AttentionPath::kAuto;
  Dtype dtype = Dtype::kF32;
};

template <typename V, typename... C>
  requires(std::same_as<std::remove_const_t<C>, BookCfg> && ...)
void visit_fields(V&& v, C&... c) {
  v(OptionField{"vocab_size", "", "", true, true}, c.vocab_size...);
  v(OptionField{"context_length", "", "", true, true}, c.context_length...);
  v(OptionField{"emb_dim", "", "", true, true}, c.emb_dim...);
  v(OptionField{"n_heads", "", "", true, true}, c.n_heads...);
  v(OptionField{"n_layers", "", "", true, true}, c.n_layers...);
  v(OptionField{"drop_rate", "", "", true, true}, c.drop_rate...);
  v(OptionField{"qkv_bias", "", "", false, true}, c.qkv_bias...);
  v(OptionField{"tied_head", "", "", false, false}, c.tied_head...);
  v(OptionField{"attention", "", "", true, false}, c.attention...);
  v(OptionField{"dtype", "", "", true, false}, c.dtype...);
}

DecoderSpec spec_of(const BookCfg& c, const std::string& where) {
  QKV_CHECK(c.n_heads > 0 && c.emb_dim % c.n_heads == 0, where, ": emb_dim (", c.emb_dim,
            ") must be divisible by n_heads (", c.n_heads, ")");
  DecoderSpec s;
  s.family = "gpt";
  s.vocab_size = c.vocab_size;
  s.context_length = c.context_length;
  s.width = c.emb_dim;
  s.layers = c.n_layers;
  s.norm = NormKind::kLayerNorm;
  s.norm_eps = 1e-5;
  s.ff = FeedForwardKind::kGelu;
  s.ff_width = 4 * c.emb_dim;
  s.learned_positions = true;
  s.tied_head = c.tied_head;
  s.qkv_bias = c.qkv_bias;
  s.out_bias = true;
  s.shortcut_dropout = true;
  s.path = c.attention;
  s.attention.heads = c.n_heads;
  s.attention.head_dim = c.emb_dim / c.n_heads;
  s.attention.dropout = c.drop_rate;
  s.attention.dtype = c.dtype;
  validate_decoder_spec(s, where, kGptKeys);
  return s;
}

BookCfg cfg_of(const DecoderSpec& s) {
  BookCfg c;
  c.vocab_size = s.vocab_size;
  c.context_length = s.context_length;
  c.emb_dim = s.width;
  c.n_heads = s.attention.heads;
  c.n_layers = s.layers;
  c.drop_rate = s.attention.dropout;
  c.qkv_bias = s.qkv_bias;
  c.tied_head = s.tied_head;
  c.attention = s.path;
  c.dtype = s.attention.dtype;
  return c;
}

std::string describe_gpt(const DecoderSpec& s) {
  return str("GPT model: ", s.layers, " layers x ", s.attention.heads, " heads, emb_dim ", s.width, ", vocab ",
             s.vocab_size, ", context ", s.context_length, s.tied_head ? ", head tied to the token embedding" : "");
}

DecoderSpec read_cfg(const nlohmann::json& j, const std::string& where) { return gpt_spec_from_cfg(j, where); }

std::unique_ptr<Tokenizer> gpt2_tokenizer(const std::string& /*source*/, const LoadOptions& o, std::string& file) {
  file.clear();
  return std::make_unique<Gpt2Tokenizer>(load_gpt2(o.vocab_dir));
}

// GPT-2's weights in any layout gpt_weights.h reads.
LoadedModel load_gpt(const std::string& path, const LoadOptions& options) {
  if (is_gguf_file(path)) return load_gguf(path, options);
  QKV_CHECK(options.quantize.empty(), "quantizing the weights (", options.quantize, ") at load reads a Llama 3 / Qwen3 ",
            "folder or a float GGUF file; GPT-2's weights in ", excerpt(path), " are quantized by writing them as GGUF: ",
            "qkv convert --weights ", path, " --to gguf --type ", options.quantize, " --out model.gguf");
  GptWeights w = read_gpt_weights(path, options.num_heads);
  if (options.path) w.spec.path = *options.path;
  if (options.dropout) w.spec.attention.dropout = *options.dropout;
  if (options.dtype) {
    w.spec.attention.dtype = *options.dtype;
    // generation runs in eval mode, where auto is the fused path (dropout is off)
    if (*options.dtype == Dtype::kBF16 && w.spec.path == AttentionPath::kAuto) w.spec.path = AttentionPath::kFused;
  }
  LoadedModel m;
  m.generator = std::make_unique<Generator>(options.seed.value_or(Generator::kDefaultSeed));
  m.model = gpt_model_from(w, *m.generator, options.draw);
  if (w.spec.attention.dtype == Dtype::kBF16) m.model->keep_bf16_weights();  // decoding reads bf16
  m.description = str(m.model->describe(), " from ", excerpt(path), " (", gpt_layout_name(w.layout), " layout)");
  if (options.tokenizer) {
    std::string file;
    attach_tokenizer(m, gpt2_tokenizer("", options, file), "GPT-2's vocabulary", file);
  }
  return m;
}

// The book's names with qkv's metadata (its cfg): what qkv train --model gpt writes and every
// command reads back with its head count.
std::vector<OutputFile> gpt_checkpoint(LanguageModel& model, const std::string& path, const std::string&) {
  return {{path,
           serialize_safetensors(gpt_state_in_layout(model, GptLayout::kBook),
                                 {{"format", "pt"}, {"qkv", "gpt-weights 1"}, {"config", gpt_cfg_json(model.spec()).dump()}}),
           "--checkpoint"}};
}

}  // namespace

DecoderSpec gpt_spec(int64_t vocab_size, int64_t context_length, int64_t emb_dim, int64_t n_heads, int64_t n_layers,
                     double drop_rate, bool qkv_bias, bool tied_head) {
  BookCfg c;
  c.vocab_size = vocab_size;
  c.context_length = context_length;
  c.emb_dim = emb_dim;
  c.n_heads = n_heads;
  c.n_layers = n_layers;
  c.drop_rate = drop_rate;
  c.qkv_bias = qkv_bias;
  c.tied_head = tied_head;
  return spec_of(c, "the GPT configuration");
}

DecoderSpec gpt_spec_from_cfg(const nlohmann::json& j, const std::string& where) {
  BookCfg c;
  fields_from_json(j, c, where);
  return spec_of(c, where);
}

nlohmann::json gpt_cfg_json(const DecoderSpec& s) { return fields_to_json(cfg_of(s)); }

const std::vector<std::string>& gpt_preset_names() {
  static const std::vector<std::string> names = {"gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"};
  return names;
}

DecoderSpec gpt_preset(const std::string& name) {
  const struct { const char* name; int64_t E, L, H; } sizes[] = {
      {"gpt2-small", 768, 12, 12}, {"gpt2-medium", 1024, 24, 16}, {"gpt2-large", 1280, 36, 20}, {"gpt2-xl", 1600, 48, 25}};
  for (const auto& s : sizes)
    if (name == s.name) return gpt_spec(50257, 1024, s.E, s.H, s.L, 0.1, false);
  std::string known;
  for (const std::string& n : gpt_preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown GPT preset ", excerpt(name), "; expected one of: ", known);
}

namespace models_detail {

const ModelFamily& gpt_family() {
  static const ModelFamily f = [] {
    ModelFamily g;
    g.name = "gpt";
    g.title = "GPT";
    g.model_types = {"gpt2"};
    g.gguf_architectures = {"gpt2"};
    g.book_config = true;
    g.names = {.embed = "tok_emb.", .positions = "pos_emb.", .blocks = "trf_blocks.",
               .norm1 = "norm1.", .attention = "att.", .norm2 = "norm2.", .ff = "ff.",
               .q = "W_query.", .k = "W_key.", .v = "W_value.", .o = "out_proj.", .q_norm = "q_norm.", .k_norm = "k_norm.", .linear = "",
               .final_norm = "final_norm.", .head = "out_head.", .mask = true, .norms_last = true};
    g.words = {.projection_note = " (+ bias)", .attention = "att(norm1(x))", .layer = "block", .show_weights = false};
    g.keys = kGptKeys;
    g.read_config = read_cfg;
    g.write_config = gpt_cfg_json;
    g.describe = describe_gpt;
    g.presets = gpt_preset_names();
    g.preset = gpt_preset;
    g.load = load_gpt;
    g.checkpoint = gpt_checkpoint;
    g.checkpoint_kind = "the book's names; qkv generate --weights reads them";
    g.torch_state = [](LanguageModel& m) { return gpt_state_in_layout(m, GptLayout::kBook); };
    g.vocabulary = "gpt2";
    g.tokenizer = gpt2_tokenizer;
    g.end_tokens = {"<|endoftext|>"};
    return g;
  }();
  return f;
}

}  // namespace models_detail
}  // namespace qkv
