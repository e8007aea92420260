// Reading and writing .safetensors files. See include/qkv/io/safetensors.h.
//
// The reader treats the file as hostile: every length and offset is checked against what is
// actually there before it is used, sizes are computed without overflow, and nothing is
// allocated for a tensor until its shape, dtype and byte range have been found consistent.
#include "qkv/io/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "qkv/core/bf16.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/atomic_file.h"
#include "qkv/core/json_read.h"
#include "qkv/core/prefault.h"

namespace qkv {
namespace {

using nlohmann::json;

// --- dtypes ---------------------------------------------------------------------------------

// Int and UInt (the integer dtypes) are read only as whole numbers (load_safetensors_integers).
enum class Dtype { F32, F16, BF16, F64, Int, UInt, Unsupported };

struct DtypeInfo {
  const char* name;
  uint64_t size;  // bytes per element
  Dtype dtype;
};

// Every dtype the format defines; the ones qkv cannot turn into float32 are named so that the
// error can tell "unsupported" from "unknown".
constexpr DtypeInfo kDtypes[] = {
    {"F32", 4, Dtype::F32},          {"F16", 2, Dtype::F16},
    {"BF16", 2, Dtype::BF16},        {"F64", 8, Dtype::F64},
    {"BOOL", 1, Dtype::Unsupported}, {"U8", 1, Dtype::UInt},
    {"I8", 1, Dtype::Int},           {"F8_E4M3", 1, Dtype::Unsupported},
    {"F8_E5M2", 1, Dtype::Unsupported}, {"I16", 2, Dtype::Int},
    {"U16", 2, Dtype::UInt},         {"I32", 4, Dtype::Int},
    {"U32", 4, Dtype::UInt},         {"I64", 8, Dtype::Int},
    {"U64", 8, Dtype::UInt},         {"C64", 8, Dtype::Unsupported},
};
constexpr const char* kSupportedDtypes = "F32, F16, BF16, F64";

const DtypeInfo* find_dtype(const std::string& name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// --- little-endian loads and stores (independent of the host's byte order) -----------------

uint64_t load_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// --- messages -------------------------------------------------------------------------------

// A JSON value for an error message: compact, quoted, escaped and bounded.
std::string brief(const json& j) { return json_excerpt(j); }

// A path for a message (bounded by PATH_MAX when it names a file at all).
std::string quoted_path(const std::string& file) { return excerpt(file, 4096); }

std::string name_list(const std::vector<std::string>& names, size_t max_shown) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max_shown; ++i) {
    if (i) s += ", ";
    s += excerpt(names[i], 40);
  }
  if (names.size() > max_shown) s += str(", ... (", names.size() - max_shown, " more)");
  return s;
}

// "'file' has no tensor 'x' (it has: 'a', 'b')": TensorFile::get's and MappedSafetensors's error.
[[noreturn]] void fail_missing(const std::string& file, const std::string& name, const std::vector<std::string>& names) {
  fail(quoted_path(file), " has no tensor ", excerpt(name), " (it has: ",
       names.empty() ? std::string("no tensors") : name_list(names, 40), ")");
}

// --- header parsing -------------------------------------------------------------------------

// Parses the header JSON; a key repeated within one object is an error (nlohmann would keep
// the last one silently, which would let two readers of the same file disagree).
json parse_header(const char* begin, const char* end, const std::string& file) {
  json header = parse_json(std::string_view(begin, static_cast<size_t>(end - begin)),
                           quoted_path(file) + ": header", JsonKeys::kUnique);
  QKV_CHECK(header.is_object(), quoted_path(file), ": header must be a JSON object, got ",
            header.type_name(), " ", brief(header));
  return header;
}

// A non-negative JSON integer (signed or unsigned), or nothing.
bool as_count(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  const DtypeInfo* dtype = nullptr;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data buffer; checked to lie within it
};

const json& field(const json& entry, const char* key, const std::string& file,
                  const std::string& name) {
  auto it = entry.find(key);
  QKV_CHECK(it != entry.end(), quoted_path(file), ": tensor ", excerpt(name), " has no '", key,
            "' (expected dtype, shape and data_offsets), got ", brief(entry));
  return *it;
}

// integers: the integer dtypes are accepted (whole numbers read by load_safetensors_integers);
// elsewhere they are refused, as weights (int8 weights mean nothing without their scales).
Entry parse_entry(const std::string& name, const json& j, uint64_t data_size, const std::string& file,
                  bool integers) {
  const std::string where = str(quoted_path(file), ": tensor ", excerpt(name));
  QKV_CHECK(j.is_object(), where, ": entry must be a JSON object with dtype, shape and "
            "data_offsets, got ", j.type_name(), " ", brief(j));
  Entry e;
  e.name = name;

  // dtype
  const json& dtype = field(j, "dtype", file, name);
  QKV_CHECK(dtype.is_string(), where, ": 'dtype' must be a string such as \"F32\", got ",
            dtype.type_name(), " ", brief(dtype));
  const std::string& dtype_name = dtype.get_ref<const std::string&>();
  e.dtype = find_dtype(dtype_name);
  QKV_CHECK(e.dtype != nullptr, where, " has unknown dtype ", excerpt(dtype_name),
            " (supported: ", kSupportedDtypes, ")");
  QKV_CHECK(e.dtype->dtype != Dtype::Unsupported, where, " has unsupported dtype ", excerpt(dtype_name),
            " (supported: ", kSupportedDtypes, ")");
  QKV_CHECK(integers || (e.dtype->dtype != Dtype::Int && e.dtype->dtype != Dtype::UInt), where,
            " has unsupported dtype ", excerpt(dtype_name), " (supported: ", kSupportedDtypes,
            "; integer dtypes are read as token ids only, qkv train --data)");

  // shape
  const json& shape = field(j, "shape", file, name);
  QKV_CHECK(shape.is_array(), where, ": 'shape' must be an array of non-negative integers, got ",
            shape.type_name(), " ", brief(shape));
  QKV_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), where, ": shape ", brief(shape),
            " has rank ", shape.size(), ", more than the ", kMaxRank, " dimensions qkv supports");
  Shape nonzero;  // the sizes that set the strides: their product must fit too, even when the tensor is empty
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t d = 0;
    QKV_CHECK(as_count(shape[i], &d), where, ": dimension ", i, " of shape ", brief(shape),
              " must be a non-negative integer, got ", brief(shape[i]));
    QKV_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where, ": dimension ", i,
              " of shape ", brief(shape), " is absurdly large (", d, ")");
    e.shape.push_back(static_cast<int64_t>(d));
    if (d != 0) nonzero.push_back(static_cast<int64_t>(d));
  }
  int64_t numel = 0, want = 0;
  try {
    checked_product(std::span<const int64_t>(nonzero.data(), nonzero.size()), "its elements");
    numel = checked_product(std::span<const int64_t>(e.shape.data(), e.shape.size()), "its elements");
    want = checked_bytes(numel, static_cast<int64_t>(e.dtype->size), "its bytes");
  } catch (const Error& err) {
    fail(where, ": shape ", brief(shape), " is absurdly large: ", err.what());
  }

  // data_offsets
  const json& offsets = field(j, "data_offsets", file, name);
  uint64_t begin = 0, end = 0;
  QKV_CHECK(offsets.is_array() && offsets.size() == 2 && as_count(offsets[0], &begin) &&
                as_count(offsets[1], &end),
            where, ": 'data_offsets' must be [begin, end] with non-negative integers, got ",
            brief(offsets));
  QKV_CHECK(end >= begin, where, ": data_offsets [", begin, ", ", end, "] end (", end,
            ") is before begin (", begin, ")");
  QKV_CHECK(end <= data_size, where, ": data offsets past the end of the data buffer: "
            "data_offsets [", begin, ", ", end, "] but the buffer has only ", data_size,
            " bytes (truncated file?)");
  QKV_CHECK(end - begin == static_cast<uint64_t>(want), where, ": shape ", shape_str(e.shape), " of ", e.dtype->name,
            " needs ", want, " bytes (", numel, " elements x ", e.dtype->size,
            " bytes) but data_offsets [", begin, ", ", end, "] hold ", end - begin, " bytes");
  e.begin = begin;
  e.end = end;
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& file) {
  QKV_CHECK(j.is_object(), quoted_path(file), ": __metadata__ must be an object mapping strings to "
            "strings, got ", j.type_name(), " ", brief(j));
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    QKV_CHECK(it.value().is_string(), quoted_path(file), ": __metadata__ must map strings to strings, "
              "but key ", excerpt(it.key()), " has ", it.value().type_name(), " ", brief(it.value()));
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

// The tensors' byte ranges tile the data buffer, as Hugging Face's safetensors requires (its
// validate: each range starts where the one before it in offset order ends, and the last ends at
// the end of the file): two ranges that share a byte would alias each other's data, and bytes that
// belong to no tensor - a hole, or a tail after the last - are a damaged or padded file, which
// safetensors refuses (InvalidOffset, MetadataIncompleteBuffer). Empty tensors take no bytes.
void check_layout(std::vector<const Entry*> entries, uint64_t data_size, const std::string& file) {
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const Entry* e) { return e->begin == e->end; }),
                entries.end());
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const Entry* reach = nullptr;  // the entry reaching furthest so far
  for (const Entry* e : entries) {
    if (reach != nullptr) {
      QKV_CHECK(e->begin >= reach->end, quoted_path(file), ": tensors ", excerpt(reach->name), " [",
                reach->begin, ", ", reach->end, "] and ", excerpt(e->name), " [", e->begin, ", ",
                e->end, "] overlap in the data buffer");
    }
    const uint64_t from = reach == nullptr ? 0 : reach->end;
    QKV_CHECK(e->begin <= from, quoted_path(file), ": bytes [", from, ", ", e->begin, ") of the data buffer belong to ",
              "no tensor (", reach == nullptr ? std::string("before the first, ") : "between " + excerpt(reach->name) +
              " and ", excerpt(e->name), "); expected the tensors to fill it, each starting where the one before ends");
    if (reach == nullptr || e->end > reach->end) reach = e;
  }
  const uint64_t end = reach == nullptr ? 0 : reach->end;
  QKV_CHECK(end == data_size, quoted_path(file), ": ", data_size - end, " bytes follow the ",
            reach == nullptr ? std::string("header, which lists no tensor data") : "last tensor, " + excerpt(reach->name),
            " (the data buffer is ", data_size, " bytes, its tensors end at ", end, "); expected the file to end ",
            "with its last tensor (a damaged or appended-to file?)");
}

