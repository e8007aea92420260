// Unicode normalisation form C of UTF-8 text, in time linear in its length (private to src/text).
//
// utf8proc_map's canonical ordering sorts each run of combining marks by exchanging neighbours,
// quadratic in the run's length: a megabyte of alternating marks would take hours. nfc() makes the
// same string with utf8proc's decompositions and compositions and a stable sort of each run by
// combining class (which is what canonical ordering is).
#pragma once

#include <string>
#include <string_view>

namespace qkv::text_detail {

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);
// utf8proc_map(UTF8PROC_STABLE | UTF8PROC_COMPOSE): the reference nfc() is tested against.
std::string nfc_reference(std::string_view text);

}  // namespace qkv::text_detail
