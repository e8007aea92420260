// Hostile Hugging Face folders and logits (issue 41's third pass): each refused with the cause
// named, before the model is allocated - a config.json larger than its weights, an unknown or
// unparseable model_type, keys of the wrong JSON type, rope_scaling with a factor of 0, numbers
// past int64, a GGUF file, an index naming shards that are not there, JSON past its size limit - a
// folder with both model.safetensors and an index read as Hugging Face reads it, and sampling from
// logits that hold NaN or inf refused (a temperature too small for logits / t: the greedy limit).
#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_support.h"
#include "qkv/core/json_read.h"
#include "qkv/core/limits.h"
#include "qkv/core/read_file.h"
#include "qkv/core/torch_math.h"
#include "qkv/models/family.h"
#include "qkv/models/generation.h"
#include "qkv/models/gguf_model.h"
#include "qkv/models/hf_folder.h"
#include "qkv/text/byte_level.h"
#include "qkv/text/utf8.h"
#include "test_support.h"

namespace qkv {
namespace {

using json = nlohmann::json;
using testing::HasSubstr;
using testing_support::error_of;
namespace fs = std::filesystem;

// A small model's folder, as save_hf_folder writes it (config.json, model.safetensors).
class HostileFolder : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing_support::temp_dir("qkv_hostile_folder_");
    Generator gen(7);
    DecoderModel model(llama_sizes(GetParam(), 48, 16, 24, 2, 4, 2, 4, 32), gen);
    save_hf_folder(model, dir_, /*bf16=*/false);
    held_ = model.num_parameters();
    config_ = json::parse(read_file(dir_ + "/config.json"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The folder with config.json's `key` set to `value` (null: removed); load_model's error.
  std::string load_with(const std::string& key, const json& value) {
    json c = config_;
    if (value.is_null()) c.erase(key);
    else c[key] = value;
    write("config.json", c.dump());
    return error_of([&] { load_model(dir_); });
  }
  void write(const std::string& name, const std::string& bytes) { std::ofstream(dir_ + "/" + name) << bytes; }

  std::string dir_;
  json config_;
  int64_t held_ = 0;
};

TEST_P(HostileFolder, AConfigLargerThanItsWeightsIsRefusedBeforeTheModelIsMade) {
  // 100,000 layers, or a vocabulary or width of millions, over a file of 2 layers - more than twice
  // the file's parameters - refused with both counts before any layer is allocated (a memory limit
  // of 64 MiB would stop any that were).
  testing_support::ScopedLimits keep;
  Limits l = limits();
  l.max_memory_bytes = int64_t{64} << 20;
  set_limits(l);
  for (const auto& [key, value] : std::vector<std::pair<std::string, int64_t>>{
           {"num_hidden_layers", 100000}, {"num_hidden_layers", 5}, {"vocab_size", 5'000'000},
           {"intermediate_size", 1'000'000}}) {
    const std::string e = load_with(key, value);
    EXPECT_THAT(e, HasSubstr("config.json' describes a " + GetParam() + " model of ")) << key;
    EXPECT_THAT(e, HasSubstr(str("hold only ", held_, " ("))) << key;
    EXPECT_THAT(e, HasSubstr("config.json does not describe these weights")) << key;
  }
  // within twice the file (a layer more or fewer): the model is made and the tensor named
  EXPECT_THAT(load_with("num_hidden_layers", 3), HasSubstr("has no tensor 'model.layers.2."));
  EXPECT_THAT(load_with("num_hidden_layers", 1), HasSubstr("model.layers.1."));
  EXPECT_THAT(load_with("num_hidden_layers", 2), "(no error)");
}

// A path holding a NUL byte is refused naming it: the system's calls would stop at the NUL and open
// another file (a library caller's "folder\0.gguf" loaded the folder). A FIFO is refused at once: the
// GGUF check's plain open waited for a writer forever.
TEST_P(HostileFolder, APathWithANulByteOrAFifoIsRefusedAtOnce) {
  const std::string nul = dir_ + std::string(1, '\0') + "x.gguf";
  EXPECT_THAT(error_of([&] { load_model(nul); }), HasSubstr("the path holds a NUL byte"));
  EXPECT_THAT(error_of([&] { read_file(nul); }), HasSubstr("the path holds a NUL byte"));
  EXPECT_THAT(error_of([&] { MappedFile f(dir_ + "/config.json" + std::string(1, '\0')); }),
              HasSubstr("the path holds a NUL byte"));
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(is_gguf_file(dir_ + "/fifo"));
  EXPECT_THAT(error_of([&] { load_model(dir_ + "/fifo"); }), HasSubstr("it is a FIFO (named pipe)"));
}

TEST_P(HostileFolder, AnUnknownOrUnreadableModelTypeIsNamed) {
  for (const json& type : {json("mistral"), json("gemma3"), json("")}) {
    const std::string e = load_with("model_type", type);
    EXPECT_THAT(e, HasSubstr("\"model_type\" is '" + type.get<std::string>() + "'")) << e;
    EXPECT_THAT(e, HasSubstr("qkv reads \"gpt2\", \"llama\", \"qwen2\", \"qwen3\"")) << e;
    EXPECT_THAT(e, testing::Not(HasSubstr("GPT model"))) << e;
  }
  EXPECT_THAT(load_with("model_type", 5), HasSubstr("\"model_type\" is 5; expected a string"));
  write("config.json", "{\"model_type\": \"llama\", ");
  EXPECT_THAT(error_of([&] { load_model(dir_); }), HasSubstr("config.json': not valid JSON at byte"));
  write("config.json", "[1, 2]");
  EXPECT_THAT(error_of([&] { load_model(dir_); }), HasSubstr("config.json' is not a JSON object"));
}

TEST_P(HostileFolder, AFolderWithoutModelTypeOrItsWeightsAloneAreNamed) {
  // config.json without model_type: only GPT-2's folders may say nothing
  EXPECT_THAT(load_with("model_type", nullptr),
              HasSubstr("config.json' has no \"model_type\" and '" + dir_ +
                        "/model.safetensors' is not GPT-2's weights (which is all a folder without one may hold)"));
  // the folder's model.safetensors given alone: the sizes are in config.json beside it
  EXPECT_THAT(error_of([&] { load_model(dir_ + "/model.safetensors"); }),
              HasSubstr("holds Hugging Face model.embed_tokens.weight (Llama 3 or Qwen weights): give the folder"));
}

TEST_P(HostileFolder, KeysOfTheWrongTypeAreNamed) {
  EXPECT_THAT(load_with("tie_word_embeddings", "yes"),
              HasSubstr("\"tie_word_embeddings\" is \"yes\"; expected true or false"));
  EXPECT_THAT(load_with("tie_word_embeddings", 1), HasSubstr("\"tie_word_embeddings\" is 1; expected true or false"));
  const std::string flag = GetParam() == "qwen2" ? "use_sliding_window" : "attention_bias";  // Qwen2: biases always
  EXPECT_THAT(load_with(flag, "no"), HasSubstr("\"" + flag + "\" is \"no\"; expected true or false"));
  EXPECT_THAT(load_with("rope_scaling", "llama3"), HasSubstr("\"rope_scaling\" is '\"llama3\"'; expected an object"));
  EXPECT_THAT(load_with("rope_scaling", json{{"rope_type", 3}}), HasSubstr("\"rope_type\" is 3; expected a string"));
  EXPECT_THAT(load_with("rope_scaling", json{{"type", json::array()}}), HasSubstr("\"type\" is []; expected a string"));
  EXPECT_THAT(load_with("hidden_size", 16.5), HasSubstr("\"hidden_size\" is 16.5; expected an integer"));
  // a number past double's range: the parser's words, without its library tag
  write("config.json", "{\"model_type\": \"" + GetParam() + "\", \"vocab_size\": 1e999}");
  const std::string overflow = error_of([&] { load_model(dir_); });
  EXPECT_THAT(overflow, HasSubstr("config.json': not valid JSON: 'number overflow parsing"));
  EXPECT_THAT(overflow, testing::Not(HasSubstr("json.exception")));
  // past int64: refused by name, never wrapped to a negative size
  for (const json& big : {json(uint64_t{1} << 63), json(std::numeric_limits<uint64_t>::max())})
    EXPECT_THAT(load_with("vocab_size", big),
                HasSubstr("\"vocab_size\" is " + big.dump() + "; expected an integer of at most 2^63-1"));
  const std::string huge = load_with("vocab_size", std::numeric_limits<int64_t>::max());
  EXPECT_THAT(huge, HasSubstr("9223372036854775807 x 16 exceeds the largest size"));
  EXPECT_THAT(huge, testing::Not(HasSubstr("-")));
}

TEST_P(HostileFolder, RopeScalingWithAFactorOfZeroOrLessIsRefused) {
  const json scaling = {{"rope_type", "llama3"}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 16}};
  for (double factor : {0.0, -1.0, -32.0}) {
    json r = scaling;
    r["factor"] = factor;
    EXPECT_THAT(load_with("rope_scaling", r), HasSubstr("rope_scaling: \"factor\" is " + str(factor) +
                                                        "; Llama 3's scaling needs a factor of at least 1"));
  }
  json r = scaling;
  r["factor"] = 8.0;
  EXPECT_EQ(load_with("rope_scaling", r), "(no error)");
  // Hugging Face's "no scaling", as null
  EXPECT_EQ(load_with("rope_scaling", json{{"rope_type", "default"}}), "(no error)");
  EXPECT_EQ(load_with("rope_scaling", json{{"type", "default"}, {"factor", 0}}), "(no error)");
  EXPECT_THAT(load_with("rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4}}), HasSubstr("rope_type 'yarn'"));
}

TEST_P(HostileFolder, ModelSafetensorsIsReadBeforeAnIndexAsHuggingFaceDoes) {
  // An index beside model.safetensors naming shards that are not there: Hugging Face reads the
  // single file, and so does qkv.
  const json gone = {{"weight_map", {{"model.embed_tokens.weight", "gone.safetensors"}}}};
  write("model.safetensors.index.json", gone.dump());
  EXPECT_EQ(error_of([&] { load_model(dir_); }), "(no error)");
  // Without model.safetensors, the index is read: every missing shard counted, the first named.
  fs::rename(dir_ + "/model.safetensors", dir_ + "/kept.safetensors");
  json map;
  for (int i = 0; i < 100000; ++i) map[str("t", i)] = str("shard-", i % 70000, ".safetensors");
  write("model.safetensors.index.json", json{{"weight_map", map}}.dump());
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { load_model(dir_); });
  EXPECT_THAT(e, HasSubstr("names the shard 'shard-0.safetensors', which is missing from"));
  EXPECT_THAT(e, HasSubstr("(70000 of its 70000 shards are)"));
  // not a timing test: a bound 100x what it takes, against the O(shards^2) scan it was (minutes)
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST_P(HostileFolder, AGgufFileIsNamedAsGguf) {
  std::string gguf = "GGUF";
  gguf += std::string("\x03\x00\x00\x00", 4) + std::string(64, '\x7f');  // version 3, then anything
  write("model.safetensors", gguf);
  EXPECT_THAT(error_of([&] { load_model(dir_); }),
              HasSubstr("model.safetensors' is a GGUF file (llama.cpp's format, its first bytes \"GGUF\"), not "
                        "safetensors: give the GGUF file itself"));
  write("model.gguf", gguf);  // read as GGUF: its metadata count (0x7f7f...) is more than the file holds
  EXPECT_THAT(error_of([&] { load_model(dir_ + "/model.gguf"); }), HasSubstr("model.gguf"));
  EXPECT_THAT(error_of([&] { load_model(dir_ + "/model.gguf"); }), HasSubstr("the metadata count 9187201950435737471"));
}

TEST_P(HostileFolder, WithoutTokenizerJsonTextIsRefusedSayingSo) {
  LoadedModel m = load_model(dir_);
  EXPECT_THAT(error_of([&] { m.encode("hi"); }), HasSubstr("has no tokenizer to read text with: '" + dir_ +
                                                           "' has no tokenizer.json"));
  EXPECT_THAT(error_of([&] { m.decode({1}); }), HasSubstr("has no tokenizer.json"));
}

// A tokenizer.json whose ids pass the model's vocabulary names its largest (a single added token of
// id 2^31 - 2 read as "has 2147483647 tokens", for a file of a few hundred).
TEST_P(HostileFolder, ATokenizerWhoseIdsPassTheVocabularyNamesTheLargest) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    utf8::append(spelled, byte_level_char(static_cast<uint8_t>(b)));
    vocab[spelled] = b;
  }
  const json tokenizer = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
                          {"added_tokens", json::array({{{"id", 2147483646}, {"content", "<big>"}, {"special", true}}})},
                          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
  write("tokenizer.json", tokenizer.dump());
  EXPECT_THAT(error_of([&] { load_model(dir_); }),
              HasSubstr("has ids up to 2147483646 (its largest), past the model's vocabulary of 48 (ids 0 .. 47)"));
}

INSTANTIATE_TEST_SUITE_P(Families, HostileFolder, testing::Values("llama", "qwen2", "qwen3"));

TEST(JsonSize, ALongerTextThanTheLimitIsRefusedNamingTheLimit) {
  testing_support::ScopedLimits keep;
  Limits l = limits();
  l.max_json_bytes = 1000;
  set_limits(l);
  std::string fits(998, ' '), over(999, ' ');
  fits.append("{}");
  over.append("{}");
  EXPECT_EQ(parse_json(fits, "x.json").dump(), "{}");
  EXPECT_THAT(error_of([&] { parse_json(over, "x.json"); }),
              HasSubstr("x.json is 1001 bytes of JSON, more than the 1000 qkv parses (max_json_bytes)"));
}

TEST(Sampling, NonFiniteLogitsAreRefusedAndATinyTemperatureIsGreedy) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> scratch;
  for (double temperature : {0.0, 1.0}) {
    SamplingOptions o;
    o.temperature = temperature;
    Generator gen(1);
    EXPECT_THAT(error_of([&] {
                  const std::vector<float> z = {0.5f, nan, 1.0f};
                  pick_next_token(z.data(), 3, o, gen, scratch);
                }),
                HasSubstr("logits hold NaN (at id 1 of 3)"));
    EXPECT_THAT(error_of([&] {
                  const std::vector<float> z = {0.5f, 1.0f, inf};
                  pick_next_token(z.data(), 3, o, gen, scratch);
                }),
                HasSubstr("logits hold +inf (at id 2 of 3)"));
    EXPECT_THAT(error_of([&] {
                  const std::vector<float> z = {-inf, -inf};
                  pick_next_token(z.data(), 2, o, gen, scratch);
                }),
                HasSubstr("logits are all -inf"));
    const std::vector<float> some = {-inf, 2.0f, -inf};  // -inf is a token never drawn
    EXPECT_EQ(pick_next_token(some.data(), 3, o, gen, scratch), 1);
  }
  // logits / 1e-45 overflows to inf (and inf - inf to NaN in softmax): the greedy limit, at every
  // scale of logits and with top-k
  for (float scale : {1.0f, 1e-3f, 1e30f}) {
    const std::vector<float> z = {0.25f * scale, -1.0f * scale, 3.0f * scale, 2.5f * scale};
    for (int64_t top_k : {0, 2}) {
      SamplingOptions o;
      o.temperature = 1e-45;
      o.top_k = top_k;
      Generator gen(3);
      EXPECT_EQ(pick_next_token(z.data(), 4, o, gen, scratch), 2) << scale << " " << top_k;
    }
  }
}

// Greedy picks the first index of the largest logit, as torch.argmax: on vocabularies of every
// length around the greedy scan's sixteen lanes, the largest value placed anywhere, tied at a later
// index in a later lane (as -0 beside +0) and in an earlier lane (15 on), among -inf tokens;
// against a one-pass scan written here.
TEST(Sampling, GreedyIsTheFirstLargestLogitAtEveryPlace) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> scratch;
  SamplingOptions o;  // temperature 0, no top-k
  o.temperature = 0.0;
  Generator gen(1), values(9);
  for (int64_t V : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1001}) {
    for (int64_t at = 0; at < V; at += std::max<int64_t>(1, V / 13)) {
      std::vector<float> z(static_cast<size_t>(V));
      for (float& x : z) x = static_cast<float>(values.random64() % 1000) / 1000.0f - 2.0f;  // in [-2, -1)
      if (V > 3) z[static_cast<size_t>((at + 2) % V)] = -inf;
      z[static_cast<size_t>(at)] = 0.0f;
      if (at + 3 < V) z[static_cast<size_t>(at + 3)] = -0.0f;  // equal to +0: the first stays the pick
      if (at + 15 < V) z[static_cast<size_t>(at + 15)] = 0.0f;  // the lane before at's, a later index
      int64_t naive = 0;
      for (int64_t j = 1; j < V; ++j)
        if (z[static_cast<size_t>(j)] > z[static_cast<size_t>(naive)]) naive = j;
      ASSERT_EQ(naive, at);  // the case is what it says
      EXPECT_EQ(pick_next_token(z.data(), V, o, gen, scratch), at) << "V " << V;
    }
  }
}