// --- element conversion ---------------------------------------------------------------------

// n elements of the entry's dtype at src, as float32 into dst.
void decode(const Entry& e, const unsigned char* src, float* dst, int64_t n) {
  switch (e.dtype->dtype) {
    case Dtype::F32:
      if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i)
          dst[i] = std::bit_cast<float>(static_cast<uint32_t>(load_le(src + 4 * i, 4)));
      }
      break;
    case Dtype::F16:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = f16_to_f32(static_cast<uint16_t>(load_le(src + 2 * i, 2)));
      break;
    case Dtype::BF16:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = bf16_to_f32(static_cast<uint16_t>(load_le(src + 2 * i, 2)));
      break;
    case Dtype::F64:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = f64_to_f32(std::bit_cast<double>(load_le(src + 8 * i, 8)));
      break;
    case Dtype::Int:
    case Dtype::UInt:
    case Dtype::Unsupported:
      fail("internal error: decoding dtype ", e.dtype->name, " as float32");
  }
}

}  // namespace

// --- conversions ------------------------------------------------------------------------------

float f16_to_f32(uint16_t h) { return f16_to_float(h); }

float bf16_to_f32(uint16_t bits) { return bf16_to_float(bits); }

float f64_to_f32(double v) {
  // Converting a finite double beyond the float range is undefined behaviour in C++; IEEE
  // round-to-nearest-even gives FLT_MAX below the midpoint 2^128 - 2^103 and infinity from it on.
  constexpr double kMidpoint = 0x1.ffffffp127;
  if (std::isfinite(v) && std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
    float big = std::fabs(v) >= kMidpoint ? std::numeric_limits<float>::infinity()
                                          : std::numeric_limits<float>::max();
    return v < 0 ? -big : big;
  }
  return static_cast<float>(v);
}

