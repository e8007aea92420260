// qkv/train/run_options.h - the options a run starts with: those given (a command line's flags),
// or, resuming, a checkpoint's options with the given ones on top.
//
// `given(field)` says whether the caller set a field (on a command line: whether its flag was
// given). Resuming, every given field overrides the checkpoint's, but the model fields that change
// what the weights compute without changing their shapes (num_heads, num_kv_heads, rope,
// rope_base, window, alibi, softcap) must equal the checkpoint's: a different one is an
// OptionError naming the flag and both values ("leave the flag out to keep it"); a field that
// changes a shape is refused later by the tensor's shape when the weights load. Either way a given
// text_file sets the task to text, and a given data_file to data; head_dim is derived
// (set_head_dim).
#pragma once

#include <functional>
#include <string>

#include "qkv/core/error.h"
#include "qkv/models/option_fields.h"
#include "qkv/train/train_options.h"

namespace qkv {

using FieldGiven = std::function<bool(const OptionField& field)>;

// resumed: the checkpoint's options, or null for a fresh run; file names it in messages.
TrainOptions run_options(const TrainOptions* resumed, const TrainOptions& given, const FieldGiven& is_given,
                         const std::string& file = "");

}  // namespace qkv
