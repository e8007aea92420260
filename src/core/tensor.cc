// Tensor storage, views and copies. See include/qkv/core/tensor.h.
#include "qkv/core/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qkv/core/error.h"

namespace qkv {
namespace {

constexpr size_t kAlignment = 64;  // one cache line; what AVX-512 loads like

// Freed blocks of kCachedFrom bytes and more, kept for the next request of the same rounded size
// (see tensor_block_cache_bytes in tensor.h): a training or prefill step asks for the same
// activations every time, and memory fresh from the kernel costs a page fault and a clear of every
// 4 KiB page (about an eighth of a GPT-2 training step before this cache).
constexpr size_t kCachedFrom = size_t{1} << 20;
constexpr size_t kCacheGranule = size_t{64} << 10;  // request sizes rounded up to 64 KiB

class BlockCache {
 public:
  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(bytes);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= bytes;
    return p;
  }
  void give(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + bytes <= limit_) {
        free_[bytes].push_back(p);
        cached_ += bytes;
        return;
      }
    }
    std::free(p);
  }
  void release() {
    std::unordered_map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
      cached_ = 0;
    }
    for (auto& [bytes, list] : blocks)
      for (void* p : list) std::free(p);
  }
  size_t cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }
  void set_limit(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = bytes;
      if (cached_ <= limit_) return;
    }
    release();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> free blocks of it
  size_t cached_ = 0;
#if defined(__SANITIZE_ADDRESS__)
  size_t limit_ = 0;  // AddressSanitizer sees every free (a kept block would hide a use after free)
#else
  size_t limit_ = size_t{1} << 30;
#endif
};

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;  // never destroyed: tensors may outlive static destructors
  return *cache;
}

std::shared_ptr<float[]> allocate(int64_t n) {
  size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (bytes >= kCachedFrom) {
    bytes = (bytes + kCacheGranule - 1) / kCacheGranule * kCacheGranule;
    void* p = block_cache().take(bytes);
    if (p == nullptr) p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) fail("out of memory allocating ", n, " floats");
    return std::shared_ptr<float[]>(static_cast<float*>(p), [bytes](float* q) { block_cache().give(q, bytes); });
  }
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p == nullptr) fail("out of memory allocating ", n, " floats");
  return std::shared_ptr<float[]>(static_cast<float*>(p), [](float* q) { std::free(q); });
}

// From this size on, Tensor::zeros takes fresh pages from the kernel: zero already, and resident
// only once written, so that a gradient or optimiser state that is never used (a model that only
// runs forward) costs address space and not memory.
constexpr size_t kFreshPagesFrom = size_t{1} << 20;

std::shared_ptr<float[]> fresh_pages(int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("out of memory allocating ", n, " floats");
  return std::shared_ptr<float[]>(static_cast<float*>(p), [bytes](float* q) { ::munmap(q, bytes); });
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

int wrap_dim(int d, int rank, const char* op) {
  int w = d < 0 ? d + rank : d;
  QKV_CHECK(w >= 0 && w < rank, op, ": dimension ", d, " is out of range for a tensor of rank ", rank);
  return w;
}

}  // namespace

void Shape::rank_error(size_t rank) {
  fail("a shape has at most ", kMaxRank, " dimensions (kMaxRank); this one would have rank ", rank);
}

Shape::iterator Shape::insert(const_iterator pos, std::initializer_list<int64_t> values) {
  const size_t at = static_cast<size_t>(pos - d_), k = values.size();
  check_rank(n_ + k);
  for (size_t i = n_; i-- > at;) d_[i + k] = d_[i];
  size_t i = at;
  for (int64_t v : values) d_[i++] = v;
  n_ += static_cast<uint32_t>(k);
  return d_ + at;
}

