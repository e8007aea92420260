// qkv forward --module M --d-in N --d-out N ... (--seed S | --weights FILE) (--input FILE | --text T)
//
// Runs one attention module on the tensor `input` of a safetensors file, or on text: GPT-2 ids ->
// token embedding + positional embedding -> the module. Every output is computed and serialised
// before the first file is written, and each file is written whole or not at all.
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "commands.h"
#include "forward_model.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/models/family.h"
#include "qkv/core/generator.h"
#include "qkv/core/print.h"
#include "qkv/io/atomic_file.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/kernels/rope.h"
#include "qkv/modules/attention_module.h"
#include "qkv/models/module_on_text.h"
#include "qkv/text/vocab_files.h"

namespace qkv::cli {
namespace {

struct ForwardFlags : ModuleFlags {
  ModelSizeFlags sizes;  // --module gpt --seed
  std::string input, output, save_weights, attn_weights;
  std::string text, text_file, vocab_dir;
  std::string grad_output, grads_out;  // backward: dL/doutput in, gradients out
  bool cached = false;                 // through the module's inference cache, token by token
};

int run_forward(ForwardFlags& f, const CLI::App& sub) {
  if (f.grad_output.empty() != f.grads_out.empty())
    bad_flag(f.grad_output.empty() ? "--grads-out" : "--grad-output",
             "--grad-output FILE (dL/doutput in) and --grads-out FILE (the gradients out) go together");
  if (is_model_family(f.module)) {  // a whole model of a family
    if (f.cached) bad_flag("--cached", "a flag of the modules with an inference cache (",
                           attention_module_list(&AttentionModuleInfo::cached), "), not of --module ", f.module);
    const std::string text = f.text_file.empty() ? f.text : read_file(f.text_file);
    return run_forward_model(f, f.sizes, {f.input, f.output, f.save_weights, f.grad_output, f.grads_out, text,
                                          f.vocab_dir, f.attn_weights, f.text_file},
                             sub);
  }
  for (const char* flag : {"--vocab-size", "--d-model", "--num-layers"})
    if (sub.count(flag) > 0) bad_flag(flag, "is a flag of --module gpt, not ", f.module);
  const bool from_text = !f.text.empty() || !f.text_file.empty() || sub.count("--text") > 0;
  const AttentionModuleInfo& info = attention_module_info(f.module);
  const bool causal = info.causal;
  if (!info.softmax && !f.attn_weights.empty())
    bad_flag("--attn-weights", f.module, " (", info.class_name, ") has no softmax attention weights (qkv explore --module ",
             f.module, " shows the map its recurrence applies to the values)");
  if (f.cached) {
    if (!info.cached)
      bad_flag("--cached", f.module, " (", info.class_name, ") has no inference cache (modules with one: ",
               attention_module_list(&AttentionModuleInfo::cached), ")");
    for (const auto& [flag, given] : {std::pair{"--train", f.train}, {"--attn-weights", !f.attn_weights.empty()},
                                      {"--grad-output", !f.grad_output.empty()}})
      if (given) bad_flag("--cached", "not with ", flag, ": the cached form is inference, one token at a time (no "
                          "dropout, attention weights or backward)");
  }
  const AttentionConfig c = checked_module_config(f, sub, from_text);
  QKV_CHECK((from_text ? 1 : 0) + (f.input.empty() ? 0 : 1) == 1, "give exactly one of --input FILE (a tensor), --text T or ",
            "--text-file F (GPT-2 tokens through token + positional embeddings)");

  // The destinations, checked before the work (and again when written).
  std::vector<OutputFile> destinations;
  for (const auto& [path, flag] : {std::pair{&f.output, "--output"}, {&f.attn_weights, "--attn-weights"},
                                   {&f.save_weights, "--save-weights"}, {&f.grads_out, "--grads-out"}})
    if (!path->empty()) destinations.push_back({*path, "", flag});
  check_output_files(destinations, {{f.input, "--input"}, {f.weights, "--weights"}, {f.grad_output, "--grad-output"},
                                    {f.text_file, "--text-file"}});

  if (causal && info.softmax && !f.save_weights.empty())  // the state dict may hold the (context_length, context_length) mask
    check_sizes({c.context_length, c.context_length}, 4, "the causal mask (--context-length squared)");

  // Read everything first: a bad input file fails before any module is built.
  std::optional<TensorFile> in;
  std::vector<int64_t> ids;
  int64_t n_vocab = 0;
  if (from_text) {
    std::string text = f.text_file.empty() ? f.text : read_file(f.text_file);
    Encoding gpt2 = load_gpt2(f.vocab_dir);
    n_vocab = gpt2.n_vocab();
    check_sizes({n_vocab, c.d_in}, 4, "the token embedding (the vocabulary x --d-in)");
    ids = gpt2.encode(text, SpecialTokens::all());
    QKV_CHECK(!ids.empty(), "the text is empty: there are no tokens to attend over");
    QKV_CHECK(static_cast<int64_t>(ids.size()) <= c.context_length, "the text is ", ids.size(),
              " GPT-2 tokens but --context-length is ", c.context_length,
              " (the positional table and causal mask cover only that many); shorten the text or raise it");
  } else {
    in = load_safetensors(f.input);
  }
  std::optional<TensorFile> grad_file;  // the tensor 'grad_output', checked against the output
  if (!f.grad_output.empty()) grad_file = load_safetensors(f.grad_output);
  std::map<std::string, Tensor> state;
  if (!f.weights.empty()) state = load_safetensors(f.weights).tensors;
  ModuleRun run{f.module, c, f.seed.value_or(Generator::kDefaultSeed), f.train};
  if (!f.weights.empty()) run.state = &state;
  if (from_text) {
    run.ids = &ids;
    run.vocab_size = n_vocab;
  } else {
    run.input = &in->get("input");
    run.input_name = "the tensor 'input' in " + excerpt(f.input);
  }
  run.attention_weights = !f.attn_weights.empty();
  run.cached = f.cached;
  if (grad_file) {
    run.doutput = &grad_file->get("grad_output");
    run.doutput_name = "the tensor 'grad_output' in " + excerpt(f.grad_output);
  }
  const ModuleResult r = run_module(run);

  // Serialise every output, then write them.
  const std::map<std::string, std::string> pt = {{"format", "pt"}, {"module", f.module}};
  std::vector<OutputFile> files;
  if (!f.output.empty()) files.push_back({f.output, serialize_safetensors({{"output", r.output}}), "--output"});
  if (!f.attn_weights.empty())
    files.push_back({f.attn_weights, serialize_safetensors(r.attention_weights), "--attn-weights"});
  if (!f.save_weights.empty()) files.push_back({f.save_weights, serialize_safetensors(r.state, pt), "--save-weights"});
  if (grad_file) files.push_back({f.grads_out, serialize_safetensors(r.gradients, pt), "--grads-out"});
  write_files_atomically(files);  // all or none, after every destination is checked
  if (f.output.empty()) std::cout << to_string(r.output) << "\n";
  return 0;
}

}  // namespace

Command add_forward(CLI::App& app) {
  auto f = std::make_shared<ForwardFlags>();
  std::string families;
  for (const ModelFamily* m : model_families())
    if (m->name != "attention-lm") families += (families.empty() ? "" : ", ") + m->name;
  CLI::App* sub = app.add_subcommand("forward", "Run one attention module on a tensor from a safetensors file, or a whole "
                                                "model (" + families + ") on ids");
  add_module_flags(sub, *f);
  sub->get_option("--module")->required();
  add_model_size_flags(sub, f->sizes);
  sub->add_option("--input", f->input, "Safetensors file holding the tensor 'input'");
  sub->add_option("--text", f->text,
                  "Text instead of --input: GPT-2 ids -> token + positional embedding (token_emb.weight, "
                  "pos_emb.weight) -> the module");
  sub->add_option("--text-file", f->text_file, "Like --text, reading the text from a file");
  sub->add_option("--vocab-dir", f->vocab_dir, "Where GPT-2's encoder.json and vocab.bpe are (default: see qkv encode --help)");
  sub->add_option("--output", f->output, "Write the result as the tensor 'output' (default: print it)");
  sub->add_option("--save-weights", f->save_weights, "Write the module's state dict (safetensors)");
  sub->add_option("--attn-weights", f->attn_weights,
                  "Write the attention weights as 'attn_weights' (per head), and after dropout as "
                  "'attn_weights_dropped' when dropout is active; --module gpt: every block's as "
                  "'trf_blocks.N.attn_weights' (B, H, T, T)");
  sub->add_flag("--cached", f->cached,
                "mha, gated-mha, mla, gated-deltanet: run the module as decoding does, through its inference cache "
                "one token at a time (keys and values in a KV cache; latent attention absorbed over the cached "
                "latents; the delta rule's recurrent step on its state): the forward's output within float "
                "rounding");
  sub->add_option("--grad-output", f->grad_output,
                  "Run the backward pass with dL/doutput = the tensor 'grad_output' of this safetensors file");
  sub->add_option("--grads-out", f->grads_out,
                  "Write the gradients: of the input as 'input', of each parameter under its state-dict name "
                  "(with --text also token_emb.weight and pos_emb.weight)");
  sub->footer(
      "Shapes: self-attention-v1/v2 take input (T, d_in); the others (B, T, d_in).\n"
      "With both --seed and --weights, the seed drives dropout after the weights are loaded.\n"
      "With --text, --seed S draws the embeddings first (as torch.manual_seed(S); nn.Embedding(50257, d_in);\n"
      "nn.Embedding(context_length, d_in)), then the module; --weights may hold the embeddings too.");
  return {sub, [f, sub]() { return run_forward(*f, *sub); }};
}

}  // namespace qkv::cli
