// Llama 3 and Qwen3 models through llama.cpp's GGUF files (models/gguf_model.h): written by qkv
// convert's writer and read back - in F32 the same model bit for bit, in every quantized type the
// weights each type's reference decoder gives - and files edited into what a hostile or broken file
// holds, each refused naming the field before the model is made. The layout itself is checked
// against llama.cpp and the PyTorch twin's own writer in tests/pytorch/test_gguf_llamacpp.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model_support.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/read_file.h"
#include "qkv/io/gguf.h"
#include "qkv/io/output_files.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/gpt.h"
#include "qkv/models/tokenizer.h"
#include "qkv/models/hf_folder.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/utf8.h"
#include "qkv/text/vocab_files.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;
using testing_support::temp_dir;

class GgufModel : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { dir_ = temp_dir("qkv_gguf_model_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A small model of the family (head_dim not the width over the heads, grouped keys; rows of 256
  // for the K-quants' blocks), drawn from a seed.
  std::unique_ptr<DecoderModel> model(bool tied = false) {
    DecoderSpec spec = llama_sizes(GetParam(), 300, 256, 512, 2, 4, 2, 32, 64, tied);
    Generator gen(7);
    return std::make_unique<DecoderModel>(spec, gen);
  }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string gguf(LanguageModel& m, const std::string& type) {
    std::vector<std::string> notes;
    return gguf_model_bytes(m, nullptr, type, notes);
  }
  LoadedModel load(const std::string& path, bool f32 = true) {
    LoadOptions o;
    if (f32) o.dtype = Dtype::kF32;
    o.float_weights = f32;
    return load_model(path, o);
  }

  std::string dir_;
};

TEST_P(GgufModel, AnF32FileIsTheSameModelBitForBit) {
  for (const bool tied : {false, true}) {
    auto m = model(tied);
    const std::string path = write("m.gguf", gguf(*m, "f32"));
    LoadedModel back = load(path);
    const std::vector<StateEntry> want = m->state_dict(), got = back.model->state_dict();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].name, got[i].name);
      ASSERT_EQ(std::memcmp(want[i].tensor->data(), got[i].tensor->data(), 4 * static_cast<size_t>(want[i].tensor->numel())), 0)
          << want[i].name;
    }
    const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
    m->eval();
    const Tensor a = m->forward(ids, 1, 8), b = back.model->forward(ids, 1, 8);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), 4 * static_cast<size_t>(a.numel())), 0);
    EXPECT_THAT(back.description, HasSubstr("(GGUF, F32 weights, f32 products)"));
  }
}

TEST_P(GgufModel, EveryTypeReadsBackAsItsBlocksDecode) {
  auto m = model();
  for (const std::string type : {"f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"}) {
    const std::string path = write("m.gguf", gguf(*m, type));
    LoadedModel back = load(path);
    const std::vector<StateEntry> want = m->state_dict(), got = back.model->state_dict();
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t n = want[i].tensor->numel();
      // 1-D tensors stay F32; 2-D rows are blocks of the type (a row's blocks never span rows, so
      // Q and K's row order in the file does not change what each row decodes to), or Q8_0 where a
      // row is not whole blocks of it (o_proj's rows of 128 and the K-quants' 256)
      const int64_t cols = want[i].shape().back();
      const QuantType& t = want[i].shape().size() == 1 ? quant_type_named("F32")
                           : cols % quant_type_named(type).block == 0 ? quant_type_named(type)
                                                                      : quant_type_named("Q8_0");
      std::vector<uint8_t> blocks(static_cast<size_t>(quant_bytes(t, n, want[i].name)));
      quantize(t, want[i].tensor->data(), n, blocks.data());
      std::vector<float> expect(static_cast<size_t>(n));
      dequantize(t, blocks.data(), n, expect.data());
      ASSERT_EQ(std::memcmp(expect.data(), got[i].tensor->data(), 4 * static_cast<size_t>(n)), 0)
          << type << " " << want[i].name;
    }
    // loaded for generation: bf16 products, the weights in bf16 only
    LoadedModel fast = load_model(path);
    EXPECT_TRUE(fast.model->bf16_only()) << type;
    const bool blocks = type[0] == 'q';  // the quantized types compute on their blocks
    EXPECT_THAT(fast.description, HasSubstr(std::string("(GGUF, ") + quant_type_named(type).name + " weights, " +
                                            (blocks ? "integer products on its blocks)" : "bf16 products)")));
  }
}

