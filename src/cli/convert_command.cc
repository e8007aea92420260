// qkv convert --weights IN --to huggingface|book|qkv --out OUT [--config config.json] [--num-heads H]
// qkv convert --weights IN --to gguf --out OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|q4_k|q6_k]
//
// --to gguf: any GPT-2, Llama 3, Qwen2.5 or Qwen3 model qkv reads (a Hugging Face folder, GPT-2's weights in
// any layout below, a GGUF file) as llama.cpp's GGUF file (models/gguf_model.h), its 2-D weights in
// --type (default: f32 for float32 weights, else bf16), with the model's tokenizer.
//
// GPT-2's weights from one layout into another (qkv/models/gpt_weights.h), bit for bit: Hugging
// Face's model.safetensors (Conv1D weights transposed back; lm_head only when the head is not tied;
// with --config, its config.json), the book's state-dict names (with each block's causal mask, so
// the book's GPTModel loads it with strict=True), or qkv's (the book's names with the configuration
// in the metadata, as qkv train --model gpt writes them). Every output is written whole or not at all.
#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/family.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/gpt_weights.h"

namespace qkv::cli {
namespace {

struct ConvertFlags {
  std::string weights, model, to, out, config, type, tokenizer;
  uint64_t seed = 123;
  std::optional<int64_t> num_heads;
};

int run_gguf(const ConvertFlags& f) {
  check_output_files({{f.out, "", "--out"}}, {{f.weights, "--weights"}, {f.tokenizer, "--tokenizer"}});
  // the family from the preset or the files' description (config.json, GGUF metadata) alone, so a
  // model qkv cannot write is refused before its weights are drawn or read
  check_gguf_writable(!f.model.empty() ? family_of_preset(f.model) : family_of_path(f.weights));
  std::optional<nlohmann::json> tokenizer;  // --tokenizer's, read before the weights
  if (!f.tokenizer.empty()) tokenizer = tokenizer_json_file(f.tokenizer);
  LoadOptions options;
  options.float_weights = true;
  options.num_heads = f.num_heads;  // GPT-2's weights in the book's names carry no head count
  options.tokenizer = !tokenizer;   // --tokenizer stands in for the model's own (a GPT of another vocabulary)
  const LoadedModel m = !f.model.empty() ? make_model(f.model, f.seed, options) : load_model(f.weights, options);
  const std::string type = !f.type.empty() ? f.type : m.model->spec().attention.dtype == Dtype::kF32 ? "f32" : "bf16";
  if (!tokenizer) tokenizer = model_tokenizer_json(m, f.weights);
  std::vector<std::string> notes;
  std::string bytes = gguf_model_bytes(*m.model, tokenizer ? &*tokenizer : nullptr, type, notes);
  const size_t size = bytes.size();
  write_files_atomically({{f.out, std::move(bytes), "--out"}});
  std::cout << "wrote " << f.out << " (" << size << " bytes): " << m.model->describe() << ", GGUF " << type << "\n";
  for (const std::string& n : notes) std::cout << "  note: " << n << "\n";
  return 0;
}

int run_convert(const ConvertFlags& f) {
  if (f.weights.empty() == f.model.empty()) bad_flag("--weights", "give one of --weights PATH or --model PRESET");
  if (!f.model.empty() && f.to != "gguf") bad_flag("--model", "writes an untrained preset as GGUF: it goes with --to gguf");
  if (f.to == "gguf") return run_gguf(f);
  if (!f.type.empty()) bad_flag("--type", "is the GGUF file's tensor type: it goes with --to gguf");
  if (!f.tokenizer.empty()) bad_flag("--tokenizer", "is the GGUF file's tokenizer: it goes with --to gguf");
  std::vector<OutputFile> destinations = {{f.out, "", "--out"}};
  if (!f.config.empty()) destinations.push_back({f.config, "", "--config"});
  check_output_files(destinations, {{f.weights, "--weights"}});
  if (!f.config.empty() && f.to != "huggingface")
    bad_flag("--config", "writes Hugging Face's config.json: it goes with --to huggingface");
  const GptWeights w = read_gpt_weights(f.weights, f.num_heads);
  Generator gen;
  std::unique_ptr<LanguageModel> model = gpt_model_from(w, gen);
  const std::vector<OutputFile> files = gpt_layout_files(*model, f.to, f.out, f.config);
  write_files_atomically(files);
  std::cout << "wrote " << f.out << (f.config.empty() ? "" : " and " + f.config) << ": " << model->describe() << ", "
            << gpt_layout_name(w.layout) << " layout -> " << f.to << "\n";
  return 0;
}

}  // namespace

Command add_convert(CLI::App& app) {
  auto f = std::make_shared<ConvertFlags>();
  CLI::App* sub = app.add_subcommand("convert", "Convert GPT-2's weights between Hugging Face's layout, the book's "
                                                "names and qkv's, bit for bit; or a " + family_titles(has_gguf, "or") +
                                                " model to llama.cpp's GGUF");
  sub->add_option("--weights", f->weights, "The weights: model.safetensors (or its directory with config.json), the "
                                           "book's names, or qkv's; --to gguf: any " + family_titles(has_gguf, "or") +
                                           " model qkv reads");
  add_preset_flag(sub, f->model, "--to gguf: an untrained preset drawn from --seed instead (as "
                                  "torch.manual_seed(S); Model(cfg)), with its installed tokenizer");
  add_number_with_default(sub, "--seed", f->seed, "--model: the seed its weights are drawn from");
  sub->add_option("--to", f->to, "huggingface | book | qkv (GPT-2) | gguf (" + family_titles(has_gguf) + ")")
      ->required()
      ->check(CLI::IsMember({"huggingface", "book", "qkv", "gguf"}));
  sub->add_option("--out", f->out, "The file to write (safetensors, or GGUF with --to gguf)")->required();
  sub->add_option("--type", f->type, "--to gguf: the 2-D weights' type, f32 | f16 | bf16 | q8_0 | q4_0 | q4_k | q6_k "
                                     "(default: f32 for float32 weights, else bf16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"}, CLI::ignore_case));
  sub->add_option("--tokenizer", f->tokenizer, "--to gguf: the tokenizer.json the file holds (default: the "
                                               "model's own; a preset's installed one, which Qwen3.5 has not)");
  sub->add_option("--config", f->config, "--to huggingface: also write config.json here");
  add_number(sub, "--num-heads", f->num_heads, "The head count, when the file does not say it and its width is not "
                                               "one of GPT-2's", positive<int64_t>());
  sub->footer("The book's names load into the book's GPTModel with model.load_state_dict(state, strict=True) once\n"
              "read with safetensors.torch.load_file; Hugging Face's into transformers' GPT2LMHeadModel.");
  return {sub, [f]() { return run_convert(*f); }};
}

}  // namespace qkv::cli
