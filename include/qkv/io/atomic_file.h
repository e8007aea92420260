// qkv/io/atomic_file.h - whole-file reads, and writes that either replace a file whole or leave it be.
//
// write_file_atomically writes to a fresh temporary file in the same directory as `path`
// ("<path>.tmp.<pid>.<counter>"), flushes and fsyncs it, then renames it over `path`, so a reader
// sees either the old file or the new one, never a half-written one, even if the process dies
// midway. On any failure the temporary is removed, `path` is untouched, and qkv::Error says which
// path and why (strerror). It is write_files_atomically with one file: symlinks are written through,
// FIFOs and devices written directly, directories refused (qkv/io/output_files.h).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

namespace qkv {

// Replaces (or creates) `path` with exactly `bytes`. A replaced file keeps its permission bits;
// a new one gets 0666 minus the umask, like any other new file.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The same, with the content produced by `write`. `write` runs before anything touches the
// disk: if it throws, the exception propagates and `path` is untouched, with no temporary left.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);

// Whether read_file takes the path "-" for standard input (where a command reads one stream).
enum class StdinRule { kNoStdin, kDashIsStdin };

// The whole content of `path`, a regular file of at most limits().max_file_bytes bytes: a
// directory, a device (/dev/zero), a FIFO or a larger file is refused before anything is read.
// With StdinRule::kDashIsStdin, "-" reads standard input (up to the same limit). Throws
// qkv::Error "cannot open 'path': No such file or directory" (or "cannot read 'path': it is a
// directory ...", "... more than the file size limit of N bytes (max_file_bytes)") on failure.
std::string read_file(const std::string& path, StdinRule stdin_rule = StdinRule::kNoStdin);

}  // namespace qkv
