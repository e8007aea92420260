// Hash tables keyed by byte strings, for the BPE hot path (private to src/text).
//
// TokenTable: token bytes -> rank, built once; PieceCache: piece bytes -> its BPE ranks, filled as
// pieces are met (one per thread, never shared). Both are open addressing with linear probing over
// a power-of-two array of slots; a slot keeps 32 bits of the hash, so a probe compares bytes only
// when the hashes agree. The keys' bytes live in one arena string.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::bpe_detail {

using Rank = uint32_t;
inline constexpr Rank kNoRank = UINT32_MAX;

inline uint64_t mix(uint64_t a, uint64_t b) {
  const __uint128_t m = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

inline uint64_t load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// a[0..n) == b[0..n), inline for the short keys of a vocabulary.
inline bool same_bytes(const char* a, const char* b, size_t n) {
  if (n >= 8) {
    for (size_t i = 0; i + 8 < n; i += 8)
      if (load64(a + i) != load64(b + i)) return false;
    return load64(a + n - 8) == load64(b + n - 8);
  }
  if (n >= 4) return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// A fast hash of short byte strings (wyhash's layout: two overlapping loads for up to 16 bytes).
inline uint64_t hash_bytes(const char* p, size_t n) {
  constexpr uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull, k2 = 0x8ebc6af09c88c6e3ull;
  uint64_t a, b;
  if (n <= 16) {
    if (n >= 4) {
      const size_t q = (n >> 3) << 2;
      a = (load32(p) << 32) | load32(p + q);
      b = (load32(p + n - 4) << 32) | load32(p + n - 4 - q);
    } else if (n > 0) {
      a = (static_cast<uint64_t>(static_cast<uint8_t>(p[0])) << 16) |
          (static_cast<uint64_t>(static_cast<uint8_t>(p[n >> 1])) << 8) | static_cast<uint8_t>(p[n - 1]);
      b = 0;
    } else {
      a = b = 0;
    }
  } else {
    uint64_t seed = k0;
    size_t i = n;
    const char* q = p;
    while (i > 16) {
      seed = mix(load64(q) ^ k1, load64(q + 8) ^ seed);
      q += 16;
      i -= 16;
    }
    a = load64(p + n - 16) ^ seed;
    b = load64(p + n - 8);
  }
  return mix(k1 ^ n, mix(a ^ k1, b ^ k2));
}

// The first min(n, 8) bytes of p as a little-endian integer, zero-padded (exact for n <= 8).
inline uint64_t head_bytes(const char* p, size_t n) {
  if (n >= 8) return load64(p);
  if (n >= 4) return load32(p) | (load32(p + n - 4) << (8 * (n - 4)));  // the loads overlap on equal bytes
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Token bytes -> rank. A slot holds a key's first 8 bytes, so a key of up to 8 bytes (most tokens)
// is found without touching the arena.
class TokenTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // Inserts bytes -> rank; returns false (and changes nothing) if bytes were already there.
  bool insert(std::string_view bytes, Rank rank) {
    if (bytes.empty()) return false;
    if ((count_ + 1) * 2 > slots_.size()) grow();
    if (find(bytes) != kNoRank) return false;
    const uint64_t head = head_bytes(bytes.data(), bytes.size());
    Slot s{head, rank, static_cast<uint32_t>(bytes.size()), 0};
    if (bytes.size() > 8) {
      s.tail_offset = static_cast<uint32_t>(arena_.size());
      arena_.append(bytes.substr(8));
    }
    place(s, hash_of(bytes.data(), bytes.size(), head));
    ++count_;
    return true;
  }
  Rank find(const char* p, size_t n) const {
    if (slots_.empty() || n == 0) return kNoRank;
    const uint64_t head = head_bytes(p, n);
    for (size_t i = hash_of(p, n, head) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.len == 0) return kNoRank;
      if (s.head == head && s.len == n && (n <= 8 || same_bytes(arena_.data() + s.tail_offset, p + 8, n - 8)))
        return s.rank;
    }
  }
  Rank find(std::string_view bytes) const { return find(bytes.data(), bytes.size()); }
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint64_t head = 0;  // the first 8 bytes, zero-padded
    uint32_t rank = 0;
    uint32_t len = 0;          // 0: empty (keys are never empty)
    uint32_t tail_offset = 0;  // bytes 8.. in arena_, for keys longer than 8
  };
  static uint64_t hash_of(const char* p, size_t n, uint64_t head) {
    return n <= 8 ? mix(head ^ 0xe7037ed1a0b428dbull, n ^ 0x8ebc6af09c88c6e3ull) : hash_bytes(p, n);
  }
  void place(const Slot& s, uint64_t h) {
    for (size_t i = h & mask_;; i = (i + 1) & mask_)
      if (slots_[i].len == 0) {
        slots_[i] = s;
        return;
      }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.empty() ? 8 : old.size());
    for (const Slot& s : old) {
      if (s.len == 0) continue;
      std::string key(8, '\0');
      std::memcpy(key.data(), &s.head, 8);
      key.resize(std::min<size_t>(s.len, 8));
      if (s.len > 8) key.append(arena_, s.tail_offset, s.len - 8);
      place(s, hash_of(key.data(), key.size(), s.head));
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0, count_ = 0;
};

// piece -> the ranks BPE gave it. Bounded: when full it starts again empty (pieces that recur are
// back after one miss each).
class PieceCache {
 public:
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxPieceBytes = 256;  // longer pieces are not cached

  // The cached ranks of piece, or nullptr; *count receives their number.
  const Rank* find(std::string_view piece, size_t* count) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = hash_bytes(piece.data(), piece.size());
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.len == 0) return nullptr;
      if (s.tag == tag && s.len == piece.size() && same_bytes(bytes_.data() + s.offset, piece.data(), piece.size())) {
        *count = s.n_ranks;
        return ranks_.data() + s.first_rank;
      }
    }
  }
  void insert(std::string_view piece, const Rank* ranks, size_t n) {
    if (piece.empty() || piece.size() > kMaxPieceBytes) return;
    if (slots_.empty() || count_ >= kMaxEntries) clear_and_size();
    const uint64_t h = hash_bytes(piece.data(), piece.size());
    size_t i = h & mask_;
    while (slots_[i].len != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(bytes_.size()),
                     static_cast<uint32_t>(piece.size()), static_cast<uint32_t>(ranks_.size()),
                     static_cast<uint32_t>(n)};
    bytes_.append(piece);
    ranks_.insert(ranks_.end(), ranks, ranks + n);
    ++count_;
  }
  void clear() {
    slots_.clear();
    bytes_.clear();
    ranks_.clear();
    count_ = 0;
  }

 private:
  struct Slot {
    uint32_t tag = 0, offset = 0, len = 0, first_rank = 0, n_ranks = 0;
  };
  void clear_and_size() {
    clear();
    slots_.assign(kMaxEntries * 2, Slot{});
    mask_ = kMaxEntries * 2 - 1;
  }

  std::vector<Slot> slots_;
  std::string bytes_;
  std::vector<Rank> ranks_;
  size_t mask_ = 0, count_ = 0;
};

}  // namespace qkv::bpe_detail
