// A run's outputs, checked together and written together. See include/qkv/io/output_files.h.
#include "qkv/io/output_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <charconv>
#include <system_error>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

namespace qkv {
namespace {

std::string errno_message(int err) { return std::generic_category().message(err); }

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "'a.st'", or "--output 'a.st'" when the caller named it.
std::string named(const OutputFile& f) { return f.what.empty() ? excerpt(f.path) : f.what + " " + excerpt(f.path); }

// Where a destination's bytes go, once symlinks are followed.
struct Destination {
  std::string target;   // the path written (a symlink's final target)
  bool direct = false;  // a FIFO or character device: written in place, no temporary
  bool exists = false;
  bool is_char_device = false;
  mode_t mode = 0;                  // of the existing file
  dev_t dev = 0, dir_dev = 0;       // the file's, and its directory's
  ino_t ino = 0, dir_ino = 0;
};

[[noreturn]] void cannot_write(const OutputFile& f, const std::string& why) {
  fail("cannot write ", named(f), ": ", why);
}

Destination resolve(const OutputFile& f) {
  QKV_CHECK(!f.path.empty(), "cannot write a file with an empty path", f.what.empty() ? "" : " (", f.what,
            f.what.empty() ? "" : ")");
  // (for reading, "-" is standard input; for writing it would be a file named "-" where standard
  // output was meant)
  if (f.path == "-")
    cannot_write(f, "\"-\" is standard input for qkv's inputs, not standard output for its outputs; give a file "
                    "name, or /dev/stdout to write to standard output (./- for a file named \"-\")");
  Destination d;
  d.target = f.path;
  struct stat st {};
  for (int hops = 0;; ++hops) {
    if (::lstat(d.target.c_str(), &st) != 0) {
      if (errno != ENOENT) cannot_write(f, errno_message(errno));
      break;  // a new file (or a dangling link's target)
    }
    if (!S_ISLNK(st.st_mode)) {
      d.exists = true;
      break;
    }
    if (hops == 40) cannot_write(f, "too many levels of symbolic links");
    std::string link(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(d.target.c_str(), link.data(), link.size());
    if (n < 0) cannot_write(f, "reading the symbolic link " + excerpt(d.target) + ": " + errno_message(errno));
    link.resize(static_cast<size_t>(n));
    if (link.compare(0, 6, "/proc/") == 0) {  // /dev/stdout, /dev/fd/N: an open descriptor, written as it is
      d.direct = true;
      d.exists = true;
      if (::stat(d.target.c_str(), &st) != 0) cannot_write(f, errno_message(errno));
      d.dev = st.st_dev;
      d.ino = st.st_ino;
      d.is_char_device = true;  // two outputs to one descriptor are the user's stream, not a collision
      return d;
    }
    d.target = !link.empty() && link[0] == '/' ? link : parent_dir(d.target) + "/" + link;
  }
  if (d.exists) {
    d.mode = st.st_mode;
    d.dev = st.st_dev;
    d.ino = st.st_ino;
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
      d.direct = true;
      d.is_char_device = S_ISCHR(st.st_mode);
      if (::access(d.target.c_str(), W_OK) != 0) cannot_write(f, errno_message(errno));
      return d;
    }
    if (!S_ISREG(st.st_mode))
      cannot_write(f, S_ISDIR(st.st_mode) ? errno_message(EISDIR) : "it is neither a file, a FIFO nor a device");
  }
  const std::string dir = parent_dir(d.target);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) cannot_write(f, "its directory " + excerpt(dir) + ": " + errno_message(errno));
  if (!S_ISDIR(ds.st_mode)) cannot_write(f, excerpt(dir) + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    cannot_write(f, "its directory " + excerpt(dir) + " is not writable: " + errno_message(errno));
  d.dir_dev = ds.st_dev;
  d.dir_ino = ds.st_ino;
  return d;
}

bool same_file(const Destination& a, const Destination& b) {
  if (a.exists && b.exists && a.dev == b.dev && a.ino == b.ino) return true;  // also hard links
  return !a.direct && !b.direct && a.dir_dev == b.dir_dev && a.dir_ino == b.dir_ino &&
         base_name(a.target) == base_name(b.target);
}

std::vector<Destination> check_all(const std::vector<OutputFile>& files) {
  std::vector<Destination> dests;
  dests.reserve(files.size());
  for (const OutputFile& f : files) dests.push_back(resolve(f));
  for (size_t i = 0; i < files.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (same_file(dests[i], dests[j]) && !(dests[i].is_char_device && dests[j].is_char_device))
        fail(named(files[j]), " and ", named(files[i]), " name the same file; give each output its own");
  return dests;
}

bool pid_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

// Removes "<target>.tmp.<pid>.<n>" files whose process is gone (a run killed while writing).
void remove_stale_temporaries(const std::string& target) {
  const std::string dir = parent_dir(target), prefix = base_name(target) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const char* p = name.data() + prefix.size();
    const char* end = name.data() + name.size();
    long pid = 0, n = 0;
    auto r = std::from_chars(p, end, pid);
    if (r.ec != std::errc() || r.ptr == end || *r.ptr != '.') continue;
    auto r2 = std::from_chars(r.ptr + 1, end, n);
    if (r2.ec != std::errc() || r2.ptr != end || pid == ::getpid() || pid_alive(pid)) continue;
    (void)::unlinkat(::dirfd(d), name.c_str(), 0);
  }
  ::closedir(d);
}

std::atomic<unsigned long> temp_counter{0};

// Writes all of `bytes` to `fd`; false with errno set on failure.
bool write_all(int fd, const std::string& bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

// The temporaries written so far; removed unless committed.
class Temporaries {
 public:
  ~Temporaries() {
    for (const std::string& t : paths_)
      if (!t.empty()) ::unlink(t.c_str());
  }
  void add(std::string path) { paths_.push_back(std::move(path)); }
  std::string& operator[](size_t i) { return paths_[i]; }
  size_t size() const { return paths_.size(); }

 private:
  std::vector<std::string> paths_;
};

// A fresh temporary next to `d.target`, holding `f.bytes`, fsynced and closed.
// A new file "<target>.tmp.<pid>.<n>" beside d's target, opened for writing (its name in tmp); else
// cannot_write naming `what` it was for and why.
int create_temporary(const OutputFile& f, const Destination& d, std::string& tmp, const std::string& what) {
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = str(d.target, ".tmp.", ::getpid(), ".", temp_counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST && errno != EINTR) break;
  }
  if (fd < 0) cannot_write(f, what + excerpt(tmp) + ": " + errno_message(errno));
  return fd;
}

std::string write_temporary(const OutputFile& f, const Destination& d) {
  std::string tmp;
  const int fd = create_temporary(f, d, tmp, "cannot create temporary file ");
  auto fail_and_clean = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    cannot_write(f, std::string(what) + " " + excerpt(tmp) + " failed: " + errno_message(err));
  };
  // A replaced file keeps its permissions (the temporary was created with the umask's).
  if (d.exists && ::fchmod(fd, d.mode & 07777) != 0) fail_and_clean("fchmod of", errno);
  if (!write_all(fd, f.bytes)) fail_and_clean("writing", errno);
  if (::fsync(fd) != 0) fail_and_clean("fsync of", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    cannot_write(f, "closing " + excerpt(tmp) + " failed: " + errno_message(err));
  }
  return tmp;
}

void write_direct(const OutputFile& f, const Destination& d) {
  int fd;
  do {
    fd = ::open(d.target.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // after what the stream holds already
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) cannot_write(f, errno_message(errno));
  const bool ok = write_all(fd, f.bytes);
  const int err = errno;
  ::close(fd);
  if (!ok) cannot_write(f, errno_message(err));
}

// A file can be made beside the destination, as its temporary will be: access() lets root pass where
// the kernel still refuses to create one (/proc), and a run should learn that before its work.
void check_creatable(const OutputFile& f, const Destination& d) {
  std::string tmp;
  ::close(create_temporary(f, d, tmp, "a file cannot be created beside it: "));
  ::unlink(tmp.c_str());
}

}  // namespace

void check_output_files(const std::vector<OutputFile>& files, const std::vector<InputPath>& inputs) {
  const std::vector<Destination> dests = check_all(files);
  for (size_t i = 0; i < files.size(); ++i)
    if (!dests[i].direct) check_creatable(files[i], dests[i]);
  for (const InputPath& in : inputs) {
    struct stat st {};
    if (in.path.empty() || ::stat(in.path.c_str(), &st) != 0) continue;  // (a missing input fails as it is read)
    const std::string input = (in.what.empty() ? "" : in.what + " ") + excerpt(in.path);
    for (size_t i = 0; i < files.size(); ++i) {
      const Destination& d = dests[i];
      if (!d.exists || d.direct) continue;  // a new file harms no input; a stream is written as it is
      if (S_ISDIR(st.st_mode) ? d.dir_dev == st.st_dev && d.dir_ino == st.st_ino
                              : d.dev == st.st_dev && d.ino == st.st_ino)
        fail(named(files[i]), S_ISDIR(st.st_mode) ? " is a file of the input folder " : " is the input ", input,
             ": writing it would replace what this run reads; write the output elsewhere");
    }
  }
}

void write_files_atomically(const std::vector<OutputFile>& files) {
  const std::vector<Destination> dests = check_all(files);
  Temporaries tmps;
  for (size_t i = 0; i < files.size(); ++i) {
    if (dests[i].direct) {
      tmps.add("");
      continue;
    }
    remove_stale_temporaries(dests[i].target);
    tmps.add(write_temporary(files[i], dests[i]));
  }
  for (size_t i = 0; i < files.size(); ++i)
    if (dests[i].direct) write_direct(files[i], dests[i]);
  for (size_t i = 0; i < files.size(); ++i) {
    if (dests[i].direct) continue;
    if (::rename(tmps[i].c_str(), dests[i].target.c_str()) != 0)
      cannot_write(files[i], "renaming " + excerpt(tmps[i]) + " over it failed: " + errno_message(errno));
    tmps[i].clear();
  }
  // Make the renames durable. Best effort: the files are already in place and complete.
  for (const Destination& d : dests) {
    if (d.direct) continue;
    const int dir = ::open(parent_dir(d.target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      (void)::fsync(dir);
      ::close(dir);
    }
  }
}

OutputFolder::OutputFolder(const std::string& path, const std::string& what) {
  if (::mkdir(path.c_str(), 0777) == 0) {
    path_ = path;
    return;
  }
  QKV_CHECK(errno == EEXIST, "cannot make the ", what, " folder ", excerpt(path), ": ", errno_message(errno));
}

OutputFolder::~OutputFolder() {
  if (!path_.empty()) (void)::rmdir(path_.c_str());  // only when still empty
}

OutputFolder& OutputFolder::operator=(OutputFolder&& o) noexcept {
  if (this != &o) {
    if (!path_.empty()) (void)::rmdir(path_.c_str());
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

}  // namespace qkv
