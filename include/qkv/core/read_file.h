// qkv/core/read_file.h - whole-file reads, bounded and refusing what is not a regular file.
#pragma once

#include <cstdint>
#include <string>

namespace qkv {

// Whether read_file takes the path "-" for standard input (where a command reads one stream).
enum class StdinRule { kNoStdin, kDashIsStdin };

// The whole content of `path`, a regular file of at most limits().max_file_bytes bytes: a
// directory, a device (/dev/zero), a FIFO or a larger file is refused before anything is read.
// With StdinRule::kDashIsStdin, "-" reads standard input (up to the same limit). Throws
// qkv::Error "cannot open 'path': No such file or directory" (or "cannot read 'path': it is a
// directory ...", "... more than the file size limit of N bytes (max_file_bytes)") on failure.
std::string read_file(const std::string& path, StdinRule stdin_rule = StdinRule::kNoStdin);

// Throws qkv::Error naming `path` when it holds a NUL byte: the system's calls would stop there and
// open another file ("a.safetensors\0.gguf" is "a.safetensors" to them). read_file, MappedFile and
// the model loaders' path checks call it first.
void check_path(const std::string& path);

// Whether `path` is a regular file that starts with `magic` (at most 16 bytes). Never waits: a FIFO,
// a device or a missing file is not one.
bool file_starts_with(const std::string& path, const std::string& magic);

// A whole file's bytes, valid while it lives: memory-mapped read-only when the path is a regular,
// non-empty file (no size limit: the pages come from the page cache as they are read), else read
// whole by read_file (which refuses what it must, naming the path).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool mapped() const { return map_ != nullptr; }
  // The pages wholly inside [offset, offset + bytes) given back (madvise DONTNEED): a reader that
  // has copied them out keeps the process's memory at one copy. They read again from the file if
  // touched. Nothing when not mapped.
  void release(uint64_t offset, uint64_t bytes) const;

 private:
  void* map_ = nullptr;
  std::string bytes_;  // when not mapped
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace qkv
