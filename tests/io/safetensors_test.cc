// Tests for the safetensors reader/writer and the atomic file writes beneath it.
#include "qkv/io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string_view>

#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"
#include "test_support.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

// --- helpers ----------------------------------------------------------------------------------

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "qkv_safetensors_test_XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }
  // Every entry in the directory, to check that no temporary was left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

// Runs `f` and checks that it throws qkv::Error whose message contains every one of `parts`.
template <typename F>
testing::AssertionResult ThrowsErrorWith(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (std::string_view p : parts) {
      if (msg.find(p) == std::string::npos) {
        return testing::AssertionFailure()
               << "the error message\n  " << msg << "\ndoes not contain\n  " << p;
      }
    }
    return testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return testing::AssertionFailure() << "threw a non-qkv exception: " << e.what();
  }
  return testing::AssertionFailure() << "did not throw";
}

// A safetensors file from a header text and a data buffer, byte by byte.
std::string make_file(const std::string& header, const std::string& data) {
  return testing_support::le64(header.size()) + header + data;
}

template <typename T>
std::string le_bytes(const std::vector<T>& values) {
  std::string s;
  for (T v : values) {
    for (size_t i = 0; i < sizeof(T); ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  return s;
}

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Same shape and bit-identical elements (so NaN == NaN and -0 != +0).
testing::AssertionResult BitIdentical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    return testing::AssertionFailure() << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  std::vector<float> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::bit_cast<uint32_t>(x[i]) != std::bit_cast<uint32_t>(y[i]))
      return testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  }
  return testing::AssertionSuccess();
}

TensorFile parse(const std::string& bytes) { return parse_safetensors(bytes, "bad.safetensors"); }

// --- round trips --------------------------------------------------------------------------------

TEST(SafetensorsRoundTrip, RanksZeroToFourEmptyTensorsDottedNamesAndMetadataSurvive) {
  std::mt19937 rng(7);
  NamedTensors tensors = {
      {"heads.0.W_query.weight", Tensor::from({3, 2}, random_values(6, rng))},
      {"scalar", Tensor::scalar(-1.25f)},
      {"bias", Tensor::from({5}, random_values(5, rng))},
      {"empty", Tensor::empty({0})},
      {"empty.2d", Tensor::empty({2, 0, 3})},
      {"cube", Tensor::from({2, 3, 4}, random_values(24, rng))},
      {"rank4", Tensor::from({2, 1, 3, 2}, random_values(12, rng))},
  };
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "d_in=3 \"quoted\""}};
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, tensors, metadata);

  TensorFile f = load_safetensors(path);
  EXPECT_EQ(f.path, path);
  EXPECT_EQ(f.metadata, metadata);
  ASSERT_EQ(f.names.size(), tensors.size());
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    SCOPED_TRACE(name);
    const Tensor& back = f.get(name);
    EXPECT_TRUE(BitIdentical(back, t));
    EXPECT_EQ(back.name(), name);
    EXPECT_TRUE(back.is_contiguous());
  }
  EXPECT_EQ(f.get("scalar").dim(), 0);
  EXPECT_EQ(f.get("scalar").item(), -1.25f);
  EXPECT_EQ(f.get("empty.2d").shape(), (Shape{2, 0, 3}));
  // Names come in data order, which is the order they were given in (a zero-size tensor sits at
  // the offset where it was written, before the tensor that starts there too).
  EXPECT_EQ(f.names.front(), "heads.0.W_query.weight");
  EXPECT_EQ(f.names.back(), "rank4");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsRoundTrip, NamesAreListedInTheOrderOfTheirDataOffsets) {
  NamedTensors tensors = {{"z", Tensor::from({1}, {1})}, {"a", Tensor::from({2}, {2, 3})},
                          {"m", Tensor::from({1}, {4})}};
  TensorFile f = parse_safetensors(serialize_safetensors(tensors), "x.safetensors");
  EXPECT_EQ(f.names, (std::vector<std::string>{"z", "a", "m"}));
}

