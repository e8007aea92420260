// Standard input and output with their errors reported. See include/qkv/io/standard_output.h.
#include "qkv/io/standard_output.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <streambuf>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

// A buffer over a file descriptor that keeps the errno of its first failed write.
class FdBuffer : public std::streambuf {
 public:
  explicit FdBuffer(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* p = pbase();
    size_t left = static_cast<size_t>(pptr() - pbase());
    while (left > 0 && error_ == 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        break;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    setp(buf_, buf_ + sizeof buf_);  // after a failure the rest is dropped, not retried
    return error_ == 0;
  }

  int fd_;
  int error_ = 0;
  char buf_[1 << 16];
};

FdBuffer* g_buffer = nullptr;
std::streambuf* g_previous = nullptr;

}  // namespace

StdoutCapture::StdoutCapture() {
  g_buffer = new FdBuffer(STDOUT_FILENO);
  g_previous = std::cout.rdbuf(g_buffer);
}

StdoutCapture::~StdoutCapture() {
  std::cout.flush();
  std::cout.rdbuf(g_previous);
  delete g_buffer;
  g_buffer = nullptr;
}

int flush_stdout() {
  std::cout.flush();
  if (g_buffer != nullptr && g_buffer->error() != 0) return g_buffer->error();
  return std::cout.good() ? 0 : EIO;
}

void write_stdout(std::string_view bytes) {
  std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (const int err = flush_stdout(); err != 0) fail("writing to standard output: ", std::strerror(err));
}

std::string read_stdin() {
  std::string s;
  char buf[1 << 16];
  size_t n;
  const int64_t limit = limits().max_file_bytes;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
    s.append(buf, n);
    QKV_CHECK(static_cast<int64_t>(s.size()) <= limit, "standard input is longer than the limit of ", limit,
              " bytes for an input read whole (max_file_bytes)");
  }
  QKV_CHECK(!std::ferror(stdin), "cannot read standard input");
  return s;
}

}  // namespace qkv
