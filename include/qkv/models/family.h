// qkv/models/family.h - the model families qkv runs, one registry entry each, and the questions
// every command asks them.
//
// A family is a value (ModelFamily): how its configuration is read into the one description
// (models/decoder_spec.h), where its weights sit in its state dict, its presets, how its files
// load and how its checkpoints are written, its tokenizer, end tokens and chat format, and the
// words the explorer uses for its parts. Every model is a DecoderModel built from a DecoderSpec
// (models/decoder.h); the family only names its choices. Commands, the front door (qkv/qkv.h),
// the explorer, the benchmarks and the Python bindings ask the registry or the model
// (LanguageModel::spec(), family()) and never name a model class.
//
//   attention-lm  chapter 3's attention-only LM (qkv train's checkpoints)
//   gpt           the book's GPT model and GPT-2 (config.json model_type "gpt2", GGUF "gpt2")
//   llama         Llama 3 (model_type "llama", GGUF "llama")
//   qwen2         Qwen2 and Qwen2.5 (model_type "qwen2", GGUF "qwen2")
//   qwen3         Qwen3 (model_type "qwen3", GGUF "qwen3")
//   qwen3_5       Qwen3.5's text model (model_type "qwen3_5"): Gated DeltaNet and gated attention
//
// Adding a family: one entry (in its own file in src/models/, as gpt.cc and llama.cc are, declared
// in src/models/families.h and listed in family.cc) and, when its block differs, the block's
// choice in DecoderSpec. docs/families.md walks through one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/chat.h"
#include "qkv/models/decoder_spec.h"
#include "qkv/models/loaded_model.h"

namespace qkv {

// Where each weight of a DecoderModel sits in the family's state dict (prefixes end in '.').
//   <embed>weight, <positions>weight, <blocks>N.<norm1>..., <blocks>N.<attention><q>weight, ...,
//   <final_norm>..., <head>weight (and bias)
struct StateNames {
  std::string embed, positions, blocks;
  std::string norm1, attention, norm2, ff;
  std::string q, k, v, o, q_norm, k_norm;
  std::string linear;       // a linear-attention block's layer ("linear_attn."; its own names below it)
  std::string final_norm, head;
  bool mask = false;        // each block lists its causal mask buffer (<attention>mask), as the book's classes
  bool norms_last = false;  // a block's order: attention, ff, norm1, norm2 (the book's TransformerBlock);
                            // else norm1, attention, norm2, ff
};

// The family's own words where the explorer's captions differ between families.
struct FamilyWords {
  std::string projection_note;  // after "norm1(x) @ att.W_query.T": " (+ bias)" for GPT
  std::string attention;        // the attention's call in captions: "att(norm1(x))", "self_attn(h)"
  std::string layer;            // a block in the lens's rows: "block", "layer"
  bool show_weights = false;    // the page holds the projection matrices (the attention-only LM: small)
};

struct ModelFamily {
  std::string name;                      // "gpt"
  std::string title;                     // "GPT", for people
  std::vector<std::string> model_types;  // config.json's model_type values it reads ("gpt2")
  // GGUF's general.architecture values whose files it reads (models/gguf_model.h): its metadata
  // into read_config's config.json, its tensors by the state names.
  std::vector<std::string> gguf_architectures;
  // The prefixes of a folder's tensors that are not the model's, skipped (Qwen3.5's vision tower).
  std::vector<std::string> other_tensors = {};
  StateNames names;
  FamilyWords words;
  DecoderNames keys;                     // its configuration's names for the spec's fields, in messages
  // Its configuration is the book's cfg dict (GPT_CONFIG_124M): qkv forward and train take its sizes
  // as flags (--d-model, --num-heads, ...); its weights may come as one safetensors file without a
  // config.json (GPT-2's model.safetensors, the book's state dict), whose head count --num-heads /
  // LoadOptions::num_heads gives; its config.json ("gpt2") is read by its own loader, not as a
  // Hugging Face folder of the others (hf_folder.h).
  bool book_config = false;

  // Its configuration (config.json's keys; the book's cfg dict for gpt; qkv train's model options
  // for attention-lm) into the one description, validated (errors name the key); and back.
  DecoderSpec (*read_config)(const nlohmann::json& config, const std::string& where) = nullptr;
  nlohmann::json (*write_config)(const DecoderSpec& spec) = nullptr;
  // A line for people: "GPT model: 12 layers x 12 heads, emb_dim 768, vocab 50257, context 1024".
  std::string (*describe)(const DecoderSpec& spec) = nullptr;

