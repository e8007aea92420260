// The GGUF reader (io/gguf.h) on files written here byte by byte from the format's description:
// metadata of every type read back, tensors' shapes in PyTorch's order and their data dequantized,
// any alignment; and every hostile header refused naming the field before anything large is made -
// each prefix of a file (truncation anywhere), a tensor past the end, unknown value and tensor
// types, a count of 2^62, a string of 2^40 bytes, duplicate keys and tensors, rows that are not
// whole blocks, offsets off the alignment, versions 1 and big-endian.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/io/gguf.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;

// A GGUF file, written field by field.
class Writer {
 public:
  Writer& raw(const std::string& s) {
    out_ += s;
    return *this;
  }
  Writer& u(uint64_t v, int bytes) {  // 1 to 8 bytes, little-endian
    EXPECT_TRUE(bytes >= 1 && bytes <= 8) << bytes;
    for (int k = 0; k < bytes && k < 8; ++k) out_ += static_cast<char>((v >> (8 * k)) & 0xFF);
    return *this;
  }
  Writer& str(const std::string& s) { return u(s.size(), 8).raw(s); }
  Writer& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return raw("GGUF").u(version, 4).u(tensors, 8).u(kvs, 8);
  }
  Writer& kv(const std::string& key, GgufType t) { return str(key).u(static_cast<uint32_t>(t), 4); }
  Writer& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u(ne.size(), 4);
    for (uint64_t n : ne) u(n, 8);
    return u(type, 4).u(offset, 8);
  }
  Writer& pad(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_ += '\0';
    return *this;
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// A small model-like file: metadata of every type, an F32 (2, 3) tensor and a Q8_0 (2, 32) one,
// aligned to `alignment` (32: GGUF's default, unsaid).
std::string sample(uint32_t alignment) {
  Writer w;
  const bool say_alignment = alignment != 32;
  w.header(2, 14 + (say_alignment ? 1 : 0));
  w.kv("general.architecture", GgufType::kString).str("qwen3");
  w.kv("u8", GgufType::kU8).u(200, 1);
  w.kv("i8", GgufType::kI8).u(0xFE, 1);  // -2
  w.kv("u16", GgufType::kU16).u(65535, 2);
  w.kv("i16", GgufType::kI16).u(0x8000, 2);  // -32768
  w.kv("qwen3.block_count", GgufType::kU32).u(28, 4);
  w.kv("i32", GgufType::kI32).u(0xFFFFFFFF, 4);  // -1
  w.kv("f32", GgufType::kF32).u(std::bit_cast<uint32_t>(1e-6f), 4);
  w.kv("bool", GgufType::kBool).u(1, 1);
  w.kv("u64", GgufType::kU64).u(uint64_t{1} << 40, 8);
  w.kv("i64", GgufType::kI64).u(static_cast<uint64_t>(-5), 8);
  w.kv("f64", GgufType::kF64).u(std::bit_cast<uint64_t>(1000000.0), 8);
  w.kv("tokenizer.ggml.tokens", GgufType::kArray).u(static_cast<uint32_t>(GgufType::kString), 4).u(3, 8);
  w.str("a").str("").str("<|im_end|>");
  w.kv("tokenizer.ggml.token_type", GgufType::kArray).u(static_cast<uint32_t>(GgufType::kI32), 4).u(3, 8);
  w.u(1, 4).u(3, 4).u(static_cast<uint32_t>(-1), 4);
  if (say_alignment) w.kv("general.alignment", GgufType::kU32).u(alignment, 4);
  const uint64_t second = (24 + alignment - 1) / alignment * alignment;  // after 24 bytes of F32
  w.tensor("token_embd.weight", {3, 2}, 0, 0);
  w.tensor("blk.0.attn_q.weight", {32, 2}, 8, second);
  w.pad(alignment);
  w.raw(testing_support::f32_bytes({1, 2, 3, 4, 5, 6})).pad(alignment);
  for (int row = 0; row < 2; ++row) {  // Q8_0 rows: d = 0.5 (row 0) or 2 (row 1), q = 0..31
    w.u(row == 0 ? 0x3800 : 0x4000, 2);
    for (int j = 0; j < 32; ++j) w.u(static_cast<uint64_t>(j - 16) & 0xFF, 1);
  }
  return w.bytes();
}

TEST(Gguf, ReadsMetadataOfEveryTypeAndTensorsAtAnyAlignment) {
  for (uint32_t alignment : {32u, 64u, 1u, 4096u}) {
    const GgufFile f = GgufFile::parse(sample(alignment), "s.gguf");
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.string("general.architecture"), "qwen3");
    EXPECT_EQ(f.unsigned_int("qwen3.block_count"), 28u);
    EXPECT_EQ(f.unsigned_int("u8"), 200u);
    EXPECT_EQ(f.value("i8").i, -2);
    EXPECT_EQ(f.unsigned_int("u16"), 65535u);
    EXPECT_EQ(f.value("i16").i, -32768);
    EXPECT_EQ(f.value("i32").i, -1);
    EXPECT_EQ(f.number("f32"), static_cast<double>(1e-6f));
    EXPECT_TRUE(f.boolean("bool"));
    EXPECT_EQ(f.unsigned_int("u64"), uint64_t{1} << 40);
    EXPECT_EQ(f.number("i64"), -5.0);
    EXPECT_EQ(f.number("f64"), 1e6);
    EXPECT_EQ(f.strings("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "", "<|im_end|>"}));
    EXPECT_EQ(f.ints("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 3, -1}));
    ASSERT_EQ(f.tensors().size(), 2u);
    const GgufTensor& e = f.tensor("token_embd.weight");
    EXPECT_EQ(e.shape, (Shape{2, 3}));  // ne (3, 2) reversed
    EXPECT_EQ(std::string(e.type->name), "F32");
    std::vector<float> y(6);
    f.read_floats("token_embd.weight", y.data());
    EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4, 5, 6}));
    const GgufTensor& q = f.tensor("blk.0.attn_q.weight");
    EXPECT_EQ(q.shape, (Shape{2, 32}));
    EXPECT_EQ(q.bytes, 68);
    std::vector<float> z(64);
    f.read_floats("blk.0.attn_q.weight", z.data());
    EXPECT_EQ(z[0], -8.0f);   // (0 - 16) 0.5
    EXPECT_EQ(z[31], 7.5f);   // 15 x 0.5
    EXPECT_EQ(z[32], -32.0f); // (0 - 16) x 2
    // typed accessors name the key and both types
    EXPECT_THAT(error_of([&] { f.string("u8"); }), HasSubstr("'s.gguf': metadata 'u8' is u8; expected a string"));
    EXPECT_THAT(error_of([&] { f.unsigned_int("i32"); }), HasSubstr("metadata 'i32' is -1; expected a count"));
    EXPECT_THAT(error_of([&] { f.floats("tokenizer.ggml.tokens"); }),
                HasSubstr("is an array of string; expected an array of floats"));
    EXPECT_THAT(error_of([&] { f.string("general.name"); }), HasSubstr("'s.gguf' has no metadata 'general.name'"));
    EXPECT_THAT(error_of([&] { f.tensor("output.weight"); }), HasSubstr("has no tensor 'output.weight'"));
    // pages given back by range (nothing to give back in memory), metadata forgotten once read
    EXPECT_NO_THROW(f.release("blk.0.attn_q.weight", 0, 34));
    EXPECT_THAT(error_of([&] { f.release("blk.0.attn_q.weight", 34, 69); }),
                HasSubstr("bytes [34, 69) of tensor 'blk.0.attn_q.weight' given back; it has 68"));
    GgufFile g = GgufFile::parse(sample(alignment), "s.gguf");
    g.drop("tokenizer.ggml.tokens");
    g.drop("no such key");
    EXPECT_FALSE(g.has("tokenizer.ggml.tokens"));
    EXPECT_TRUE(g.has("tokenizer.ggml.token_type"));
  }
}

TEST(Gguf, AFileOnDiskIsMappedAndReadTheSame) {
  const std::string dir = testing_support::temp_dir("qkv_gguf_");
  const std::string path = dir + "/m.gguf";
  std::ofstream(path, std::ios::binary) << sample(32);
  const GgufFile f(path);
  std::vector<float> y(6);
  f.read_floats("token_embd.weight", y.data());
  EXPECT_EQ(y[5], 6.0f);
  EXPECT_THAT(error_of([&] { GgufFile g(dir + "/missing.gguf"); }), HasSubstr("missing.gguf"));
  std::filesystem::remove_all(dir);
}

TEST(Gguf, EveryTruncationIsRefused) {
  const std::string whole = sample(32);
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string e = error_of([&] { GgufFile::parse(whole.substr(0, n), "t.gguf"); });
    ASSERT_NE(e, "(no error)") << n << " of " << whole.size() << " bytes";
    EXPECT_THAT(e, HasSubstr("'t.gguf'")) << n;
  }
}

