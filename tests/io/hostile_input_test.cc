// Input made by someone else, as a hostile user would make it: deeply nested JSON, huge headers,
// sizes that overflow, checkpoints that ask for too much or hold damaged weights, hostile names,
// inputs that are not regular files. Each is refused with a short, escaped message; none crashes,
// recurses without bound or takes quadratic time.
#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/io/atomic_file.h"
#include "qkv/core/json_read.h"
#include "qkv/io/safetensors.h"
#include "qkv/text/json_string.h"
#include "qkv/text/vocab_files.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/trainer.h"
#include "test_support.h"
#include "tiny_training.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// --- helpers ----------------------------------------------------------------------------------

// Runs `f` on a thread with a 256 KiB stack and returns the qkv::Error message it threw ("" if
// none). Anything that recursed once per nesting level of a 100,000-deep input would overflow this
// stack and crash the test.
std::string error_on_small_stack(const std::function<void()>& f) {
  struct Job {
    const std::function<void()>* f;
    std::string error;
    std::string other;
  } job{&f, "", ""};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t thread;
  auto body = [](void* p) -> void* {
    Job* j = static_cast<Job*>(p);
    try {
      (*j->f)();
    } catch (const Error& e) {
      j->error = e.what();
    } catch (const std::exception& e) {
      j->other = e.what();
    }
    return nullptr;
  };
  EXPECT_EQ(pthread_create(&thread, &attr, body, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(job.other, "") << "a non-qkv exception";
  return job.error;
}

using testing_support::error_of;

std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  return testing_support::le64(header.size()) + header + data;
}

std::string nested(char open, char close, size_t depth, const std::string& inside = "") {
  return std::string(depth, open) + inside + std::string(depth, close);
}

// 100,000 levels of {"a": ...}.
std::string nested_objects(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

// A message fit to print: short, with no raw control character in it.
void expect_bounded_and_escaped(const std::string& msg) {
  EXPECT_LT(msg.size(), 2000u) << msg.substr(0, 2000);
  for (char c : msg) {
    const auto u = static_cast<unsigned char>(c);
    ASSERT_TRUE(u >= 0x20 || c == '\n') << "a raw control character " << static_cast<int>(u) << " in: " << msg;
  }
}

class Scratch {
 public:
  Scratch() {
    dir_ = fs::temp_directory_path() /
           ("qkv_hostile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

using LimitsGuard = testing_support::ScopedLimits;  // the limits in force, restored at the end of the scope

// A real checkpoint after two steps, as a safetensors file we can take apart and put back together.
struct CheckpointParts {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

CheckpointParts tiny_checkpoint(const std::string& path, TrainOptions o = testing_support::tiny_copy_task()) {
  Trainer t(o);
  t.step();
  t.step();
  save_checkpoint(path, t.checkpoint());
  TensorFile f = load_safetensors(path);
  CheckpointParts p;
  for (const std::string& name : f.names) p.tensors.push_back({name, f.tensors.at(name)});
  p.metadata = f.metadata;
  return p;
}

// --- JSON nesting -----------------------------------------------------------------------------

TEST(HostileJson, ADeeplyNestedHeaderIsRefusedWithoutRecursion) {
  for (const std::string& header : {nested('[', ']', 100000), nested_objects(100000),
                                    "{\"w\":" + nested('[', ']', 100000) + "}"}) {
    const std::string msg = error_on_small_stack([&] { parse_safetensors(safetensors_bytes(header), "deep.st"); });
    EXPECT_THAT(msg, HasSubstr("'deep.st': header"));
    EXPECT_THAT(msg, HasSubstr("nest more than 64 deep (json_max_depth)"));
    expect_bounded_and_escaped(msg);
  }
}

TEST(HostileJson, NestingUpToTheLimitIsReadAndOneMoreIsRefused) {
  const int depth = limits().json_max_depth;
  EXPECT_TRUE(parse_json(nested('[', ']', static_cast<size_t>(depth)), "x").is_array());
  EXPECT_THAT(error_of([&] { parse_json(nested('[', ']', static_cast<size_t>(depth) + 1), "x"); }),
              HasSubstr("at byte 64"));
  LimitsGuard guard;
  Limits l = limits();
  l.json_max_depth = 2;
  set_limits(l);
  EXPECT_THAT(error_of([] { parse_json("{\"a\":{\"b\":[1]}}", "the options"); }),
              HasSubstr("the options: arrays and objects nest more than 2 deep (json_max_depth), at byte 10"));
}

TEST(HostileJson, ADeeplyNestedCheckpointMetadataIsRefusedWithoutRecursion) {
  Scratch s;
  CheckpointParts p = tiny_checkpoint(s.path("c.st"));
  for (const char* key : {"options", "data.state", "evals"}) {
    CheckpointParts q = p;
    q.metadata[key] = nested('[', ']', 100000);
    save_safetensors(s.path("deep.st"), q.tensors, q.metadata);
    const std::string msg = error_on_small_stack([&] { load_checkpoint(s.path("deep.st")); });
    EXPECT_THAT(msg, HasSubstr("json_max_depth")) << key;
    expect_bounded_and_escaped(msg);
  }
}

TEST(HostileJson, ABadJsonErrorQuotesNoMoreThanAnExcerpt) {
  // An unclosed string of 10 MB: nlohmann's message would carry all of it ("last read: ...").
  const std::string header = "{\"w\":\"" + std::string(10'000'000, 'x') + "\x1b[31m";
  const std::string msg = error_of([&] { parse_safetensors(safetensors_bytes(header), "bad.st"); });
  EXPECT_THAT(msg, HasSubstr("'bad.st': header: not valid JSON at byte"));
  expect_bounded_and_escaped(msg);
}

// --- size ------------------------------------------------------------------------------------

TEST(HostileHeader, AHeaderWithAHundredThousandTensorsParses) {
  // Took minutes before: nlohmann's parser callback scanned the whole header object at the end of
  // every tensor's entry, quadratic in the number of tensors.
  constexpr int kTensors = 100000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i) {
    if (i) header += ',';
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[" + (i % 2 ? "0,3" : "0") +
              "],\"data_offsets\":[0,0]}";
  }
  header += "}";
  TensorFile f = parse_safetensors(safetensors_bytes(header), "many.st");
  ASSERT_EQ(f.names.size(), static_cast<size_t>(kTensors));
  ASSERT_EQ(f.tensors.size(), static_cast<size_t>(kTensors));
  EXPECT_EQ(f.get("t0").shape(), (Shape{0}));
  EXPECT_EQ(f.get("t99999").shape(), (Shape{0, 3}));
  // ... and a key given twice among them is still found.
  const std::string twice = header.substr(0, header.size() - 1) + ",\"t500\":{}}";
  EXPECT_THAT(error_of([&] { parse_safetensors(safetensors_bytes(twice), "many.st"); }),
              HasSubstr("the key 't500' is in one object more than once"));
}

TEST(HostileHeader, AShapeWhoseBytesOverflowIsRefusedNotWrapped) {
  // 2^61 F32 elements are 2^63 bytes: one past the largest int64.
  const std::string header = R"({"w":{"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,0]}})";
  EXPECT_THAT(error_of([&] { parse_safetensors(safetensors_bytes(header), "big.st"); }),
              HasSubstr("'big.st': tensor 'w': shape [2305843009213693952] is absurdly large: its bytes: "
                        "2305843009213693952 elements of 4 bytes each: the byte count exceeds the largest size"));
}

// --- messages --------------------------------------------------------------------------------

TEST(HostileMessages, AHostileTensorNameIsQuotedBounded) {
  // A 40 MB name with NUL, ESC and invalid UTF-8 in it.
  const std::string name = std::string("w\0\x1b[2J\xff", 7) + std::string(40'000'000, 'A');
  const std::string header = "{\"" + std::string("w\\u0000\\u001b[2J") + std::string(40'000'000, 'A') +
                             "\":{\"dtype\":\"Q99\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  const std::string msg = error_of([&] { parse_safetensors(safetensors_bytes(header, "abcd"), "evil.st"); });
  EXPECT_THAT(msg, HasSubstr("'evil.st': tensor 'w\\x00\\x1B[2JAAAA"));
  EXPECT_THAT(msg, HasSubstr("more bytes) has unknown dtype 'Q99'"));
  expect_bounded_and_escaped(msg);
  // get() on a file with hostile names lists them escaped and bounded too.
  TensorFile f;
  f.path = "evil.st";
  f.names = {name};
  const std::string missing = error_of([&] { f.get(name); });
  EXPECT_THAT(missing, HasSubstr("has no tensor 'w\\x00\\x1B[2J\\xFFAAA"));
  expect_bounded_and_escaped(missing);
}

TEST(HostileMessages, AJsonValueInAMessageIsBoundedAndEscaped) {
  nlohmann::json j = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) j.push_back(std::string("\x1b[31m\xc2\x9b"));  // ESC and the C1 control CSI (U+009B)
  const std::string shown = json_excerpt(j);
  EXPECT_THAT(shown, HasSubstr("[\"\\u001b[31m\\u009b\",\"\\u001b"));
  EXPECT_THAT(shown, HasSubstr("... (cut)"));
  expect_bounded_and_escaped(shown);
  EXPECT_EQ(json_excerpt(nlohmann::json{{"a", 2.5}}), "{\"a\":2.5}");
}

TEST(HostileMessages, JsonLinesAndRankFilesQuoteTheirLinesBounded) {
  const std::string line = "\x1b]0;owned\x07" + std::string(1'000'000, 'z');
  const std::string jsonl = error_of([&] { parse_json_string_lines(line, "--jsonl in.jsonl"); });
  EXPECT_THAT(jsonl, HasSubstr("in.jsonl line 1: expected one JSON string"));
  expect_bounded_and_escaped(jsonl);
  const std::string ranks = error_of([&] { parse_tiktoken_ranks(line, "r.tiktoken"); });
  EXPECT_THAT(ranks, HasSubstr("r.tiktoken line 1: expected"));
  expect_bounded_and_escaped(ranks);
  const std::string rank = error_of([&] { parse_tiktoken_ranks("YQ== " + line, "r.tiktoken"); });
  EXPECT_THAT(rank, HasSubstr("is not a rank"));
  expect_bounded_and_escaped(rank);
}

// --- inputs ----------------------------------------------------------------------------------

TEST(HostileInputs, ANonRegularInputIsRefused) {
  Scratch s;
  // Each returns at once: a FIFO with no writer would block a plain open, /dev/zero never ends.
  EXPECT_THAT(error_of([&] { read_file(s.path("")); }), HasSubstr("Is a directory; an input must be a regular file"));
  EXPECT_THAT(error_of([] { read_file("/dev/zero"); }),
              HasSubstr("cannot read '/dev/zero': it is a character device; an input must be a regular file"));
  ASSERT_EQ(::mkfifo(s.path("fifo").c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { read_file(s.path("fifo")); }), HasSubstr("it is a FIFO (named pipe)"));
  EXPECT_THAT(error_of([&] { load_safetensors(s.path("fifo")); }), HasSubstr("it is a FIFO (named pipe)"));
  EXPECT_THAT(error_of([&] { read_file(s.path("fifo"), StdinRule::kDashIsStdin); }),
              HasSubstr("a regular file (or - for standard input)"));
  // "-" is a file name unless the caller reads standard input.
  EXPECT_THAT(error_of([] { read_file("-"); }), HasSubstr("cannot open '-': No such file or directory"));
}

TEST(HostileInputs, AFileOverTheSizeLimitIsRefusedBeforeItIsRead) {
  Scratch s;
  write_file_atomically(s.path("big"), std::string(4096, 'x'));
  LimitsGuard guard;
  Limits l = limits();
  l.max_file_bytes = 4095;
  set_limits(l);
  EXPECT_THAT(error_of([&] { read_file(s.path("big")); }),
              HasSubstr("big': it is 4096 bytes, more than the file size limit of 4095 bytes (max_file_bytes)"));
  l.max_file_bytes = 4096;
  set_limits(l);
  EXPECT_EQ(read_file(s.path("big")).size(), 4096u);
}

// --- checkpoints -----------------------------------------------------------------------------

TEST(HostileCheckpoint, ACheckpointAskingForTooMuchIsRefusedBeforeAnythingIsBuilt) {
  Scratch s;
  const CheckpointParts p = tiny_checkpoint(s.path("c.st"));
  LimitsGuard guard;
  Limits l = limits();
  l.max_memory_bytes = int64_t{256} << 20;  // whatever this machine has
  set_limits(l);
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> change;
    const char* expected;
  };
  const Case cases[] = {
      {"d_model 2^62", [](nlohmann::json& o) { o["model"]["d_model"] = int64_t{1} << 62; }, "exceeds the largest size"},
      {"d_model 2^20", [](nlohmann::json& o) { o["model"]["d_model"] = int64_t{1} << 20; }, "max_memory_bytes"},
      {"a million layers", [](nlohmann::json& o) { o["model"]["num_layers"] = 1000000; }, "max_memory_bytes"},
      {"2^40 evaluation sequences", [](nlohmann::json& o) { o["eval_sequences"] = int64_t{1} << 40; },
       "the held-out set"},
      {"a 1e9-token task", [](nlohmann::json& o) { o["task_length"] = 1000000000; }, "max_memory_bytes"},
      {"context_length 2^32", [](nlohmann::json& o) { o["model"]["context_length"] = int64_t{1} << 32; },
       "max_memory_bytes"},
      {"a batch of 2^40", [](nlohmann::json& o) { o["batch_size"] = int64_t{1} << 40; }, "max_memory_bytes"},
      {"a negative size", [](nlohmann::json& o) { o["model"]["vocab_size"] = -6; },
       "model.vocab_size (--vocab-size) is -6; expected at least 0"},
      // Within the limits, but not what the tensors are: refused before a model is built, too.
      {"d_model 16", [](nlohmann::json& o) { o["model"]["d_model"] = 16; },
       "tensor 'tok_emb.weight' has shape (6, 8) but its options (vocab_size 6, context_length 6, d_model 16) make "
       "it (6, 16)"},
      {"two layers", [](nlohmann::json& o) { o["model"]["num_layers"] = 2; }, "has no tensor 'blocks.1.W_query.weight'"},
  };
  for (const Case& c : cases) {
    CheckpointParts q = p;
    nlohmann::json options = nlohmann::json::parse(q.metadata.at("options"));
    c.change(options);
    q.metadata["options"] = options.dump();
    save_safetensors(s.path("big.st"), q.tensors, q.metadata);
    const std::string msg = error_of([&] { load_checkpoint(s.path("big.st")); });
    EXPECT_THAT(msg, HasSubstr("big.st': ")) << c.what;
    EXPECT_THAT(msg, HasSubstr(c.expected)) << c.what;
  }
  // The Trainer checks the same before it builds a model from options given in code.
  TrainOptions o = testing_support::tiny_copy_task();
  o.model.d_model = int64_t{1} << 20;
  EXPECT_THAT(error_of([&] { Trainer t(o); }), HasSubstr("max_memory_bytes"));
}

