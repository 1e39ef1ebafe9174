#pragma once
// CPU tensors in 2 MB pages, for buffers a loop streams from memory once per step (incremental
// decoding's packed weights and cached keys and values): one TLB entry covers 2 MB instead of
// 4 KB. On a 2-core Zen 5, a 16-row decoding step's vocabulary product and attention, reading
// cold memory, ran 5-10% faster from 2 MB pages (vocabulary 0.513 -> 0.456 ms, a layer's
// attention 0.252 -> 0.229 ms, medians of 60 alternating rounds).
//
// Best effort: Linux gives 2 MB pages to a 2 MB-aligned block marked madvise(MADV_HUGEPAGE)
// where its transparent huge pages are "madvise" or "always" and it has free 2 MB pages; with
// "never", with none free, or elsewhere, the block is ordinary memory. Off Linux, empty_huge is
// torch::empty.

#include "txl/kernels/tensor.h"

#include <cstdint>
#include <vector>

namespace txl::kernels {

// Blocks of at least this many bytes are 2 MB-aligned and marked for 2 MB pages; smaller ones
// come from torch::empty (rounding them up would waste more than it gains).
constexpr int64_t kHugePageMinBytes = 1 << 20;
constexpr int64_t kHugePageBytes = 2 << 20;

// An uninitialised contiguous tensor of `sizes` like torch::empty(sizes, options). On Linux, for
// a strided, non-quantized CPU tensor of at least kHugePageMinBytes, its storage is a block of
// its own, mmap'ed, 2 MB-aligned (size rounded up to 2 MB), zero-filled, and given back to the
// system with the tensor; such a storage cannot be resized (resize_, out= ops that grow it
// throw). Throws c10::Error for an impossible shape or when memory runs out, as torch::empty.
at::Tensor empty_huge(at::IntArrayRef sizes, const at::TensorOptions& options);

// Moves strided CPU tensors of one dtype into one empty_huge block, each a contiguous view of
// it (starting on a 64-byte line) with its values and shape, no longer requiring gradients:
// small buffers streamed together (a decoder's packed weights) share 2 MB pages instead of
// each rounding its own up. The copies are made while the old tensors live (at most twice
// their bytes for a moment); views of the old tensors, and aliases between them, keep the old
// storage. Throws c10::Error for null, undefined, non-CPU or non-strided tensors or mixed
// dtypes.
void share_huge_block(const std::vector<at::Tensor*>& tensors);

}  // namespace txl::kernels
