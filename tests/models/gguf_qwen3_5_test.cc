// Qwen3.5 through llama.cpp's GGUF files ("qwen35", models/gguf_model.h): qkv's writer and reader
// against each other and against the layout written out by hand here (norms as 1 + weight, A_log as
// -exp, the convolution squeezed, the value heads tiled where the key heads are fewer), and the
// files qkv cannot write or read refused naming the field. llama.cpp itself reads qkv's files in
// tests/pytorch/test_gguf_llamacpp.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "model_support.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/read_file.h"
#include "qkv/io/gguf.h"
#include "qkv/models/decoder.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/qwen3_5.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/vocab_files.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;
using testing_support::temp_dir;

// A small Qwen3.5: layers linear, linear, full, linear, linear, full (full_attention_interval 3),
// 4 value heads over 2 key heads of 32 (rows of whole Q8_0 blocks), partial rotary.
nlohmann::json small_config(bool tied, int64_t value_heads = 4, int64_t key_dim = 32, int64_t value_dim = 32) {
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < 6; ++i) types.push_back((i + 1) % 3 == 0 ? "full_attention" : "linear_attention");
  const nlohmann::json text = {
      {"vocab_size", 50}, {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 6},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16}, {"max_position_embeddings", 32},
      {"rope_parameters", {{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}}, {"layer_types", types},
      {"linear_num_value_heads", value_heads}, {"linear_num_key_heads", 2}, {"linear_key_head_dim", key_dim},
      {"linear_value_head_dim", value_dim}, {"linear_conv_kernel_dim", 4}};
  return {{"model_type", "qwen3_5"}, {"tie_word_embeddings", tied}, {"text_config", text}};
}

std::unique_ptr<DecoderModel> draw(const nlohmann::json& config, uint64_t seed = 7) {
  Generator gen(seed);
  auto m = std::make_unique<DecoderModel>(read_qwen3_5_config(config), gen);
  Generator off(seed + 1);  // the norms and dt_bias off their initial values, A_log spread
  for (const StateEntry& e : m->state_dict())
    if (e.name.find("norm") != std::string::npos || e.name.ends_with("dt_bias") || e.name.ends_with("A_log")) {
      std::vector<float> d(static_cast<size_t>(e.tensor->numel()));
      off.normal(d.data(), e.tensor->numel(), 0.0, 0.3);
      for (int64_t i = 0; i < e.tensor->numel(); ++i) e.tensor->data()[i] += d[static_cast<size_t>(i)];
    }
  m->eval();
  return m;
}

class GgufQwen3_5 : public testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir("qkv_gguf_qwen3_5_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  static std::string gguf(LanguageModel& m, const std::string& type) {
    std::vector<std::string> notes;
    return gguf_model_bytes(m, nullptr, type, notes);
  }
  static LoadedModel load_f32(const std::string& path) {
    LoadOptions o;
    o.dtype = Dtype::kF32;
    o.float_weights = true;
    return load_model(path, o);
  }

  std::string dir_;
};

const float* state(const LanguageModel& m, const std::string& name) {
  for (const StateEntry& e : const_cast<LanguageModel&>(m).state_dict())
    if (e.name == name) return e.tensor->data();
  ADD_FAILURE() << "no " << name;
  return nullptr;
}

