// qkv/io/output_files.h - a run's outputs, written together or not at all.
//
// The rule for every file a run writes: all outputs are computed first, then their destinations
// are checked together, then written together:
//
//   std::vector<OutputFile> out = {{"a.st", bytes_a, "--output"}, {"w.st", bytes_w, "--save-weights"}};
//   write_files_atomically(out);
//
// 1. Check: the destinations are distinct (the same file by device and inode, or the same name in
//    the same directory, is an error naming both), each one's directory exists and is writable,
//    and each destination is a regular file, a symlink, a FIFO or a character device, or absent.
// 2. Write: each regular destination gets a temporary next to it ("<path>.tmp.<pid>.<n>"), written
//    and fsynced; FIFOs and character devices (/dev/null, /dev/stdout) are written directly.
// 3. Rename every temporary over its destination, then fsync the directories.
// Any failure before step 3 removes every temporary and leaves every destination as it was.
//
// A symlink is written through: its final target is replaced (atomically), the link stays; a link
// into /proc (/dev/stdout, /dev/fd/N) is an open descriptor and written directly, appending. A
// directory or other non-file is refused, and so is the name "-" (standard input for the inputs; a
// file named "-" where standard output was meant: /dev/stdout is that). Temporaries a killed run left for a destination (their
// pid no longer alive) are removed when the next write to it finds them.
#pragma once

#include <string>
#include <vector>

namespace qkv {

struct OutputFile {
  std::string path;
  std::string bytes;
  std::string what;  // how the caller names it in messages (a flag: "--output"); "" for none
};

// A file or folder a run reads, named as the caller names it ("--weights"); "" for none.
struct InputPath {
  std::string path;
  std::string what;
};

// Throws qkv::Error ("cannot write 'path': ...") unless every destination can be written as above,
// and is neither one of `inputs` (the same file) nor an existing file in an input folder (a model
// folder's config.json): writing it would replace what the run reads. `bytes` is not looked at, so
// a long run can check its outputs before it starts.
void check_output_files(const std::vector<OutputFile>& files, const std::vector<InputPath>& inputs = {});

// Checks, then writes every file (see above).
void write_files_atomically(const std::vector<OutputFile>& files);

// A folder for a run's outputs, made now (when missing) so they can be checked before the run,
// and removed again when the run fails before writing into it: a failed run leaves no new empty
// folder behind. keep() once the outputs are written. A folder that was there is never removed.
class OutputFolder {
 public:
  OutputFolder() = default;
  OutputFolder(const std::string& path, const std::string& what);  // qkv::Error when it cannot be made
  ~OutputFolder();
  OutputFolder(OutputFolder&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  OutputFolder& operator=(OutputFolder&& o) noexcept;
  void keep() { path_.clear(); }

 private:
  std::string path_;  // the folder made here, until kept
};

}  // namespace qkv