TEST(HostileCheckpoint, EveryNumberOfACheckpointParsesExactly) {
  Scratch s;
  const CheckpointParts p = tiny_checkpoint(s.path("c.st"));
  for (const char* step : {"3x", "2 ", " 2", "+2", "-1", "", "0x2", "2.0", "99999999999999999999"}) {
    CheckpointParts q = p;
    q.metadata["step"] = step;
    save_safetensors(s.path("bad.st"), q.tensors, q.metadata);
    EXPECT_THAT(error_of([&] { load_checkpoint(s.path("bad.st")); }),
                HasSubstr("its step must be a non-negative integer, not '" + std::string(step) + "'"));
  }
  CheckpointParts q = p;
  q.metadata["step"] = "3";  // a whole number, but not the length of the loss history (2)
  save_safetensors(s.path("bad.st"), q.tensors, q.metadata);
  EXPECT_THAT(error_of([&] { load_checkpoint(s.path("bad.st")); }), HasSubstr("its loss history has 2 entries for 3 steps"));
  q = p;
  q.metadata["evals"] = R"([{"step": 1.5, "loss": 1, "accuracy": 0.5}])";
  save_safetensors(s.path("bad.st"), q.tensors, q.metadata);
  EXPECT_THAT(error_of([&] { load_checkpoint(s.path("bad.st")); }),
              HasSubstr("an evaluation must be {\"step\": N, \"loss\": X, \"accuracy\": X}, not {\"accuracy\":0.5"));
  EXPECT_EQ(load_checkpoint(s.path("c.st")).step, 2);
}

