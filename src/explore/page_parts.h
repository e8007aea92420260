// src/explore/page_parts.h - what every page builder shares (explore_data.cc defines them): a
// pipeline step, key heads repeated per query head, and the summaries made once a page's layers
// are filled in (rollout, thumbnails, head statistics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/explore/explore.h"

namespace qkv::explore_detail {

ExploreStep step(std::string name, std::string caption, Tensor value, bool per_head = false,
                 std::vector<ExploreLink> links = {}, int64_t layer = -1);
// Key heads repeated so that query head h reads row h: (G, T, D) -> (H, T, D).
Tensor repeat_heads(const Tensor& k, int64_t H);
// The rollout, the model view's thumbnails and each head's statistics of a page whose layers are filled in.
void summarise(ExplorePage& p);

}  // namespace qkv::explore_detail
