// qkv/core/tensor.h - the float32 tensor: aligned shared storage plus a strided view of it.
//
// A Tensor is metadata (shape, strides, offset) over a reference-counted, 64-byte-aligned
// buffer. Views (transpose, select, slice, unsqueeze, view of contiguous data) share the buffer
// and change only the metadata, as in PyTorch: `x.transpose(0, 1)` copies nothing. Sharing the
// buffer rather than borrowing it means a view can never outlive its data, even when it is taken
// of a temporary. Kernels below this layer take raw pointers and sizes, never a Tensor.
//
// A view allocates nothing: the shape and strides are held inline (rank <= kMaxRank) and the
// name is shared by reference count, so taking one costs two reference-count increments.
//
// Legend used across qkv: B batch, T tokens, C channels (d_in / d_model), H heads, D head dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace qkv {

inline constexpr int kMaxRank = 8;

// A tensor's shape (or strides): up to kMaxRank int64 held inline, no heap. It reads like the
// std::vector<int64_t> it replaces (size, [], begin/end, push_back, insert, erase, ==); growing
// past kMaxRank throws qkv::Error naming the rank.
class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Shape() = default;
  explicit Shape(size_t n, int64_t value = 0) { assign(n, value); }
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  template <std::input_iterator It>
  Shape(It first, It last) { assign(first, last); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT: implicit by design

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  static constexpr size_t max_size() { return kMaxRank; }
  int64_t* data() { return d_; }
  const int64_t* data() const { return d_; }
  int64_t& operator[](size_t i) { return d_[i]; }
  int64_t operator[](size_t i) const { return d_[i]; }
  int64_t& front() { return d_[0]; }
  int64_t front() const { return d_[0]; }
  int64_t& back() { return d_[n_ - 1]; }
  int64_t back() const { return d_[n_ - 1]; }
  iterator begin() { return d_; }
  iterator end() { return d_ + n_; }
  const_iterator begin() const { return d_; }
  const_iterator end() const { return d_ + n_; }
  const_iterator cbegin() const { return d_; }
  const_iterator cend() const { return d_ + n_; }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  void clear() { n_ = 0; }
  void assign(size_t n, int64_t value) {
    check_rank(n);
    n_ = static_cast<uint32_t>(n);
    for (size_t i = 0; i < n; ++i) d_[i] = value;
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    if constexpr (std::forward_iterator<It>) check_rank(static_cast<size_t>(std::distance(first, last)));
    n_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  void resize(size_t n, int64_t value = 0) {
    check_rank(n);
    for (size_t i = n_; i < n; ++i) d_[i] = value;
    n_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t value) {
    check_rank(n_ + 1);
    d_[n_++] = value;
  }
  void pop_back() { --n_; }
  iterator insert(const_iterator pos, int64_t value) { return insert(pos, {value}); }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> values);
  iterator erase(const_iterator pos);

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.n_ != b.n_) return false;
    for (size_t i = 0; i < a.n_; ++i)
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }

 private:
  static void check_rank(size_t rank) {
    if (rank > static_cast<size_t>(kMaxRank)) rank_error(rank);
  }
  [[noreturn]] static void rank_error(size_t rank);
  int64_t d_[kMaxRank] = {};
  uint32_t n_ = 0;
};

std::string shape_str(const Shape& shape);  // "(2, 6, 3)"
int64_t numel_of(const Shape& shape);

// Tensor storage of 1 MiB and more (Tensor::empty and everything built on it) is kept when freed,
// up to a limit (1 GiB unless set; 0 under AddressSanitizer), and handed out again for a request of the same size rounded
// up to 64 KiB: a model's step asks for the same activations every time, and fresh memory costs a
// page fault and a clear per 4 KiB page. Thread-safe. The kept blocks count in the process's
// memory until released (a long-lived embedder done with a model may release them).
size_t tensor_block_cache_bytes();       // bytes kept now
void release_tensor_block_cache();       // frees every kept block
void set_tensor_block_cache_limit(size_t bytes);  // keep at most this many (0: none); above it, frees all

class Tensor {
 public:
  // An undefined tensor (as PyTorch's at::Tensor()): no storage, nothing allocated. It is how qkv
  // says "absent" (no bias, no mask, no dropout trace), distinct from a defined tensor with zero
  // elements (a batch of B = 0 or T = 0 is a legitimate tensor). Its metadata reads as an empty
  // tensor's: defined() false, shape (0), dim() 1, numel() 0, data() null, name() "". Anything
  // that needs its data (at, item, views, copies, the ops of ops.h) throws qkv::Error saying the
  // tensor is undefined.
  Tensor() = default;

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
  bool defined() const { return storage_ != nullptr; }
  int dim() const { return static_cast<int>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return numel_of(shape_); }
  bool is_contiguous() const;
  const std::string& name() const;
  Tensor& set_name(std::string name);
  std::string describe() const;  // "tensor 'W_query' (3, 2)"

  // --- data ---------------------------------------------------------------------------------
  float* data() { return data_; }  // points at element [0, 0, ...]; strided; null when undefined
  const float* data() const { return data_; }
  float& at(std::initializer_list<int64_t> index);
  float at(std::initializer_list<int64_t> index) const;
  float item() const;               // the one element of a 1-element tensor
  std::vector<float> to_vector() const;  // row-major copy
  bool shares_storage(const Tensor& other) const { return defined() && storage_ == other.storage_; }

  // --- views (no copy, no allocation) -------------------------------------------------------
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

  // Throws qkv::Error "<op>: the tensor is undefined ..." unless defined().
  void check_defined(const char* op) const;

 private:
  std::shared_ptr<float[]> storage_;
  float* data_ = nullptr;
  Shape shape_{0};    // (0) while undefined
  Shape strides_{1};  // in elements
  std::shared_ptr<const std::string> name_;  // null: no name; shared by views, never copied
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
