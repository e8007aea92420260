// qkv/text/byte_level.h - GPT-2's byte-level alphabet (bytes_to_unicode): how byte-level BPE
// vocabularies (GPT-2's encoder.json and vocab.bpe, Hugging Face's tokenizer.json) spell bytes as
// characters. Byte b is the character U+00b when b is printable (Python's str.isprintable, and not
// the space: 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF), else U+0100 + n, n counting the other bytes in order
// (so the space is U+0120, 'Ġ', and the newline U+010A, 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace qkv {

uint32_t byte_level_char(uint8_t b);   // the code point that spells byte b
int byte_level_byte(uint32_t cp);      // the byte that code point cp spells, or -1 (none)
// The printable bytes in order, then the others: GPT-2's ranks of the single bytes.
const std::array<uint8_t, 256>& byte_level_order();
// Appends the bytes a byte-level token (UTF-8 text in this alphabet) spells to out. Returns false,
// with *bad the first character that spells no byte, when one does not (out then holds a part).
bool byte_level_decode(std::string_view token, std::string& out, uint32_t* bad = nullptr);

}  // namespace qkv