TEST(Gguf, HostileHeadersAreRefusedNamingTheField) {
  auto refused = [](const std::string& bytes) { return error_of([&] { GgufFile::parse(bytes, "h.gguf"); }); };
  EXPECT_THAT(refused("GGML" + std::string(20, '\0')), HasSubstr("is not a GGUF file"));
  EXPECT_THAT(refused(Writer().header(0, 0, 1).bytes()), HasSubstr("version 1; qkv reads versions 2 and 3"));
  EXPECT_THAT(refused(Writer().raw("GGUF").u(0x03000000, 4).u(0, 8).u(0, 8).bytes()), HasSubstr("a big-endian GGUF file"));
  EXPECT_EQ(refused(Writer().header(0, 0, 2).bytes()), "(no error)");  // version 2: the same layout
  // counts and lengths beyond the file, before anything is allocated for them
  EXPECT_THAT(refused(Writer().header(uint64_t{1} << 62, 0).bytes()), HasSubstr("the tensor count 4611686018427387904"));
  EXPECT_THAT(refused(Writer().header(0, uint64_t{1} << 62).bytes()), HasSubstr("the metadata count"));
  EXPECT_THAT(refused(Writer().header(0, 1).u(uint64_t{1} << 40, 8).raw(std::string(16, 'k')).bytes()),
              HasSubstr("metadata entry 0: its key is 1099511627776 bytes long but only 16 are left"));
  EXPECT_THAT(refused(Writer().header(0, 1).u(1, 8).raw("k").bytes()), HasSubstr("the metadata count 1 is more than"));
  EXPECT_THAT(refused(Writer().header(0, 1).kv("k", GgufType::kString).u(uint64_t{1} << 40, 8).bytes()),
              HasSubstr("metadata entry 0 ('k'): a string is 1099511627776 bytes long"));
  EXPECT_THAT(refused(Writer().header(0, 1).kv("k", GgufType::kArray).u(4, 4).u(uint64_t{1} << 62, 8).u(0, 8).bytes()),
              HasSubstr("an array of 4611686018427387904 u32 values needs at least"));
  EXPECT_THAT(refused(Writer().header(0, 1).kv("k", static_cast<GgufType>(13)).bytes()),
              HasSubstr("its type is 13; GGUF's value types are 0 .. 12"));
  EXPECT_THAT(refused(Writer().header(0, 1).kv("k", GgufType::kBool).u(2, 1).bytes()), HasSubstr("a bool is 2"));
  EXPECT_THAT(refused(Writer().header(0, 1).kv("k", GgufType::kArray).u(9, 4).u(1, 8).bytes()),
              HasSubstr("an array of arrays"));
  EXPECT_THAT(refused(Writer().header(0, 1).kv("k", GgufType::kArray).u(10, 4).u(1, 8).u(~uint64_t{0}, 8).bytes()),
              HasSubstr("element 0 of the array is 18446744073709551615"));
  EXPECT_THAT(refused(Writer().header(0, 2).kv("k", GgufType::kU8).u(1, 1).kv("k", GgufType::kU8).u(2, 1).bytes()),
              HasSubstr("metadata entry 1 ('k'): the key is in the file twice"));
  for (uint64_t a : {0, 3, 1 << 21})
    EXPECT_THAT(refused(Writer().header(0, 1).kv("general.alignment", GgufType::kU32).u(a, 4).bytes()),
                HasSubstr("general.alignment: is " + std::to_string(a) + "; expected a power of two"));
  EXPECT_THAT(refused(Writer().header(0, 1).kv("general.alignment", GgufType::kU64).u(32, 8).bytes()),
              HasSubstr("general.alignment: is u64; expected u32"));
  // tensors
  auto one = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, uint64_t data) {
    Writer w;
    w.header(1, 0).tensor("w", std::move(ne), type, offset).pad(32);
    return w.raw(std::string(static_cast<size_t>(data), '\0')).bytes();
  };
  EXPECT_EQ(refused(one({32, 2}, 8, 0, 68)), "(no error)");
  EXPECT_THAT(refused(one({32, 2}, 8, 0, 67)), HasSubstr("tensor 0 ('w'): its 68 bytes at offset 0 go past the end"));
  EXPECT_THAT(refused(one({32, 2}, 8, 64, 100)), HasSubstr("go past the end of the data (100 bytes"));
  EXPECT_THAT(refused(one({32, 2}, 8, 16, 200)), HasSubstr("offset 16 is not a multiple of the alignment 32"));
  EXPECT_THAT(refused(one({33, 2}, 8, 0, 200)), HasSubstr("rows of 33 values are not whole Q8_0 blocks of 32"));
  EXPECT_THAT(refused(one({32, 2}, 99, 0, 200)), HasSubstr("tensor type 99 is not one of ggml's types"));
  EXPECT_THAT(refused(one({}, 0, 0, 0)), HasSubstr("has 0 dimensions; ggml's tensors have 1 to 4"));
  EXPECT_THAT(refused(one({1, 1, 1, 1, 1}, 0, 0, 4)), HasSubstr("has 5 dimensions"));
  EXPECT_THAT(refused(one({4, 0}, 0, 0, 0)), HasSubstr("dimension 1 is 0; expected 1 .. 2^63 - 1"));
  EXPECT_THAT(refused(one({uint64_t{1} << 62, uint64_t{1} << 62}, 0, 0, 0)), HasSubstr("tensor 0 ('w')"));
  Writer twice;
  twice.header(2, 0).tensor("w", {1}, 0, 0).tensor("w", {1}, 0, 32).pad(32).raw(std::string(64, '\0'));
  EXPECT_THAT(refused(twice.bytes()), HasSubstr("tensor 1 ('w'): the name is in the file twice"));
  // a known type qkv does not read: the file opens, the tensor is refused when read
  const GgufFile q3 = GgufFile::parse(one({256}, 11, 0, 110), "q3.gguf");
  std::vector<float> y(256);
  EXPECT_THAT(error_of([&] { q3.read_floats("w", y.data()); }),
              HasSubstr("'q3.gguf': tensor 'w' is Q3_K; qkv reads F32, F16"));
}

}  // namespace
}  // namespace qkv