// Sampling draws next = argmax(probs / q), q = -log(1 - u) per entry, as torch.multinomial; the
// scan takes the logarithm only where an entry could win, and skips blocks of entries none of
// which can. Against every entry's quotient computed here, in full: flat, peaked and long-tailed
// logits (tails that underflow in exp), ties, -inf tokens and top-k, over many draws, vocabularies
// shorter and longer than the scan's blocks, the same ids; and the generator left at the same
// place.
TEST(Sampling, DrawsTheFirstLargestQuotientOfEveryEntry) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> scratch;
  Generator values(17);
  auto uniform = [&] { return static_cast<float>(values.random64() % 1000003) / 1000003.0f; };
  int64_t draws = 0, differing_from_argmax = 0;
  for (int kind = 0; kind < 5; ++kind) {
    for (int64_t V : {1, 3, 50, 511, 513, 1000, 20000}) {
      std::vector<float> z(static_cast<size_t>(V));
      for (size_t j = 0; j < z.size(); ++j) {
        const float r = uniform();
        z[j] = kind == 0   ? 0.0f                                 // flat: every entry ties
               : kind == 1 ? 8.0f * r                             // a spread of 8
               : kind == 2 ? (j % 97 == 5 ? 30.0f : -200.0f * r)  // peaks over a tail exp underflows
               : kind == 3 ? (j % 3 == 0 ? -inf : 3.0f * r)       // tokens never drawn
                           : std::round(4.0f * r);                // few values: many ties
      }
      if (kind == 3) z[0] = 1.0f;  // one finite logit at least
      for (double temperature : {1.0, 0.7, 3.0}) {
        for (int64_t top_k : {int64_t{0}, std::min<int64_t>(V, 5)}) {
          SamplingOptions o;
          o.temperature = temperature;
          o.top_k = top_k;
          for (uint64_t seed = 1; seed <= 6; ++seed) {
            // the reference: torch.softmax over the (top-k) logits / T (torch_softmax: its own
            // test holds it to PyTorch's rule), then every quotient, then the first index of the
            // largest
            std::vector<float> w = z;
            if (top_k > 0 && top_k < V) {
              std::vector<float> sorted = z;
              std::sort(sorted.begin(), sorted.end(), std::greater<float>());
              for (float& x : w)
                if (x < sorted[static_cast<size_t>(top_k - 1)]) x = -inf;
            }
            for (float& x : w) x = x / static_cast<float>(temperature);
            torch_softmax(w.data(), V);
            Generator ref_gen(seed);
            for (float& x : w) {
              const double u = static_cast<double>(ref_gen.random64() & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
              x = x / static_cast<float>(-std::log(1.0 - u));
            }
            int64_t expected = 0;
            for (int64_t j = 1; j < V; ++j)
              if (w[static_cast<size_t>(j)] > w[static_cast<size_t>(expected)]) expected = j;
            Generator gen(seed);
            const int64_t got = pick_next_token(z.data(), V, o, gen, scratch);
            ASSERT_EQ(got, expected) << "kind " << kind << " V " << V << " T " << temperature << " top-k " << top_k
                                     << " seed " << seed;
            ASSERT_EQ(gen.random64(), ref_gen.random64()) << "the draws taken: one per entry";
            ++draws;
            int64_t top = 0;
            for (int64_t j = 1; j < V; ++j)
              if (z[static_cast<size_t>(j)] > z[static_cast<size_t>(top)]) top = j;
            differing_from_argmax += got != top;
          }
        }
      }
    }
  }
  EXPECT_EQ(draws, 5 * 7 * 3 * 2 * 6);
  EXPECT_GT(differing_from_argmax, draws / 4);  // the cases do sample, not only pick the largest
}

}  // namespace
}  // namespace qkv