TEST(SafetensorsRoundTrip, NonContiguousTensorsAreWrittenInLogicalOrder) {
  Tensor t = Tensor::from({2, 3}, {1, 2, 3, 4, 5, 6}).transpose(0, 1);  // (3, 2), a view
  ASSERT_FALSE(t.is_contiguous());
  TensorFile f = parse(serialize_safetensors({{"t", t}}));
  EXPECT_EQ(f.get("t").shape(), (Shape{3, 2}));
  EXPECT_EQ(f.get("t").to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(SafetensorsRoundTrip, SpecialFloat32ValuesSurviveBitForBit) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor t = Tensor::from({6}, {inf, -inf, std::numeric_limits<float>::quiet_NaN(), -0.0f,
                                std::numeric_limits<float>::denorm_min(),
                                std::numeric_limits<float>::max()});
  EXPECT_TRUE(BitIdentical(parse(serialize_safetensors({{"t", t}})).get("t"), t));
}

TEST(SafetensorsRoundTrip, WrittenLayoutIsF32WithAHeaderPaddedToAMultipleOfEight) {
  std::string bytes = serialize_safetensors({{"w", Tensor::from({2}, {1.0f, -2.0f})}},
                                            {{"k", "v"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 8);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"k\":\"v\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                         "\"data_offsets\":[0,8]}}", 0), 0u) << header;
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  EXPECT_EQ(bytes.substr(8 + n), testing_support::f32_bytes({1.0f, -2.0f}));
}

TEST(SafetensorsRoundTrip, AFileWithNoTensorsAndNoMetadataIsValid) {
  TensorFile f = parse(serialize_safetensors({}));
  EXPECT_TRUE(f.names.empty());
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_TRUE(ThrowsErrorWith([&] { f.get("x"); }, {"has no tensor 'x'", "no tensors"}));
}

TEST(SafetensorsRoundTrip, GetNamesTheFileTheMissingTensorAndTheOnesThere) {
  TensorFile f = parse_safetensors(
      serialize_safetensors({{"a", Tensor::scalar(1)}, {"b", Tensor::scalar(2)},
                             {"c", Tensor::scalar(3)}}),
      "file.safetensors");
  EXPECT_TRUE(f.contains("b"));
  EXPECT_FALSE(f.contains("input"));
  EXPECT_TRUE(ThrowsErrorWith([&] { f.get("input"); },
                              {"'file.safetensors' has no tensor 'input' (it has: 'a', 'b', 'c')"}));
}

TEST(SafetensorsRoundTrip, AnUndefinedTensorIsRefusedByNameWhileAnEmptyOneIsWritten) {
  EXPECT_TRUE(ThrowsErrorWith([] { serialize_safetensors({{"a", Tensor::scalar(1)}, {"bias", Tensor()}}); },
                              {"'bias' is undefined", "leave it out"}));
  TensorFile f = parse(serialize_safetensors({{"e", Tensor::zeros({2, 0})}}));
  EXPECT_EQ(f.get("e").shape(), (Shape{2, 0}));
  EXPECT_TRUE(f.get("e").defined());
}

// --- other dtypes, built byte by byte -------------------------------------------------------

TEST(SafetensorsDtypes, F16IsConvertedExactlyIncludingSubnormalsInfinitiesAndNaN) {
  std::vector<uint16_t> bits = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400,
                                0x7C00, 0xFC00, 0x7E00, 0x8000, 0x3555, 0x8001};
  std::string header = R"({"h":{"dtype":"F16","shape":[2,6],"data_offsets":[0,24]}})";
  TensorFile f = parse(make_file(header, le_bytes(bits)));
  std::vector<float> v = f.get("h").to_vector();
  ASSERT_EQ(v.size(), 12u);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 65504.0f);
  EXPECT_EQ(v[3], std::ldexp(1.0f, -24));            // smallest subnormal
  EXPECT_EQ(v[4], std::ldexp(1023.0f, -24));         // largest subnormal
  EXPECT_EQ(v[5], std::ldexp(1.0f, -14));            // smallest normal
  EXPECT_EQ(v[6], inf);
  EXPECT_EQ(v[7], -inf);
  EXPECT_TRUE(std::isnan(v[8]));
  EXPECT_EQ(v[9], 0.0f);
  EXPECT_TRUE(std::signbit(v[9]));
  EXPECT_EQ(v[10], 0.333251953125f);                 // 0x3555, the f16 nearest 1/3
  EXPECT_EQ(v[11], -std::ldexp(1.0f, -24));
  EXPECT_EQ(f.get("h").shape(), (Shape{2, 6}));
}

TEST(SafetensorsDtypes, F16ConversionAgreesWithWideningEveryBitPattern) {
  // Every finite f16 is sign * man * 2^(exp-25) with the implicit bit for exp > 0.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint32_t exp = (b >> 10) & 0x1f, man = b & 0x3ff;
    const float got = f16_to_f32(static_cast<uint16_t>(b));
    if (exp == 0x1f) {
      ASSERT_TRUE(man ? std::isnan(got) : std::isinf(got)) << b;
      continue;
    }
    float want = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
                          : std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
    if (b & 0x8000) want = -want;
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << b;
  }
}

TEST(SafetensorsDtypes, BF16IsConvertedExactlyIncludingSubnormalsInfinitiesAndNaN) {
  std::vector<uint16_t> bits = {0x3F80, 0xC020, 0x477F, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x7F7F};
  std::string header = R"({"b":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]}})";
  std::vector<float> v = parse(make_file(header, le_bytes(bits))).get("b").to_vector();
  ASSERT_EQ(v.size(), 8u);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 65280.0f);
  EXPECT_EQ(v[3], std::ldexp(1.0f, -133));  // smallest bf16 subnormal
  EXPECT_EQ(v[4], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[5], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(v[6]));
  EXPECT_EQ(v[7], 0x1.fep127f);  // largest finite bf16
}