// --- TensorFile -------------------------------------------------------------------------------

const Tensor& TensorFile::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    fail_missing(path, name, names);
  }
  return it->second;
}

// --- reading ----------------------------------------------------------------------------------

namespace {

// A file's header, checked against its size: the metadata and every entry, in data-offset order.
struct Layout {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;   // sorted by data offsets
  const unsigned char* data = nullptr;  // the data buffer
};

Layout parse_layout(const unsigned char* raw, uint64_t size, const std::string& file, bool integers = false) {
  QKV_CHECK(size >= 8, quoted_path(file), ": file is ", size, " bytes, too short for a safetensors file ",
            "(expected at least 8 bytes: the header length)");
  QKV_CHECK(std::memcmp(raw, "GGUF", 4) != 0, quoted_path(file), " is a GGUF file (llama.cpp's format, its first ",
            "bytes \"GGUF\"), not safetensors: give the GGUF file itself (--weights FILE.gguf), not as a folder's ",
            "model.safetensors");
  const uint64_t header_len = load_le(raw, 8);
  QKV_CHECK(header_len <= size - 8, quoted_path(file), ": header length is ", header_len,
            " bytes but only ", size - 8, " bytes follow the 8-byte length (truncated file?)");
  Layout out;
  const char* header_begin = reinterpret_cast<const char*>(raw) + 8;
  const json header = parse_header(header_begin, header_begin + header_len, file);
  out.data = raw + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  try {
    out.entries.reserve(header.size());
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        out.metadata = parse_metadata(it.value(), file);
      } else {
        out.entries.push_back(parse_entry(it.key(), it.value(), data_size, file, integers));
      }
    }
  } catch (const json::exception& e) {
    // Not expected (every access above is type-checked first), but never let one escape.
    fail(quoted_path(file), ": malformed header: ", excerpt(e.what(), 200));
  }
  std::vector<const Entry*> order;
  for (const Entry& e : out.entries) order.push_back(&e);
  check_layout(order, data_size, file);
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  return out;
}

