#pragma once
// Attention of one new position per row over a buffer of cached keys and values: the step of
// incremental decoding (generation::IncrementalDecoder) with relative positions (Transformer-XL's
// u, v and projected encodings, Shaw's relative keys) or none. One pass per (row, head) on raw
// memory: it replaces about ten tensor ops per layer and, on LibTorch 1.13 with OpenBLAS, a loop
// of one small matrix product per row and head. The (row, head) pairs are split between
// LibTorch's threads (MKL, LibTorch 2.x) or, where OpenBLAS has threads of its own and holds the
// cores (CoresToBlas; 1.13's at::parallel_for runs on the calling thread in code compiled
// without OpenMP, as txl's is), between the caller and run_beside's side thread once they
// hold about 270k multiply-adds (split_work): on 2 cores, 16-row generation 4,652 -> 5,026
// tokens/s, one row at context 1,024 0.88 -> 0.74 ms per token. Each pair is computed alike on
// any thread. Keys and values are asked for 4 KB ahead of their reads (software prefetch): a
// 16-row step streams them from memory, and the hardware's prefetcher alone keeps too few lines
// in flight.
//
// For row b, head h, with K keys in use (the new position's own key last, at slot K-1):
//   s_k = (q + u) . key_k + (q + v) . R[K-1-k]     k in [first_b, K)
//   out = sum_k softmax(s)_k value_k
// R is indexed by distance (row 0 = distance 0). Without u and v, q is used as is; without R
// the position term is absent.
//
// Legend: B rows, H heads, D head size, C buffer capacity (slots), K keys in use.

#include "txl/kernels/tensor.h"

#include <cstdint>
#include <vector>

namespace txl::kernels {

// kBest: on a CPU with AVX-512, float heads of D = 16 N (N <= 8) go through a kernel that keeps
// the query and the output's sums in registers; everything else, and kPortable, through the
// portable loops (vector clones). Both compute the definition below; they differ in summation
// order and in where multiply-adds are fused (fp32: within 2e-5 of the definition in the tests).
enum class CachedKernel { kBest, kPortable };

// Whether attend_cached takes buffers like `like`: CPU float or double (vector_loops_take).
bool attend_cached_takes(const at::Tensor& like);

// Whether kBest takes the AVX-512 kernel on this CPU (for float heads of 16 N, N <= 8).
bool cached_kernel_vectorised();

struct CachedKeys {
  at::Tensor buffer;       // [2, H, B, C, D]: keys, values; slots 0 .. K-2 already filled
  at::Tensor by_distance;  // [H, C, D] encodings of distance 0 .. C-1, or undefined
  at::Tensor u, v;         // [H, D] query biases (content, position), or both undefined
};

// qkv [B, 3, H, D], contiguous: the new position's query (already scaled by 1/sqrt(D)), key
// and value. Writes the key and value into slot k_len - 1 of every row of `keys.buffer`, and
// returns the attention output [B, H D] (heads in order). first[b]: the first slot row b sees
// (0 <= first[b] < k_len). CPU, float or double (vector_loops_take), every tensor of one dtype.
// `kernel`: see CachedKernel. Throws txl::Error for shapes, dtypes or a device it does not take.
at::Tensor attend_cached(const at::Tensor& qkv, const CachedKeys& keys, int64_t k_len,
                         const std::vector<int64_t>& first,
                         CachedKernel kernel = CachedKernel::kBest);

}  // namespace txl::kernels
