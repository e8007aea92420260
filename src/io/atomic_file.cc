// Atomic whole-file writes and whole-file reads. See include/qkv/io/atomic_file.h.
#include "qkv/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <sstream>
#include <system_error>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

std::string errno_message(int err) { return std::generic_category().message(err); }

// The directory holding `path` ("." for a bare file name), for the fsync after the rename.
std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

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

std::atomic<unsigned long> temp_counter{0};

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  QKV_CHECK(!path.empty(), "cannot write a file with an empty path");

  // A fresh temporary next to the target (same file system, so rename is atomic). O_EXCL makes
  // the name ours alone; on a clash (a stale temporary of a dead process with our pid) try again.
  std::string tmp;
  int raw_fd = -1;
  for (int attempt = 0; attempt < 100 && raw_fd < 0; ++attempt) {
    tmp = str(path, ".tmp.", ::getpid(), ".", temp_counter.fetch_add(1));
    raw_fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (raw_fd < 0 && errno != EEXIST && errno != EINTR) break;
  }
  if (raw_fd < 0) {
    int err = errno;
    fail("cannot write '", path, "': cannot create temporary file '", tmp, "': ",
         errno_message(err));
  }
  Fd fd(raw_fd);

  // From here on, every failure removes the temporary before throwing.
  auto fail_and_clean = [&](const char* what, int err) {
    ::close(fd.release());
    ::unlink(tmp.c_str());
    fail("cannot write '", path, "': ", what, " '", tmp, "' failed: ", errno_message(err));
  };

  // A replaced file keeps its permissions (the temporary was created with the umask's).
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0 && S_ISREG(existing.st_mode)) {
    if (::fchmod(raw_fd, existing.st_mode & 07777) != 0) fail_and_clean("fchmod of", errno);
  }

  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(raw_fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_and_clean("writing", errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(raw_fd) != 0) fail_and_clean("fsync of", errno);
  fd.release();
  if (::close(raw_fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot write '", path, "': closing '", tmp, "' failed: ", errno_message(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot write '", path, "': renaming '", tmp, "' over it failed: ", errno_message(err));
  }

  // Make the rename itself durable. Best effort: the file is already in place and complete.
  int dir = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  std::ostringstream out;
  write(out);
  QKV_CHECK(out.good(), "cannot write '", path, "': producing its content failed");
  write_file_atomically(path, std::move(out).str());
}

namespace {

// What a non-regular file is, for the message that refuses it.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Reads fd to its end, refusing more than limits().max_file_bytes.
std::string read_all(int fd, const std::string& name, int64_t expected) {
  const int64_t limit = limits().max_file_bytes;
  std::string out;
  if (expected > 0) out.reserve(static_cast<size_t>(expected));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      fail("cannot read ", name, ": ", errno_message(err));
    }
    if (n == 0) break;
    QKV_CHECK(static_cast<int64_t>(out.size()) + n <= limit, "cannot read ", name, ": it holds more than the file size ",
              "limit of ", limit, " bytes (max_file_bytes)");
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

std::string read_file(const std::string& path, StdinRule stdin_rule) {
  if (path == "-" && stdin_rule == StdinRule::kDashIsStdin) return read_all(STDIN_FILENO, "standard input", 0);
  const std::string name = excerpt(path, 4096);
  int raw_fd;
  do {
    // O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused below.
    raw_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (raw_fd < 0 && errno == EINTR);
  if (raw_fd < 0) {
    int err = errno;
    fail("cannot open ", name, ": ", errno_message(err));
  }
  Fd fd(raw_fd);

  struct stat st {};
  if (::fstat(raw_fd, &st) != 0) {
    int err = errno;
    fail("cannot read ", name, ": ", errno_message(err));
  }
  QKV_CHECK(S_ISREG(st.st_mode), "cannot read ", name, ": ",
            S_ISDIR(st.st_mode) ? errno_message(EISDIR) : std::string("it is ") + file_kind(st.st_mode),
            "; an input must be a regular file",
            stdin_rule == StdinRule::kDashIsStdin ? " (or - for standard input)" : "");
  const int64_t limit = limits().max_file_bytes;
  QKV_CHECK(st.st_size <= limit, "cannot read ", name, ": it is ", st.st_size,
            " bytes, more than the file size limit of ", limit, " bytes (max_file_bytes)");
  return read_all(raw_fd, name, st.st_size);
}

}  // namespace qkv