// The F32 file holds llama.cpp's layout, written out here from the state: value head j of the
// file is the model's head (j % Hk) r + j / Hk.
TEST_F(GgufQwen3_5, TheFileHoldsLlamaCppsLayout) {
  auto m = draw(small_config(false));
  const GgufFile f = GgufFile::parse(gguf(*m, "f32"), "m.gguf");
  EXPECT_EQ(f.string("general.architecture"), "qwen35");
  EXPECT_EQ(f.unsigned_int("qwen35.full_attention_interval"), 3u);
  EXPECT_EQ(f.unsigned_int("qwen35.rope.dimension_count"), 4u);
  EXPECT_EQ(f.unsigned_int("qwen35.ssm.time_step_rank"), 4u);
  EXPECT_EQ(f.unsigned_int("qwen35.ssm.group_count"), 2u);
  EXPECT_EQ(f.unsigned_int("qwen35.ssm.inner_size"), 128u);
  const std::string L = "model.language_model.layers.0.linear_attn.";
  const int64_t Hk = 2, Hv = 4, r = 2, D = 32, E = 64, qk = 2 * Hk * D;
  auto file = [&](const std::string& name) {
    std::vector<float> v(static_cast<size_t>(f.tensor(name).numel()));
    f.read_floats(name, v.data());
    return v;
  };
  auto model_head = [&](int64_t j) { return (j % Hk) * r + j / Hk; };
  const std::vector<float> qkv = file("blk.0.attn_qkv.weight"), gate = file("blk.0.attn_gate.weight"),
                           a = file("blk.0.ssm_a"), conv = file("blk.0.ssm_conv1d.weight"),
                           out = file("blk.0.ssm_out.weight"), norm = file("blk.0.attn_norm.weight"),
                           qn = file("blk.2.attn_q_norm.weight"), ssm_norm = file("blk.0.ssm_norm.weight");
  const float *mqkv = state(*m, L + "in_proj_qkv.weight"), *mz = state(*m, L + "in_proj_z.weight"),
              *ma = state(*m, L + "A_log"), *mconv = state(*m, L + "conv1d.weight"),
              *mout = state(*m, L + "out_proj.weight"),
              *mnorm = state(*m, "model.language_model.layers.0.input_layernorm.weight"),
              *mqn = state(*m, "model.language_model.layers.2.self_attn.q_norm.weight"),
              *mssm = state(*m, L + "norm.weight");
  EXPECT_EQ(f.tensor("blk.0.ssm_conv1d.weight").shape, (Shape{qk + Hv * D, 4}));
  for (int64_t j = 0; j < Hv; ++j) {
    const int64_t h = model_head(j);
    EXPECT_EQ(a[j], -std::exp(ma[h])) << j;
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t c = 0; c < E; ++c) {
        ASSERT_EQ(qkv[((qk + j * D + d) * E + c)], mqkv[(qk + h * D + d) * E + c]) << j << " " << d;
        ASSERT_EQ(gate[(j * D + d) * E + c], mz[(h * D + d) * E + c]) << j << " " << d;
        ASSERT_EQ(out[c * Hv * D + j * D + d], mout[c * Hv * D + h * D + d]) << j << " " << d;
      }
      for (int64_t k = 0; k < 4; ++k) ASSERT_EQ(conv[(qk + j * D + d) * 4 + k], mconv[(qk + h * D + d) * 4 + k]);
    }
  }
  for (int64_t i = 0; i < qk * E; ++i) ASSERT_EQ(qkv[i], mqkv[i]) << i;  // q and k's rows as they are
  for (int64_t i = 0; i < E; ++i) EXPECT_EQ(norm[i], 1.0f + mnorm[i]);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(qn[i], 1.0f + mqn[i]);
  for (int64_t i = 0; i < D; ++i) EXPECT_EQ(ssm_norm[i], mssm[i]);  // the gated norm scales by its weight
  EXPECT_FALSE(f.contains("blk.0.ffn_norm.weight"));
  EXPECT_TRUE(f.contains("blk.0.post_attention_norm.weight"));
  EXPECT_EQ(f.tensor("blk.0.ssm_conv1d.weight").type->name, std::string("F32"));
}

