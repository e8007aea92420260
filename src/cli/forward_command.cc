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
};

std::string expected_input(const AttentionModule& m, const AttentionConfig& c) {
  return m.input_rank() == 2 ? str("(num_tokens, d_in = ", c.d_in, ")")
                             : str("(batch, num_tokens, d_in = ", c.d_in, ")");
}

int run_forward(ForwardFlags& f, const CLI::App& sub) {
  if (is_model_family(f.module)) {  // a whole model of a family
    const std::string text = f.text_file.empty() ? f.text : read_file(f.text_file);
    return run_forward_model(f, f.sizes, {f.input, f.output, f.save_weights, f.grad_output, f.grads_out, text,
                                          f.vocab_dir, f.attn_weights},
                             sub);
  }
  for (const char* flag : {"--d-in", "--d-out"})
    if (sub.count(flag) == 0) bad_flag(flag, "--module ", f.module, " needs it");
  for (const char* flag : {"--vocab-size", "--d-model", "--num-layers"})
    if (sub.count(flag) > 0) bad_flag(flag, "is a flag of --module gpt, not ", f.module);
  const AttentionModuleInfo& info = attention_module_info(f.module);
  const bool causal = info.causal;
  const AttentionConfig c = module_config(f, sub);  // the flags against each other, first
  QKV_CHECK(f.seed || !f.weights.empty(), "give --seed S (weights as torch.manual_seed(S) and the ",
            "PyTorch constructor make them) or --weights FILE (a safetensors state dict)");
  if (causal && sub.count("--context-length") == 0)
    fail("--module ", f.module, " needs --context-length N (the size of its causal mask buffer)");
  const bool from_text = !f.text.empty() || !f.text_file.empty() || sub.count("--text") > 0;
  QKV_CHECK((from_text ? 1 : 0) + (f.input.empty() ? 0 : 1) == 1, "give exactly one of --input FILE (a tensor), --text T or ",
            "--text-file F (GPT-2 tokens through token + positional embeddings)");
  if (from_text && sub.count("--context-length") == 0)
    fail("--text needs --context-length N (the size of the positional embedding table",
         causal ? " and of the causal mask)" : ")");
  if (!causal) {
    QKV_CHECK((from_text || sub.count("--context-length") == 0) && sub.count("--dropout") == 0 &&
                  sub.count("--num-heads") == 0,
              "--module ", f.module, " takes no --context-length, --dropout or --num-heads (it has no mask, ",
              "dropout or heads)");
  }
  if (causal && !info.multi_head)
    QKV_CHECK(sub.count("--num-heads") == 0, "--module ", f.module, " has one head; drop --num-heads");
  QKV_CHECK(info.bias || !f.qkv_bias, f.module, " has no bias (its weights are plain matrices); drop --qkv-bias");

  // The destinations, checked before the work (and again when written).
  std::vector<OutputFile> destinations;
  for (const auto& [path, flag] : {std::pair{&f.output, "--output"}, {&f.attn_weights, "--attn-weights"},
                                   {&f.save_weights, "--save-weights"}, {&f.grads_out, "--grads-out"}})
    if (!path->empty()) destinations.push_back({*path, "", flag});
  check_output_files(destinations);

  // Sizes the flags multiply, checked before anything is allocated (4-byte floats).
  check_sizes({f.d_in, f.d_out}, 4, "the projection weights (--d-in x --d-out)");
  if (info.multi_head) {
    check_sizes({f.num_heads, f.d_in, f.d_out}, 4, "the projection weights (--num-heads x --d-in x --d-out)");
    check_sizes({f.num_heads, f.d_out, f.d_out}, 4, "the output projection (--num-heads x --d-out x --d-out)");
  }
  if (causal && !f.save_weights.empty())  // the state dict holds the (context_length, context_length) mask
    check_sizes({c.context_length, c.context_length}, 4, "the causal mask (--context-length squared)");
  if (from_text) check_sizes({c.context_length, c.d_in}, 4, "the positional embedding (--context-length x --d-in)");

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
  // --- backward, read side: the tensor 'grad_output' (checked against the output below) ---------
  std::optional<TensorFile> grad_file;
  QKV_CHECK(f.grad_output.empty() == f.grads_out.empty(), "--grad-output FILE and --grads-out FILE go together");
  if (!f.grad_output.empty()) grad_file = load_safetensors(f.grad_output);
  // --- end backward, read side ------------------------------------------------------------------
  std::map<std::string, Tensor> state;
  if (!f.weights.empty()) state = load_safetensors(f.weights).tensors;

  // torch.manual_seed(S); [embeddings = ...;] module = Class(...); [load_state_dict(...)];
  // module.train(); module(x)
  std::optional<ModuleOnText> text_model;
  std::unique_ptr<AttentionModule> own;
  Generator gen(f.seed.value_or(Generator::kDefaultSeed));
  if (from_text) {
    text_model.emplace(f.module, c, n_vocab, f.seed.value_or(Generator::kDefaultSeed));
    if (!f.weights.empty()) text_model->load_state_dict(state);
  } else {
    own = make_attention_module(f.module, c, gen);
    if (!f.weights.empty()) own->load_state_dict(state, /*strict=*/true);
  }
  AttentionModule& m = text_model ? text_model->module() : *own;
  m.train(f.train);
  const Tensor x = text_model ? text_model->embed(ids) : in->get("input");
  QKV_CHECK(x.dim() == m.input_rank() && x.size(-1) == c.d_in, f.module, ": the tensor 'input' in ",
            excerpt(f.input), " has shape ", shape_str(x.shape()), "; expected ", expected_input(m, c));
  if (causal && !text_model)  // (text was checked against --context-length above)
    QKV_CHECK(x.size(1) <= c.context_length, f.module, ": the tensor 'input' in ", excerpt(f.input), " has ", x.size(1),
              " tokens but context_length is ", c.context_length,
              " (the causal mask covers only that many); use a larger --context-length or a shorter input");
  AttentionTrace trace;
  Tensor y = m.forward(x, f.attn_weights.empty() ? nullptr : &trace);

  // Serialise every output, then write them.
  std::vector<OutputFile> files;
  if (!f.output.empty()) files.push_back({f.output, serialize_safetensors({{"output", y}}), "--output"});
  if (!f.attn_weights.empty()) {
    NamedTensors t = {{"attn_weights", trace.weights}};
    if (trace.dropped_weights.numel() > 0) t.push_back({"attn_weights_dropped", trace.dropped_weights});
    files.push_back({f.attn_weights, serialize_safetensors(t), "--attn-weights"});
  }
  if (!f.save_weights.empty()) {
    NamedTensors out;
    for (const StateEntry& e : text_model ? text_model->state_dict() : m.state_dict()) out.push_back({e.name, e.value()});
    files.push_back(
        {f.save_weights, serialize_safetensors(out, {{"format", "pt"}, {"module", f.module}}), "--save-weights"});
  }
  // --- backward: dL/dinput as 'input', each parameter's gradient under its state-dict name ------
  if (grad_file) {
    const Tensor& dy = grad_file->get("grad_output");
    QKV_CHECK(dy.shape() == y.shape(), "the tensor 'grad_output' in ", excerpt(f.grad_output), " has shape ",
              shape_str(dy.shape()), "; it must have the output's shape ", shape_str(y.shape()));
    const Tensor dx = text_model ? text_model->backward(dy) : m.backward(dy);
    NamedTensors grads = {{"input", dx}};
    for (const StateEntry& e : text_model ? text_model->state_dict() : m.state_dict())
      if (e.grad != nullptr) grads.push_back({e.name, *e.grad});
    files.push_back({f.grads_out, serialize_safetensors(grads, {{"format", "pt"}, {"module", f.module}}), "--grads-out"});
  }
  // --- end backward ------------------------------------------------------------------------------
  write_files_atomically(files);  // all or none, after every destination is checked
  if (f.output.empty()) std::cout << to_string(y) << "\n";
  return 0;
}

}  // namespace

Command add_forward(CLI::App& app) {
  auto f = std::make_shared<ForwardFlags>();
  CLI::App* sub = app.add_subcommand("forward", "Run one attention module on a tensor from a safetensors file, or a whole model (gpt, llama, qwen3) on ids");
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
