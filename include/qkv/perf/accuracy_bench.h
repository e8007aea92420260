// qkv/perf/accuracy_bench.h - the accuracy of quantized weights as llama.cpp states it
// (`qkv bench --module accuracy`): a reference model and a candidate holding the same weights
// quantized, run over the same text, compared position by position (models/logit_agreement.h:
// mean and max KL(p_ref || p_cand), top-1 agreement, each model's perplexity).
//
//   weights a quantized GGUF file     reference: the file decoded into f32 weights, f32 products
//                                      (LoadOptions dtype f32, dequantize); candidate: the file as
//                                      loaded for generation (its blocks, integer products)
//   weights a float model (a Hugging Face folder, an F32/F16/BF16 GGUF file), quantize T
//                                      reference: its weights in f32, f32 products; candidate: the
//                                      model loaded with LoadOptions::quantize T
//   a float model, no quantize         a row for each type the products read (product_quant_names)
//
// Tokens: the text through the model's tokenizer, the first seq_len of them (fewer when the text
// has fewer), in windows of the model's context. Bits per weight: of the file's matrices (every
// 2-D tensor's bytes x 8 over its values) for a quantized file; the type's own (its block's bytes
// x 8 over its values: Q8_0 8.5, Q6_K 6.5625, Q4_K 4.5, Q4_0 4.5) for --quantize, whose matrices
// whose rows are not whole blocks of the type fall back to Q8_0 or bf16 (the candidate's
// description says how many).
//
// Each model is loaded, run over the text and released before the next: memory holds one model
// and two sets of logits (T V floats each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/models/logit_agreement.h"

namespace qkv::perf {

struct AccuracyBenchOptions {
  std::string weights;      // a GGUF file or a Hugging Face folder
  std::string quantize;     // "": as above
  std::string text;         // the text itself
  std::string text_name;    // where it came from, for the report and errors
  int64_t seq_len = 1000;   // tokens of the text compared, at least 2
};

struct AccuracyRow {
  std::string type;           // "Q8_0"; a file's types by their share of its matrices' values: "Q4_K+Q6_K"
  double bits_per_weight = 0;
  std::string candidate;      // the candidate's description
  LogitAgreement agreement;
};

struct AccuracyBenchReport {
  std::string reference;        // its description
  std::string text_name;
  int64_t text_tokens = 0;      // the whole text's
  int64_t tokens = 0;           // compared
  int64_t context = 0, windows = 0;
  std::vector<AccuracyRow> rows;
};

// Checks the options (qkv::Error naming the field: "seq_len 1: ...", "quantize ...", the text's
// tokens), then loads and runs the models in turn (above).
AccuracyBenchReport run_accuracy_bench(const AccuracyBenchOptions& options);

// The table for people, and qkv bench --json's object.
std::string report_text(const AccuracyBenchReport& r);
nlohmann::json report_json(const AccuracyBenchReport& r);

}  // namespace qkv::perf