// Read back: every tensor the model's (the norms and A_log through 1 + w and -exp(w): within a
// rounding of their scale), the logits within 1e-6 of the model's; tied and untied.
TEST_F(GgufQwen3_5, AnF32FileReadsBackAsTheModel) {
  for (const bool tied : {false, true}) {
    auto m = draw(small_config(tied));
    LoadedModel back = load_f32(write("m.gguf", gguf(*m, "f32")));
    EXPECT_EQ(back.model->family().name, "qwen3_5");
    const std::vector<StateEntry> want = m->state_dict(), got = back.model->state_dict();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].name, got[i].name);
      const bool mapped = want[i].name.find("norm.") != std::string::npos || want[i].name.ends_with("A_log");
      for (int64_t k = 0; k < want[i].tensor->numel(); ++k) {
        const float w = want[i].tensor->data()[k], g = got[i].tensor->data()[k];
        if (mapped)
          ASSERT_NEAR(g, w, 2e-7 * (1.0f + std::fabs(w))) << want[i].name << "[" << k << "]";
        else
          ASSERT_EQ(g, w) << want[i].name << "[" << k << "]";
      }
    }
    const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 44, 12};
    const Tensor a = m->forward(ids, 1, 10), b = back.model->forward(ids, 1, 10);
    float scale = 0, diff = 0;
    for (int64_t k = 0; k < a.numel(); ++k) {
      scale = std::max(scale, std::fabs(a.data()[k]));
      diff = std::max(diff, std::fabs(a.data()[k] - b.data()[k]));
    }
    EXPECT_LE(diff, 1e-6f * scale) << "tied " << tied;
  }
}

// In the other types: the products' weights decode as the type's blocks of the model's (in the
// file's tiled order), the convolution and 1-D tensors stay F32; generation loads them in bf16.
TEST_F(GgufQwen3_5, EveryTypeReadsBackAsItsBlocksDecode) {
  auto m = draw(small_config(false));
  const std::string z = "model.language_model.layers.1.linear_attn.in_proj_z.weight";
  const std::vector<StateEntry> want = m->state_dict();
  for (const std::string type : {"bf16", "q8_0", "q4_0"}) {
    const std::string path = write("m.gguf", gguf(*m, type));
    LoadedModel back = load_f32(path);
    for (const StateEntry& e : want) {
      if (e.name != z) continue;  // in_proj_z: rows reordered by heads in the file, read back in place
      const QuantType& t = quant_type_named(type);
      const int64_t n = e.tensor->numel();
      std::vector<uint8_t> blocks(static_cast<size_t>(quant_bytes(t, n, e.name)));
      quantize(t, e.tensor->data(), n, blocks.data());
      std::vector<float> expect(static_cast<size_t>(n));
      dequantize(t, blocks.data(), n, expect.data());
      ASSERT_EQ(std::memcmp(expect.data(), state(*back.model, z), 4 * static_cast<size_t>(n)), 0) << type;
    }
    const GgufFile f(path);
    EXPECT_EQ(f.tensor("blk.1.ssm_conv1d.weight").type->name, std::string("F32")) << type;
    EXPECT_EQ(f.tensor("blk.1.attn_gate.weight").type->name, quant_type_named(type).name) << type;
    LoadedModel fast = load_model(path);
    EXPECT_TRUE(fast.model->bf16_only()) << type;
    // a step reads the file's blocks for every product: the linear layers' five, the gated
    // attention's packed queries and gates (split by rows), the head (the embedding: one row a token)
    int64_t want_bytes = 0;
    for (const GgufTensor& t : f.tensors())
      if (t.shape.size() == 2 && !t.name.ends_with("ssm_conv1d.weight") && t.name != "token_embd.weight")
        want_bytes += type == "bf16" ? 2 * t.numel() : t.bytes;
    EXPECT_EQ(dynamic_cast<const DecoderModel&>(*fast.model).step_weight_bytes(), want_bytes) << type;
    const std::vector<int64_t> ids = {3, 1, 4, 1, 5};
    const Tensor a = back.model->forward(ids, 1, 5), b = fast.model->forward(ids, 1, 5);
    float scale = 0, diff = 0;
    for (int64_t k = 0; k < a.numel(); ++k) {
      scale = std::max(scale, std::fabs(a.data()[k]));
      diff = std::max(diff, std::fabs(a.data()[k] - b.data()[k]));
    }
    EXPECT_LE(diff, 0.05f * scale) << type;  // bf16 products on the same decoded weights
  }
}