Tensor decoded(const Entry& e, const unsigned char* data) {
  Tensor t = Tensor::empty(e.shape);
  decode(e, data + e.begin, t.data(), numel_of(e.shape));
  t.set_name(e.name);
  return t;
}

// The entry's elements at src as int64: integers sign- or zero-extended (a U64 beyond int64's
// largest refused), floats only where whole and within int64 (F64 read as doubles, not rounded to
// float32 first).
IntegerTensor integer_values(const Entry& e, const unsigned char* src, const std::string& file) {
  IntegerTensor t;
  t.shape = e.shape;
  const int64_t n = numel_of(e.shape);
  t.values.resize(static_cast<size_t>(n));
  const int bytes = static_cast<int>(e.dtype->size);
  auto element = [&](int64_t i) { return src + static_cast<uint64_t>(i * bytes); };
  auto whole = [&](int64_t i, double v) {
    QKV_CHECK(std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.2e18, quoted_path(file), ": tensor ",
              excerpt(e.name), " element ", i, " is ", v, "; expected a whole number within int64's range");
    t.values[static_cast<size_t>(i)] = static_cast<int64_t>(v);
  };
  switch (e.dtype->dtype) {
    case Dtype::Int: {
      const int shift = 64 - 8 * bytes;  // sign extension: the value's top bit moved to bit 63 and back
      for (int64_t i = 0; i < n; ++i)
        t.values[static_cast<size_t>(i)] = static_cast<int64_t>(load_le(element(i), bytes) << shift) >> shift;
      break;
    }
    case Dtype::UInt:
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t u = load_le(element(i), bytes);
        QKV_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), quoted_path(file), ": tensor ",
                  excerpt(e.name), " element ", i, " is ", u, ", beyond int64's largest");
        t.values[static_cast<size_t>(i)] = static_cast<int64_t>(u);
      }
      break;
    case Dtype::F64:
      for (int64_t i = 0; i < n; ++i) whole(i, std::bit_cast<double>(load_le(element(i), 8)));
      break;
    default: {  // F32, F16, BF16: exact in float32
      std::vector<float> f(static_cast<size_t>(n));
      decode(e, src, f.data(), n);
      for (int64_t i = 0; i < n; ++i) whole(i, f[static_cast<size_t>(i)]);
    }
  }
  return t;
}

}  // namespace

