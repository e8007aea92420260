// qkv/io/gguf.h - llama.cpp's GGUF files (versions 2 and 3, little-endian): the metadata, and the
// tensors memory-mapped, each with its name, shape, ggml type (core/quant_blocks.h) and bytes.
//
//   const GgufFile f("Qwen3-0.6B-Q8_0.gguf");
//   f.string("general.architecture")                 // "qwen3"
//   f.unsigned_int("qwen3.block_count")               // 28 (any integer type that holds it)
//   const GgufTensor& t = f.tensor("blk.0.attn_q.weight");
//   t.shape                                           // (2048, 1024): PyTorch's order, GGUF's ne reversed
//   t.type->name, t.data, t.bytes                     // "Q8_0", the mapped blocks, their size
//   f.read_floats("token_embd.weight", out)           // dequantized
//
// The layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; each metadata entry a
// key (u64 length + bytes), a u32 value type and the value (strings u64 length + bytes; arrays a
// u32 element type, u64 count, the elements); each tensor a name, u32 dimension count, u64 ne[n]
// (innermost first), u32 ggml type, u64 offset; then padding to general.alignment (32 unless said)
// and the tensors' data, each at its offset from there.
//
// Everything is checked against the file before anything is kept: counts, lengths and array sizes
// against the bytes left (a count of 2^62 or a string of 2^40 bytes is refused naming the field,
// never allocated), duplicate keys and tensor names, types ggml does not define, dimensions whose
// product overflows or whose rows are not whole blocks, offsets not aligned or past the end. An
// error names the file, the entry (its index and key or name) and what was expected.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/quant_blocks.h"
#include "qkv/core/tensor.h"

namespace qkv {

// GGUF's value types, as the file numbers them.
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12
};
const char* gguf_type_name(GgufType t);  // "u32", "string", "array", ...

// One metadata value: a scalar (in the member its type uses) or an array of one element type.
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType element = GgufType::kU8;  // arrays: their elements' type
  uint64_t u = 0;                    // unsigned integers and bools
  int64_t i = 0;                     // signed integers
  double f = 0;                      // floats
  std::string s;                     // strings
  std::vector<std::string> strings;  // arrays of strings
  std::vector<int64_t> ints;         // arrays of integers (unsigned ones above 2^63 - 1 are refused) and bools
  std::vector<double> floats;        // arrays of floats
};

struct GgufTensor {
  std::string name;
  Shape shape;                  // PyTorch's order: the file's ne reversed
  const QuantType* type = nullptr;
  uint64_t offset = 0;          // from the start of the data
  int64_t bytes = 0;
  const uint8_t* data = nullptr;
  int64_t numel() const;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // memory-mapped
  static GgufFile parse(std::string bytes, const std::string& name);  // from memory (tests, fuzzing)
  ~GgufFile();
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;

  const std::string& path() const;
  uint32_t version() const;
  int64_t alignment() const;

  // Metadata. Each accessor throws qkv::Error naming the key when it is missing or of another type.
  bool has(const std::string& key) const;
  const std::map<std::string, GgufValue>& metadata() const;
  const GgufValue& value(const std::string& key) const;
  std::string string(const std::string& key) const;
  uint64_t unsigned_int(const std::string& key) const;  // any integer type, not negative
  double number(const std::string& key) const;           // any integer or float type
  bool boolean(const std::string& key) const;
  const std::vector<std::string>& strings(const std::string& key) const;
  const std::vector<int64_t>& ints(const std::string& key) const;
  const std::vector<double>& floats(const std::string& key) const;  // arrays of f32 or f64

  // Tensors, in the file's order.
  const std::vector<GgufTensor>& tensors() const;
  bool contains(const std::string& name) const;
  const GgufTensor& tensor(const std::string& name) const;  // qkv::Error naming it otherwise
  // The tensor's values as floats (dequantized): out holds numel() floats.
  void read_floats(const std::string& name, float* out) const;
  // The tensor's mapped pages given back once it has been copied out (MappedFile::release): loading
  // a file into memory then holds about one copy of it, not two. With begin, end: the pages wholly
  // within bytes [begin, end) of its data, for a tensor copied out a piece at a time.
  void release(const std::string& name) const;
  void release(const std::string& name, int64_t begin, int64_t end) const;
  // A metadata entry forgotten once it has been read (its memory given back: a 151,936-token
  // vocabulary's tokenizer.ggml.tokens and .merges hold about 15 MB); nothing when it is absent.
  void drop(const std::string& key);

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What a GGUF file to write holds: metadata entries in order, and tensors whose bytes are written
// by `fill` straight into the file's buffer (quant_bytes(type, numel) of them).
struct GgufMetadata {
  std::string key;
  GgufValue value;
};
struct GgufTensorSource {
  std::string name;
  Shape shape;  // PyTorch's order (written reversed, as ne)
  const QuantType* type = nullptr;
  std::function<void(uint8_t* out)> fill;
};
// Scalars and arrays for GgufMetadata: u32, u64, f32, bool, string, arrays of strings and of i32.
GgufValue gguf_u32(uint64_t v);  // qkv::Error past 2^32 - 1
GgufValue gguf_u64(uint64_t v);
GgufValue gguf_f32(double v);
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_strings(std::vector<std::string> v);
GgufValue gguf_i32s(std::vector<int64_t> v);  // qkv::Error for a value outside int32
// The file's bytes, version 3, little-endian, general.alignment 32 (data and each tensor padded to
// it): what GgufFile reads back. Keys and tensor names must be unique (qkv::Error otherwise).
std::string serialize_gguf(const std::vector<GgufMetadata>& metadata, const std::vector<GgufTensorSource>& tensors);

}  // namespace qkv
