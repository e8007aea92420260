// qkv forward --module gpt: the book's GPT model (chapter 4) on ids, forward and backward.
//
//   qkv forward --module gpt --seed S --vocab-size V --context-length C --d-model E --num-heads H
//               --num-layers L [--dropout p --train] [--qkv-bias] (--input ids.safetensors | --text T)
//               [--output logits.safetensors] [--attn-weights w.safetensors]
//               [--grad-output g.safetensors --grads-out grads.safetensors]
//   qkv forward --module gpt --weights PATH [--num-heads H] ...
//
// With --seed the weights are drawn as torch.manual_seed(S); GPTModel(cfg) draws them; with
// --weights too, they are drawn and then replaced by the file's, so that --train's dropout draws
// what PyTorch's would after the same lines. The input is the tensor 'input' of (B, T) token ids
// (whole numbers stored as floats), or --text's GPT-2 tokens (B = 1).
#include <iostream>
#include <map>
#include <optional>

#include "forward_gpt.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/print.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/gpt.h"
#include "qkv/models/gpt_weights.h"
#include "qkv/text/vocab_files.h"

namespace qkv::cli {
namespace {

// The ids of the tensor 'input' (B, T): whole numbers in [0, V).
std::vector<int64_t> ids_of(const Tensor& t, int64_t V, const std::string& file, const std::string& module) {
  QKV_CHECK(t.dim() == 2 && t.size(0) >= 1 && t.size(1) >= 1, "--module ", module, ": the tensor 'input' in ",
            excerpt(file), " has shape ", shape_str(t.shape()), "; expected (batch, num_tokens) token ids");
  std::vector<int64_t> ids;
  for (float v : t.to_vector()) {
    QKV_CHECK(v == std::floor(v) && v >= 0 && v < static_cast<float>(V), "--module ", module,
              ": the tensor 'input' in ", excerpt(file), " holds ", v, ", not a token id in [0, ", V, ")");
    ids.push_back(static_cast<int64_t>(v));
  }
  return ids;
}

}  // namespace

void check_forward_outputs(const ForwardOutputs& out) {
  std::vector<OutputFile> destinations;
  for (const auto& [path, flag] : {std::pair{&out.output, "--output"}, {&out.save_weights, "--save-weights"},
                                   {&out.grads_out, "--grads-out"}, {&out.attn_weights, "--attn-weights"}})
    if (!path->empty()) destinations.push_back({*path, "", flag});
  check_output_files(destinations);
  QKV_CHECK(out.grad_output.empty() == out.grads_out.empty(), "--grad-output FILE and --grads-out FILE go together");
}

int run_model_forward(const ModelForward& run, const ForwardOutputs& out, const CLI::App& sub) {
  LanguageModel& model = run.model;
  std::vector<int64_t> ids;
  int64_t B = 1, T = 0;
  if (!out.text.empty() || sub.count("--text") > 0) {
    QKV_CHECK(run.encode != nullptr, "--module ", run.module, " has no tokenizer here for --text");
    ids = run.encode(out.text);
    T = static_cast<int64_t>(ids.size());
  } else {
    QKV_CHECK(!out.input.empty(), "give --input FILE (the tensor 'input' of (B, T) ids) or --text T");
    const TensorFile in = load_safetensors(out.input);
    const Tensor& t = in.get("input");
    ids = ids_of(t, model.vocab_size(), out.input, run.module);
    B = t.size(0);
    T = t.size(1);
  }
  QKV_CHECK(T >= 1, "the input has no tokens");
  QKV_CHECK(T <= model.context_length(), "the input has ", T, " tokens but the model's context_length is ",
            model.context_length());
  if (run.record_traces) run.record_traces(!out.attn_weights.empty());
  const Tensor logits = model.forward(ids, B, T);  // (B, T, V)

  std::vector<OutputFile> files;
  if (!out.output.empty()) files.push_back({out.output, serialize_safetensors({{"output", logits}}), "--output"});
  if (!out.attn_weights.empty()) {
    QKV_CHECK(run.traces != nullptr, "--module ", run.module, " does not write --attn-weights");
    NamedTensors t;
    const std::vector<AttentionTrace>& traces = run.traces();
    for (size_t l = 0; l < traces.size(); ++l)
      t.push_back({run.trace_prefix + std::to_string(l) + ".attn_weights", traces[l].weights});
    files.push_back({out.attn_weights, serialize_safetensors(t), "--attn-weights"});
  }
  if (!out.save_weights.empty())
    files.push_back({out.save_weights, serialize_safetensors(run.state(), {{"format", "pt"}}), "--save-weights"});
  if (!out.grad_output.empty()) {
    const TensorFile gf = load_safetensors(out.grad_output);
    const Tensor& dy = gf.get("grad_output");
    QKV_CHECK(dy.shape() == logits.shape(), "the tensor 'grad_output' in ", excerpt(out.grad_output), " has shape ",
              shape_str(dy.shape()), "; it must have the logits' shape ", shape_str(logits.shape()));
    model.backward(dy);
    NamedTensors grads;
    for (const StateEntry& e : model.state_dict())
      if (e.grad != nullptr) grads.push_back({e.name, *e.grad});
    files.push_back({out.grads_out, serialize_safetensors(grads, {{"format", "pt"}}), "--grads-out"});
  }
  write_files_atomically(files);
  if (out.output.empty()) std::cout << to_string(logits) << "\n";
  return 0;
}

void add_gpt_forward_flags(CLI::App* sub, GptForwardFlags& f) {
  add_number(sub, "--vocab-size", f.vocab_size, "--module gpt with --seed: the vocabulary (default GPT-2's 50257)",
             positive<int64_t>());
  add_number(sub, "--d-model", f.d_model, "--module gpt with --seed: the embedding width E", positive<int64_t>());
  add_number(sub, "--num-layers", f.num_layers, "--module gpt with --seed: the transformer blocks", non_negative<int64_t>());
}

int run_forward_gpt(const ModuleFlags& m, const GptForwardFlags& g, const ForwardOutputs& out, const CLI::App& sub) {
  for (const char* flag : {"--d-in", "--d-out", "--num-kv-heads", "--rope", "--rope-base", "--window",
                           "--alibi", "--softcap"})
    if (sub.count(flag) > 0) bad_flag(flag, "is not a flag of --module gpt");
  if (!m.seed && m.weights.empty()) bad_flag("--seed", "give --seed S (weights drawn as torch.manual_seed(S); "
                                             "GPTModel(cfg)) or --weights PATH");
  // The configuration: the file's, or the flags'.
  std::optional<GptWeights> file;
  GPTConfig c;
  if (!m.weights.empty()) {
    for (const char* flag : {"--vocab-size", "--d-model", "--num-layers", "--context-length", "--qkv-bias"})
      if (sub.count(flag) > 0) bad_flag(flag, "comes from the file with --weights");
    file = read_gpt_weights(m.weights, sub.count("--num-heads") > 0 ? std::optional<int64_t>(m.num_heads) : std::nullopt);
    c = file->config;
  } else {
    for (const char* flag : {"--d-model", "--context-length"})
      if (sub.count(flag) == 0) bad_flag(flag, "--module gpt with --seed needs it");
    c.vocab_size = g.vocab_size;
    c.context_length = m.context_length;
    c.emb_dim = g.d_model;
    c.n_layers = g.num_layers;
    c.qkv_bias = m.qkv_bias;
    c.attention.heads = m.num_heads;
    if (c.emb_dim % c.attention.heads != 0)
      bad_flag("--d-model", c.emb_dim, " must be divisible by --num-heads (", c.attention.heads, ")");
    set_head_dim(c);
  }
  if (sub.count("--dropout") > 0) c.attention.dropout = m.dropout;
  c.path = m.path;
  c.attention.dtype = m.variants.dtype;
  check_attention_flags(c.attention);
  check_sizes({c.vocab_size, c.emb_dim}, 4, "the token embedding (--vocab-size x --d-model)");
  check_sizes({c.n_layers, 12, c.emb_dim, c.emb_dim}, 4, "the blocks (--num-layers x 12 x --d-model squared)");

  check_forward_outputs(out);

  // torch.manual_seed(S); model = GPTModel(cfg); [load_state_dict(...)]; model.train(); model(x)
  Generator gen(m.seed.value_or(Generator::kDefaultSeed));
  GPTModel model(c, gen);
  if (file) {
    load_gpt_weights(model, *file);
  }
  model.train(m.train);
  ModelForward run{model, "gpt"};
  run.encode = [&](const std::string& text) { return load_gpt2(out.vocab_dir).encode(text, SpecialTokens::all()); };
  run.record_traces = [&](bool on) { model.record_traces(on); };
  run.traces = [&]() -> const std::vector<AttentionTrace>& { return model.traces(); };
  run.trace_prefix = "trf_blocks.";
  run.state = [&] { return gpt_state_in_layout(model, GptLayout::kBook); };
  return run_model_forward(run, out, sub);
}

}  // namespace qkv::cli