TEST(SafetensorsDtypes, F64IsRoundedToTheNearestFloat32) {
  const double inf = std::numeric_limits<double>::infinity();
  const double fmax = std::numeric_limits<float>::max();
  std::vector<double> values = {1.0,  -2.5, 65504.0, 0.1, 1e-45, 1e300, -1e300, inf,
                                std::numeric_limits<double>::quiet_NaN(), fmax,
                                0x1.fffffefffffffp127,  // above FLT_MAX, below the midpoint
                                0x1.ffffffp127,         // the midpoint: ties to even -> inf
                                std::numeric_limits<double>::denorm_min(), 1.0 + 0x1p-24};
  std::vector<uint64_t> bits;
  for (double d : values) bits.push_back(std::bit_cast<uint64_t>(d));
  std::string header = str(R"({"d":{"dtype":"F64","shape":[)", values.size(),
                           R"(],"data_offsets":[0,)", values.size() * 8, "]}}");
  std::vector<float> v = parse(make_file(header, le_bytes(bits))).get("d").to_vector();
  ASSERT_EQ(v.size(), values.size());
  const float finf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 65504.0f);
  EXPECT_EQ(v[3], 0.1f);
  EXPECT_EQ(v[4], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(v[5], finf);
  EXPECT_EQ(v[6], -finf);
  EXPECT_EQ(v[7], finf);
  EXPECT_TRUE(std::isnan(v[8]));
  EXPECT_EQ(v[9], std::numeric_limits<float>::max());
  EXPECT_EQ(v[10], std::numeric_limits<float>::max());
  EXPECT_EQ(v[11], finf);
  EXPECT_EQ(v[12], 0.0f);
  EXPECT_EQ(v[13], 1.0f);  // 1 + 2^-24 is a tie between 1 and 1 + 2^-23: even wins
}

TEST(SafetensorsDtypes, MixedDtypesInOneFileAreAllConverted) {
  std::string data = testing_support::f32_bytes({1.5f}) + le_bytes(std::vector<uint16_t>{0x3C00}) +
                     le_bytes(std::vector<uint16_t>{0x4000});
  std::string header = R"({"f":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                       R"("h":{"dtype":"F16","shape":[1],"data_offsets":[4,6]},)"
                       R"("b":{"dtype":"BF16","shape":[1,1],"data_offsets":[6,8]}})";
  TensorFile f = parse(make_file(header, data));
  EXPECT_EQ(f.get("f").item(), 1.5f);
  EXPECT_EQ(f.get("h").item(), 1.0f);
  EXPECT_EQ(f.get("b").item(), 2.0f);
  EXPECT_EQ(f.names, (std::vector<std::string>{"f", "h", "b"}));
}

// --- malformed files --------------------------------------------------------------------------

// A header with one tensor entry `w` given as raw JSON, over `data_bytes` bytes of data.
std::string one_entry(const std::string& entry, size_t data_bytes = 64) {
  return make_file(R"({"w":)" + entry + "}", std::string(data_bytes, '\0'));
}

TEST(SafetensorsMalformed, AFileShorterThanEightBytesIsRejected) {
  EXPECT_TRUE(ThrowsErrorWith([] { parse("abc"); }, {"'bad.safetensors'", "3 bytes", "too short"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(""); }, {"0 bytes", "at least 8"}));
}

TEST(SafetensorsMalformed, AHeaderLengthBeyondTheFileIsReportedAsTruncation) {
  EXPECT_TRUE(ThrowsErrorWith([] { parse(testing_support::le64(1000) + "{}"); },
                              {"'bad.safetensors'", "1000", "only 2 bytes", "truncated"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(testing_support::le64(~uint64_t{0}) + "{}"); }, {"truncated"}));
}

TEST(SafetensorsMalformed, AHeaderThatIsNotJsonOrNotAnObjectIsRejected) {
  EXPECT_TRUE(ThrowsErrorWith([] { parse(make_file("{not json", "")); },
                              {"'bad.safetensors'", "not valid JSON"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(make_file("", "")); }, {"not valid JSON"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(make_file("[1, 2]", "")); },
                              {"must be a JSON object", "got array"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(make_file("\"w\"", "")); }, {"got string"}));
}

TEST(SafetensorsMalformed, AKeyGivenTwiceIsRejected) {
  std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_TRUE(ThrowsErrorWith([&] { parse(make_file(header, std::string(8, '\0'))); },
                              {"'w'", "more than once"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]})")); },
      {"'dtype'", "more than once"}));
}

TEST(SafetensorsMalformed, AnEntryThatIsNotAnObjectNamesTheTensor) {
  EXPECT_TRUE(ThrowsErrorWith([] { parse(one_entry("5")); },
                              {"'bad.safetensors'", "tensor 'w'", "must be a JSON object", "number"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(one_entry("[]")); }, {"tensor 'w'", "array"}));
}

