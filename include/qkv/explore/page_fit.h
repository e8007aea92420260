// qkv/explore/page_fit.h - a model's page on a text, and any page within its size: the storage chosen, one layer's pipeline kept
// when every layer's would not fit, and a page too large refused before and after the work, each
// time saying what makes it smaller.
//
// The limits a page is made under are `qkv explore`'s flags: --precision (values), --attention-
// weights (stored or computed), --pipeline-layer, --max-page-size; the messages name them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "qkv/explore/explore.h"
#include "qkv/models/generation.h"
#include "qkv/models/loaded_model.h"

namespace qkv {

struct ExploreLimits {
  ExplorePrecision precision = ExplorePrecision::kAuto;
  ExploreWeights weights = ExploreWeights::kAuto;
  std::optional<int64_t> pipeline_layer;  // the one layer whose pipeline the page keeps; unset: all that fit
  int64_t max_bytes = int64_t{64} << 20;
};

// "f32", "u8, attention weights computed in the page": how a page stores its values.
std::string storage_name(ExploreStorage st);
// "12.3 MB"
std::string megabytes(int64_t bytes);

// Before any work: the attention weights of `layers` x `heads` (T, T) (or their queries and keys
// when the page computes them), and `square_steps` more (T, T) per head its pipeline shows, at the
// smallest size the limits allow must fit; else a qkv::Error saying what would make it smaller.
void check_page_fits(int64_t layers, int64_t heads, int64_t head_dim, int64_t tokens, bool causal,
                     const ExploreLimits& limits, int64_t square_steps = 0);

// The page made within the limits: the storage resolved (resolve_storage), the pipeline cut to one
// layer (the given one; layer 0 when every layer's would not fit), the estimate and then the HTML
// held to max_bytes. Returns the HTML; `storage` receives the storage used.
std::string fit_page(ExplorePage& page, const ExploreLimits& limits, ExploreStorage& storage);

// A model's page on a text (qkv explore --weights / --checkpoint / --model).
struct ExploreTextOptions {
  int64_t generate = 0;       // continue the text by N tokens first, as qkv generate does (the KV cache, the draws)
  SamplingOptions sampling;   // those draws (max_new_tokens is `generate`)
  ExploreLimits limits;       // the page's, checked before any work
};
// Every layer of the model on the text's tokens - and their continuation, marked - in one pass:
// the title is the model's description and the text; the induction score on 64 random tokens
// (fixed seed) repeated once where the context holds them; the logit lens's top 5.
ExplorePage explore_text(LoadedModel& m, const std::string& text, const ExploreTextOptions& o);

}  // namespace qkv