// Loaded for generation, the quantized types compute on their blocks (x quantized per block, integer
// dot products): the logits of the model holding the decoded weights in f32, up to the activations'
// rounding - each product's error at most sum |w| d_x / 2 (core/quant_matvec.h), about 1/254 of the
// row's scale per product, compounding over 2 layers: judged at 5% of the logits' largest magnitude,
// and far from equal to the bf16 path's (the products are not that one's). A step of the cache gives
// the full forward's last row exactly (each row's activations and sums do not depend on the others).
TEST_P(GgufModel, QuantizedTypesComputeOnTheirBlocks) {
  auto m = model();
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  // and a prompt of more rows than a decoding step's (SwiGLU's gate and up apart, not one product)
  const std::vector<int64_t> longer = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4};
  const int64_t T = static_cast<int64_t>(ids.size()), V = 300;
  for (const std::string type : {"q8_0", "q4_0", "q4_k", "q6_k"}) {
    const std::string path = write("m.gguf", gguf(*m, type));
    LoadedModel f32 = load(path);
    LoadedModel q = load_model(path);
    LoadOptions o;
    o.dequantize = true;
    LoadedModel b16 = load_model(path, o);
    EXPECT_THAT(q.description, HasSubstr("integer products on its blocks")) << type;
    EXPECT_THAT(b16.description, HasSubstr("bf16 products")) << type;
    const Tensor want = f32.model->forward(ids, 1, T), got = q.model->forward(ids, 1, T),
                 bf16 = b16.model->forward(ids, 1, T);
    float scale = 0, err = 0, from_bf16 = 0;
    for (int64_t i = 0; i < T * V; ++i) {
      scale = std::max(scale, std::fabs(want.data()[i]));
      err = std::max(err, std::fabs(got.data()[i] - want.data()[i]));
      from_bf16 = std::max(from_bf16, std::fabs(got.data()[i] - bf16.data()[i]));
    }
    EXPECT_LE(err, 0.05f * scale) << type;
    EXPECT_GT(from_bf16, 0.0f) << type;
    const int64_t TL = static_cast<int64_t>(longer.size());
    const Tensor want_longer = f32.model->forward(longer, 1, TL), got_longer = q.model->forward(longer, 1, TL);
    float scale_longer = 0, err_longer = 0;
    for (int64_t i = 0; i < TL * V; ++i) {
      scale_longer = std::max(scale_longer, std::fabs(want_longer.data()[i]));
      err_longer = std::max(err_longer, std::fabs(got_longer.data()[i] - want_longer.data()[i]));
    }
    EXPECT_LE(err_longer, 0.05f * scale_longer) << type << ", " << TL << " ids";
    kernels::KvCache cache = q.model->make_cache(1, kernels::CacheDtype::kF32, T);
    std::vector<float> step(static_cast<size_t>(V));
    q.model->forward_cached_into(std::vector<int64_t>(ids.begin(), ids.end() - 1), 1, T - 1, cache, step.data());
    q.model->forward_cached_into({ids.back()}, 1, 1, cache, step.data());
    EXPECT_EQ(std::memcmp(step.data(), got.data() + (T - 1) * V, step.size() * 4), 0) << type;
  }
}

// --quantize on a Hugging Face folder: the matrices quantized at load into the very blocks qkv
// convert writes into a GGUF file of the type (from the same bf16 values), so the logits are that
// file's, bit for bit, and off the f32 model's by no more than the activations' rounding (the 5% of
// QuantizedTypesComputeOnTheirBlocks). Refused with the float weights or f32 products.
TEST_P(GgufModel, AFolderQuantizedAtLoadIsItsGgufFile) {
  auto drawn = model();
  save_hf_folder(*drawn, dir_, /*bf16=*/true);
  LoadOptions floats;
  floats.dtype = Dtype::kF32;
  floats.float_weights = true;
  LoadedModel m = load_model(dir_, floats);  // the folder's bf16 values, as floats
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  for (const std::string type : {"q8_0", "q4_k"}) {
    LoadOptions o;
    o.quantize = type;
    LoadedModel q = load_model(dir_, o);
    // o_proj's rows of 128 are not whole Q4_K blocks: Q8_0, as the GGUF writer falls back
    EXPECT_THAT(q.description, HasSubstr(type == "q8_0" ? "(BF16 weights, quantized to Q8_0, integer products)"
                                                        : "quantized to Q4_K (2 matrices to Q8_0), integer products"))
        << type;
    const std::string path = write("m.gguf", gguf(*m.model, type));
    const Tensor got = q.model->forward(ids, 1, 8), file = load_model(path).model->forward(ids, 1, 8),
                 want = load(path).model->forward(ids, 1, 8);
    EXPECT_EQ(std::memcmp(got.data(), file.data(), 4 * static_cast<size_t>(got.numel())), 0) << type;
    float scale = 0, err = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      scale = std::max(scale, std::fabs(want.data()[i]));
      err = std::max(err, std::fabs(got.data()[i] - want.data()[i]));
    }
    EXPECT_LE(err, 0.05f * scale) << type;
  }
  LoadOptions bad;
  bad.quantize = "q8_0";
  bad.float_weights = true;
  EXPECT_THAT(error_of([&] { load_model(dir_, bad); }), HasSubstr("quantizing the weights (q8_0) is for generation"));
  bad.float_weights = false;
  bad.quantize = "q5_k";
  EXPECT_THAT(error_of([&] { load_model(dir_, bad); }), HasSubstr("q5_k is not a type the integer products read"));
}