TensorFile parse_safetensors(const std::string& bytes, const std::string& file) {
  const Layout layout = parse_layout(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), file);
  TensorFile out;
  out.path = file;
  out.metadata = layout.metadata;
  for (const Entry& e : layout.entries) {
    out.stored_dtypes[e.name] = e.dtype->name;
    out.names.push_back(e.name);
    out.tensors.emplace(e.name, decoded(e, layout.data));
  }
  return out;
}

TensorFile load_safetensors(const std::string& path) {
  return parse_safetensors(read_file(path), path);
}

std::map<std::string, IntegerTensor> load_safetensors_integers(const std::string& path,
                                                               const std::vector<std::string>& names) {
  const std::string bytes = read_file(path);
  const Layout layout = parse_layout(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), path, true);
  std::vector<std::string> all;
  for (const Entry& e : layout.entries) all.push_back(e.name);
  std::map<std::string, IntegerTensor> out;
  for (const std::string& name : names) {
    const auto it = std::find_if(layout.entries.begin(), layout.entries.end(),
                                 [&](const Entry& e) { return e.name == name; });
    if (it == layout.entries.end()) fail_missing(path, name, all);
    out.emplace(name, integer_values(*it, layout.data + it->begin, path));
  }
  return out;
}

// --- MappedSafetensors ------------------------------------------------------------------------

struct MappedSafetensors::Impl {
  std::string path;
  std::unique_ptr<MappedFile> file;  // the whole file, mapped read-only (or read whole)
  Layout layout;
  std::vector<std::string> names;
  std::map<std::string, size_t> index;  // name -> entry

  const Entry& entry(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end())
      fail_missing(path, name, names);
    return layout.entries[it->second];
  }
};

MappedSafetensors::MappedSafetensors(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.file = std::make_unique<MappedFile>(path);
  m.layout = parse_layout(m.file->data(), m.file->size(), path);
  for (size_t i = 0; i < m.layout.entries.size(); ++i) {
    m.names.push_back(m.layout.entries[i].name);
    m.index.emplace(m.layout.entries[i].name, i);
  }
}

MappedSafetensors::~MappedSafetensors() = default;

const std::string& MappedSafetensors::path() const { return impl_->path; }
const std::vector<std::string>& MappedSafetensors::names() const { return impl_->names; }
const std::map<std::string, std::string>& MappedSafetensors::metadata() const { return impl_->layout.metadata; }
bool MappedSafetensors::contains(const std::string& name) const { return impl_->index.count(name) != 0; }
const Shape& MappedSafetensors::shape(const std::string& name) const { return impl_->entry(name).shape; }
std::string MappedSafetensors::stored_dtype(const std::string& name) const { return impl_->entry(name).dtype->name; }

Tensor MappedSafetensors::read(const std::string& name) const {
  Tensor t = Tensor::empty(shape(name));
  read_into(name, t.data());
  t.set_name(name);
  return t;
}

void MappedSafetensors::read_into(const std::string& name, float* out) const {
  read_range_into(name, 0, numel_of(impl_->entry(name).shape), out);
}

void MappedSafetensors::read_range_into(const std::string& name, int64_t first, int64_t count, float* out) const {
  const Impl& m = *impl_;
  const Entry& e = m.entry(name);
  const int64_t n = numel_of(e.shape);
  QKV_CHECK(first >= 0 && count >= 0 && first <= n && count <= n - first, "elements [", first, ", ", first, " + ",
            count, ") of ", excerpt(name), " in ", excerpt(m.path), ": expected a range within its ", n, " elements");
  const auto size = static_cast<int64_t>(e.dtype->size);
  const unsigned char* data = m.layout.data + e.begin + static_cast<uint64_t>(first * size);
  if (!m.file->mapped()) {
    decode(e, data, out, count);
    return;
  }
  // In pieces of about 8 MiB, each piece's pages dropped from this process's memory once decoded
  // (whole pages: a neighbour's page dropped too comes back from the page cache when it is read),
  // so that a tensor costs its float32 copy and not its bytes in the file as well.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const int64_t piece = std::max<int64_t>(1, (int64_t{8} << 20) / size);
  for (int64_t i = 0; i < count; i += piece) {
    const int64_t k = std::min(piece, count - i);
    const unsigned char* src = data + static_cast<uint64_t>(i * size);
    prefault_pages(out + i, static_cast<size_t>(k) * sizeof(float));  // written whole: mapped in one call
    decode(e, src, out + i, k);
    const auto lo = reinterpret_cast<uintptr_t>(src) & ~(page - 1);
    const auto hi = reinterpret_cast<uintptr_t>(src + k * size);
    ::madvise(reinterpret_cast<void*>(lo), static_cast<size_t>(hi - lo), MADV_DONTNEED);
  }
}

