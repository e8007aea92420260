// qkv/modules/layers.h - the building blocks: Linear, Embedding, PositionalEmbedding, Dropout.
//
// Each draws its initial values from a Generator exactly as the PyTorch constructor does, so
// `Generator g(123); Linear l(768, 768, true, g);` holds what
// `torch.manual_seed(123); nn.Linear(768, 768)` holds.
//
// Each forward() keeps what its backward() needs; backward(doutput) returns the gradient of the
// input and adds the parameters' gradients into their d<name> members (see module.h). The
// forwards of Linear and the embeddings are const - they change no parameter - and keep that
// record in mutable members: it is bookkeeping for backward, not state.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/generator.h"
#include "qkv/core/tensor.h"
#include "qkv/modules/module.h"

namespace qkv {

// y = x @ weight.T + bias.  x (..., in) -> (..., out)
// dtype kBF16: the products of forward and backward in bf16 mode (their operands rounded to bf16,
// float32 sums), as MultiHeadAttention's projections in bf16 mode; the weights stay float32.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, Generator& gen);
  const char* type_name() const override { return "Linear"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(const Tensor& x) const;      // x (..., in) -> (..., out)
  Tensor backward(const Tensor& doutput);     // doutput (..., out) -> dx (..., in)

  Tensor weight;   // (out, in), kaiming-uniform(a = sqrt(5)) as nn.Linear
  Tensor bias;     // (out), uniform(+-1/sqrt(in)); undefined when there is no bias
  bool has_bias;
  Dtype dtype = Dtype::kF32;  // the products' precision
  Tensor dweight;  // (out, in)
  Tensor dbias;    // (out); undefined when there is no bias

 private:
  mutable Tensor x_;  // (..., in) the last forward's input
};

// A lookup table: ids -> rows of weight.  ids (T) or (B, T) -> (T, dim) or (B, T, dim)
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen);  // weight ~ N(0, 1)
  const char* type_name() const override { return "Embedding"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  // ids: flat row-major ids of `shape`; each must be in [0, num_embeddings).
  Tensor forward(const std::vector<int64_t>& ids, const Shape& shape) const;
  // doutput (shape..., dim): adds row i of doutput into dweight[ids[i]] (ids have no gradient;
  // a row used several times gets the sum, rows not used get nothing).
  void backward(const Tensor& doutput);

  Tensor weight;   // (num_embeddings, dim)
  Tensor dweight;  // (num_embeddings, dim)

 private:
  mutable std::vector<int64_t> ids_;  // the last forward's ids
  mutable Shape shape_;               // and their shape
};

// A learned table indexed by position: forward(T) = weight[0:T].  -> (T, dim)
class PositionalEmbedding : public Module {
 public:
  PositionalEmbedding(int64_t context_length, int64_t dim, Generator& gen);
  const char* type_name() const override { return "PositionalEmbedding"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  Tensor forward(int64_t num_tokens) const;  // fails plainly when num_tokens > context_length
  void backward(const Tensor& doutput);     // doutput (T, dim): adds into table.dweight[0:T]

  Embedding table;  // its dweight holds the gradient

 private:
  mutable int64_t num_tokens_ = 0;
};

// nn.Dropout(p): in training mode each element is zeroed with probability p and the survivors
// are scaled by 1/(1-p); the mask comes from Generator::bernoulli(1-p), so the same seed gives
// PyTorch's mask. In eval mode, or with p = 0, the input passes through and nothing is drawn.
class Dropout : public Module {
 public:
  // p must be in [0, 1). The Dropout draws from `gen` at every forward in training mode and keeps
  // a pointer to it (as nn.Dropout draws from torch's default generator): gen must outlive it,
  // and so must the generator given to a module that holds Dropouts (CausalAttention, MHA, ...).
  Dropout(double p, Generator& gen);
  const char* type_name() const override { return "Dropout"; }
  void collect_state(const std::string&, std::vector<StateEntry>&) override {}
  Tensor forward(const Tensor& x);
  // dx = doutput * the last forward's noise (the same mask, scaled by 1/(1-p)); doutput itself
  // when that forward passed its input through.
  Tensor backward(const Tensor& doutput);
  bool active() const { return training_ && p_ > 0.0; }
  double p() const { return p_; }
  // 0 or 1/(1-p), shaped like the last input; undefined when that forward drew nothing.
  const Tensor& last_noise() const { return noise_; }
  // A 64-bit seed for a kernel that draws its own dropout mask (one random64() of the generator
  // this Dropout draws from, so a run stays reproducible from the module's seed).
  uint64_t draw_seed() { return gen_->random64(); }

  // Data-parallel training: the inputs to come hold sequences [begin, begin + n) (dim 0) of a
  // batch of `total`, and each must get the mask the whole batch would give it. forward draws the
  // whole batch's numbers from the generator (leaving it where the whole batch would) and keeps
  // this slice's; a kernel keys its mask by batch_offset() + b. (0, 0): the input is the batch.
  void set_batch_slice(int64_t begin, int64_t total);
  int64_t batch_offset() const { return slice_begin_; }

 private:
  double p_;
  Generator* gen_;
  int64_t slice_begin_ = 0, slice_total_ = 0;  // slice_total_ 0: no slice
  Tensor noise_;  // undefined when the last forward passed its input through (drew nothing)
  Shape shape_;   // the last forward's input shape
};

}  // namespace qkv
