// nfc(): see nfc.h.
#include "nfc.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/text/utf8.h"

namespace qkv::text_detail {

namespace {
constexpr auto kOptions = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);

int combining_class(utf8proc_int32_t c) { return utf8proc_get_property(c)->combining_class; }
}  // namespace

std::string nfc_reference(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out, kOptions);
  QKV_CHECK(n >= 0, "NFC normalisation failed: ", utf8proc_errmsg(n));
  std::string s(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return s;
}

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);  // ASCII is its own NFC
  // 1. canonical decomposition, code point by code point
  std::vector<utf8proc_int32_t> cps;
  cps.reserve(text.size());
  utf8proc_int32_t parts[32];
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<utf8proc_int32_t>(utf8::next(text, i));
    const utf8proc_ssize_t n = utf8proc_decompose_char(c, parts, 32, kOptions, nullptr);
    QKV_CHECK(n >= 0 && n <= 32, "NFC normalisation failed at U+", c, ": ", n < 0 ? utf8proc_errmsg(n) : "too long");
    cps.insert(cps.end(), parts, parts + n);
  }
  // 2. canonical ordering: each run of non-starters sorted by combining class, stably
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < cps.size() && combining_class(cps[end]) != 0) ++end;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(end),
                     [](utf8proc_int32_t a, utf8proc_int32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  // 3. composition (utf8proc_normalize_utf32: one pass, each mark against its starter) and UTF-8
  //    again, in place (utf8proc_reencode does both)
  cps.push_back(0);  // room: reencode writes a terminating 0
  const utf8proc_ssize_t n = utf8proc_reencode(cps.data(), static_cast<utf8proc_ssize_t>(cps.size() - 1), kOptions);
  QKV_CHECK(n >= 0, "NFC normalisation failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(cps.data()), static_cast<size_t>(n));
}

}  // namespace qkv::text_detail
