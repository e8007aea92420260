// qkv forward --module gpt|llama|qwen3: a whole model of a family (models/family.h) on ids, forward
// and backward.
//
//   qkv forward --module gpt --seed S --vocab-size V --context-length C --d-model E --num-heads H
//               --num-layers L [--dropout p --train] [--qkv-bias] (--input ids.safetensors | --text T) ...
//   qkv forward --module gpt|llama|qwen3 --weights PATH [--seed S] [--dtype bf16] [--attention fused|textbook]
//               (--input ids.safetensors | --text T) [--output logits.safetensors]
//               [--attn-weights w.safetensors] [--save-weights state.safetensors]
//               [--grad-output g.safetensors --grads-out grads.safetensors]
//
// The weights are drawn as torch.manual_seed(S) and the family's constructor draw them; with
// --weights they are then replaced by the file's, so that --train's dropout draws what PyTorch's
// would after the same lines. Without --weights the model is the book's GPT of the sizes given.
// The input is the tensor 'input' of (B, T) token ids (whole numbers stored as floats), or --text's
// tokens (B = 1). --attn-weights writes <blocks>N.attn_weights (B, H, T, T) for every block.
#include <iostream>

#include "forward_model.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/print.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"
#include "qkv/models/gpt.h"
#include "qkv/models/model_forward.h"

