// qkv/io/standard_output.h - standard output, written so that a failed write (a full disk, a closed pipe) is an error:
// "writing to standard output: No space left on device", exit status 1.
#pragma once

#include <string>
#include <string_view>

namespace qkv {

// While it lives, std::cout writes to file descriptor 1 through a buffer that remembers why the
// first failed write failed (iostreams keep only "bad", not the errno). main() holds one.
class StdoutCapture {
 public:
  StdoutCapture();
  ~StdoutCapture();
  StdoutCapture(const StdoutCapture&) = delete;
  StdoutCapture& operator=(const StdoutCapture&) = delete;
};

// Writes `bytes` to std::cout and flushes; throws qkv::Error with the reason on failure.
void write_stdout(std::string_view bytes);

// Standard input read whole, at most limits().max_file_bytes (core/limits.h); qkv::Error beyond.
std::string read_stdin();

// Flushes std::cout; the errno of the first write to it that failed, or 0.
int flush_stdout();

}  // namespace qkv
