// qkv/core/json_read.h - JSON from outside (a safetensors header, a checkpoint's metadata, a list of
// token ids), read so that no input can make qkv recurse, take quadratic time or print it whole.
//
//   nlohmann::json j = parse_json(text, "'w.st': header", JsonKeys::kUnique);
//   fail("'shape' must be an array, got ", json_excerpt(j["shape"]));   // {"a":[1,2,... (cut)
//
// parse_json runs nlohmann's iterative parser with a SAX handler that counts the nesting and, if
// asked, the keys of each open object: nothing in it recurses on the input's nesting (nlohmann
// 3.11's destructor is iterative too), and it is linear in the input's size. (nlohmann's own
// parser callback is not: at the end of every object it scans the enclosing object, quadratic in
// the number of members.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "qkv/core/excerpt.h"

namespace qkv {

enum class JsonKeys { kLastWins, kUnique };  // kUnique: a key twice in one object is an error

// The one JSON value `text` holds. Throws qkv::Error starting with `what` when the text is not
// JSON (with the byte offset and an excerpt of the text there), when it is longer than
// limits().max_json_bytes (naming max_json_bytes), when arrays and objects nest more
// than limits().json_max_depth deep (naming json_max_depth), or, with JsonKeys::kUnique, when an
// object has a key twice (naming the key).
nlohmann::json parse_json(std::string_view text, const std::string& what, JsonKeys keys = JsonKeys::kLastWins);

// A JSON value fit for a message: its compact JSON text, ASCII only (every control character and
// everything beyond ASCII \u-escaped, invalid UTF-8 replaced), at most `max_bytes` of it and
// "... (cut)" after when there is more. Never recurses more than a few levels and never writes out
// much more than it shows, whatever the value holds.
std::string json_excerpt(const nlohmann::json& j, size_t max_bytes = kExcerptBytes);

}  // namespace qkv