  // Its untrained presets: the published sizes.
  std::vector<std::string> presets;
  DecoderSpec (*preset)(const std::string& name) = nullptr;

  // Its files: a folder or file of the family (a GGUF file too, with gguf_architectures: load_gguf)
  // -> the model with its tokenizer, in eval mode.
  // Throws qkv::Error naming the file and what is wrong before anything is half-built.
  LoadedModel (*load)(const std::string& path, const LoadOptions& options) = nullptr;
  // A checkpoint of `model` at `path` in the family's own format, as files for the caller to
  // write with its others (qkv train: the loss curve too); tokenizer_file is copied into a folder
  // format. Null: the family's checkpoints are written by its trainer (attention-lm).
  std::vector<OutputFile> (*checkpoint)(LanguageModel& model, const std::string& path,
                                        const std::string& tokenizer_file) = nullptr;
  std::string checkpoint_kind;           // what that checkpoint is, for people
  bool checkpoint_folder = false;        // it is a folder (Hugging Face's: hf_folder.h's files), not a file
  // The state as the family's PyTorch class's state_dict() holds it, when that is not the model's
  // own (the book's GPTModel keeps a head of its own: a tied one is written as out_head.weight too).
  NamedTensors (*torch_state)(LanguageModel& model) = nullptr;

  // Its text: the tokenizer from a source (an installed vocabulary's name: `vocabulary`, or a
  // folder holding its file), the end tokens it marks (the first: end of text), its chat format.
  std::string vocabulary;                // "gpt2" | "qwen3" | "llama3"; "" none installed
  std::unique_ptr<Tokenizer> (*tokenizer)(const std::string& source, const LoadOptions& options,
                                          std::string& file) = nullptr;
  std::vector<std::string> end_tokens;
  std::optional<ChatFormat> chat;
};

// The registry, in the order above.
const std::vector<const ModelFamily*>& model_families();
// By name; an unknown name is a qkv::Error listing the known ones.
const ModelFamily& model_family(const std::string& name);
// The titles of the families for which `has` holds, in the registry's order, for help texts and
// messages: "GPT, Llama 3, Qwen2.5 and Qwen3" (`last` "or": "... Qwen2.5 or Qwen3").
std::string family_titles(bool (*has)(const ModelFamily&), const char* last = "and");
bool has_gguf(const ModelFamily& f);  // a GGUF architecture
bool has_chat(const ModelFamily& f);  // a chat format
bool has_hf_folder(const ModelFamily& f);  // Hugging Face's folders (hf_folder.h): read, and its checkpoints
// The family reading config.json's model_type, or null.
const ModelFamily* family_of_model_type(const std::string& model_type);
// Every family's presets, and the family a preset belongs to (qkv::Error listing them all).
std::vector<std::string> model_preset_names();
const ModelFamily& family_of_preset(const std::string& preset);
// The family of a model's files: a folder's config.json model_type (a folder without one: gpt,
// GPT-2's), a GGUF file's general.architecture, a qkv train checkpoint (attention-lm), GPT-2's
// weights in a file (gpt); anything else a qkv::Error saying what qkv reads.
const ModelFamily& family_of_path(const std::string& path);

// Where a checkpoint of the family at `path` goes, for check_output_files before any training: a
// folder format's files (the caller makes the folder: OutputFolder), else the file; each named `what`.
std::vector<OutputFile> checkpoint_destinations(const ModelFamily& f, const std::string& path, const std::string& what);

// What every loader finishes with: the tokenizer (checked against the model's vocabulary), the
// family's end tokens it has (end_ids, eos_id the first) and its chat format.
void attach_tokenizer(LoadedModel& m, std::unique_ptr<Tokenizer> tokenizer, const std::string& source,
                      std::string file);

// An untrained model of a preset, its weights drawn from Generator(seed) as torch.manual_seed(seed)
// followed by the family's constructor draws them, in eval mode, with the installed vocabulary's
// tokenizer; options.dtype bf16 keeps its weights in bf16 too.
LoadedModel make_model(const std::string& preset, uint64_t seed, const LoadOptions& options = {});
// A model's files, read by their family (family_of_path).
LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace qkv