TEST(SafetensorsMalformed, MissingFieldsAreNamed) {
  EXPECT_TRUE(ThrowsErrorWith([] { parse(one_entry(R"({"shape":[1],"data_offsets":[0,4]})")); },
                              {"tensor 'w'", "no 'dtype'"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(one_entry(R"({"dtype":"F32","data_offsets":[0,4]})")); },
                              {"tensor 'w'", "no 'shape'"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(one_entry(R"({"dtype":"F32","shape":[1]})")); },
                              {"tensor 'w'", "no 'data_offsets'"}));
}

TEST(SafetensorsMalformed, FieldsOfTheWrongJsonTypeAreRejected) {
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "'dtype' must be a string", "number"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})")); },
      {"tensor 'w'", "'shape' must be an array", "string"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "dimension 0", "non-negative integer", "1.5"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1,"2"],"data_offsets":[0,8]})")); },
      {"tensor 'w'", "dimension 1", "\"2\""}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})")); },
      {"tensor 'w'", "'data_offsets' must be [begin, end]", "[0]"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1],"data_offsets":{"a":0}})")); },
      {"tensor 'w'", "'data_offsets' must be"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})")); },
      {"tensor 'w'", "'data_offsets' must be", "-4"}));
}

TEST(SafetensorsMalformed, NegativeAndAbsurdShapesAreRejected) {
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "non-negative", "-1"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "absurd"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "absurd"}));
  // A zero dimension does not excuse the others from overflowing.
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]})")); },
      {"tensor 'w'", "absurd"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "rank 9"}));
}

TEST(SafetensorsMalformed, UnknownAndUnsupportedDtypesAreNamedWithTheSupportedOnes) {
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"Q7","shape":[1],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "unknown dtype 'Q7'", "F32, F16, BF16, F64"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"I32","shape":[1],"data_offsets":[0,4]})")); },
      {"tensor 'w'", "unsupported dtype 'I32'", "F32, F16, BF16, F64", "token ids only"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})")); },
      {"unknown dtype 'f32'"}));
}

TEST(SafetensorsMalformed, OffsetsEndingBeforeTheyBeginAreRejected) {
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})")); },
      {"tensor 'w'", "end (4) is before begin (8)"}));
}

TEST(SafetensorsMalformed, OffsetsPastTheEndOfTheDataGiveBothNumbers) {
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[25],"data_offsets":[0,100]})", 64)); },
      {"tensor 'w'", "offsets past the end", "100", "64 bytes"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]})")); },
      {"tensor 'w'", "offsets past the end", "18446744073709551615"}));
}

TEST(SafetensorsMalformed, AByteLengthThatDoesNotMatchTheShapeIsRejected) {
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})")); },
      {"tensor 'w'", "(2, 3)", "needs 24 bytes", "hold 20 bytes"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F16","shape":[2,3],"data_offsets":[0,24]})")); },
      {"tensor 'w'", "F16 needs 12 bytes", "hold 24 bytes"}));
  EXPECT_TRUE(ThrowsErrorWith(
      [] { parse(one_entry(R"({"dtype":"F32","shape":[],"data_offsets":[0,0]})")); },
      {"tensor 'w'", "needs 4 bytes"}));
}

TEST(SafetensorsMalformed, OverlappingTensorsAreBothNamed) {
  std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                       R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  EXPECT_TRUE(ThrowsErrorWith([&] { parse(make_file(header, std::string(24, '\0'))); },
                              {"'bad.safetensors'", "'a' [0, 16]", "'b' [8, 24]", "overlap"}));
  // One range inside another that is not its neighbour in offset order.
  header = R"({"big":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
           R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
           R"("y":{"dtype":"F32","shape":[1],"data_offsets":[20,24]}})";
  EXPECT_TRUE(ThrowsErrorWith([&] { parse(make_file(header, std::string(32, '\0'))); },
                              {"'big'", "'x'", "overlap"}));
}

// Hugging Face's safetensors refuses a data buffer its tensors do not fill (InvalidOffset,
// MetadataIncompleteBuffer): bytes after the last tensor, a hole between two, a hole before the first.
TEST(SafetensorsMalformed, BytesThatBelongToNoTensorAreRefused) {
  const std::string two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  EXPECT_NO_THROW(parse(make_file(two, std::string(16, '\0'))));
  EXPECT_TRUE(ThrowsErrorWith([&] { parse(make_file(two, std::string(17, '\0'))); },
                              {"'bad.safetensors'", "1 bytes follow the last tensor, 'b'", "buffer is 17 bytes",
                               "end at 16", "expected the file to end with its last tensor"}));
  EXPECT_TRUE(ThrowsErrorWith([&] { parse(make_file("{}", std::string(4, '\0'))); },
                              {"4 bytes follow the header, which lists no tensor data"}));
  const std::string hole = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  EXPECT_TRUE(ThrowsErrorWith([&] { parse(make_file(hole, std::string(20, '\0'))); },
                              {"bytes [8, 12) of the data buffer belong to no tensor (between 'a' and 'b')"}));
  const std::string late = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_TRUE(ThrowsErrorWith([&] { parse(make_file(late, std::string(12, '\0'))); },
                              {"bytes [0, 4)", "before the first, 'a'"}));
}