TEST_P(GgufModel, TheTokenizerComesThroughTheFile) {
  const bool qwen = GetParam() != "llama";  // Qwen2.5 and Qwen3: Qwen's vocabulary
  const std::string vocab = qwen ? "qwen3" : "llama3";
  if (!find_hf_vocab(vocab)) GTEST_SKIP() << vocab << "'s tokenizer.json is not installed (scripts/setup.sh installs it)";
  const std::string json_text = read_file(*find_hf_vocab(vocab));
  const nlohmann::json tokenizer = nlohmann::json::parse(json_text);
  const HfTokenizer original = HfTokenizer::load(vocab);
  const int64_t V = qwen ? 151936 : 128256;
  std::vector<GgufMetadata> meta = {{"general.architecture", gguf_string(GetParam())}};
  for (GgufMetadata& m : gguf_tokenizer_metadata(tokenizer, V, model_family(GetParam()))) meta.push_back(std::move(m));
  const GgufFile f = GgufFile::parse(serialize_gguf(meta, {}), "t.gguf");
  EXPECT_EQ(f.strings("tokenizer.ggml.tokens").size(), static_cast<size_t>(V));
  EXPECT_EQ(f.string("tokenizer.ggml.pre"), qwen ? "qwen2" : "llama-bpe");
  // The installed files' post-processor is ByteLevel alone: nothing before a text (Meta's own Llama 3
  // file's template, below, puts <|begin_of_text|> there).
  EXPECT_FALSE(f.boolean("tokenizer.ggml.add_bos_token"));
  EXPECT_TRUE(HfTokenizer::build(gguf_tokenizer_parts(f), "t.gguf").prefix().empty());
  // The file's end token (the family's first, as llama.cpp's converter writes it), checked against
  // the vocabulary by key; an id past it was ignored, as the key was.
  const std::vector<int64_t> ends = gguf_end_ids(f);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0], *original.added_token(model_family(GetParam()).end_tokens.front()));
  auto with = [&](const std::string& key, const GgufValue& v) {
    std::vector<GgufMetadata> edited = meta;
    edited.push_back({key, v});
    return GgufFile::parse(serialize_gguf(edited, {}), "t.gguf");
  };
  EXPECT_EQ(gguf_end_ids(with("tokenizer.ggml.eot_token_id", gguf_u32(100))), (std::vector<int64_t>{ends[0], 100}));
  for (const std::string key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    EXPECT_THAT(error_of([&] { gguf_end_ids(with(key, gguf_u32(static_cast<uint64_t>(V)))); }),
                HasSubstr(str(key, " is ", V, "; tokenizer.ggml.tokens has ids 0 .. ", V - 1)));
    EXPECT_THAT(error_of([&] { gguf_end_ids(with(key, gguf_string("2"))); }), HasSubstr(key));
  }
  // built straight from the file's arrays (as a load does), and through the tokenizer.json they make
  const HfTokenizer built = HfTokenizer::build(gguf_tokenizer_parts(f), "t.gguf");
  const HfTokenizer back = HfTokenizer::parse(gguf_tokenizer_json(f).dump(), "t.gguf");
  EXPECT_EQ(built.vocab_size(), original.vocab_size());
  EXPECT_EQ(back.vocab_size(), original.vocab_size());
  EXPECT_EQ(built.added_tokens().size(), original.added_tokens().size());
  std::vector<TokenId> every(static_cast<size_t>(V));
  for (int64_t id = 0; id < V; ++id) every[static_cast<size_t>(id)] = static_cast<TokenId>(id);
  EXPECT_EQ(built.decode_bytes(every), original.decode_bytes(every));  // each token's bytes, in order
  for (const std::string text : {"Hello, world! It's 2026: 12345 tokens.", "  spaces\n\n\tand tabs  ",
                                 "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", "<|im_start|>user\nhi<|im_end|>",
                                 "<|begin_of_text|>x<|eot_id|>", "e\xcc\x81 (decomposed)", "don't WE'LL I'M",
                                 "antidisestablishmentarianism internationalization"}) {
    EXPECT_EQ(built.encode(text), original.encode(text)) << text;
    EXPECT_EQ(back.encode(text), original.encode(text)) << text;
    EXPECT_EQ(built.decode(original.encode(text)), original.decode(original.encode(text))) << text;
  }
}

