// A folder of temporary files for the targets whose parser takes a path (a checkpoint, a model's
// folder or file): one folder per process, $TMPDIR/qkv-fuzz-<target>-<pid>, each file rewritten for
// every input, the files and the folder removed when the process ends.
//
//   qkv_fuzz::TempFiles g_files("gguf-model");   // a global: see below
//   const std::string path = g_files.write("model.gguf", data);
//
// Make it a global of the target's file (in an unnamed namespace): a function-local static would
// be made after the clean-up of other globals and destroyed first (ASan caught a read after free
// at exit that way).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_target.h"

namespace qkv_fuzz {

class TempFiles {
 public:
  explicit TempFiles(const std::string& target) {
    const char* t = std::getenv("TMPDIR");
    dir_ = std::string(t && *t ? t : "/tmp") + "/qkv-fuzz-" + target + "-" + std::to_string(getpid());
    ::mkdir(dir_.c_str(), 0700);
  }
  ~TempFiles() {
    for (const std::string& name : names_) std::remove(path(name).c_str());
    ::rmdir(dir_.c_str());
  }
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  // The bytes as the file `name` of the folder (replacing it); its path.
  std::string write(const std::string& name, std::string_view bytes) {
    names_.insert(name);
    const std::string p = path(name);
    std::FILE* f = std::fopen(p.c_str(), "wb");
    QKV_FUZZ_EXPECT(f != nullptr);
    QKV_FUZZ_EXPECT(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    QKV_FUZZ_EXPECT(std::fclose(f) == 0);
    return p;
  }
  // Removes the file `name` if it is there.
  void remove(const std::string& name) const { std::remove(path(name).c_str()); }

 private:
  std::string dir_;
  std::set<std::string> names_;  // the files written, removed at the end
};

}  // namespace qkv_fuzz