TEST(SafetensorsMalformed, TouchingRangesAndZeroSizeTensorsDoNotCountAsOverlap) {
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  TensorFile f = parse(make_file(header, testing_support::f32_bytes({1, 2, 3, 4})));
  EXPECT_EQ(f.get("b").to_vector(), (std::vector<float>{3, 4}));
  EXPECT_EQ(f.get("e").shape(), (Shape{0, 5}));
  EXPECT_EQ(f.names, (std::vector<std::string>{"a", "e", "b"}));
}

TEST(SafetensorsMalformed, MetadataThatIsNotStringToStringIsRejected) {
  EXPECT_TRUE(ThrowsErrorWith([] { parse(make_file(R"({"__metadata__":[1]})", "")); },
                              {"'bad.safetensors'", "__metadata__", "array"}));
  EXPECT_TRUE(ThrowsErrorWith([] { parse(make_file(R"({"__metadata__":{"a":"x","n":3}})", "")); },
                              {"__metadata__", "key 'n'", "number"}));
}

TEST(SafetensorsMalformed, AMissingFileIsReportedWithItsPathAndTheReason) {
  EXPECT_TRUE(ThrowsErrorWith([] { load_safetensors("/nonexistent/dir/m.safetensors"); },
                              {"cannot open '/nonexistent/dir/m.safetensors'",
                               "No such file or directory"}));
}

TEST(SafetensorsMalformed, ErrorsFromLoadNameTheFilePath) {
  TempDir dir;
  const std::string path = dir.file("broken.safetensors");
  write_file_atomically(path, "short");
  EXPECT_TRUE(ThrowsErrorWith([&] { load_safetensors(path); }, {"'" + path + "'", "too short"}));
}

// --- fuzzing -------------------------------------------------------------------------------------

TEST(SafetensorsFuzz, TruncatedOrCorruptedFilesEitherParseOrThrowQkvError) {
  // A valid file with every supported dtype, metadata, empty and rank-0 tensors.
  std::string data = testing_support::f32_bytes({1, 2, 3, 4, 5, 6}) + le_bytes(std::vector<uint16_t>{0x3C00, 0x7E00}) +
                     le_bytes(std::vector<uint16_t>{0x3F80}) +
                     le_bytes(std::vector<uint64_t>{std::bit_cast<uint64_t>(2.5)});
  std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
      R"("b":{"dtype":"BF16","shape":[],"data_offsets":[28,30]},)"
      R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[30,30]},)"
      R"("d":{"dtype":"F64","shape":[1],"data_offsets":[30,38]}})";
  const std::string valid = make_file(header, data);
  ASSERT_NO_THROW(parse(valid));

  int parsed = 0, rejected = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      parse(bytes);
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }  // anything else escapes and fails the test
  };
  for (size_t n = 0; n < valid.size(); ++n) attempt(valid.substr(0, n));

  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  const char interesting[] = "{}[]\",:0123456789-eE. FBI";
  for (int round = 0; round < 6000; ++round) {
    std::string bytes = valid;
    const int flips = 1 + round % 4;
    for (int k = 0; k < flips; ++k) {
      // Mostly the length prefix and the header, where the parsing happens.
      size_t limit = round % 5 == 0 ? bytes.size() : 8 + header.size();
      size_t pos = std::uniform_int_distribution<size_t>(0, limit - 1)(rng);
      if (round % 3 == 0) {
        bytes[pos] = interesting[std::uniform_int_distribution<size_t>(0, sizeof interesting - 2)(rng)];
      } else {
        bytes[pos] = static_cast<char>(byte(rng));
      }
    }
    if (round % 7 == 0) bytes.resize(std::uniform_int_distribution<size_t>(0, bytes.size())(rng));
    attempt(bytes);
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(parsed, 10);  // flips in the data buffer still parse
}

// --- writing -------------------------------------------------------------------------------------