// A tokenizer.json whose post-processor puts a token before every text (Meta's Llama 3 files:
// <|begin_of_text|> $A) is a GGUF file with add_bos_token true and that token as BOS, as llama.cpp's
// converter writes it; the file's tokenizer, and the tokenizer.json made back from it, read the same
// prefix, and a model reads it before a text.
TEST(GgufTokenizer, ATemplatesTokenBeforeTheTextIsAddBosToken) {
  if (!find_hf_vocab("llama3")) GTEST_SKIP() << "llama3's tokenizer.json is not installed (scripts/setup.sh installs it)";
  nlohmann::json t = nlohmann::json::parse(read_file(*find_hf_vocab("llama3")));
  t["post_processor"] = nlohmann::json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                               "tokens": ["<|begin_of_text|>"]}}}]})");
  const HfTokenizer parsed = HfTokenizer::parse(t.dump(), "tokenizer.json");
  EXPECT_EQ(parsed.prefix(), (std::vector<TokenId>{128000}));
  EXPECT_EQ(parsed.encode("hi"), HfTokenizer::load("llama3").encode("hi")) << "encode() adds no template's tokens";
  std::vector<GgufMetadata> meta = {{"general.architecture", gguf_string("llama")}};
  for (GgufMetadata& m : gguf_tokenizer_metadata(t, 128256, model_family("llama"))) meta.push_back(std::move(m));
  const GgufFile f = GgufFile::parse(serialize_gguf(meta, {}), "t.gguf");
  EXPECT_TRUE(f.boolean("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.unsigned_int("tokenizer.ggml.bos_token_id"), 128000u);
  EXPECT_EQ(HfTokenizer::build(gguf_tokenizer_parts(f), "t.gguf").prefix(), (std::vector<TokenId>{128000}));
  EXPECT_EQ(HfTokenizer::parse(gguf_tokenizer_json(f).dump(), "back").prefix(), (std::vector<TokenId>{128000}));
  LoadedModel model;  // a model reads the prefix before its text
  model.tokenizer = std::make_unique<HfTextTokenizer>(parsed, "tokenizer.json");
  std::vector<int64_t> want = {128000};
  for (TokenId id : parsed.encode("hi there")) want.push_back(id);
  EXPECT_EQ(model.encode("hi there"), want);
  EXPECT_EQ(model.encode(""), (std::vector<int64_t>{128000}));
  // add_bos_token without a BOS id, or with one past the vocabulary: named
  auto edited = [&](const std::string& key, std::optional<GgufValue> v) {
    std::vector<GgufMetadata> m;
    for (const GgufMetadata& e : meta)
      if (e.key != key) m.push_back(e);
    if (v) m.push_back({key, *v});
    return GgufFile::parse(serialize_gguf(m, {}), "t.gguf");
  };
  EXPECT_THAT(error_of([&] { gguf_tokenizer_parts(edited("tokenizer.ggml.bos_token_id", std::nullopt)); }),
              HasSubstr("tokenizer.ggml.add_bos_token is true but the file has no tokenizer.ggml.bos_token_id"));
  EXPECT_THAT(error_of([&] { gguf_tokenizer_parts(edited("tokenizer.ggml.bos_token_id", gguf_u32(128256))); }),
              HasSubstr("tokenizer.ggml.bos_token_id is 128256; tokenizer.ggml.tokens has ids 0 .. 128255"));
}

TEST_P(GgufModel, BrokenFilesAreRefusedNamingTheField) {
  auto m = model();
  const std::string good = gguf(*m, "q8_0");
  const std::string a = GetParam() + ".";
  auto set = [&](const std::string& key, GgufValue v) {  // the key's value, or the key added
    return [key, v](std::vector<GgufMetadata>& meta) {
      for (GgufMetadata& e : meta)
        if (e.key == key) {
          e.value = v;
          return;
        }
      meta.push_back({key, v});
    };
  };
  auto refused = [&](const std::string& bytes) { return error_of([&] { load(write("bad.gguf", bytes)); }); };

  // 10^6 layers over a file of 2: refused before the model is made, in well under a second
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(refused(edited(good, set(a + "block_count", gguf_u32(1000000)))),
              HasSubstr("but its tensors hold only"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));  // 100x what it takes
  // a count past int64 is named with the file's key and value (it was clamped to 2^63 - 1 and refused
  // as a product of sizes naming neither)
  EXPECT_THAT(refused(edited(good, set(a + "block_count", gguf_u64(~uint64_t{0})))),
              HasSubstr("metadata '" + a + "block_count' is 18446744073709551615; more than qkv reads (2^63 - 1)"));
  EXPECT_THAT(refused(edited(good, set("general.architecture", gguf_string("mamba")))),
              HasSubstr("general.architecture is 'mamba'; qkv reads GGUF files of \"gpt2\", \"llama\", \"qwen2\", \"qwen3\""));
  EXPECT_THAT(refused(edited(good, set(a + "embedding_length", gguf_string("256")))),
              HasSubstr("metadata '" + a + "embedding_length' is string; expected an integer"));
  // the configuration's checks name the file's keys, not the config.json keys they were read into
  // ("hidden_size" (0) must be positive, for embedding_length 0)
  EXPECT_THAT(refused(edited(good, set(a + "attention.head_count_kv", gguf_u32(3)))),
              HasSubstr(a + "attention.head_count_kv (3) must divide " + a + "attention.head_count (4)"));
  // a head count for a file that has its own was ignored
  LoadOptions heads;
  heads.num_heads = 4;
  EXPECT_THAT(error_of([&] { load_model(write("heads.gguf", good), heads); }),
              HasSubstr("a head count (4) was given for"));
  // a block_count below the file's layers names both (it read "tensor 'blk.0...' is not of the model")
  EXPECT_THAT(refused(edited(good, set(a + "block_count", gguf_u32(0)))),
              HasSubstr("tensor 'blk.0.attn_norm.weight' is of layer 0; the metadata's " + a + "block_count is 0"));
  EXPECT_THAT(refused(edited(good, set(a + "embedding_length", gguf_u32(0)))),
              HasSubstr(a + "embedding_length (0) must be positive"));
  EXPECT_THAT(refused(edited(good, set(a + "attention.layer_norm_rms_epsilon", gguf_f32(-1.0f)))),
              HasSubstr(a + "attention.layer_norm_rms_epsilon (-1) must be a positive number"));
  EXPECT_THAT(refused(edited(good, set(a + "attention.value_length", gguf_u32(16)))),
              HasSubstr("attention.value_length (16) differs from " + a + "attention.key_length (32)"));
  EXPECT_THAT(refused(edited(good, set(a + "rope.dimension_count", gguf_u32(16)))),
              HasSubstr("rope.dimension_count (16) is not the head's dimension (32)"));
  EXPECT_THAT(refused(edited(good, [&](auto& meta) { meta.push_back({a + "rope.scaling.type", gguf_string("yarn")}); })),
              HasSubstr("rope.scaling.type is 'yarn'"));
  EXPECT_THAT(refused(edited(good, [](auto&) {}, [](auto& t) { t.erase(t.begin() + 3); })), HasSubstr("has no tensor"));
  EXPECT_THAT(refused(edited(good, [](auto&) {},
                             [](auto& t) { t.push_back({"extra.weight", {32}, &quant_type_named("F32"), [](uint8_t*) {}}); })),
              HasSubstr("tensor 'extra.weight' is not of the metadata's"));
  EXPECT_THAT(refused(edited(good, [](auto&) {},
                             [](auto& t) {
                               for (auto& x : t)
                                 if (x.name == "blk.1.ffn_up.weight") x.shape = {256, 512};
                             })),
              HasSubstr("tensor 'blk.1.ffn_up.weight' has shape (256, 512); the metadata's model has (512, 256)"));
  EXPECT_THAT(refused(edited(good, [](auto&) {},
                             [](auto& t) {
                               for (auto& x : t)
                                 if (x.name == "blk.0.attn_v.weight") x.type = &quant_type(16);  // IQ2_XXS
                             })),
              HasSubstr("tensor 'blk.0.attn_v.weight' is IQ2_XXS; qkv reads F32, F16, Q4_0"));
  // Llama 3's scaling factors that are not Llama 3's
  EXPECT_THAT(refused(edited(good, [](auto&) {},
                             [](auto& t) {
                               t.push_back({"rope_freqs.weight", {16}, &quant_type_named("F32"), [](uint8_t* out) {
                                              std::vector<float> f(16, 1.0f);
                                              f[3] = 5.0f;
                                              std::memcpy(out, f.data(), 64);
                                            }});
                             })),
              HasSubstr("qkv reads Llama 3's scaling only"));
  // a tokenizer qkv does not read
  std::vector<std::string> notes;
  EXPECT_THAT(refused(edited(good, [](auto& meta) {
                meta.push_back({"tokenizer.ggml.model", gguf_string("gpt2")});
                meta.push_back({"tokenizer.ggml.pre", gguf_string("falcon")});
                meta.push_back({"tokenizer.ggml.tokens", gguf_strings({"a", "b"})});
              })),
              HasSubstr("tokenizer.ggml.pre is 'falcon'"));
  EXPECT_THAT(refused(edited(good, [](auto& meta) {
                meta.push_back({"tokenizer.ggml.model", gguf_string("llama")});
              })),
              HasSubstr("tokenizer.ggml.model is 'llama'; qkv reads byte-level BPE"));
  EXPECT_THAT(refused(edited(good, [](auto& meta) {
                meta.push_back({"tokenizer.ggml.model", gguf_string("gpt2")});
                meta.push_back({"tokenizer.ggml.tokens", gguf_strings({"a", "a"})});
              })),
              HasSubstr("tokenizer.ggml.tokens[1] ('a') is another token's text too"));
  // the engine's checks name GGUF's keys: every byte spelled, then a merge of two tokens into none
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    utf8::append(spelled, byte_level_char(static_cast<uint8_t>(b)));
    bytes.push_back(spelled);
  }
  auto with_merges = [&](std::vector<std::string> merges) {
    return edited(good, [&](auto& meta) {
      meta.push_back({"tokenizer.ggml.model", gguf_string("gpt2")});
      meta.push_back({"tokenizer.ggml.pre", gguf_string("qwen2")});
      meta.push_back({"tokenizer.ggml.tokens", gguf_strings(bytes)});
      meta.push_back({"tokenizer.ggml.merges", gguf_strings(merges)});
    });
  };
  EXPECT_NO_THROW(load(write("bytes.gguf", with_merges({}))));
  EXPECT_THAT(refused(with_merges({"a b"})),
              HasSubstr("tokenizer.ggml.merges[0] makes 'ab', which is not in tokenizer.ggml.tokens"));
  EXPECT_THAT(refused(with_merges({"ab"})),
              HasSubstr("tokenizer.ggml.merges[0] is 'ab'; expected two tokens separated by one space"));
  bytes.pop_back();
  EXPECT_THAT(refused(with_merges({})), HasSubstr("tokenizer.ggml.tokens has no token for byte"));
}

