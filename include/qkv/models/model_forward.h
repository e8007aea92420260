// qkv/models/model_forward.h - a whole model's forward and backward as `qkv forward --module
// <family>` and the bindings report them: the logits, every block's attention weights, the
// gradients by state name, the state as the family's PyTorch class holds it.
//
// Legend: B batch, T tokens, V vocabulary, H heads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/language_model.h"

namespace qkv {

struct ModelForward {
  Tensor logits;                   // (B, T, V)
  NamedTensors attention_weights;  // with attention_weights: "<blocks>N.attn_weights" (B, H, T, T) per block
  NamedTensors gradients;          // with dlogits: each parameter's gradient under its state name
};

// ids (B, T) -> the forward (in the model's mode: training mode draws its dropouts), and with
// dlogits (B, T, V: the logits' shape, else a qkv::Error) the backward from fresh gradients.
ModelForward run_model_forward(LanguageModel& model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                               bool attention_weights, const Tensor* dlogits = nullptr);

// The state as the family's PyTorch class's state_dict() holds it (the book's GPTModel keeps its
// own head: a tied one is written as out_head.weight too).
NamedTensors torch_state(LanguageModel& model);

// The ids of a (B, T) tensor of whole numbers in [0, V) stored as floats; `what` names the tensor
// in errors ("the tensor 'input' in 'ids.st'").
std::vector<int64_t> token_ids_of(const Tensor& t, int64_t vocab_size, const std::string& what);

}  // namespace qkv
