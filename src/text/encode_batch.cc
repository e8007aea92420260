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

using SpecialSet = Encoding::Impl::SpecialSet;

// Runs work(i, worker) for every text index i on a pool of workers (worker in 0..workers-1);
// returns the number of workers. The first failing text (lowest index) fails the batch.
template <typename Work>
size_t run_batch(size_t count, int threads, const Work& work_on) {
  QKV_CHECK(threads >= 0, "encode_batch: threads must be >= 0 (0: one per hardware thread), not ", threads);
  size_t workers = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  workers = std::min({workers, static_cast<size_t>(std::max(1, limits().max_threads)), count});
  workers = std::max<size_t>(1, workers);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  size_t error_index = SIZE_MAX;
  std::string error_message;
  auto work = [&](size_t worker) {
    for (size_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < count;) {
      try {
        work_on(i, worker);
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
    for (size_t w = 1; w < workers; ++w) pool.emplace_back(work, w);
  } catch (const std::system_error&) {
  }
  work(0);
  for (std::thread& t : pool) t.join();
  QKV_CHECK(!failed, "text ", error_index + 1, " of ", count, " in the batch: ", error_message);
  return workers;
}

// One text, as Encoding::encode does it, appended to out.
void encode_one(const Encoding::Impl& impl, std::string_view text, const SpecialSet& allowed,
                const SpecialSet& disallowed, std::vector<TokenId>& out) {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::replace_invalid(text);
    text = repaired;
  }
  impl.check_disallowed(text, disallowed);
  impl.encode_into(text, allowed, out);
}

}  // namespace

std::vector<std::vector<TokenId>> Encoding::encode_batch(const std::vector<std::string>& texts, int threads,
                                                         const SpecialTokens& allowed_special,
                                                         const SpecialTokens& disallowed_special) const {
  SpecialSet allowed, disallowed;
  impl_->resolve_specials(allowed_special, disallowed_special, allowed, disallowed);
  std::vector<std::vector<TokenId>> out(texts.size());
  run_batch(texts.size(), threads, [&](size_t i, size_t) {
    out[i].reserve(texts[i].size() / 3 + 8);
    encode_one(*impl_, texts[i], allowed, disallowed, out[i]);
  });
  return out;
}

std::vector<std::vector<TokenId>> Encoding::encode_ordinary_batch(const std::vector<std::string>& texts,
                                                                  int threads) const {
  std::vector<std::vector<TokenId>> out(texts.size());
  run_batch(texts.size(), threads, [&](size_t i, size_t) { out[i] = encode_ordinary(texts[i]); });
  return out;
}

void Encoding::encode_batch_into(std::span<const std::string_view> texts, TokenBatch& out, int threads,
                                 const SpecialTokens& allowed_special,
                                 const SpecialTokens& disallowed_special) const {
  SpecialSet allowed, disallowed;
  impl_->resolve_specials(allowed_special, disallowed_special, allowed, disallowed);
  out.where_.assign(texts.size(), TokenBatch::Where{});
  // A buffer for each worker there may be; run_batch never starts more than this.
  const size_t most = std::max<size_t>(1, std::min(texts.size(), threads > 0 ? static_cast<size_t>(threads)
                                                                              : std::max(1u, std::thread::hardware_concurrency())));
  if (out.buffers_.size() < most) out.buffers_.resize(most);
  for (std::vector<TokenId>& b : out.buffers_) b.clear();
  run_batch(texts.size(), threads, [&](size_t i, size_t worker) {
    std::vector<TokenId>& buffer = out.buffers_[worker];
    const size_t begin = buffer.size();
    encode_one(*impl_, texts[i], allowed, disallowed, buffer);
    out.where_[i] = TokenBatch::Where{worker, begin, buffer.size() - begin};
  });
}

}  // namespace qkv