INSTANTIATE_TEST_SUITE_P(Families, GgufModel, testing::Values("llama", "qwen2", "qwen3"));

// The book's GPT model as llama.cpp's "gpt2" file: LayerNorm's scale and shift, learned positions,
// Q, K and V's rows in one attn_qkv tensor (their biases too), GELU feed-forward with biases.
class GgufGpt : public GgufModel {
 protected:
  // Rows of 256 (whole Q4_K blocks) in every product but the head's.
  static std::unique_ptr<DecoderModel> gpt(bool qkv_bias, bool tied, int64_t vocab = 300, int64_t width = 256) {
    Generator gen(5);
    auto m = std::make_unique<DecoderModel>(gpt_spec(vocab, 32, width, 4, 2, 0.0, qkv_bias, tied), gen);
    for (const StateEntry& e : m->state_dict())  // LayerNorm's scale and shift, and the biases, off 1 and 0
      if (e.tensor != nullptr && e.shape().size() == 1)
        for (int64_t i = 0; i < e.tensor->numel(); ++i) e.tensor->data()[i] += 0.01f * static_cast<float>(i % 7 + 1);
    m->eval();
    return m;
  }
};

TEST_F(GgufGpt, AnF32FileIsTheBooksModelBitForBit) {
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  for (const auto& [bias, tied] : {std::pair{true, false}, std::pair{false, true}}) {
    auto m = gpt(bias, tied);
    const std::string path = write("g.gguf", gguf(*m, "f32"));
    const GgufFile file(path);
    EXPECT_EQ(file.tensor("blk.1.attn_qkv.weight").shape, Shape({768, 256}));
    EXPECT_EQ(file.tensor("blk.1.attn_qkv.bias").shape, Shape({768}));  // zeros for the model without
    EXPECT_EQ(file.contains("output.weight"), !tied);
    LoadedModel back = load(path);
    EXPECT_EQ(back.model->family().name, "gpt");
    EXPECT_TRUE(back.model->spec().qkv_bias);  // the file's zeros are read as a bias: the same numbers
    EXPECT_EQ(back.model->spec().tied_head, tied);
    std::map<std::string, const Tensor*> got;
    for (const StateEntry& e : back.model->state_dict()) got[e.name] = e.tensor;
    for (const StateEntry& e : m->state_dict()) {
      if (e.tensor == nullptr) continue;  // the mask buffers
      ASSERT_TRUE(got.count(e.name)) << e.name;
      ASSERT_EQ(std::memcmp(e.tensor->data(), got[e.name]->data(), 4 * static_cast<size_t>(e.tensor->numel())), 0)
          << e.name;
    }
    if (!bias) {
      for (const char* q : {"trf_blocks.0.att.W_query.bias", "trf_blocks.1.att.W_value.bias"})
        for (int64_t i = 0; i < got[q]->numel(); ++i) ASSERT_EQ(got[q]->data()[i], 0.0f) << q;
    }
    const Tensor a = m->forward(ids, 1, 8), b = back.model->forward(ids, 1, 8);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * static_cast<size_t>(a.numel())), 0);
  }
}