TEST_F(GgufQwen3_5, ModelsLlamaCppCannotReadAreNotWritten) {
  auto widths = draw(small_config(false, 4, 16, 32));
  EXPECT_THAT(error_of([&] { gguf(*widths, "f32"); }),
              HasSubstr("llama.cpp's qwen35 reads linear layers whose key and value heads are of one width "
                        "(ssm.state_size); this model's are 16 (linear_key_head_dim) and 32 (linear_value_head_dim)"));
  nlohmann::json c = small_config(false);
  c["text_config"]["layer_types"][1] = "full_attention";
  auto pattern = draw(c);
  EXPECT_THAT(error_of([&] { gguf(*pattern, "f32"); }),
              HasSubstr("the model's layers are linear, full, full, linear, linear, full; llama.cpp's qwen35 has "
                        "a full-attention layer exactly at every full_attention_interval-th layer"));
  c = small_config(false);
  c["text_config"]["attn_output_gate"] = false;
  auto ungated = draw(c);
  EXPECT_THAT(error_of([&] { gguf(*ungated, "f32"); }), HasSubstr("has attn_output_gate false"));
}

TEST_F(GgufQwen3_5, BrokenFilesAreRefusedNamingTheField) {
  auto m = draw(small_config(false));
  const std::string good = gguf(*m, "f32");
  auto set = [](std::vector<GgufMetadata>& meta, const std::string& key, GgufValue v) {
    for (GgufMetadata& x : meta)
      if (x.key == key) x.value = std::move(v);
  };
  auto refused = [&](const std::string& bytes) {
    return error_of([&] { load_f32(write("bad.gguf", bytes)); });
  };
  EXPECT_THAT(refused(edited(good, [&](auto& meta) { set(meta, "qwen35.ssm.inner_size", gguf_u32(130)); })),
              HasSubstr("qwen35.ssm.inner_size (130) is not a whole number of ssm.time_step_rank's (4) value heads"));
  EXPECT_THAT(refused(edited(good, [&](auto& meta) { set(meta, "qwen35.rope.dimension_count", gguf_u32(17)); })),
              HasSubstr("qwen35.rope.dimension_count (17) is not between 1 and attention.key_length (16)"));
  EXPECT_THAT(refused(edited(good, [&](auto& meta) { set(meta, "qwen35.full_attention_interval", gguf_u32(0)); })),
              HasSubstr("qwen35.full_attention_interval is 0; expected at least 1"));
  // a layer count past any model's is named as such (it read "layer_types has 1048576 entries"), in
  // the file's key, and so in a config.json without layer_types
  EXPECT_THAT(refused(edited(good, [&](auto& meta) { set(meta, "qwen35.block_count", gguf_u32(2000000)); })),
              HasSubstr("qwen35.block_count (2000000) is more than the 1048576 layers qkv reads"));
  nlohmann::json c = small_config(false);
  c["text_config"].erase("layer_types");
  c["text_config"]["num_hidden_layers"] = 2000000;
  EXPECT_THAT(error_of([&] { read_qwen3_5_config(c); }),
              HasSubstr("\"num_hidden_layers\" (2000000) is more than the 1048576 layers qkv reads"));
  // an interval the tensors do not follow: layer 2's attention tensors where a linear layer's are wanted
  EXPECT_THAT(refused(edited(good, [&](auto& meta) { set(meta, "qwen35.full_attention_interval", gguf_u32(2)); })),
              HasSubstr("has no tensor 'blk.1.attn_q.weight'"));
  EXPECT_THAT(refused(edited(good, [&](auto& meta) {
                std::erase_if(meta, [](const GgufMetadata& x) { return x.key == "qwen35.ssm.conv_kernel"; });
              })),
              HasSubstr("qwen35.ssm.conv_kernel"));
  // ssm_a is -exp(A_log): a value that is not negative has no A_log
  std::vector<float> positive = {-1.0f, 0.5f, -2.0f, -3.0f};
  EXPECT_THAT(refused(edited(good, [](auto&) {},
                             [&](std::vector<GgufTensorSource>& t) {
                               for (GgufTensorSource& x : t)
                                 if (x.name == "blk.3.ssm_a")
                                   x.fill = [&](uint8_t* out) { std::memcpy(out, positive.data(), 16); };
                             })),
              HasSubstr("blk.3.ssm_a[1] is 0.5; expected negative values (-exp(A_log))"));
}

