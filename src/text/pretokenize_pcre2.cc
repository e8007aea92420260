// Pre-tokenisation by any pattern, with PCRE2 (UTF + UCP) and its JIT compiler. Each split() call
// uses its own match data and JIT stack, so one Pretokenizer serves many threads at once.
//
// Patterns come from users (--pattern), so every match runs under limits: PCRE2's match limit and
// depth limit from limits().regex_match_limit, its heap limit from limits().max_memory_bytes, and
// a JIT stack of at most kJitStackMax. `(a+)+$` on "aaa...ab" then fails in milliseconds with an
// error naming the limit, instead of backtracking for ages. A match limit bounds one match, not a
// text (a pattern can succeed every time just under it), so split() also keeps a budget of time:
// one second plus the bytes consumed over limits().regex_min_bytes_per_second; a pattern slower
// than that fails with an error naming the rate instead of running for hours.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <chrono>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/limits.h"
#include "qkv/text/pretokenize.h"

namespace qkv {
namespace {

constexpr size_t kJitStackMax = 64 * 1024 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// A failed match: which limit the pattern ran into, and what raises it.
[[noreturn]] void fail_match(int rc, size_t pos, const std::string& pattern) {
  const std::string where = "pre-tokenisation pattern " + excerpt(pattern) + " at byte " + std::to_string(pos);
  switch (rc) {
    case PCRE2_ERROR_MATCHLIMIT:
    case PCRE2_ERROR_DEPTHLIMIT:
      fail(where, ": the pattern exceeded the match limit of ", limits().regex_match_limit,
           " backtracking steps (regex_match_limit); it backtracks too much on this text");
    case PCRE2_ERROR_HEAPLIMIT:
      fail(where, ": the pattern exceeded the memory limit of ", limits().max_memory_bytes,
           " bytes for its backtracking (max_memory_bytes)");
    case PCRE2_ERROR_JIT_STACKLIMIT:
      fail(where, ": the pattern needs more than the ", kJitStackMax / (1024 * 1024),
           " MiB JIT stack PCRE2 is given; it backtracks too much on this text");
    default:
      fail(where, ": PCRE2 failed: ", pcre2_message(rc));
  }
}

class Pcre2Pretokenizer final : public Pretokenizer {
 public:
  explicit Pcre2Pretokenizer(const std::string& pattern) : Pretokenizer(pattern) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &code, &offset, nullptr);
    QKV_CHECK(code_ != nullptr, "pre-tokenisation pattern: PCRE2 rejects it at offset ", offset, ": ",
              pcre2_message(code), "\n  pattern: ", excerpt(pattern, 400));
    // (a pattern that starts (*NO_JIT) compiles "successfully" to no machine code: matched by the
    // interpreter, as pcre2_jit_match would refuse it)
    size_t jit_bytes = 0;
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0 &&
           pcre2_pattern_info(code_, PCRE2_INFO_JITSIZE, &jit_bytes) == 0 && jit_bytes > 0;
  }
  ~Pcre2Pretokenizer() override { pcre2_code_free(code_); }
  Pcre2Pretokenizer(const Pcre2Pretokenizer&) = delete;
  Pcre2Pretokenizer& operator=(const Pcre2Pretokenizer&) = delete;

  const char* engine() const override { return jit_ ? "pcre2-jit" : "pcre2"; }

  size_t split(std::string_view text, size_t pos, std::vector<std::string_view>& pieces,
               size_t max) const override {
    Scratch s(code_, jit_);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const size_t n = text.size();
    const size_t first = pos;
    const auto started = std::chrono::steady_clock::now();
    const double rate = static_cast<double>(limits().regex_min_bytes_per_second);
    size_t next_check = 0;  // the match before which the clock is read next
    for (size_t count = 0, calls = 0; pos < n && count < max; ++calls) {
      // The clock is read before matches 0, 1, 3, 7, ... and then after about every 10 ms of
      // matching at the pace so far, at most 64 matches apart: cheap next to fast matches, and when
      // each match is slow (a back-reference pattern can take a good part of a second per match
      // under the match limit) before every match, so that the floor is seen one match after it
      // is passed, not 64 slow matches later.
      if (calls == next_check) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        const double budget = 1.0 + static_cast<double>(pos - first) / rate;
        QKV_CHECK(seconds <= budget, "pre-tokenisation pattern ", excerpt(pattern()), " at byte ", pos,
                  ": it ran for ", seconds, " s over ", pos - first, " bytes, slower than the ",
                  limits().regex_min_bytes_per_second,
                  " bytes per second (after a first second) qkv allows (regex_min_bytes_per_second);",
                  " it backtracks too much on this text");
        const double per_match = seconds / static_cast<double>(calls + 1);
        const double ahead = std::min({per_match > 0 ? 0.01 / per_match : 64.0, static_cast<double>(calls + 1), 64.0});
        next_check = calls + std::max<size_t>(1, static_cast<size_t>(ahead));
      }
      const int rc = jit_ ? pcre2_jit_match(code_, subject, n, pos, PCRE2_NO_UTF_CHECK, s.match, s.context)
                          : pcre2_match(code_, subject, n, pos, PCRE2_NO_UTF_CHECK, s.match, s.context);
      if (rc == PCRE2_ERROR_NOMATCH) return n;
      if (rc < 0) fail_match(rc, pos, pattern());
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.match);
      const size_t start = ov[0], end = ov[1];
      pieces.emplace_back(text.data() + start, end - start);
      ++count;
      if (end > start) {
        pos = end;
      } else {  // an empty match (a boundary): resume one character on
        pos = start + 1;
        while (pos < n && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
    return pos;
  }

 private:
  struct Scratch {
    Scratch(const pcre2_code* code, bool jit) {
      match = pcre2_match_data_create_from_pattern(code, nullptr);
      context = pcre2_match_context_create(nullptr);
      if (jit) {
        stack = pcre2_jit_stack_create(32 * 1024, kJitStackMax, nullptr);
        if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
      }
      QKV_CHECK(match && context && (!jit || stack), "pre-tokenisation: out of memory for PCRE2");
      const Limits& l = limits();
      const auto steps = static_cast<uint32_t>(std::clamp<int64_t>(l.regex_match_limit, 1, UINT32_MAX));
      pcre2_set_match_limit(context, steps);
      pcre2_set_depth_limit(context, steps);
      // The heap limit is in KiB; PCRE2's own default (20,000,000 KiB) if the memory limit is above it.
      pcre2_set_heap_limit(context, static_cast<uint32_t>(std::clamp<int64_t>(l.max_memory_bytes / 1024, 1, 20'000'000)));
    }
    ~Scratch() {
      pcre2_match_data_free(match);
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
    }
    pcre2_match_data* match = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;
  };

  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace

std::unique_ptr<Pretokenizer> make_pcre2_pretokenizer(const std::string& pattern) {
  return std::make_unique<Pcre2Pretokenizer>(pattern);
}

}  // namespace qkv