TEST_F(GgufGpt, QuantizedFilesReadBackAsTheirBlocksAndComputeOnThem) {
  auto m = gpt(true, false);
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  const int64_t T = static_cast<int64_t>(ids.size()), V = 300;
  for (const std::string type : {"q8_0", "q4_k"}) {
    const std::string path = write("g.gguf", gguf(*m, type));
    LoadedModel f32 = load(path);
    std::map<std::string, const Tensor*> got;
    for (const StateEntry& e : f32.model->state_dict()) got[e.name] = e.tensor;
    for (const StateEntry& e : m->state_dict()) {  // each part of attn_qkv its own rows' blocks
      if (e.tensor == nullptr) continue;
      const int64_t n = e.tensor->numel(), cols = e.shape().back();
      const QuantType& t = e.shape().size() == 1 ? quant_type_named("F32")
                           : cols % quant_type_named(type).block == 0 ? quant_type_named(type)
                                                                      : quant_type_named("Q8_0");
      std::vector<uint8_t> blocks(static_cast<size_t>(quant_bytes(t, n, e.name)));
      quantize(t, e.tensor->data(), n, blocks.data());
      std::vector<float> expect(static_cast<size_t>(n));
      dequantize(t, blocks.data(), n, expect.data());
      ASSERT_EQ(std::memcmp(expect.data(), got[e.name]->data(), 4 * static_cast<size_t>(n)), 0) << type << " " << e.name;
    }
    LoadedModel q = load_model(path);
    EXPECT_THAT(q.description, HasSubstr("integer products on its blocks")) << type;
    const Tensor want = f32.model->forward(ids, 1, T), fast = q.model->forward(ids, 1, T);
    float scale = 0, err = 0;
    for (int64_t i = 0; i < T * V; ++i) {
      scale = std::max(scale, std::fabs(want.data()[i]));
      err = std::max(err, std::fabs(fast.data()[i] - want.data()[i]));
    }
    EXPECT_LE(err, 0.05f * scale) << type;
    kernels::KvCache cache = q.model->make_cache(1, kernels::CacheDtype::kF32, T);
    std::vector<float> step(static_cast<size_t>(V));
    q.model->forward_cached_into(std::vector<int64_t>(ids.begin(), ids.end() - 1), 1, T - 1, cache, step.data());
    q.model->forward_cached_into({ids.back()}, 1, 1, cache, step.data());
    EXPECT_EQ(std::memcmp(step.data(), fast.data() + (T - 1) * V, step.size() * 4), 0) << type;
  }
}

