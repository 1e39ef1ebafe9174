#pragma once
// CPU tensors in 2 MB pages, for buffers a loop streams from memory once per step (incremental
// decoding's packed weights and cached keys and values): one TLB entry covers 2 MB instead of
// 4 KB, and the prefetchers run on past what would be a 4 KB page's end. On a 2-core Zen 5, a
// 16-row decoding step's vocabulary product and attention, reading cold memory, ran 5-10%
// faster from 2 MB pages (vocabulary 0.513 -> 0.456 ms, a layer's attention 0.252 -> 0.229 ms,
// medians of 60 alternating rounds).
//
// Linux gives 2 MB pages to a 2 MB-aligned block marked madvise(MADV_HUGEPAGE) where its
// transparent huge pages are "madvise" or "always"; with "never", or elsewhere, the block is
// ordinary memory and only the alignment remains.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace txl::util {

// Blocks of at least this many bytes are 2 MB-aligned and marked for 2 MB pages; smaller ones
// come from torch::empty (rounding them up would waste more than it gains).
constexpr int64_t kHugePageMinBytes = 1 << 20;
constexpr int64_t kHugePageBytes = 2 << 20;

// An uninitialised contiguous tensor of `sizes` like torch::empty(sizes, options); on the CPU and
// at least kHugePageMinBytes, its storage is its own 2 MB-aligned block (size rounded up to
// 2 MB), freed with the tensor. Throws c10::Error (out of memory) as torch::empty does.
torch::Tensor empty_huge(at::IntArrayRef sizes, const torch::TensorOptions& options);

// Moves the CPU tensors (one dtype) into one empty_huge block, each a contiguous view of it
// (starting on a 64-byte line) with its values and shape: small buffers streamed together (a
// decoder's packed weights) share 2 MB pages instead of each rounding its own up. Views of the
// old tensors keep the old storage. Throws c10::Error for tensors of other devices or dtypes.
void share_huge_block(const std::vector<torch::Tensor*>& tensors);

}  // namespace txl::util