// llama.cpp's converter keeps Qwen3.5's multi-token-prediction layer (mtp.*) after the model's:
// block_count counts it, nextn_predict_layers says how many there are, blk.L.* holds a full-attention
// block and its nextn.* tensors. qkv reads the model before them and leaves them unread.
TEST_F(GgufQwen3_5, MultiTokenPredictionLayersAreLeftUnread) {
  auto m = draw(small_config(false));
  const std::string plain = gguf(*m, "f32");
  const GgufFile f = GgufFile::parse(plain, "m.gguf");
  std::vector<float> ones(128, 1.0f);
  auto with_mtp = [&](uint64_t blocks, uint64_t later, const std::string& layer) {
    return edited(
        plain,
        [&](std::vector<GgufMetadata>& meta) {
          for (GgufMetadata& x : meta)
            if (x.key == "qwen35.block_count") x.value = gguf_u32(blocks);
          meta.push_back({"qwen35.nextn_predict_layers", gguf_u32(later)});
        },
        [&](std::vector<GgufTensorSource>& t) {
          const size_t n = t.size();
          for (size_t i = 0; i < n; ++i)  // layer 2's full attention as the later layer's
            if (t[i].name.starts_with("blk.2."))
              t.push_back({"blk." + layer + "." + t[i].name.substr(6), t[i].shape, t[i].type, t[i].fill});
          const QuantType* f32 = &quant_type_named("F32");
          auto fill = [&](uint8_t* out, size_t n_floats) { std::memcpy(out, ones.data(), n_floats * 4); };
          t.push_back({"blk." + layer + ".nextn.eh_proj.weight", {64, 128}, f32,
                       [&, fill](uint8_t* out) {
                         for (int r = 0; r < 64; ++r) fill(out + r * 128 * 4, 128);
                       }});
          for (const char* norm : {"enorm", "hnorm", "shared_head_norm"})
            t.push_back({"blk." + layer + ".nextn." + norm + ".weight", {64}, f32, [fill](uint8_t* out) { fill(out, 64); }});
        });
  };
  ASSERT_FALSE(f.has("qwen35.nextn_predict_layers"));
  LoadedModel back = load_f32(write("mtp.gguf", with_mtp(7, 1, "6")));
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  const Tensor a = load_f32(write("plain.gguf", plain)).model->forward(ids, 1, 8), b = back.model->forward(ids, 1, 8);
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t k = 0; k < a.numel(); ++k) ASSERT_EQ(a.data()[k], b.data()[k]) << k;
  auto refused = [&](const std::string& bytes) {
    return error_of([&] { load_f32(write("bad.gguf", bytes)); });
  };
  EXPECT_THAT(refused(with_mtp(7, 7, "6")),
              HasSubstr("qwen35.nextn_predict_layers (7) is not fewer than block_count (7)"));
  // a layer past block_count is no one's
  EXPECT_THAT(refused(with_mtp(7, 1, "7")),
              HasSubstr("tensor 'blk.7.attn_q.weight' is of layer 7; the metadata's qwen35.block_count is 7"));
}