TEST(SafetensorsWrite, WritingIntoAMissingDirectoryThrowsAndLeavesNothingBehind) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/m.safetensors");
  EXPECT_TRUE(ThrowsErrorWith([&] { save_safetensors(path, {{"w", Tensor::scalar(1)}}); },
                              {path, "No such file or directory"}));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsWrite, AnExistingFileIsReplacedWhole) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  save_safetensors(path, {{"big", Tensor::zeros({100, 100})}, {"old", Tensor::scalar(1)}},
                   {{"version", "1"}});
  save_safetensors(path, {{"new", Tensor::from({2}, {3, 4})}});
  EXPECT_EQ(fs::file_size(path), serialize_safetensors({{"new", Tensor::from({2}, {3, 4})}}).size());
  TensorFile f = load_safetensors(path);
  EXPECT_EQ(f.names, std::vector<std::string>{"new"});
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(f.get("new").to_vector(), (std::vector<float>{3, 4}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.safetensors"});
}

TEST(SafetensorsWrite, ADuplicateNameIsRejectedAndTheOldFileIsUntouched) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  save_safetensors(path, {{"keep", Tensor::from({3}, {1, 2, 3})}});
  const std::string before = read_file(path);
  EXPECT_TRUE(ThrowsErrorWith(
      [&] { save_safetensors(path, {{"w", Tensor::scalar(1)}, {"w", Tensor::scalar(2)}}); },
      {"'w'", "more than once"}));
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.safetensors"});
}

TEST(SafetensorsWrite, EmptyAndReservedNamesAreRejected) {
  EXPECT_TRUE(ThrowsErrorWith([] { serialize_safetensors({{"", Tensor::scalar(1)}}); },
                              {"empty name"}));
  EXPECT_TRUE(ThrowsErrorWith([] { serialize_safetensors({{"__metadata__", Tensor::scalar(1)}}); },
                              {"'__metadata__' is reserved"}));
}

// --- atomic files --------------------------------------------------------------------------------

TEST(AtomicFile, WritesAndReadsBackArbitraryBytes) {
  TempDir dir;
  const std::string path = dir.file("blob");
  std::string bytes("a\0b\xff\n", 5);
  write_file_atomically(path, bytes);
  EXPECT_EQ(read_file(path), bytes);
  write_file_atomically(path, std::string());
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"blob"});
}

TEST(AtomicFile, TheStreamVersionWritesWhatTheCallbackProduces) {
  TempDir dir;
  const std::string path = dir.file("text");
  write_file_atomically(path, [](std::ostream& out) { out << "x = " << 42 << "\n"; });
  EXPECT_EQ(read_file(path), "x = 42\n");
}

TEST(AtomicFile, ACallbackThatThrowsLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("text");
  write_file_atomically(path, "old");
  EXPECT_THROW(write_file_atomically(path,
                                     [](std::ostream& out) {
                                       out << "partial";
                                       throw Error("boom");
                                     }),
               Error);
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"text"});
}

