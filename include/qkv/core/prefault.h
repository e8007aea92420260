// qkv/core/prefault.h - large buffers about to be written whole (weights read from a file), with
// their pages mapped in one call instead of one fault each.
//
// A fresh 4 KiB page costs a fault when first touched: ~10 us on some VMs, so copying a 1.1 GB
// BF16 file's weights into new memory took 3.5-3.9 s of which the copy itself was a small part.
// madvise(MADV_POPULATE_WRITE) (Linux 5.14) maps every page of a range in one call: the same copy
// took 1.8-2.4 s (Zen 5 VM). The pages are resident afterwards, so use it only where the whole
// buffer is written at once. (Weights' own storage, qkv/core/weight_memory.h, maps its pages so.)
//   prefault_pages(p, bytes): maps the whole 4 KiB pages inside [p, p + bytes) for writing when the
//     range spans at least 2 MiB; below that, on kernels without the advice, and elsewhere than
//     Linux, nothing. Returns whether the kernel mapped them.
//   map_pages_for_writing(p, bytes): the same for every page [p, p + bytes) touches, whatever its
//     size (pages it shares with a neighbour included: a weight carved from a chunk of mapped memory).
#pragma once

#include <cstddef>

namespace qkv {

bool prefault_pages(void* p, size_t bytes);
bool map_pages_for_writing(void* p, size_t bytes);

}  // namespace qkv
