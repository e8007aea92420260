// qkv/train/data.h - what a language model trains on: batches of (input, target) token ids.
//
// Three sources, each a stream that can be saved and restored (for checkpoints):
//
//   SequenceTask  the built-in tasks. A sequence is n random symbols, a separator, then the
//                 symbols again (copy) or reversed (reverse):
//                     copy     a b c d | a b c d          reverse  a b c d | d c b a
//                 input = sequence[0 : 2n], target = sequence[1 : 2n + 1]; only the n targets
//                 after the separator count (the others are ignore_index), so a model must look
//                 back n (copy) or 2k+1 (reverse) positions: a task for attention. Symbols are the
//                 letters a, b, c, ... (ids 0..symbols-1), the separator '|' is id `symbols`.
//   TokenWindows  next-token prediction on one long stream of ids: windows of T + 1 ids at random
//                 offsets; input = window[0:T], target = window[1:T+1].
//   FixedBatches  (N, T) tensors `inputs` and `targets` (ids stored as float32, -100 = ignore)
//                 read from a safetensors file; batch k is rows [kB, (k+1)B) taken in order,
//                 wrapping around. For fixed data shared with another program (the PyTorch test).
//
// Random draws come from a qkv::Generator: a symbol is random() % symbols, an offset
// random64() % (number of windows).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/text/bpe.h"

namespace qkv {

inline constexpr int64_t kIgnoreIndex = -100;

struct Batch {
  std::vector<int64_t> inputs, targets;  // (batch, tokens) row-major each
  int64_t batch = 0, tokens = 0;
};

class TrainingData {
 public:
  virtual ~TrainingData() = default;
  virtual std::string describe() const = 0;  // "copy task: 8 symbols from 16, ..."
  virtual int64_t vocab_size() const = 0;
  virtual int64_t tokens() const = 0;        // T of every sequence
  virtual Batch next(int64_t batch_size) = 0;
  virtual nlohmann::json state() const = 0;  // where the stream stands
  virtual void set_state(const nlohmann::json& state) = 0;
};

enum class TaskKind { kCopy, kReverse };

class SequenceTask : public TrainingData {
 public:
  // length n >= 1 symbols drawn from `symbols` (2..26) letters; draws from Generator(seed).
  SequenceTask(TaskKind kind, int64_t length, int64_t symbols, uint64_t seed);
  std::string describe() const override;
  int64_t vocab_size() const override { return symbols_ + 1; }
  int64_t tokens() const override { return 2 * length_; }
  Batch next(int64_t batch_size) override;
  nlohmann::json state() const override;
  void set_state(const nlohmann::json& state) override;

  TaskKind kind() const { return kind_; }
  int64_t length() const { return length_; }
  int64_t symbols() const { return symbols_; }
  int64_t separator() const { return symbols_; }
  // Text <-> ids: 'a' + id for symbols, '|' for the separator. Other characters are an error.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  TaskKind kind_;
  int64_t length_, symbols_;
  Generator gen_;
};

class TokenWindows : public TrainingData {
 public:
  // ids.size() must be at least tokens + 1 (an error says how many are needed).
  TokenWindows(std::vector<int64_t> ids, int64_t vocab_size, int64_t tokens, uint64_t seed, std::string what);
  std::string describe() const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t tokens() const override { return tokens_; }
  Batch next(int64_t batch_size) override;
  nlohmann::json state() const override;
  void set_state(const nlohmann::json& state) override;

 private:
  std::vector<int64_t> ids_;
  int64_t vocab_size_, tokens_;
  Generator gen_;
  std::string what_;
};

class FixedBatches : public TrainingData {
 public:
  // Reads `inputs` and `targets` (N, T) from a safetensors file; ids must be whole numbers in
  // [0, vocab_size) (targets may also be -100). vocab_size 0: the largest id + 1.
  FixedBatches(const std::string& path, int64_t vocab_size);
  std::string describe() const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t tokens() const override { return tokens_; }
  Batch next(int64_t batch_size) override;
  nlohmann::json state() const override { return {{"row", row_}}; }
  void set_state(const nlohmann::json& state) override;

 private:
  std::string path_;
  std::vector<int64_t> inputs_, targets_;
  int64_t rows_ = 0, tokens_ = 0, vocab_size_ = 0, row_ = 0;
};

// A text's tokens with a vocabulary of only the tokens it uses: ids[i] = the index of
// tokens[i] in vocab, vocab = the distinct tokens in increasing order. Keeps a model trained on a
// small text from carrying GPT-2's 50257-row output layer.
struct CompactTokens {
  std::vector<int64_t> ids;    // model ids
  std::vector<int64_t> vocab;  // model id -> original (GPT-2) id
};
CompactTokens compact_vocabulary(const std::vector<int64_t>& tokens);

// A text's training data: its GPT-2 tokens (special tokens matched) with a vocabulary of only the
// tokens it uses (compact_vocabulary), in windows of `tokens` drawn from Generator(seed). `what`
// names the text in errors (a text shorter than one window says so).
struct TextData {
  std::unique_ptr<TokenWindows> windows;
  std::vector<int64_t> vocab;  // model id -> GPT-2 id
};
TextData text_training_data(const std::string& text, const Encoding& gpt2, int64_t tokens, uint64_t seed,
                            const std::string& what);

// A generator's full state as a hex string and back (for JSON checkpoint metadata).
std::string generator_state_hex(const Generator& gen);
void set_generator_state_hex(Generator& gen, const std::string& hex);

}  // namespace qkv
