// Training data sources. See include/qkv/train/data.h.
#include "qkv/train/data.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/tokenizer.h"
#include "qkv/text/hex.h"

namespace qkv {

std::string generator_state_hex(const Generator& gen) { return hex_encode(gen.get_state()); }

void set_generator_state_hex(Generator& gen, const std::string& hex) {
  gen.set_state(hex_decode(hex, "generator state"));
}

CompactTokens compact_vocabulary(const std::vector<int64_t>& tokens) {
  CompactTokens c;
  c.vocab = tokens;
  std::sort(c.vocab.begin(), c.vocab.end());
  c.vocab.erase(std::unique(c.vocab.begin(), c.vocab.end()), c.vocab.end());
  c.ids.reserve(tokens.size());
  for (int64_t t : tokens) c.ids.push_back(std::lower_bound(c.vocab.begin(), c.vocab.end(), t) - c.vocab.begin());
  return c;
}

// --- SequenceTask ----------------------------------------------------------------------------------

SequenceTask::SequenceTask(TaskKind kind, int64_t length, int64_t symbols, uint64_t seed)
    : kind_(kind), length_(length), symbols_(symbols), gen_(seed) {
  QKV_CHECK(length >= 1, "task: the sequence length (", length, ") must be at least 1");
  QKV_CHECK(symbols >= 2 && symbols <= 26, "task: the number of symbols (", symbols, ") must be in [2, 26]");
}

std::string SequenceTask::describe() const {
  return str(kind_ == TaskKind::kCopy ? "copy" : "reverse", " task: ", length_, " symbols from an alphabet of ",
             symbols_, ", a separator, then the symbols ", kind_ == TaskKind::kCopy ? "again" : "reversed");
}

Batch SequenceTask::next(int64_t batch_size) {
  QKV_CHECK(batch_size >= 1, "task: batch size (", batch_size, ") must be at least 1");
  const int64_t n = length_, T = 2 * n;
  Batch b;
  b.batch = batch_size;
  b.tokens = T;
  std::vector<int64_t> seq(static_cast<size_t>(T + 1));
  for (int64_t s = 0; s < batch_size; ++s) {
    for (int64_t i = 0; i < n; ++i) seq[static_cast<size_t>(i)] = static_cast<int64_t>(gen_.random() % static_cast<uint32_t>(symbols_));
    seq[static_cast<size_t>(n)] = separator();
    for (int64_t i = 0; i < n; ++i)
      seq[static_cast<size_t>(n + 1 + i)] = seq[static_cast<size_t>(kind_ == TaskKind::kCopy ? i : n - 1 - i)];
    for (int64_t t = 0; t < T; ++t) {
      b.inputs.push_back(seq[static_cast<size_t>(t)]);
      b.targets.push_back(t >= n ? seq[static_cast<size_t>(t + 1)] : kIgnoreIndex);  // only the answer counts
    }
  }
  return b;
}

nlohmann::json SequenceTask::state() const { return {{"generator", generator_state_hex(gen_)}}; }

void SequenceTask::set_state(const nlohmann::json& state) {
  QKV_CHECK(state.is_object() && state.contains("generator") && state["generator"].is_string(),
            "task: the saved data state has no generator");
  set_generator_state_hex(gen_, state["generator"].get<std::string>());
}

std::vector<int64_t> SequenceTask::encode(const std::string& text) const { return LetterTokenizer(symbols_).encode(text); }

std::string SequenceTask::decode(const std::vector<int64_t>& ids) const { return LetterTokenizer(symbols_).decode(ids); }

// --- TokenWindows --------------------------------------------------------------------------------

TokenWindows::TokenWindows(std::vector<int64_t> ids, int64_t vocab_size, int64_t tokens, uint64_t seed, std::string what)
    : ids_(std::move(ids)), vocab_size_(vocab_size), tokens_(tokens), gen_(seed), what_(std::move(what)) {
  QKV_CHECK(tokens >= 1, "text: the window (", tokens, " tokens) must hold at least 1 token");
  QKV_CHECK(static_cast<int64_t>(ids_.size()) >= tokens + 1, what_, " is ", ids_.size(),
            " tokens long; one training window needs context_length + 1 = ", tokens + 1,
            " tokens. Use a longer text or a smaller context_length");
  for (int64_t id : ids_)
    QKV_CHECK(id >= 0 && id < vocab_size_, "text: token id ", id, " is outside the vocabulary of ", vocab_size_);
}

std::string TokenWindows::describe() const {
  return str("next-token prediction on ", what_, " (", ids_.size(), " tokens, ", vocab_size_,
             " distinct), windows of ", tokens_);
}

Batch TokenWindows::next(int64_t batch_size) {
  Batch b;
  b.batch = batch_size;
  b.tokens = tokens_;
  const uint64_t windows = ids_.size() - static_cast<uint64_t>(tokens_);  // offsets 0 .. size - T - 1
  for (int64_t s = 0; s < batch_size; ++s) {
    const size_t at = static_cast<size_t>(gen_.random64() % windows);
    b.inputs.insert(b.inputs.end(), ids_.begin() + static_cast<std::ptrdiff_t>(at),
                    ids_.begin() + static_cast<std::ptrdiff_t>(at) + tokens_);
    b.targets.insert(b.targets.end(), ids_.begin() + static_cast<std::ptrdiff_t>(at) + 1,
                     ids_.begin() + static_cast<std::ptrdiff_t>(at) + tokens_ + 1);
  }
  return b;
}

nlohmann::json TokenWindows::state() const { return {{"generator", generator_state_hex(gen_)}}; }

void TokenWindows::set_state(const nlohmann::json& state) {
  QKV_CHECK(state.is_object() && state.contains("generator") && state["generator"].is_string(),
            "text: the saved data state has no generator");
  set_generator_state_hex(gen_, state["generator"].get<std::string>());
}

// --- FixedBatches --------------------------------------------------------------------------------

FixedBatches::FixedBatches(const std::string& path, int64_t vocab_size) : path_(path) {
  const std::map<std::string, IntegerTensor> f = load_safetensors_integers(path, {"inputs", "targets"});
  const IntegerTensor &in = f.at("inputs"), &tg = f.at("targets");
  QKV_CHECK(in.shape.size() == 2 && in.shape == tg.shape && !in.values.empty(), "'", path,
            "': 'inputs' and 'targets' must be two (N, T) tensors of the same shape, got ", shape_str(in.shape),
            " and ", shape_str(tg.shape));
  rows_ = in.shape[0];
  tokens_ = in.shape[1];
  int64_t largest = 0;
  // Ids below 2^24: a float32 file holds every integer up to there exactly, and no vocabulary qkv
  // could build is larger.
  constexpr int64_t kIdLimit = int64_t{1} << 24;
  auto read = [&](const IntegerTensor& t, bool targets, std::vector<int64_t>& out) {
    for (int64_t v : t.values) {
      QKV_CHECK((v >= 0 && v < kIdLimit) || (targets && v == kIgnoreIndex), excerpt(path, 4096), ": ",
                targets ? "targets" : "inputs", " must hold whole ids in [0, 2^24)", targets ? " or -100" : "",
                "; found ", v);
      out.push_back(v);
      largest = std::max(largest, v);
    }
  };
  read(in, false, inputs_);
  read(tg, true, targets_);
  vocab_size_ = vocab_size > 0 ? vocab_size : largest + 1;
  QKV_CHECK(largest < vocab_size_, "'", path, "': id ", largest, " is outside the vocabulary of ", vocab_size_);
}

std::string FixedBatches::describe() const {
  return str("fixed batches from '", path_, "' (", rows_, " rows of ", tokens_, " tokens, vocabulary ", vocab_size_, ")");
}

Batch FixedBatches::next(int64_t batch_size) {
  Batch b;
  b.batch = batch_size;
  b.tokens = tokens_;
  for (int64_t s = 0; s < batch_size; ++s) {
    const auto at = static_cast<std::ptrdiff_t>(row_ * tokens_);
    b.inputs.insert(b.inputs.end(), inputs_.begin() + at, inputs_.begin() + at + tokens_);
    b.targets.insert(b.targets.end(), targets_.begin() + at, targets_.begin() + at + tokens_);
    row_ = (row_ + 1) % rows_;
  }
  return b;
}

void FixedBatches::set_state(const nlohmann::json& state) {
  QKV_CHECK(state.is_object() && state.contains("row"), "'", path_, "': the saved data state has no row");
  const nlohmann::json& row = state["row"];
  QKV_CHECK(row.is_number_unsigned() && row.get<uint64_t>() < static_cast<uint64_t>(rows_), excerpt(path_, 4096),
            ": the saved data state's row ", json_excerpt(row), " is not a row of its ", rows_, " rows");
  row_ = row.get<int64_t>();
}

TextData text_training_data(const std::string& text, const Encoding& gpt2, int64_t tokens, uint64_t seed,
                            const std::string& what) {
  CompactTokens c = compact_vocabulary(gpt2.encode(text, SpecialTokens::all()));
  TextData d;
  d.vocab = c.vocab;
  d.windows = std::make_unique<TokenWindows>(std::move(c.ids), static_cast<int64_t>(c.vocab.size()), tokens, seed, what);
  return d;
}

}  // namespace qkv