void MappedSafetensors::read_bf16_into(const std::string& name, uint16_t* out) const {
  const Impl& m = *impl_;
  const Entry& e = m.entry(name);
  const int64_t n = numel_of(e.shape);
  const unsigned char* data = m.layout.data;
  if (std::string_view(e.dtype->name) == "BF16" && std::endian::native == std::endian::little) {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const int64_t piece = int64_t{4} << 20;  // elements: 8 MiB of the file at a time
    for (int64_t i = 0; i < n; i += piece) {
      const int64_t k = std::min(piece, n - i);
      const unsigned char* src = data + e.begin + static_cast<uint64_t>(i * 2);
      std::memcpy(out + i, src, static_cast<size_t>(k) * 2);
      if (m.file->mapped()) {  // the pages copied leave this process (the page cache keeps them)
        const auto first = reinterpret_cast<uintptr_t>(src) & ~(page - 1);
        const auto last = reinterpret_cast<uintptr_t>(src + k * 2);
        ::madvise(reinterpret_cast<void*>(first), static_cast<size_t>(last - first), MADV_DONTNEED);
      }
    }
    return;
  }
  // Other dtypes: decoded to float32 a piece at a time, then rounded to nearest even.
  std::vector<float> buffer(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 20)));
  const int64_t size = static_cast<int64_t>(e.dtype->size);
  for (int64_t i = 0; i < n; i += static_cast<int64_t>(buffer.size())) {
    const int64_t k = std::min(static_cast<int64_t>(buffer.size()), n - i);
    decode(e, data + e.begin + static_cast<uint64_t>(i * size), buffer.data(), k);
    floats_to_bf16(buffer.data(), out + i, static_cast<size_t>(k));
  }
}

// --- writing ----------------------------------------------------------------------------------

std::string serialize_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                                  const std::set<std::string>& bf16) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    QKV_CHECK(!name.empty(), "save_safetensors: a tensor ", shape_str(t.shape()),
              " has an empty name");
    QKV_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot "
              "name a tensor");
    QKV_CHECK(seen.insert(name).second, "save_safetensors: the tensor name ", excerpt(name),
              " is given more than once");
    QKV_CHECK(t.defined(), "save_safetensors: the tensor ", excerpt(name), " is undefined (an absent tensor; "
              "safetensors has no way to say so: leave it out)");
  }

  for (const std::string& name : bf16)
    QKV_CHECK(seen.count(name) != 0, "save_safetensors: ", excerpt(name), " is to be written as BF16 but is not among the tensors");
  auto element_bytes = [&](const std::string& name) -> uint64_t { return bf16.count(name) ? 2 : 4; };

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * element_bytes(name);
    header[name] = {{"dtype", bf16.count(name) ? "BF16" : "F32"},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("save_safetensors: a tensor name or metadata string is not valid UTF-8: ", excerpt(e.what(), 200));
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string out(8 + header_text.size() + offset, '\0');
  store_le(out.data(), header_text.size(), 8);
  std::memcpy(out.data() + 8, header_text.data(), header_text.size());
  char* dst = out.data() + 8 + header_text.size();
  for (const auto& [name, t] : tensors) {
    const Tensor c = t.contiguous();
    const int64_t n = c.numel();
    if (n == 0) continue;
    if (bf16.count(name)) {
      for (int64_t i = 0; i < n; ++i) store_le(dst + 2 * i, float_to_bf16(c.data()[i]), 2);
      dst += n * 2;
      continue;
    }
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(dst, c.data(), static_cast<size_t>(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) store_le(dst + 4 * i, std::bit_cast<uint32_t>(c.data()[i]), 4);
    }
    dst += n * 4;
  }
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, const std::set<std::string>& bf16) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata, bf16));
}

}  // namespace qkv
