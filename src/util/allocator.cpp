#include "txl/util/allocator.h"

#include <climits>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace txl {

void keep_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_MAX, 0);               // no block is given back with munmap
    mallopt(M_TRIM_THRESHOLD, INT_MAX);   // freed memory at the top of the heap is kept
    mallopt(M_TOP_PAD, 64 * 1024 * 1024);  // the heap grows in steps of 64 MiB
  });
#endif
}

}  // namespace txl
