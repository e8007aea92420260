// qkv/io/atomic_file.h - writes that either replace a file whole or leave it be (and, from core,
// whole-file reads: qkv/core/read_file.h).
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

#include "qkv/core/read_file.h"

namespace qkv {

// Replaces (or creates) `path` with exactly `bytes`. A replaced file keeps its permission bits;
// a new one gets 0666 minus the umask, like any other new file.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The same, with the content produced by `write`. `write` runs before anything touches the
// disk: if it throws, the exception propagates and `path` is untouched, with no temporary left.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);

}  // namespace qkv
