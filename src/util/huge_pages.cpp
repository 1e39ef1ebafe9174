#include "txl/util/huge_pages.h"

#include <cstdint>
#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace txl::util {

namespace {

int64_t bytes_of(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  const auto dtype = c10::typeMetaToScalarType(options.dtype());
  return c10::multiply_integers(sizes) * static_cast<int64_t>(c10::elementSize(dtype));
}

}  // namespace

torch::Tensor empty_huge(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  const int64_t bytes = bytes_of(sizes, options);
  if (options.device().type() != c10::kCPU || bytes < kHugePageMinBytes) {
    return torch::empty(sizes, options);
  }
  const auto page = static_cast<size_t>(kHugePageBytes);
  const size_t block = (static_cast<size_t>(bytes) + page - 1) / page * page;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Fresh pages from mmap, not the C heap's: memory the heap has touched keeps its 4 KB pages.
  // One page more than the block, then what lies outside the aligned block is given back.
  void* raw = mmap(nullptr, block + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  TORCH_CHECK(raw != MAP_FAILED, "empty_huge: out of memory (", block, " bytes)");
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + page - 1) / page * page;
  if (start > base) munmap(raw, start - base);
  if (start + block < base + block + page) {
    munmap(reinterpret_cast<void*>(start + block), base + page - start);
  }
  void* data = reinterpret_cast<void*>(start);
  madvise(data, block, MADV_HUGEPAGE);  // advice only: refused, the pages stay 4 KB
  return torch::from_blob(data, sizes, [block](void* p) { munmap(p, block); }, options);
#else
  void* data = std::aligned_alloc(page, block);
  TORCH_CHECK(data != nullptr, "empty_huge: out of memory (", block, " bytes)");
  return torch::from_blob(data, sizes, [](void* p) { std::free(p); }, options);
#endif
}

void share_huge_block(const std::vector<torch::Tensor*>& tensors) {
  if (tensors.empty()) return;
  const auto options = tensors.front()->options();
  const int64_t align = 64 / static_cast<int64_t>(tensors.front()->element_size());  // a line
  int64_t total = 0;
  for (const auto* t : tensors) {
    TORCH_CHECK(t->defined() && t->is_cpu() && t->scalar_type() == options.dtype(),
                "share_huge_block: CPU tensors of one dtype");
    total += (t->numel() + align - 1) / align * align;
  }
  auto block = empty_huge({total}, options);  // [sum of the sizes, each rounded to a line]
  int64_t at = 0;
  for (auto* t : tensors) {
    const int64_t n = t->numel();
    auto slice = block.narrow(0, at, n).view(t->sizes());  // contiguous
    slice.copy_(*t);
    *t = slice;
    at += (n + align - 1) / align * align;
  }
}

}  // namespace txl::util
