#include "txl/kernels/huge_pages.h"

#include <c10/util/accumulate.h>

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace txl::kernels {

namespace {

// The bytes of the block empty_huge maps for a tensor of `sizes` like `options`, 0 where it maps
// none: only a strided, non-quantized CPU tensor of at least kHugePageMinBytes, on Linux.
size_t own_block_bytes(at::IntArrayRef sizes, const at::TensorOptions& options) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (options.device().type() != c10::kCPU || options.layout() != c10::kStrided) return 0;
  const auto dtype = c10::typeMetaToScalarType(options.dtype());
  if (c10::isQIntType(dtype)) return 0;
  for (auto s : sizes) {
    if (s < 0) return 0;  // torch::empty gives the error
  }
  const int64_t bytes =
      c10::multiply_integers(sizes) * static_cast<int64_t>(c10::elementSize(dtype));
  if (bytes < kHugePageMinBytes) return 0;
  return static_cast<size_t>((bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
#else
  (void)sizes;
  (void)options;
  return 0;
#endif
}

}  // namespace

at::Tensor empty_huge(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const size_t block = own_block_bytes(sizes, options);
  if (block == 0) return at::empty(sizes, options);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto page = static_cast<size_t>(kHugePageBytes);
  // Fresh pages from mmap, not the C heap's: memory the heap has touched keeps its 4 KB pages.
  // One page more than the block, then what lies outside the aligned block is given back (the
  // tail: between 4 KB and 2 MB).
  void* raw =
      mmap(nullptr, block + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(raw != MAP_FAILED, "empty_huge: out of memory (", block, " bytes)");
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + page - 1) / page * page;
  if (start > base) munmap(raw, start - base);
  munmap(reinterpret_cast<void*>(start + block), base + page - start);
  void* data = reinterpret_cast<void*>(start);
  madvise(data, block, MADV_HUGEPAGE);  // advice only: refused, the pages stay 4 KB
  try {
    return at::from_blob(
        data, sizes, [block](void* p) { munmap(p, block); }, options);
  } catch (...) {
    munmap(data, block);  // from_blob refused it: nothing owns the block
    throw;
  }
#else
  return at::empty(sizes, options);
#endif
}

void share_huge_block(const std::vector<at::Tensor*>& tensors) {
  if (tensors.empty()) return;
  for (const auto* t : tensors) {
    TORCH_CHECK(t != nullptr && t->defined() && t->is_cpu() && t->layout() == c10::kStrided &&
                    t->dtype() == tensors.front()->dtype(),
                "share_huge_block: strided CPU tensors of one dtype");
  }
  at::NoGradGuard no_grad;
  const auto options = tensors.front()->options().requires_grad(false);
  const int64_t align = 64 / static_cast<int64_t>(tensors.front()->element_size());  // a line
  int64_t total = 0;
  for (const auto* t : tensors) total += (t->numel() + align - 1) / align * align;
  auto block = empty_huge({total}, options);  // [sum of the sizes, each rounded up to a line]
  int64_t at = 0;
  for (auto* t : tensors) {
    const int64_t n = t->numel();
    auto slice = block.narrow(0, at, n).view(t->sizes());  // [t's sizes], contiguous
    slice.copy_(*t);
    *t = slice;  // the old storage goes as soon as nothing else holds it
    at += (n + align - 1) / align * align;
  }
}

}  // namespace txl::kernels
