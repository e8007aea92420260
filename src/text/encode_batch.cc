// encode_batch: texts spread over std::threads. Workers take the next unclaimed text (so long and
// short texts balance), each with its own piece cache; the results land in their slots, in order.
// The workers are a fixed pool: as many as asked for (0: one per hardware thread), but never more
// than limits().max_threads nor than there are texts, however many texts there are.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "encoding_impl.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

using SpecialRef = const std::pair<std::string, Encoding::Impl::Rank>*;

template <typename EncodeOne>
std::vector<std::vector<TokenId>> run_batch(const std::vector<std::string>& texts, int threads,
                                            const EncodeOne& encode_one) {
  QKV_CHECK(threads >= 0, "encode_batch: threads must be >= 0 (0: one per hardware thread), not ", threads);
  size_t workers = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  workers = std::min({workers, static_cast<size_t>(std::max(1, limits().max_threads)), texts.size()});
  workers = std::max<size_t>(1, workers);
  std::vector<std::vector<TokenId>> out(texts.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  size_t error_index = SIZE_MAX;
  std::string error_message;
  auto work = [&] {
    for (size_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < texts.size();) {
      try {
        out[i] = encode_one(texts[i]);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (i < error_index) {
          error_index = i;
          error_message = e.what();
        }
        failed = true;
      }
    }
  };
  // workers - 1 threads beside the calling thread, which works too. If the system refuses a thread,
  // the batch runs on those it has (the caller at least).
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  try {
    for (size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  } catch (const std::system_error&) {
  }
  work();
  for (std::thread& t : pool) t.join();
  QKV_CHECK(!failed, "text ", error_index + 1, " of ", texts.size(), " in the batch: ", error_message);
  return out;
}

}  // namespace

std::vector<std::vector<TokenId>> Encoding::encode_batch(const std::vector<std::string>& texts, int threads,
                                                         const SpecialTokens& allowed_special,
                                                         const SpecialTokens& disallowed_special) const {
  std::vector<SpecialRef> allowed, disallowed;
  impl_->resolve_specials(allowed_special, disallowed_special, allowed, disallowed);
  const Impl& impl = *impl_;
  return run_batch(texts, threads, [&](const std::string& text) {
    std::string repaired;
    std::string_view t = text;
    if (!utf8::is_valid(t)) {
      repaired = utf8::replace_invalid(t);
      t = repaired;
    }
    impl.check_disallowed(t, disallowed);
    std::vector<TokenId> ids;
    ids.reserve(t.size() / 4 + 8);
    impl.encode_into(t, allowed, ids);
    return ids;
  });
}

std::vector<std::vector<TokenId>> Encoding::encode_ordinary_batch(const std::vector<std::string>& texts,
                                                                  int threads) const {
  return run_batch(texts, threads, [this](const std::string& text) { return encode_ordinary(text); });
}

}  // namespace qkv