Shape::iterator Shape::erase(const_iterator pos) {
  const size_t at = static_cast<size_t>(pos - d_);
  for (size_t i = at + 1; i < n_; ++i) d_[i - 1] = d_[i];
  --n_;
  return d_ + at;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape) {
  for (int64_t d : shape) QKV_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  Tensor t;
  t.storage_ = allocate(numel_of(shape));
  t.data_ = t.storage_.get();
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::zeros(const Shape& shape) {
  for (int64_t d : shape) QKV_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  const int64_t n = numel_of(shape);
  if (static_cast<size_t>(n) * sizeof(float) < kFreshPagesFrom) return full(shape, 0.0f);
  Tensor t;
  t.storage_ = fresh_pages(n);
  t.data_ = t.storage_.get();
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

size_t tensor_block_cache_bytes() { return block_cache().cached(); }
void release_tensor_block_cache() { block_cache().release(); }
void set_tensor_block_cache_limit(size_t bytes) { block_cache().set_limit(bytes); }

Tensor Tensor::ones(const Shape& shape) { return full(shape, 1.0f); }

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  std::fill(t.data_, t.data_ + t.numel(), value);
  return t;
}

Tensor Tensor::scalar(float value) { return full({}, value); }

Tensor Tensor::from(const Shape& shape, std::vector<float> values) {
  QKV_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "Tensor::from: shape ",
            shape_str(shape), " needs ", numel_of(shape), " values, got ", values.size());
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.data_);
  return t;
}

Tensor Tensor::from(const Shape& shape, std::initializer_list<float> values) {
  return from(shape, std::vector<float>(values));
}

Tensor Tensor::arange(int64_t n) {
  Tensor t = empty({n});
  for (int64_t i = 0; i < n; ++i) t.data_[i] = static_cast<float>(i);
  return t;
}

void Tensor::check_defined(const char* op) const {
  QKV_CHECK(defined(), op, ": the tensor", name_ ? " '" + *name_ + "'" : std::string(),
            " is undefined (a default-constructed Tensor, which stands for an absent one, has no data)");
}

const std::string& Tensor::name() const {
  static const std::string kNone;
  return name_ ? *name_ : kNone;
}

Tensor& Tensor::set_name(std::string name) {
  if (name.empty()) name_.reset();
  else name_ = std::make_shared<const std::string>(std::move(name));
  return *this;
}

