// qkv/core/limits.h - the most that input from outside (a file, a flag, a checkpoint) may ask qkv
// for. A request beyond a limit is refused with qkv::Error naming the request, the limit and the
// field below that raises it (the command line maps each field to a flag and says which).
//
// The defaults are read from the machine once: memory from the physical memory this process may
// use, threads from its cores. Process-wide; set them before starting work, not during it.
#pragma once

#include <cstdint>

namespace qkv {

struct Limits {
  int64_t max_memory_bytes;   // one request for memory: a tensor, a model from a checkpoint, a read file
  int64_t max_file_bytes;     // an input file read whole
  int max_threads;            // threads one command may start
  int json_max_depth = 64;    // nesting of arrays and objects in any JSON qkv reads
  // The largest JSON text qkv parses (config.json, tokenizer.json, a safetensors header, an index):
  // a parsed JSON takes about 15x its text in memory, so this bounds that before it is made.
  // Qwen3's tokenizer.json, the largest qkv reads, is 11 MB.
  int64_t max_json_bytes = int64_t{64} << 20;
  // The work PCRE2 may do for one match of a pre-tokenisation pattern (its match limit: steps of
  // backtracking; also its depth limit), so a pattern that backtracks catastrophically fails fast.
  int64_t regex_match_limit = 10'000'000;
  // The slowest a pattern may split one text: after a first second, at least this many bytes per
  // second, so a pattern that succeeds every time just under the match limit cannot run for hours.
  int64_t regex_min_bytes_per_second = 1'000'000;
};

const Limits& limits();
void set_limits(const Limits& l);
Limits default_limits();  // memory: half the physical memory; files: the same; threads: 8 x cores (at least 64)

// Throws unless `bytes` <= limits().max_memory_bytes: "<what> needs N bytes (X GiB), more than the
// memory limit of M bytes (max_memory_bytes)".
void check_memory_request(int64_t bytes, const char* what);

}  // namespace qkv
