// qkv/core/prefault.h - large buffers about to be written whole (weights read from a file), with
// their pages mapped in one call instead of one fault each.
//
// A fresh 4 KiB page costs a fault when first touched: ~10 us on some VMs, so copying a 1.1 GB
// BF16 file's weights into new memory took 3.5-3.9 s of which the copy itself was a small part.
// madvise(MADV_POPULATE_WRITE) (Linux 5.14) maps every page of a range in one call: the same copy
// took 1.8-2.4 s (Zen 5 VM). The pages are resident afterwards, so use it only where the whole
// buffer is written at once.
//   prefault_pages(p, bytes): maps the whole 4 KiB pages inside [p, p + bytes) for writing when the
//     range spans at least 2 MiB; below that, on kernels without the advice, and elsewhere than
//     Linux, nothing. Returns whether the kernel mapped them.
//   PrefaultedVector<T>: a std::vector whose elements start uninitialised (no zero fill: the
//     caller writes them all) and whose storage of 2 MiB or more is prefaulted when allocated.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace qkv {

bool prefault_pages(void* p, size_t bytes);

template <class T>
struct PrefaultedAllocator {
  using value_type = T;
  PrefaultedAllocator() = default;
  template <class U>
  PrefaultedAllocator(const PrefaultedAllocator<U>&) noexcept {}  // NOLINT: allocator rebinding
  T* allocate(size_t n) {
    T* p = std::allocator<T>().allocate(n);
    prefault_pages(p, n * sizeof(T));
    return p;
  }
  void deallocate(T* p, size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: a trivial type's bytes left as they are
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(static_cast<Args&&>(args)...);
  }
  template <class U>
  bool operator==(const PrefaultedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using PrefaultedVector = std::vector<T, PrefaultedAllocator<T>>;

}  // namespace qkv