TEST(AtomicFile, AFailedRenameRemovesTheTemporaryAndNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("a_directory");
  fs::create_directory(path);
  // The temporary is created and written, then the rename over a directory fails.
  EXPECT_TRUE(ThrowsErrorWith([&] { write_file_atomically(path, "data"); },
                              {"cannot write '" + path + "'", "Is a directory"}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a_directory"});
}

TEST(AtomicFile, AReplacedFileKeepsItsPermissions) {
  TempDir dir;
  const std::string path = dir.file("private");
  write_file_atomically(path, "v1");
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  write_file_atomically(path, "v2");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(read_file(path), "v2");
}

TEST(AtomicFile, ReadingAMissingFileSaysCannotOpenWithTheReason) {
  EXPECT_TRUE(ThrowsErrorWith([] { read_file("/nonexistent/x.bin"); },
                              {"cannot open '/nonexistent/x.bin': No such file or directory"}));
}

TEST(AtomicFile, ReadingADirectoryFailsWithTheReason) {
  TempDir dir;
  EXPECT_TRUE(ThrowsErrorWith([&] { read_file(dir.path().string()); }, {"Is a directory"}));
}

// --- the memory-mapped reader -------------------------------------------------------------------

TEST(SafetensorsMapped, ReadsWhatTheWholeFileReaderReadsTensorByTensorAndAgain) {
  std::mt19937 rng(11);
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  // Tensors of every size around a page, so that dropping one's pages touches its neighbours'.
  NamedTensors tensors = {{"scalar", Tensor::scalar(3.5f)},
                          {"big", Tensor::from({1500, 3}, random_values(4500, rng))},
                          {"empty", Tensor::empty({0, 4})},
                          {"odd", Tensor::from({1023}, random_values(1023, rng))},
                          {"half", Tensor::from({7, 5}, random_values(35, rng))}};
  save_safetensors(path, tensors, {{"format", "pt"}}, {"half"});
  const TensorFile whole = load_safetensors(path);
  const MappedSafetensors mapped(path);
  EXPECT_EQ(mapped.path(), path);
  EXPECT_EQ(mapped.names(), whole.names);
  EXPECT_EQ(mapped.metadata(), whole.metadata);
  for (int pass = 0; pass < 2; ++pass) {  // the second pass reads pages the first one dropped
    for (const std::string& name : whole.names) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(mapped.contains(name));
      EXPECT_EQ(mapped.shape(name), whole.get(name).shape());
      EXPECT_EQ(mapped.stored_dtype(name), whole.stored_dtypes.at(name));
      const Tensor t = mapped.read(name);
      EXPECT_TRUE(BitIdentical(t, whole.get(name)));
      EXPECT_EQ(t.name(), name);
    }
  }
  EXPECT_EQ(mapped.stored_dtype("half"), "BF16");
  EXPECT_FALSE(mapped.contains("input"));
  EXPECT_TRUE(ThrowsErrorWith([&] { mapped.read("input"); }, {"has no tensor 'input' (it has: 'scalar', 'big'"}));
  EXPECT_TRUE(ThrowsErrorWith([&] { mapped.shape("input"); }, {"has no tensor 'input'"}));
}

TEST(SafetensorsMapped, ARangeOfElementsIsThatSliceOfTheWholeTensorAndAnyRangeOutsideIsRefused) {
  std::mt19937 rng(12);
  TempDir dir;
  const std::string path = dir.file("r.safetensors");
  NamedTensors tensors = {{"f", Tensor::from({700, 6}, random_values(4200, rng))},
                          {"h", Tensor::from({9, 5}, random_values(45, rng))}};
  save_safetensors(path, tensors, {}, {"h"});
  const TensorFile whole = load_safetensors(path);
  const MappedSafetensors mapped(path);
  for (const std::string name : {"f", "h"}) {
    const Tensor all = whole.get(name);
    const int64_t n = all.numel();
    for (auto [first, count] : {std::pair<int64_t, int64_t>{0, n}, {0, 0}, {n, 0}, {6, 12}, {n - 7, 7}, {1, n - 2}}) {
      SCOPED_TRACE(name + " [" + std::to_string(first) + ", +" + std::to_string(count) + ")");
      std::vector<float> got(static_cast<size_t>(count) + 1, -7.0f);
      mapped.read_range_into(name, first, count, got.data());
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], all.data()[first + i]) << i;
      EXPECT_EQ(got.back(), -7.0f) << "written past the range";
    }
    float sink[8];
    EXPECT_TRUE(ThrowsErrorWith([&] { mapped.read_range_into(name, n - 3, 4, sink); },
                                {"elements [" + std::to_string(n - 3) + ", " + std::to_string(n - 3) + " + 4) of '" + name +
                                     "'",
                                 "expected a range within its " + std::to_string(n) + " elements"}));
    EXPECT_TRUE(ThrowsErrorWith([&] { mapped.read_range_into(name, -1, 1, sink); }, {"elements [-1, -1 + 1)"}));
    EXPECT_TRUE(ThrowsErrorWith([&] { mapped.read_range_into(name, 0, -2, sink); }, {"elements [0, 0 + -2)"}));
    EXPECT_TRUE(ThrowsErrorWith([&] { mapped.read_range_into(name, n + 1, 0, sink); }, {"expected a range within"}));
  }
}

TEST(SafetensorsMapped, RefusesWhatTheWholeFileReaderRefusesWithItsErrors) {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.file(name), std::ios::binary) << bytes;
    return dir.file(name);
  };
  // Truncated data, an overlap, a header past the end, an empty file: checked when opened.
  const std::string cases[] = {
      write("truncated", serialize_safetensors({{"w", Tensor::zeros({4, 4})}}).substr(0, 80)),
      write("overlap", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 std::string(12, '\0'))),
      write("header", testing_support::le64(1000) + "{}"),
      write("empty", ""),
      dir.path().string(),  // a directory: read_file's error
      dir.file("absent"),
  };
  for (const std::string& path : cases) {
    SCOPED_TRACE(path);
    std::string whole, mapped;
    try {
      load_safetensors(path);
    } catch (const Error& e) {
      whole = e.what();
    }
    try {
      MappedSafetensors m(path);
    } catch (const Error& e) {
      mapped = e.what();
    }
    EXPECT_FALSE(whole.empty());
    EXPECT_EQ(mapped, whole);
  }
}

// --- whole numbers (token ids) ----------------------------------------------------------------

