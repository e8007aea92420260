// GPT-2 encoding throughput: qkv's tokenizer on a corpus of documents (a JSONL file of strings,
// QKV_BENCH_CORPUS), one thread and a 2-thread batch. Bytes processed are the corpus's UTF-8 bytes.
//
// "cold": every repetition starts from a fresh Encoding, so the per-thread piece cache starts
// empty, as tiktoken (which has no such cache) always does. "warm": the cache kept across
// iterations, as in a long-running process that encodes similar text again and again.
// Run through bench/tokenizer/compare_tiktoken.py, which also times tiktoken in the same run.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/text/bpe.h"
#include "qkv/text/vocab_files.h"

namespace {

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = [] {
    const char* path = std::getenv("QKV_BENCH_CORPUS");
    if (path == nullptr) {
      std::cerr << "set QKV_BENCH_CORPUS to a JSONL file of strings (compare_tiktoken.py writes one)\n";
      std::exit(2);
    }
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line).get<std::string>());
    return out;
  }();
  return docs;
}

int64_t corpus_bytes() {
  int64_t n = 0;
  for (const std::string& d : corpus()) n += static_cast<int64_t>(d.size());
  return n;
}

void cold(benchmark::State& state, int threads) {
  const std::vector<std::string>& docs = corpus();
  const qkv::SpecialTokens all = qkv::SpecialTokens::all();
  for (auto _ : state) {
    state.PauseTiming();
    qkv::Encoding enc = qkv::load_gpt2();  // a fresh encoding: an empty piece cache
    state.ResumeTiming();
    if (threads == 1) {
      for (const std::string& d : docs) benchmark::DoNotOptimize(enc.encode(d, all));
    } else {
      benchmark::DoNotOptimize(enc.encode_batch(docs, threads, all));
    }
  }
  state.SetBytesProcessed(state.iterations() * corpus_bytes());
}

void warm(benchmark::State& state, int threads) {
  const std::vector<std::string>& docs = corpus();
  const qkv::SpecialTokens all = qkv::SpecialTokens::all();
  static const qkv::Encoding enc = qkv::load_gpt2();
  for (const std::string& d : docs) benchmark::DoNotOptimize(enc.encode(d, all));  // fill the cache
  for (auto _ : state) {
    if (threads == 1) {
      for (const std::string& d : docs) benchmark::DoNotOptimize(enc.encode(d, all));
    } else {
      benchmark::DoNotOptimize(enc.encode_batch(docs, threads, all));
    }
  }
  state.SetBytesProcessed(state.iterations() * corpus_bytes());
}

void BM_EncodeCold1Thread(benchmark::State& s) { cold(s, 1); }
void BM_EncodeBatchCold2Threads(benchmark::State& s) { cold(s, 2); }
void BM_EncodeWarm1Thread(benchmark::State& s) { warm(s, 1); }

BENCHMARK(BM_EncodeCold1Thread)->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(5)->UseRealTime();
BENCHMARK(BM_EncodeBatchCold2Threads)->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(5)->UseRealTime();
BENCHMARK(BM_EncodeWarm1Thread)->Unit(benchmark::kMillisecond)->Repetitions(5)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