// --quantize reads a float GGUF file of GPT-2 (into its blocks, as for every family); GPT-2's
// safetensors layouts are not quantized at load, and say how to get the file that is.
TEST_F(GgufGpt, QuantizingAtLoadReadsTheGgufFileAndNamesTheWayForSafetensors) {
  auto m = gpt(true, false);
  const std::string f32 = write("g.gguf", gguf(*m, "f32"));
  LoadOptions o;
  o.quantize = "q8_0";
  const LoadedModel q = load_model(f32, o);
  // 2 layers x (Q, K, V, out_proj, the feed-forward's two) + the embedding and the head
  EXPECT_THAT(q.description,
              HasSubstr("(GGUF, F32 weights, integer products on its blocks, 14 tensors converted F32 to Q8_0)"));
  const std::string book = dir_ + "/g.safetensors";
  write_files_atomically(model_family("gpt").checkpoint(*m, book, ""));
  EXPECT_THAT(error_of([&] { load_model(book, o); }),
              HasSubstr("GPT-2's weights in '" + book + "' are quantized by writing them as GGUF: qkv convert --weights " +
                        book + " --to gguf --type q8_0"));
}

TEST_F(GgufGpt, GptTwoFilesTheBooksModelCannotBeAreRefusedNamingTheKey) {
  auto m = gpt(true, false);
  const std::string good = gguf(*m, "q8_0");
  auto set = [](const std::string& key, GgufValue v) {
    return [key, v](std::vector<GgufMetadata>& meta) {
      for (GgufMetadata& e : meta)
        if (e.key == key) e.value = v;
    };
  };
  auto refused = [&](const std::string& bytes) { return error_of([&] { load(write("bad.gguf", bytes)); }); };
  EXPECT_THAT(refused(edited(good, set("gpt2.feed_forward_length", gguf_u32(768)))),
              HasSubstr("gpt2.feed_forward_length is 768; the book's GPT has 4 x embedding_length (1024)"));
  EXPECT_THAT(refused(edited(good, set("gpt2.attention.layer_norm_epsilon", gguf_f32(1e-6)))),
              HasSubstr("gpt2.attention.layer_norm_epsilon is 1e-06; the book's GPT normalises with 1e-5"));
  EXPECT_THAT(refused(edited(good, set("gpt2.attention.head_count", gguf_u32(3)))), HasSubstr("divisible by n_heads (3)"));
  // an attn_qkv of two parts' rows, not three
  EXPECT_THAT(refused(edited(
                  good, [](std::vector<GgufMetadata>&) {},
                  [](std::vector<GgufTensorSource>& t) {
                    for (GgufTensorSource& x : t)
                      if (x.name == "blk.1.attn_qkv.weight") {
                        x.shape = {512, 256};
                        auto whole = x.fill;
                        x.fill = [whole](uint8_t* out) {
                          std::vector<uint8_t> all(768 * 272);
                          whole(all.data());
                          std::memcpy(out, all.data(), 512 * 272);
                        };
                      }
                  })),
              HasSubstr("'blk.1.attn_qkv.weight' has shape (512, 256); the metadata's model has (768, 256) "
                        "(trf_blocks.1.att.W_query.weight and its neighbours)"));
}