// Every integer dtype, at its extremes, and whole floats, read as int64 (little-endian, signed ones
// sign-extended); with the float reader the same file is refused (integers are no weights).
TEST(SafetensorsIntegers, EveryIntegerDtypeAndWholeFloatsAreReadAsInt64) {
  TempDir dir;
  const std::string data = le_bytes(std::vector<uint8_t>{0xff, 0x7f}) +                        // I8: -1, 127
                           le_bytes(std::vector<uint16_t>{static_cast<uint16_t>(-300)}) +      // I16
                           le_bytes(std::vector<uint32_t>{static_cast<uint32_t>(-100), 70000}) +  // I32
                           le_bytes(std::vector<uint64_t>{uint64_t{1} << 63, 5000000000}) +    // I64
                           le_bytes(std::vector<uint8_t>{255}) + le_bytes(std::vector<uint16_t>{65535}) +
                           le_bytes(std::vector<uint32_t>{4294967295u}) +
                           le_bytes(std::vector<uint64_t>{9223372036854775807ull}) +          // U64
                           testing_support::f32_bytes({3.0f, -100.0f}) +
                           le_bytes(std::vector<uint16_t>{0x4000}) +                          // BF16 2
                           le_bytes(std::vector<uint64_t>{std::bit_cast<uint64_t>(1e15)});    // F64
  const std::string header =
      R"({"i8":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},)"
      R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[2,4]},)"
      R"("i32":{"dtype":"I32","shape":[1,2],"data_offsets":[4,12]},)"
      R"("i64":{"dtype":"I64","shape":[2],"data_offsets":[12,28]},)"
      R"("u8":{"dtype":"U8","shape":[1],"data_offsets":[28,29]},)"
      R"("u16":{"dtype":"U16","shape":[1],"data_offsets":[29,31]},)"
      R"("u32":{"dtype":"U32","shape":[1],"data_offsets":[31,35]},)"
      R"("u64":{"dtype":"U64","shape":[1],"data_offsets":[35,43]},)"
      R"("f32":{"dtype":"F32","shape":[2],"data_offsets":[43,51]},)"
      R"("bf16":{"dtype":"BF16","shape":[1],"data_offsets":[51,53]},)"
      R"("f64":{"dtype":"F64","shape":[1],"data_offsets":[53,61]}})";
  const std::string path = dir.file("ids.safetensors");
  std::ofstream(path, std::ios::binary) << make_file(header, data);
  const auto f = load_safetensors_integers(path, {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32",
                                                  "bf16", "f64"});
  using V = std::vector<int64_t>;
  EXPECT_EQ(f.at("i8").values, (V{-1, 127}));
  EXPECT_EQ(f.at("i16").values, (V{-300}));
  EXPECT_EQ(f.at("i32").values, (V{-100, 70000}));
  EXPECT_EQ(f.at("i32").shape, (Shape{1, 2}));
  EXPECT_EQ(f.at("i64").values, (V{std::numeric_limits<int64_t>::min(), 5000000000}));
  EXPECT_EQ(f.at("u8").values, (V{255}));
  EXPECT_EQ(f.at("u16").values, (V{65535}));
  EXPECT_EQ(f.at("u32").values, (V{4294967295}));
  EXPECT_EQ(f.at("u64").values, (V{std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(f.at("f32").values, (V{3, -100}));
  EXPECT_EQ(f.at("bf16").values, (V{2}));
  EXPECT_EQ(f.at("f64").values, (V{1000000000000000}));
  // (the header's entries are checked in the order of their names: i16 is the first integer one)
  EXPECT_TRUE(ThrowsErrorWith([&] { load_safetensors(path); }, {"tensor 'i16'", "unsupported dtype 'I16'"}));
  EXPECT_TRUE(ThrowsErrorWith([&] { MappedSafetensors m(path); }, {"unsupported dtype 'I16'", "token ids only"}));
  EXPECT_TRUE(ThrowsErrorWith([&] { load_safetensors_integers(path, {"i8", "targets"}); },
                              {"has no tensor 'targets'", "i64"}));
}

// A value int64 cannot hold, or a float that is not whole, is named with its tensor and element;
// other dtypes stay refused.
TEST(SafetensorsIntegers, ValuesThatAreNoWholeInt64AreNamed) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto refused = [&](const std::string& dtype, const std::string& bytes,
                     std::initializer_list<std::string_view> parts) {
    const std::string header = R"({"ids":{"dtype":")" + dtype + R"(","shape":[2],"data_offsets":[0,)" +
                               std::to_string(bytes.size()) + "]}}";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << make_file(header, bytes);
    return ThrowsErrorWith([&] { load_safetensors_integers(path, {"ids"}); }, parts);
  };
  EXPECT_TRUE(refused("U64", le_bytes(std::vector<uint64_t>{1, uint64_t{1} << 63}),
                      {"'" + path + "'", "tensor 'ids' element 1 is 9223372036854775808, beyond int64's largest"}));
  EXPECT_TRUE(refused("F32", testing_support::f32_bytes({1.0f, 2.5f}),
                      {"tensor 'ids' element 1 is 2.5; expected a whole number within int64's range"}));
  EXPECT_TRUE(refused("F32", testing_support::f32_bytes({std::nanf(""), 1.0f}), {"element 0 is nan"}));
  EXPECT_TRUE(refused("F32", testing_support::f32_bytes({1.0f, 1e30f}), {"element 1 is 1e+30; expected"}));
  EXPECT_TRUE(refused("F64", le_bytes(std::vector<uint64_t>{std::bit_cast<uint64_t>(0.5), 0}), {"element 0 is 0.5"}));
  EXPECT_TRUE(refused("BOOL", std::string(2, '\1'), {"unsupported dtype 'BOOL'"}));
}

}  // namespace
}  // namespace qkv
