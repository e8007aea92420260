// qkv/core/huge_pages.h - large buffers on 2 MiB pages where the kernel grants them.
#pragma once

#include <cstddef>

namespace qkv {

// Linux backs a buffer it is asked to (madvise MADV_HUGEPAGE; transparent huge pages in "madvise"
// mode, Debian's default) with 2 MiB pages as they are first touched: 512 times fewer page faults
// (a fresh 4 KiB page costs ~15 us to touch on some VMs). Used where a buffer is written as it
// grows (the KV cache) or streamed whole (the bandwidth probe); a loaded model's weights are in
// chunks advised so (core/weight_memory.h). Not for tensors: a GPT-2 training step ran 1.11x as
// long with tensors of 1 MiB and more advised (Zen 5 VM, docs/benchmarks.md).
//   advise_huge_pages(p, bytes): asks for the whole 4 KiB pages inside [p, p + bytes) when the
//     range spans at least 2 MiB (the kernel then uses 2 MiB pages on the 2 MiB-aligned stretches);
//     below that, and elsewhere than Linux, nothing. Returns whether it asked. The bytes are
//     unchanged; call it before the pages are first touched.
bool advise_huge_pages(void* p, size_t bytes);

}  // namespace qkv