int64_t Tensor::size(int d) const { return shape_[wrap_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

std::string Tensor::describe() const {
  const std::string what = defined() ? "tensor" : "undefined tensor";
  return name_ ? what + " '" + *name_ + "' " + shape_str(shape_) : what + " " + shape_str(shape_);
}

float& Tensor::at(std::initializer_list<int64_t> index) {
  check_defined("at");
  QKV_CHECK(static_cast<int>(index.size()) == dim(), "at: ", index.size(), " indices for ",
            describe());
  int64_t off = 0;
  int d = 0;
  for (int64_t i : index) {
    int64_t w = i < 0 ? i + shape_[d] : i;
    QKV_CHECK(w >= 0 && w < shape_[d], "at: index ", i, " out of range for dimension ", d,
              " of ", describe());
    off += w * strides_[d++];
  }
  return data_[off];
}

float Tensor::at(std::initializer_list<int64_t> index) const {
  return const_cast<Tensor*>(this)->at(index);
}

float Tensor::item() const {
  check_defined("item");
  QKV_CHECK(numel() == 1, "item: ", describe(), " has ", numel(), " elements, expected 1");
  return *data_;
}

std::vector<float> Tensor::to_vector() const {
  check_defined("to_vector");
  std::vector<float> out;
  out.reserve(static_cast<size_t>(numel()));
  if (numel() == 0) return out;
  for (TensorIter it(shape_, strides_); !it.done(); it.next()) out.push_back(data_[it.offset()]);
  return out;
}

Tensor Tensor::transpose(int d0, int d1) const {
  check_defined("transpose");
  Tensor t = *this;
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::T() const {
  check_defined("T");
  return dim() < 2 ? *this : transpose(-2, -1);
}

Tensor Tensor::select(int d, int64_t index) const {
  check_defined("select");
  d = wrap_dim(d, dim(), "select");
  int64_t w = index < 0 ? index + shape_[d] : index;
  QKV_CHECK(w >= 0 && w < shape_[d], "select: index ", index, " out of range for dimension ", d,
            " of ", describe());
  Tensor t = *this;
  t.data_ += w * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  check_defined("slice");
  d = wrap_dim(d, dim(), "slice");
  int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Tensor t = *this;
  t.data_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  check_defined("unsqueeze");
  int w = d < 0 ? d + dim() + 1 : d;
  QKV_CHECK(w >= 0 && w <= dim(), "unsqueeze: dimension ", d, " out of range for ", describe());
  QKV_CHECK(dim() < kMaxRank, "unsqueeze: ", describe(), " already has the maximum rank");
  Tensor t = *this;
  int64_t stride = w < dim() ? strides_[w] * shape_[w] : 1;
  t.shape_.insert(t.shape_.begin() + w, 1);
  t.strides_.insert(t.strides_.begin() + w, stride);
  return t;
}

Tensor Tensor::squeeze(int d) const {
  check_defined("squeeze");
  d = wrap_dim(d, dim(), "squeeze");
  QKV_CHECK(shape_[d] == 1, "squeeze: dimension ", d, " of ", describe(), " has size ", shape_[d],
            ", expected 1");
  Tensor t = *this;
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

namespace {
Shape infer_shape(const Shape& want, int64_t n, const Tensor& src) {
  Shape s = want;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      QKV_CHECK(infer < 0, "view: only one dimension may be -1 in ", shape_str(want));
      infer = static_cast<int>(i);
    } else {
      QKV_CHECK(s[i] >= 0, "view: invalid dimension ", s[i], " in ", shape_str(want));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    QKV_CHECK(known > 0 && n % known == 0, "view: cannot view ", src.describe(), " as ",
              shape_str(want));
    s[infer] = n / known;
  }
  QKV_CHECK(numel_of(s) == n, "view: cannot view ", src.describe(), " (", n, " elements) as ",
            shape_str(want));
  return s;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view");
  QKV_CHECK(is_contiguous(), "view: ", describe(),
            " is not contiguous; call contiguous() or reshape() first");
  Tensor t = *this;
  t.shape_ = infer_shape(shape, numel(), *this);
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  check_defined("expand");
  QKV_CHECK(shape.size() >= shape_.size(), "expand: cannot expand ", describe(), " to ",
            shape_str(shape));
  Tensor t = *this;
  size_t lead = shape.size() - shape_.size();
  t.shape_ = shape;
  t.strides_.assign(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    size_t j = i + lead;
    if (shape_[i] == shape[j]) {
      t.strides_[j] = strides_[i];
    } else {
      QKV_CHECK(shape_[i] == 1, "expand: cannot expand ", describe(), " to ", shape_str(shape));
    }
  }
  return t;
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor t = empty(shape_);
  t.name_ = name_;
  t.copy_from(*this);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const { return contiguous().view(shape); }

void Tensor::copy_from(const Tensor& src) {
  check_defined("copy_from");
  src.check_defined("copy_from");
  Tensor s = src.shape_ == shape_ ? src : src.expand(shape_);
  if (numel() == 0) return;
  if (is_contiguous() && s.is_contiguous()) {
    std::memmove(data_, s.data_, static_cast<size_t>(numel()) * sizeof(float));
    return;
  }
  if (dim() == 0) {
    *data_ = *s.data_;
    return;
  }
  // Rows of the last dimension in a plain strided loop; TensorIter walks the rest.
  const int64_t n = shape_.back(), sd = strides_.back(), ss = s.strides_.back();
  const Shape outer(shape_.begin(), shape_.end() - 1);
  TensorIter a(outer, Shape(strides_.begin(), strides_.end() - 1));
  TensorIter b(outer, Shape(s.strides_.begin(), s.strides_.end() - 1));
  for (; !a.done(); a.next(), b.next()) {
    float* d = data_ + a.offset();
    const float* x = s.data_ + b.offset();
    for (int64_t j = 0; j < n; ++j) d[j * sd] = x[j * ss];
  }
}

TensorIter::TensorIter(const Shape& shape, const Shape& strides)
    : shape_(shape), strides_(strides) {
  done_ = numel_of(shape) == 0;
}

void TensorIter::next() {
  for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {
    if (++index_[d] < shape_[d]) {
      offset_ += strides_[d];
      return;
    }
    offset_ -= (shape_[d] - 1) * strides_[d];
    index_[d] = 0;
  }
  done_ = true;
}

void check_same_shape(const char* what, const Tensor& a, const Tensor& b) {
  QKV_CHECK(a.shape() == b.shape(), what, ": ", a.describe(), " does not match ", b.describe());
}

}  // namespace qkv
