// Atomic whole-file writes and whole-file reads. See include/qkv/io/atomic_file.h.
#include "qkv/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <system_error>

#include "qkv/core/error.h"
#include "qkv/io/output_files.h"

namespace qkv {
namespace {

std::string errno_message(int err) { return std::generic_category().message(err); }

// Closes a descriptor on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_files_atomically({{path, bytes, ""}});  // the rule for every output (qkv/io/output_files.h)
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  std::ostringstream out;
  write(out);
  QKV_CHECK(out.good(), "cannot write '", path, "': producing its content failed");
  write_file_atomically(path, std::move(out).str());
}

std::string read_file(const std::string& path) {
  int raw_fd;
  do {
    raw_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (raw_fd < 0 && errno == EINTR);
  if (raw_fd < 0) {
    int err = errno;
    fail("cannot open '", path, "': ", errno_message(err));
  }
  Fd fd(raw_fd);

  std::string out;
  struct stat st {};
  if (::fstat(raw_fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    out.reserve(static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(raw_fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      fail("cannot read '", path, "': ", errno_message(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace qkv
