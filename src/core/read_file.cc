// Whole-file reads. See include/qkv/core/read_file.h.
#include "qkv/core/read_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

std::string errno_message(int err) { return std::generic_category().message(err); }

// Closes a descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

 private:
  int fd_;
};

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

// path opened to read, never waiting (a FIFO with no writer opens at once, to be refused by its
// kind), retried when a signal interrupts; -1 with errno set on failure.
int open_to_read(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

}  // namespace

void check_path(const std::string& path) {
  QKV_CHECK(path.find('\0') == std::string::npos, "cannot open ", excerpt(path, 4096),
            ": the path holds a NUL byte (the system would read it as ", excerpt(path.substr(0, path.find('\0')), 4096),
            ", another file)");
}

bool file_starts_with(const std::string& path, const std::string& magic) {
  if (path.find('\0') != std::string::npos || magic.size() > 16) return false;
  const int fd = open_to_read(path);
  if (fd < 0) return false;
  const Fd owner(fd);
  struct stat st {};
  char head[16] = {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
         ::pread(fd, head, magic.size(), 0) == static_cast<ssize_t>(magic.size()) &&
         std::memcmp(head, magic.data(), magic.size()) == 0;
}

std::string read_file(const std::string& path, StdinRule stdin_rule) {
  if (path == "-" && stdin_rule == StdinRule::kDashIsStdin) return read_all(STDIN_FILENO, "standard input", 0);
  check_path(path);
  const std::string name = excerpt(path, 4096);
  const int raw_fd = open_to_read(path);
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

MappedFile::MappedFile(const std::string& path) {
  check_path(path);
  const int fd = open_to_read(path);  // a FIFO: refused by read_file below, not waited on
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      map_ = p;
      data_ = static_cast<const unsigned char*>(p);
      size_ = static_cast<uint64_t>(st.st_size);
    }
  }
  if (fd >= 0) ::close(fd);
  if (map_ == nullptr) {  // read_file says what is wrong with the path, or reads what cannot be mapped
    bytes_ = read_file(path);
    data_ = reinterpret_cast<const unsigned char*>(bytes_.data());
    size_ = bytes_.size();
  }
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(size_));
}

void MappedFile::release(uint64_t offset, uint64_t bytes) const {
  if (map_ == nullptr || offset >= size_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (offset + page - 1) / page * page, end = std::min(offset + bytes, size_) / page * page;
  if (end > begin) ::madvise(static_cast<char*>(map_) + begin, end - begin, MADV_DONTNEED);
}

}  // namespace qkv
