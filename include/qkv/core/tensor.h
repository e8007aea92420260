// qkv/core/tensor.h - the float32 tensor: aligned shared storage plus a strided view of it.
//
// A Tensor is metadata (shape, strides, offset) over a reference-counted, 64-byte-aligned
// buffer. Views (transpose, select, slice, unsqueeze, view of contiguous data) share the buffer
// and change only the metadata, as in PyTorch: `x.transpose(0, 1)` copies nothing. Sharing the
// buffer rather than borrowing it means a view can never outlive its data, even when it is taken
// of a temporary. Kernels below this layer take raw pointers and sizes, never a Tensor.
//
// Legend used across qkv: B batch, T tokens, C channels (d_in / d_model), H heads, D head dim.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace qkv {

inline constexpr int kMaxRank = 8;
using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);  // "(2, 6, 3)"
int64_t numel_of(const Shape& shape);

class Tensor {
 public:
  Tensor();  // an empty (0-element, rank-1) tensor

  // --- owners -----------------------------------------------------------------------------
  static Tensor empty(const Shape& shape);  // uninitialised
  static Tensor zeros(const Shape& shape);
  static Tensor ones(const Shape& shape);
  static Tensor full(const Shape& shape, float value);
  static Tensor scalar(float value);                                 // rank 0
  static Tensor from(const Shape& shape, std::vector<float> values);  // row-major values
  static Tensor from(const Shape& shape, std::initializer_list<float> values);
  static Tensor arange(int64_t n);  // (n) 0, 1, ..., n-1

  // --- metadata ---------------------------------------------------------------------------
  int dim() const { return static_cast<int>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return numel_of(shape_); }
  bool is_contiguous() const;
  const std::string& name() const { return name_; }
  Tensor& set_name(std::string name) { name_ = std::move(name); return *this; }
  std::string describe() const;  // "tensor 'W_query' (3, 2)"

  // --- data ---------------------------------------------------------------------------------
  float* data() { return data_; }  // points at element [0, 0, ...]; strided
  const float* data() const { return data_; }
  float& at(std::initializer_list<int64_t> index);
  float at(std::initializer_list<int64_t> index) const;
  float item() const;               // the one element of a 1-element tensor
  std::vector<float> to_vector() const;  // row-major copy
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }

  // --- views (no copy) ----------------------------------------------------------------------
  Tensor transpose(int d0, int d1) const;
  Tensor T() const;  // transpose of the last two dims (rank >= 2), or the tensor itself (rank 1)
  Tensor select(int d, int64_t index) const;                 // drops dim d
  Tensor slice(int d, int64_t start, int64_t end) const;     // [start, end), clamped like Python
  Tensor unsqueeze(int d) const;
  Tensor squeeze(int d) const;                               // dim d must have size 1
  Tensor view(const Shape& shape) const;                     // contiguous only; one -1 allowed
  Tensor expand(const Shape& shape) const;                   // broadcast by zero strides

  // --- copies -------------------------------------------------------------------------------
  Tensor contiguous() const;  // itself if already contiguous
  Tensor clone() const;       // always a fresh buffer
  Tensor reshape(const Shape& shape) const;  // view if possible, else copy
  void copy_from(const Tensor& src);         // same shape (or broadcastable to this)

 private:
  explicit Tensor(std::nullptr_t);  // no storage; filled in by empty()
  std::shared_ptr<float[]> storage_;
  float* data_ = nullptr;
  Shape shape_;
  Shape strides_;  // in elements
  std::string name_;
  friend class TensorIter;
};

// Walks the elements of a tensor in row-major order, yielding each element's offset.
class TensorIter {
 public:
  explicit TensorIter(const Shape& shape, const Shape& strides);
  bool done() const { return done_; }
  int64_t offset() const { return offset_; }
  void next();
 private:
  Shape shape_, strides_;
  int64_t index_[kMaxRank] = {};
  int64_t offset_ = 0;
  bool done_ = false;
};

// Throws qkv::Error unless the shapes are equal: "<what>: shape (2, 3) does not match (3, 2)".
void check_same_shape(const char* what, const Tensor& a, const Tensor& b);

}  // namespace qkv
