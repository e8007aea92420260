// qkv/core/read_file.h - whole-file reads, bounded and refusing what is not a regular file.
#pragma once

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

}  // namespace qkv
