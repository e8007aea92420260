// tests/tiny_training.h - the training options the C++ tests start from: a copy task small
// enough that each step takes milliseconds.
#pragma once

#include "qkv/train/train_options.h"

namespace qkv::testing_support {

// Copy sequences of 3 symbols out of 5 (vocabulary 6), d_model 8, 2 heads, 1 layer, batch 4,
// 6 steps, 16 held-out sequences per evaluation. Tests change what they are about.
inline TrainOptions tiny_copy_task() {
  TrainOptions o;
  o.task_length = 3;
  o.task_symbols = 5;
  o.model.d_model = 8;
  o.model.attention.heads = 2;
  o.model.num_layers = 1;
  o.batch_size = 4;
  o.steps = 6;
  o.eval_sequences = 16;
  return o;
}

}  // namespace qkv::testing_support
