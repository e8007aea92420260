// GGUF's writer side. See include/qkv/io/gguf.h.
#include <cstring>
#include <limits>
#include <set>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/io/gguf.h"

namespace qkv {
namespace {

constexpr uint64_t kAlignment = 32;

uint64_t padded(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

class Bytes {
 public:
  explicit Bytes(std::string& out) : out_(out) {}
  void u(uint64_t v, int bytes) {
    for (int k = 0; k < bytes; ++k) out_.push_back(static_cast<char>((v >> (8 * k)) & 0xffu));
  }
  void string(const std::string& s) {
    u(s.size(), 8);
    out_ += s;
  }
  void f32(double v) {
    const float x = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    u(bits, 4);
  }

 private:
  std::string& out_;
};

void write_value(Bytes& b, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kU32: b.u(v.u, 4); break;
    case GgufType::kU64: b.u(v.u, 8); break;
    case GgufType::kBool: b.u(v.u, 1); break;
    case GgufType::kF32: b.f32(v.f); break;
    case GgufType::kString: b.string(v.s); break;
    case GgufType::kArray:
      b.u(static_cast<uint32_t>(v.element), 4);
      if (v.element == GgufType::kString) {
        b.u(v.strings.size(), 8);
        for (const std::string& s : v.strings) b.string(s);
      } else {
        b.u(v.ints.size(), 8);
        for (int64_t x : v.ints) b.u(static_cast<uint64_t>(x), 4);
      }
      break;
    default: fail("qkv's GGUF writer writes u32, u64, f32, bool, string and array values, not ", gguf_type_name(v.type));
  }
}

}  // namespace

GgufValue gguf_u64(uint64_t v) {
  GgufValue g;
  g.type = GgufType::kU64;
  g.u = v;
  return g;
}

GgufValue gguf_u32(uint64_t v) {
  QKV_CHECK(v <= std::numeric_limits<uint32_t>::max(), "a GGUF u32 holds at most 4294967295, not ", v);
  GgufValue g;
  g.type = GgufType::kU32;
  g.u = v;
  return g;
}
GgufValue gguf_f32(double v) {
  GgufValue g;
  g.type = GgufType::kF32;
  g.f = v;
  return g;
}
GgufValue gguf_bool(bool v) {
  GgufValue g;
  g.type = GgufType::kBool;
  g.u = v ? 1 : 0;
  return g;
}
GgufValue gguf_string(std::string v) {
  GgufValue g;
  g.type = GgufType::kString;
  g.s = std::move(v);
  return g;
}
GgufValue gguf_strings(std::vector<std::string> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.element = GgufType::kString;
  g.strings = std::move(v);
  return g;
}
GgufValue gguf_i32s(std::vector<int64_t> v) {
  for (int64_t x : v)
    QKV_CHECK(x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max(),
              "a GGUF i32 array holds values of int32, not ", x);
  GgufValue g;
  g.type = GgufType::kArray;
  g.element = GgufType::kI32;
  g.ints = std::move(v);
  return g;
}

std::string serialize_gguf(const std::vector<GgufMetadata>& metadata, const std::vector<GgufTensorSource>& tensors) {
  std::string out;
  Bytes b(out);
  out += "GGUF";
  b.u(3, 4);
  b.u(tensors.size(), 8);
  b.u(metadata.size(), 8);
  std::set<std::string> keys;
  for (const GgufMetadata& m : metadata) {
    QKV_CHECK(keys.insert(m.key).second, "GGUF metadata key ", excerpt(m.key), " is given twice");
    b.string(m.key);
    b.u(static_cast<uint32_t>(m.value.type), 4);
    write_value(b, m.value);
  }
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const GgufTensorSource& t : tensors) {
    QKV_CHECK(names.insert(t.name).second, "GGUF tensor ", excerpt(t.name), " is given twice");
    QKV_CHECK(t.type != nullptr && !t.shape.empty() && t.shape.size() <= 4, "GGUF tensor ", excerpt(t.name),
              " needs a type and 1 to 4 dimensions");
    const int64_t n = checked_product(t.shape, t.name.c_str());
    QKV_CHECK(t.shape.back() % t.type->block == 0, "GGUF tensor ", excerpt(t.name), "'s rows (", t.shape.back(),
              " values) are not whole ", t.type->name, " blocks of ", t.type->block);
    sizes.push_back(static_cast<uint64_t>(quant_bytes(*t.type, n, t.name)));
    b.string(t.name);
    b.u(t.shape.size(), 4);
    for (size_t d = t.shape.size(); d-- > 0;) b.u(static_cast<uint64_t>(t.shape[d]), 8);
    b.u(t.type->id, 4);
    b.u(offset, 8);
    offset = padded(offset + sizes.back());
  }
  const uint64_t data = padded(out.size());
  out.resize(data + offset, '\0');
  uint64_t at = data;
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].fill(reinterpret_cast<uint8_t*>(out.data() + at));
    at = padded(at + sizes[i]);
  }
  return out;
}

}  // namespace qkv