// Qwen3.5's split (letters' runs take their combining marks) as GGUF's pre "qwen35", and back: here
// on Qwen3's vocabulary (Qwen3.5's own 248,320 tokens are not installed).
TEST(GgufQwen3_5Tokenizer, Qwen3_5sSplitComesThroughTheFile) {
  if (!find_hf_vocab("qwen3")) GTEST_SKIP() << "qwen3's tokenizer.json is not installed (scripts/setup.sh installs it)";
  nlohmann::json tokenizer = nlohmann::json::parse(read_file(*find_hf_vocab("qwen3")));
  const std::string qwen35 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  int splits = 0;
  for (nlohmann::json& p : tokenizer["pre_tokenizer"]["pretokenizers"])
    if (p["type"] == "Split") p["pattern"]["Regex"] = qwen35, ++splits;
  ASSERT_EQ(splits, 1);
  const HfTokenizer qwen3 = HfTokenizer::load("qwen3");
  const HfTokenizer original = HfTokenizer::parse(tokenizer.dump(), "qwen3.5-like tokenizer.json");
  std::vector<GgufMetadata> meta = {{"general.architecture", gguf_string("qwen35")}};
  for (GgufMetadata& m : gguf_tokenizer_metadata(tokenizer, 151936, model_family("qwen3_5"))) meta.push_back(std::move(m));
  const GgufFile f = GgufFile::parse(serialize_gguf(meta, {}), "t.gguf");
  EXPECT_EQ(f.string("tokenizer.ggml.pre"), "qwen35");
  const HfTokenizer built = HfTokenizer::build(gguf_tokenizer_parts(f), "t.gguf");
  const HfTokenizer back = HfTokenizer::parse(gguf_tokenizer_json(f).dump(), "t.gguf");
  // Thai "sawatdi": its vowel and tone marks (\p{M}) split Qwen3's letter runs, not Qwen3.5's
  const std::string marks = "\xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1\xe0\xb8\xaa\xe0\xb8\x94\xe0\xb8\xb5";
  EXPECT_NE(original.encode(marks), qwen3.encode(marks)) << "the two splits agree on a word with marks";
  for (const std::string& text : {std::string("Hello, world! It's 2026."), marks, std::string("e\xcc\x81 caf\xc3\xa9"),
                                 std::string("<|im_start|>user\nhi<|im_end|>")}) {
    EXPECT_EQ(built.encode(text), original.encode(text)) << text;
    EXPECT_EQ(back.encode(text), original.encode(text)) << text;
  }
}

// The value heads' order: the file's head j is the state's (j % Hk) r + j / Hk, and back.
TEST(GgufOrder, TiledValueHeadsAreTheirInverse) {
  const GgufOrder o{GgufOrder::kTiledValueHeads, 6, 2, 3, 2, false};  // 6 heads of 2 rows from row 3, r = 3
  const std::vector<int64_t> want = {0, 1, 2, 3, 4, 9, 10, 5, 6, 11, 12, 7, 8, 13, 14, 15};
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(o.state_index(i), want[static_cast<size_t>(i)]) << i;
  std::vector<float> rows(16 * 3);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  std::vector<float> x = rows;
  gguf_reorder(o, x.data(), 16, 3, sizeof(float), false);  // the state's rows into the file's order
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(x[static_cast<size_t>(i * 3 + c)], rows[static_cast<size_t>(want[i] * 3 + c)]);
  gguf_reorder(o, x.data(), 16, 3, sizeof(float), true);
  EXPECT_EQ(x, rows);
  GgufOrder columns = o;
  columns.columns = true;  // the same on each row's columns
  std::vector<float> y(2 * 20);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i);
  std::vector<float> z = y;
  gguf_reorder(columns, z.data(), 2, 20, sizeof(float), false);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(z[static_cast<size_t>(r * 20 + i)], y[static_cast<size_t>(r * 20 + want[i])]);
  gguf_reorder(columns, z.data(), 2, 20, sizeof(float), true);
  EXPECT_EQ(z, y);
}

}  // namespace
}  // namespace qkv