namespace qkv::cli {

void add_model_size_flags(CLI::App* sub, ModelSizeFlags& f) {
  add_number(sub, "--vocab-size", f.vocab_size, "--module gpt with --seed: the vocabulary (default GPT-2's 50257)",
             positive<int64_t>());
  add_number(sub, "--d-model", f.d_model, "--module gpt with --seed: the embedding width E", positive<int64_t>());
  add_number(sub, "--num-layers", f.num_layers, "--module gpt with --seed: the transformer blocks", non_negative<int64_t>());
}

namespace {

// --module gpt --seed S without --weights: the book's cfg dict from the flags.
LoadedModel model_of_sizes(const ModuleFlags& m, const ModelSizeFlags& g, const CLI::App& sub) {
  for (const char* flag : {"--d-model", "--context-length"})
    if (sub.count(flag) == 0) bad_flag(flag, "--module gpt with --seed needs it");
  if (g.d_model % m.num_heads != 0)
    bad_flag("--d-model", g.d_model, " must be divisible by --num-heads (", m.num_heads, ")");
  kernels::AttentionSpec a{.heads = m.num_heads, .head_dim = g.d_model / m.num_heads,
                           .dropout = sub.count("--dropout") > 0 ? m.dropout : 0.1};  // the book's drop_rate
  a.dtype = m.variants.dtype;
  check_attention_flags(a);
  DecoderSpec s = gpt_spec(g.vocab_size, m.context_length, g.d_model, m.num_heads, g.num_layers, a.dropout, m.qkv_bias);
  s.path = m.path;
  s.attention.dtype = a.dtype;
  check_sizes({s.vocab_size, s.width}, 4, "the token embedding (--vocab-size x --d-model)");
  check_sizes({s.layers, 12, s.width, s.width}, 4, "the blocks (--num-layers x 12 x --d-model squared)");
  LoadedModel loaded;
  loaded.generator = std::make_unique<Generator>(*m.seed);
  loaded.model = build_model(s, *loaded.generator);  // torch.manual_seed(S); model = GPTModel(cfg)
  return loaded;
}

}  // namespace

int run_forward_model(const ModuleFlags& m, const ModelSizeFlags& g, const ForwardFiles& out, const CLI::App& sub) {
  const ModelFamily& family = model_family(m.module);
  const bool sizes = m.weights.empty() && family.book_config;  // the book's cfg dict as flags
  for (const char* flag : {"--d-in", "--d-out", "--num-kv-heads", "--rope", "--rope-base", "--window", "--alibi",
                           "--softcap"})
    if (sub.count(flag) > 0) bad_flag(flag, "is not a flag of --module ", m.module);
  if (!sizes)
    for (const char* flag : {"--vocab-size", "--d-model", "--num-layers", "--context-length", "--qkv-bias"})
      if (sub.count(flag) > 0)
        bad_flag(flag, m.weights.empty() ? str("is not a flag of --module ", m.module, " (its model is config.json's)")
                                         : std::string("comes from the file with --weights"));
  if (!family.book_config)
    for (const char* flag : {"--num-heads", "--dropout", "--train", "--seed"})
      if (sub.count(flag) > 0) bad_flag(flag, "is not a flag of --module ", m.module, " (its model is config.json's)");
  if (m.weights.empty() && !(sizes && m.seed))
    bad_flag(sizes ? "--seed" : "--weights", sizes ? "give --seed S (weights drawn as torch.manual_seed(S); "
                                                     "GPTModel(cfg)) or --weights PATH"
                                                   : str("--module ", m.module, " needs --weights DIR (config.json and "
                                                         "model.safetensors)"),
             "");
  std::vector<OutputFile> destinations;
  for (const auto& [path, flag] : {std::pair{&out.output, "--output"}, {&out.save_weights, "--save-weights"},
                                   {&out.grads_out, "--grads-out"}, {&out.attn_weights, "--attn-weights"}})
    if (!path->empty()) destinations.push_back({*path, "", flag});
  const std::vector<InputPath> inputs = {{out.input, "--input"}, {m.weights, "--weights"},
                                         {out.grad_output, "--grad-output"}, {out.text_file, "--text-file"}};

  LoadedModel loaded;
  if (sizes && m.seed) {
    loaded = model_of_sizes(m, g, sub);
  } else {
    const ModelFamily& file_family = family_of_path(m.weights);
    QKV_CHECK(file_family.name == family.name, excerpt(m.weights), " holds a ", file_family.name, " model (",
              file_family.model_types.empty() ? file_family.title : "model_type \"" + file_family.model_types[0] + "\"",
              "); --module ", m.module, " reads ", family.name, " models");
    check_output_files(destinations, inputs);
    LoadOptions load;
    load.vocab_dir = out.vocab_dir;
    load.dtype = m.variants.dtype;
    load.path = m.path;
    load.seed = m.seed.value_or(Generator::kDefaultSeed);
    load.draw = true;
    load.float_weights = true;  // the state and the gradients are asked for by name
    load.tokenizer = !out.text.empty() || sub.count("--text") > 0 || sub.count("--text-file") > 0;
    if (sub.count("--num-heads") > 0) load.num_heads = m.num_heads;
    if (sub.count("--dropout") > 0) load.dropout = m.dropout;
    loaded = family.load(m.weights, load);
  }
  check_output_files(destinations, inputs);
  LanguageModel& model = *loaded.model;
  model.train(m.train);

  std::vector<int64_t> ids;
  int64_t B = 1, T = 0;
  if (!out.text.empty() || sub.count("--text") > 0 || sub.count("--text-file") > 0) {
    if (!loaded.tokenizer) {
      std::string file;
      LoadOptions o;
      o.vocab_dir = out.vocab_dir;
      QKV_CHECK(family.tokenizer != nullptr, "--module ", m.module, " has no tokenizer here for --text");
      // The family's installed vocabulary, checked against the model's (a folder without
      // tokenizer.json may be of another vocabulary: refused, not read with the wrong ids).
      const std::string source = m.weights.empty() ? family.vocabulary + "'s installed tokenizer"
                                                   : str(loaded.no_tokenizer, ", and ", family.vocabulary,
                                                         "'s installed tokenizer");
      attach_tokenizer(loaded, family.tokenizer(family.vocabulary, o, file), source, file);
    }
    ids = loaded.encode(out.text);
    T = static_cast<int64_t>(ids.size());
  } else {
    QKV_CHECK(!out.input.empty(), "give --input FILE (the tensor 'input' of (B, T) ids) or --text T");
    const TensorFile in = load_safetensors(out.input);
    const Tensor& t = in.get("input");
    ids = token_ids_of(t, model.vocab_size(), str("--module ", m.module, ": the tensor 'input' in ", excerpt(out.input)));
    B = t.size(0);
    T = t.size(1);
  }
  QKV_CHECK(T >= 1, "the input has no tokens");
  QKV_CHECK(T <= model.context_length(), "the input has ", T, " tokens but the model's context_length is ",
            model.context_length());
  std::optional<TensorFile> grad_file;
  if (!out.grad_output.empty()) grad_file = load_safetensors(out.grad_output);
  const Tensor* dy = grad_file ? &grad_file->get("grad_output") : nullptr;
  if (dy) {
    const Shape logits = {B, T, model.vocab_size()};
    QKV_CHECK(dy->shape() == logits, "the tensor 'grad_output' in ", excerpt(out.grad_output), " has shape ",
              shape_str(dy->shape()), "; it must have the logits' shape ", shape_str(logits));
  }
  const ModelForward r = run_model_forward(model, ids, B, T, !out.attn_weights.empty(), dy);

  std::vector<OutputFile> files;
  if (!out.output.empty()) files.push_back({out.output, serialize_safetensors({{"output", r.logits}}), "--output"});
  if (!out.attn_weights.empty())
    files.push_back({out.attn_weights, serialize_safetensors(r.attention_weights), "--attn-weights"});
  if (!out.save_weights.empty())
    files.push_back({out.save_weights, serialize_safetensors(torch_state(model), {{"format", "pt"}}), "--save-weights"});
  if (dy) files.push_back({out.grads_out, serialize_safetensors(r.gradients, {{"format", "pt"}}), "--grads-out"});
  write_files_atomically(files);
  if (out.output.empty()) std::cout << to_string(r.logits) << "\n";
  return 0;
}

}  // namespace qkv::cli