// GPT-2's vocabulary (encoder.json, vocab.bpe) as GGUF's tokenizer.ggml.*: the tokenizer made from
// the file encodes and decodes as GPT-2's tiktoken encoding does.
TEST_F(GgufGpt, GptTwosVocabularyComesThroughTheFile) {
  LoadedModel m;
  Generator gen(1);
  m.model = std::make_unique<DecoderModel>(gpt_spec(50257, 8, 16, 2, 1, 0.0, false, false), gen);
  attach_tokenizer(m, std::make_unique<Gpt2Tokenizer>(load_gpt2()), "GPT-2's vocabulary", "");
  const std::optional<nlohmann::json> t = model_tokenizer_json(m, "preset");
  ASSERT_TRUE(t.has_value());
  std::vector<GgufMetadata> meta = {{"general.architecture", gguf_string("gpt2")}};
  for (GgufMetadata& x : gguf_tokenizer_metadata(*t, 50257, model_family("gpt"))) meta.push_back(std::move(x));
  const GgufFile f = GgufFile::parse(serialize_gguf(meta, {}), "t.gguf");
  EXPECT_EQ(f.string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f.strings("tokenizer.ggml.merges").size(), 50000u);
  EXPECT_EQ(f.unsigned_int("tokenizer.ggml.eos_token_id"), 50256u);
  const HfTokenizer built = HfTokenizer::build(gguf_tokenizer_parts(f), "t.gguf");
  const Encoding gpt2 = load_gpt2();
  for (const std::string text : {"Hello, world! It's 2026: 12345 tokens.", "  spaces\n\n\tand tabs  ",
                                 "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", "don't WE'LL I'M",
                                 "antidisestablishmentarianism internationalization", "<|endoftext|> after"}) {
    std::vector<TokenId> want = gpt2.encode(text, SpecialTokens::all());
    EXPECT_EQ(built.encode(text), want) << text;
    EXPECT_EQ(built.decode(want), text) << text;
  }
}

}  // namespace
}  // namespace qkv
