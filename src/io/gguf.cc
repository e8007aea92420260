// llama.cpp's GGUF files. See include/qkv/io/gguf.h.
#include "qkv/io/gguf.h"

#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/prefault.h"
#include "qkv/core/read_file.h"

namespace qkv {
namespace {

constexpr int kMaxDims = 4;  // ggml's GGML_MAX_DIMS

// The smallest a value of each type takes in the file (a string: its 8-byte length).
uint64_t min_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

// Reads the file front to back, every read checked against the bytes left; `where()` names the
// entry being read for messages.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, std::string file) : p_(data), size_(size), file_(std::move(file)) {}

  uint64_t left() const { return size_ - at_; }
  uint64_t at() const { return at_; }
  void set_where(std::string w) { where_ = std::move(w); }
  [[noreturn]] void bad(const std::string& what) const { fail(file_, ": ", where_, ": ", what); }

  const uint8_t* take(uint64_t n, const char* what) {
    if (n > left()) bad(str(what, " needs ", n, " bytes but only ", left(), " are left in the file (truncated?)"));
    const uint8_t* q = p_ + at_;
    at_ += n;
    return q;
  }
  uint64_t u(int bytes, const char* what) {
    const uint8_t* q = take(static_cast<uint64_t>(bytes), what);
    uint64_t v = 0;
    for (int k = bytes - 1; k >= 0; --k) v = v << 8 | q[k];
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = u(8, what);
    if (n > left()) bad(str(what, " is ", n, " bytes long but only ", left(), " are left in the file"));
    const uint8_t* q = take(n, what);
    return std::string(reinterpret_cast<const char*>(q), static_cast<size_t>(n));
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t at_ = 0;
  std::string file_;
  std::string where_ = "the header";
};

GgufType value_type(Cursor& c, const char* what) {
  const uint64_t t = c.u(4, what);
  if (t > static_cast<uint64_t>(GgufType::kF64)) c.bad(str(what, " is ", t, "; GGUF's value types are 0 .. 12"));
  return static_cast<GgufType>(t);
}

// A scalar of type t into v (its member for the type).
void read_scalar(Cursor& c, GgufType t, GgufValue& v) {
  switch (t) {
    case GgufType::kU8: v.u = c.u(1, "a u8"); break;
    case GgufType::kU16: v.u = c.u(2, "a u16"); break;
    case GgufType::kU32: v.u = c.u(4, "a u32"); break;
    case GgufType::kU64: v.u = c.u(8, "a u64"); break;
    case GgufType::kI8: v.i = static_cast<int8_t>(c.u(1, "an i8")); break;
    case GgufType::kI16: v.i = static_cast<int16_t>(c.u(2, "an i16")); break;
    case GgufType::kI32: v.i = static_cast<int32_t>(c.u(4, "an i32")); break;
    case GgufType::kI64: v.i = static_cast<int64_t>(c.u(8, "an i64")); break;
    case GgufType::kF32: v.f = std::bit_cast<float>(static_cast<uint32_t>(c.u(4, "an f32"))); break;
    case GgufType::kF64: v.f = std::bit_cast<double>(c.u(8, "an f64")); break;
    case GgufType::kBool: {
      v.u = c.u(1, "a bool");
      if (v.u > 1) c.bad(str("a bool is ", v.u, "; expected 0 or 1"));
      break;
    }
    case GgufType::kString: v.s = c.string("a string"); break;
    case GgufType::kArray: c.bad("internal error: an array read as a scalar");
  }
}

GgufValue read_value(Cursor& c, GgufType t) {
  GgufValue v;
  v.type = t;
  if (t != GgufType::kArray) {
    read_scalar(c, t, v);
    return v;
  }
  v.element = value_type(c, "the array's element type");
  if (v.element == GgufType::kArray) c.bad("an array of arrays; qkv reads arrays of numbers, bools and strings");
  const uint64_t n = c.u(8, "the array's length");
  if (n > c.left() / min_size(v.element))
    c.bad(str("an array of ", n, " ", gguf_type_name(v.element), " values needs at least ", n, " x ",
              min_size(v.element), " bytes but only ", c.left(), " are left in the file"));
  GgufValue e;
  for (uint64_t k = 0; k < n; ++k) {
    read_scalar(c, v.element, e);
    switch (v.element) {
      case GgufType::kString: v.strings.push_back(std::move(e.s)); break;
      case GgufType::kF32: case GgufType::kF64: v.floats.push_back(e.f); break;
      case GgufType::kI8: case GgufType::kI16: case GgufType::kI32: case GgufType::kI64: v.ints.push_back(e.i); break;
      default:
        if (e.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          c.bad(str("element ", k, " of the array is ", e.u, ", more than qkv reads (2^63 - 1)"));
        v.ints.push_back(static_cast<int64_t>(e.u));
    }
  }
  return v;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
                                      "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked when read
  return n;
}

struct GgufFile::Impl {
  std::string path;
  std::string bytes;                 // the file, when parsed from memory
  std::unique_ptr<MappedFile> mapped;  // the file, mapped
  uint32_t version = 0;
  int64_t alignment = 32;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;
  std::map<std::string, size_t> index;

  void parse(const uint8_t* data, uint64_t size);
  [[noreturn]] void missing(const std::string& key) const {
    fail(excerpt(path), " has no metadata ", excerpt(key));
  }
  const GgufValue& typed(const std::string& key, std::initializer_list<GgufType> types, const char* expected) const {
    const auto it = metadata.find(key);
    if (it == metadata.end()) missing(key);
    for (GgufType t : types)
      if (it->second.type == t) return it->second;
    fail(excerpt(path), ": metadata ", excerpt(key), " is ", gguf_type_name(it->second.type),
         it->second.type == GgufType::kArray ? str(" of ", gguf_type_name(it->second.element)) : "", "; expected ",
         expected);
  }
};

void GgufFile::Impl::parse(const uint8_t* data, uint64_t size) {
  const std::string file = excerpt(path);
  Cursor c(data, size, file);
  QKV_CHECK(size >= 4 && std::memcmp(data, "GGUF", 4) == 0, file, " is not a GGUF file (its first bytes are not \"GGUF\")");
  c.take(4, "the magic");
  version = static_cast<uint32_t>(c.u(4, "the version"));
  if (version == 0x03000000u || version == 0x02000000u)
    c.bad("a big-endian GGUF file; qkv reads little-endian ones (as llama.cpp writes them on x86 and ARM)");
  if (version != 2 && version != 3)
    c.bad(str("version ", version, "; qkv reads versions 2 and 3", version == 1 ? " (version 1, of 32-bit counts, "
                                                                              "predates them: convert it anew)" : ""));
  const uint64_t n_tensors = c.u(8, "the tensor count");
  const uint64_t n_kv = c.u(8, "the metadata count");
  // each entry takes at least: a key (8) + a type (4) + a value (1); a tensor 8 + 4 + 4 + 8
  if (n_kv > c.left() / 13) c.bad(str("the metadata count ", n_kv, " is more than ", c.left(), " bytes can hold"));
  if (n_tensors > c.left() / 24) c.bad(str("the tensor count ", n_tensors, " is more than ", c.left(), " bytes can hold"));
  for (uint64_t k = 0; k < n_kv; ++k) {
    c.set_where(str("metadata entry ", k));
    std::string key = c.string("its key");
    c.set_where(str("metadata entry ", k, " (", excerpt(key), ")"));
    const GgufType t = value_type(c, "its type");
    GgufValue v = read_value(c, t);
    if (!metadata.emplace(key, std::move(v)).second) c.bad("the key is in the file twice");
  }
  if (const auto it = metadata.find("general.alignment"); it != metadata.end()) {
    c.set_where("metadata general.alignment");
    const GgufValue& a = it->second;
    if (a.type != GgufType::kU32) c.bad(str("is ", gguf_type_name(a.type), "; expected u32"));
    if (a.u == 0 || (a.u & (a.u - 1)) != 0 || a.u > (1u << 20))
      c.bad(str("is ", a.u, "; expected a power of two up to 2^20"));
    alignment = static_cast<int64_t>(a.u);
  }
  std::set<std::string> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    c.set_where(str("tensor ", k));
    GgufTensor t;
    t.name = c.string("its name");
    c.set_where(str("tensor ", k, " (", excerpt(t.name), ")"));
    if (!names.insert(t.name).second) c.bad("the name is in the file twice");
    const uint64_t dims = c.u(4, "its dimension count");
    if (dims < 1 || dims > kMaxDims) c.bad(str("has ", dims, " dimensions; ggml's tensors have 1 to ", kMaxDims));
    std::vector<int64_t> ne;
    for (uint64_t d = 0; d < dims; ++d) {
      const uint64_t n = c.u(8, "a dimension");
      if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.bad(str("dimension ", d, " is ", n, "; expected 1 .. 2^63 - 1"));
      ne.push_back(static_cast<int64_t>(n));
    }
    t.shape = Shape(ne.rbegin(), ne.rend());
    const uint64_t type = c.u(4, "its type");
    if (type > std::numeric_limits<uint32_t>::max()) c.bad("its type does not fit 32 bits");
    try {
      t.type = &quant_type(static_cast<uint32_t>(type));
    } catch (const Error& e) {
      c.bad(e.what());
    }
    if (ne[0] % t.type->block != 0)
      c.bad(str("rows of ", ne[0], " values are not whole ", t.type->name, " blocks of ", t.type->block));
    try {
      t.bytes = quant_bytes(*t.type, checked_product(std::span<const int64_t>(ne), "its values"), "its data");
    } catch (const Error& e) {
      c.bad(e.what());
    }
    t.offset = c.u(8, "its offset");
    if (t.offset % static_cast<uint64_t>(alignment) != 0)
      c.bad(str("offset ", t.offset, " is not a multiple of the alignment ", alignment));
    tensors.push_back(std::move(t));
  }
  // The data: from the header's end rounded up to the alignment.
  c.set_where("the data");
  const uint64_t start = (c.at() + static_cast<uint64_t>(alignment) - 1) / static_cast<uint64_t>(alignment) *
                         static_cast<uint64_t>(alignment);
  if (!tensors.empty() && start > size)
    c.bad(str("the data would start at byte ", start, " but the file has ", size));
  const uint64_t data_size = start <= size ? size - start : 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    GgufTensor& t = tensors[k];
    if (t.offset > data_size || static_cast<uint64_t>(t.bytes) > data_size - t.offset)
      fail(file, ": tensor ", k, " (", excerpt(t.name), "): its ", t.bytes, " bytes at offset ", t.offset,
           " go past the end of the data (", data_size, " bytes; truncated file?)");
    t.data = data + start + t.offset;
    index.emplace(t.name, k);
  }
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::~GgufFile() = default;
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;

GgufFile::GgufFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.mapped = std::make_unique<MappedFile>(path);
  m.parse(m.mapped->data(), m.mapped->size());
}

GgufFile GgufFile::parse(std::string bytes, const std::string& name) {
  auto m = std::make_unique<Impl>();
  m->path = name;
  m->bytes = std::move(bytes);
  m->parse(reinterpret_cast<const uint8_t*>(m->bytes.data()), m->bytes.size());
  return GgufFile(std::move(m));
}

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
int64_t GgufFile::alignment() const { return impl_->alignment; }
bool GgufFile::has(const std::string& key) const { return impl_->metadata.count(key) != 0; }
const std::map<std::string, GgufValue>& GgufFile::metadata() const { return impl_->metadata; }

const GgufValue& GgufFile::value(const std::string& key) const {
  const auto it = impl_->metadata.find(key);
  if (it == impl_->metadata.end()) impl_->missing(key);
  return it->second;
}

std::string GgufFile::string(const std::string& key) const {
  return impl_->typed(key, {GgufType::kString}, "a string").s;
}

uint64_t GgufFile::unsigned_int(const std::string& key) const {
  const GgufValue& v = impl_->typed(key, {GgufType::kU8, GgufType::kU16, GgufType::kU32, GgufType::kU64, GgufType::kI8,
                                          GgufType::kI16, GgufType::kI32, GgufType::kI64},
                                    "an integer");
  const bool is_signed = v.type == GgufType::kI8 || v.type == GgufType::kI16 || v.type == GgufType::kI32 ||
                         v.type == GgufType::kI64;
  QKV_CHECK(!is_signed || v.i >= 0, excerpt(impl_->path), ": metadata ", excerpt(key), " is ", v.i,
            "; expected a count (not negative)");
  return is_signed ? static_cast<uint64_t>(v.i) : v.u;
}

double GgufFile::number(const std::string& key) const {
  const GgufValue& v = value(key);
  switch (v.type) {
    case GgufType::kF32: case GgufType::kF64: return v.f;
    case GgufType::kU8: case GgufType::kU16: case GgufType::kU32: case GgufType::kU64: return static_cast<double>(v.u);
    case GgufType::kI8: case GgufType::kI16: case GgufType::kI32: case GgufType::kI64: return static_cast<double>(v.i);
    default:
      fail(excerpt(impl_->path), ": metadata ", excerpt(key), " is ", gguf_type_name(v.type), "; expected a number");
  }
}

bool GgufFile::boolean(const std::string& key) const { return impl_->typed(key, {GgufType::kBool}, "a bool").u != 0; }

const std::vector<std::string>& GgufFile::strings(const std::string& key) const {
  const GgufValue& v = impl_->typed(key, {GgufType::kArray}, "an array of strings");
  QKV_CHECK(v.element == GgufType::kString, excerpt(impl_->path), ": metadata ", excerpt(key), " is an array of ",
            gguf_type_name(v.element), "; expected an array of strings");
  return v.strings;
}

const std::vector<int64_t>& GgufFile::ints(const std::string& key) const {
  const GgufValue& v = impl_->typed(key, {GgufType::kArray}, "an array of integers");
  QKV_CHECK(v.element != GgufType::kString && v.element != GgufType::kF32 && v.element != GgufType::kF64,
            excerpt(impl_->path), ": metadata ", excerpt(key), " is an array of ", gguf_type_name(v.element),
            "; expected an array of integers");
  return v.ints;
}

const std::vector<double>& GgufFile::floats(const std::string& key) const {
  const GgufValue& v = impl_->typed(key, {GgufType::kArray}, "an array of floats");
  QKV_CHECK(v.element == GgufType::kF32 || v.element == GgufType::kF64, excerpt(impl_->path), ": metadata ",
            excerpt(key), " is an array of ", gguf_type_name(v.element), "; expected an array of floats");
  return v.floats;
}

const std::vector<GgufTensor>& GgufFile::tensors() const { return impl_->tensors; }
bool GgufFile::contains(const std::string& name) const { return impl_->index.count(name) != 0; }

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const auto it = impl_->index.find(name);
  QKV_CHECK(it != impl_->index.end(), excerpt(impl_->path), " has no tensor ", excerpt(name), " (it has ",
            impl_->tensors.size(), ")");
  return impl_->tensors[it->second];
}

void GgufFile::read_floats(const std::string& name, float* out) const {
  const GgufTensor& t = tensor(name);
  QKV_CHECK(t.type->readable, excerpt(impl_->path), ": tensor ", excerpt(name), " is ", t.type->name,
            "; qkv reads ", readable_quant_types());
  prefault_pages(out, static_cast<size_t>(t.numel()) * sizeof(float));  // written whole: mapped in one call
  dequantize(*t.type, t.data, t.numel(), out);
}

void GgufFile::release(const std::string& name) const { release(name, 0, tensor(name).bytes); }

void GgufFile::release(const std::string& name, int64_t begin, int64_t end) const {
  const GgufTensor& t = tensor(name);
  QKV_CHECK(0 <= begin && begin <= end && end <= t.bytes, excerpt(impl_->path), ": bytes [", begin, ", ", end,
            ") of tensor ", excerpt(name), " given back; it has ", t.bytes);
  if (impl_->mapped)
    impl_->mapped->release(static_cast<uint64_t>(t.data - impl_->mapped->data() + begin),
                           static_cast<uint64_t>(end - begin));
}

void GgufFile::drop(const std::string& key) { impl_->metadata.erase(key); }

}  // namespace qkv
