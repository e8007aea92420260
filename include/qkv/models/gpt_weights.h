// qkv/models/gpt_weights.h - GPT-2's weights in the layouts they come in, as the book's GPTModel.
//
//   kHuggingFace  transformers' GPT2Model / GPT2LMHeadModel safetensors (optionally under
//                 "transformer."): wte, wpe, h.N.ln_1, h.N.attn.c_attn (Conv1D: weight (E, 3E),
//                 q | k | v side by side), h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc, h.N.mlp.c_proj,
//                 ln_f, and lm_head.weight when the head is not tied to wte; the attn.bias and
//                 attn.masked_bias buffers are skipped. A directory holding model.safetensors and
//                 config.json (n_embd, n_head, n_layer, n_positions, vocab_size, layer_norm_epsilon)
//                 is read as the two together.
//   kBook         the book's state-dict names (gpt.h), saved as safetensors from PyTorch:
//                   from safetensors.torch import save_file
//                   save_file({k: v.contiguous() for k, v in model.state_dict().items()}, "gpt.safetensors")
//                 the mask buffers it carries are accepted and ignored.
//
// The architecture comes from the names and shapes (vocabulary, width, context, layers, biases,
// a tied head), the head count from config.json, else `num_heads`, else GPT-2's for its widths
// (768: 12, 1024: 16, 1280: 20, 1600: 25). Conv1D weights (in, out) are transposed into nn.Linear's
// (out, in). F32, F16, BF16 and F64 tensors are read (as float32). Every problem is a qkv::Error
// naming the file and the tensor: a missing one, one not of the model, a wrong shape, a config.json
// that disagrees with the tensors, a head count that does not divide the width.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qkv/io/output_files.h"
#include "qkv/io/safetensors.h"
#include "qkv/core/generator.h"
#include "qkv/models/gpt.h"
#include "qkv/models/language_model.h"

namespace qkv {

enum class GptLayout { kHuggingFace, kBook };
const char* gpt_layout_name(GptLayout layout);  // "huggingface" | "book"
GptLayout parse_gpt_layout(const std::string& name);

// A file's weights as the book's GPTModel holds them. Reading checks every name and shape; a
// tensor is made (decoded from the memory-mapped file, sliced, transposed) only when asked for,
// straight into the model's own: loading costs the model's float32 size, and one Conv1D weight more.
struct GptTensor {
  Shape shape;                          // the model's
  std::function<void(float*)> fill;     // writes its values, row-major, into numel(shape) floats
};
struct GptWeights {
  DecoderSpec spec;  // the gpt family's, drop_rate 0 (GPT-2's files hold no dropout rate)
  GptLayout layout = GptLayout::kBook;
  std::map<std::string, GptTensor> tensors;        // the book's names, every tensor of the model (no masks)
  std::shared_ptr<const MappedSafetensors> file;   // what they are read from

  Tensor tensor(const std::string& name) const;  // made now; throws qkv::Error for a name not of the model
};

// Whether a safetensors file's names are a GPT model's in one of the layouts (wte / tok_emb.weight).
bool is_gpt_weights(const MappedSafetensors& file);
// The weights of a file or a Hugging Face directory (see above).
GptWeights read_gpt_weights(const std::string& path, std::optional<int64_t> num_heads = std::nullopt);
// The same from a file already opened.
GptWeights gpt_weights_from(const std::shared_ptr<const MappedSafetensors>& file, std::optional<int64_t> num_heads,
                            const std::string& config_json = "");
// Loads `weights` into `model` (a gpt model built with their spec; dropout, path and dtype may
// differ), one tensor at a time; the model's causal masks stay its own.
void load_gpt_weights(LanguageModel& model, const GptWeights& weights);

// A model's state in `layout`: the book's names (with each block's causal mask, so the book's
// GPTModel loads it with strict=True; a tied head written as out_head.weight too, the book's model
// having its own), or Hugging Face's (Conv1D weights transposed back; lm_head.weight only when the
// head is not tied; config.json's text in `config_json` when asked for).
NamedTensors gpt_state_in_layout(LanguageModel& model, GptLayout layout);
std::string hugging_face_config_json(const DecoderSpec& spec);

// qkv convert's files, bit for bit: `model` (of `weights`) in `to`'s layout at `out` - "huggingface"
// (and Hugging Face's config.json at `config` when given), "book" (the book's names), or "qkv" (the
// book's names with the configuration in the metadata: the gpt family's checkpoint). Each file's
// `what` is `flag`.
std::vector<OutputFile> gpt_layout_files(LanguageModel& model, const std::string& to, const std::string& out,
                                         const std::string& config = "");

// A GPT model holding `weights` (built without drawing - or drawing from gen first with `draw`, as
// torch.manual_seed(S); GPTModel(cfg) - then loaded), in eval mode; gen is kept for the dropouts (it
// must outlive the model).
std::unique_ptr<LanguageModel> gpt_model_from(const GptWeights& weights, Generator& gen, bool draw = false);

}  // namespace qkv