TEST(HostileCheckpoint, ANonFiniteCheckpointIsRefusedNamingTheTensor) {
  Scratch s;
  const CheckpointParts p = tiny_checkpoint(s.path("c.st"));
  for (const char* name : {"blocks.0.W_key.weight", "optimizer.exp_avg_sq.out_head.bias"}) {
    CheckpointParts q = p;
    for (auto& [n, t] : q.tensors)
      if (n == name) {
        t = t.clone();
        t.data()[t.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
      }
    save_safetensors(s.path("nan.st"), q.tensors, q.metadata);
    EXPECT_THAT(error_of([&] { load_checkpoint(s.path("nan.st")); }),
                HasSubstr("tensor '" + std::string(name) + "' holds a value that is not finite"));
  }
}

TEST(HostileCheckpoint, ADataRowOutsideTheDataIsRefusedOnResume) {
  Scratch s;
  // Fixed batches: 3 rows of 4 tokens.
  save_safetensors(s.path("data.st"), {{"inputs", Tensor::from({3, 4}, std::vector<float>(12, 1.0f))},
                                       {"targets", Tensor::from({3, 4}, std::vector<float>(12, 2.0f))}});
  TrainOptions o = testing_support::tiny_copy_task();
  o.task = TrainTask::kData;
  o.data_file = s.path("data.st");
  CheckpointParts p = tiny_checkpoint(s.path("c.st"), o);
  // Not a row number at all: refused when the checkpoint is loaded.
  for (const char* row : {"-1", "-9223372036854775808", "1.5", "\"1\""}) {
    CheckpointParts q = p;
    q.metadata["data.state"] = std::string("{\"row\": ") + row + "}";
    save_safetensors(s.path("row.st"), q.tensors, q.metadata);
    EXPECT_THAT(error_of([&] { load_checkpoint(s.path("row.st")); }),
                HasSubstr("its data state must be {\"row\": N}, not {\"row\":" + std::string(row) + "}"));
  }
  // A row number, but past the data's rows: refused on resume, before a batch is read from it.
  for (const char* row : {"3", "18446744073709551615"}) {
    CheckpointParts q = p;
    q.metadata["data.state"] = std::string("{\"row\": ") + row + "}";
    save_safetensors(s.path("row.st"), q.tensors, q.metadata);
    const Checkpoint c = load_checkpoint(s.path("row.st"));
    Trainer t(c.options);
    EXPECT_THAT(error_of([&] { t.restore(c); }), HasSubstr("the saved data state's row " + std::string(row) +
                                                           " is not a row of its 3 rows"));
  }
}

TEST(HostileCheckpoint, ATokenIdBeyondTwoToTheTwentyFourInDataIsRefused) {
  Scratch s;
  for (float id : {9e18f, 16777216.0f, 1e30f}) {
    std::vector<float> in(4, 1.0f);
    in[2] = id;
    save_safetensors(s.path("data.st"), {{"inputs", Tensor::from({1, 4}, in)},
                                         {"targets", Tensor::from({1, 4}, std::vector<float>(4, 2.0f))}});
    // beyond int64, the reader of whole numbers names it first
    EXPECT_THAT(error_of([&] { FixedBatches b(s.path("data.st"), 0); }),
                HasSubstr(id == 1e30f ? "tensor 'inputs' element 2 is 1e+30; expected a whole number"
                                      : "inputs must hold whole ids in [0, 2^24); found"));
  }
}

}  // namespace
}  // namespace qkv
