#pragma once
// OpenBLAS (Debian LibTorch's fp32 BLAS) multiplies on threads of its own, beside LibTorch's
// OpenMP threads. Where a loop alternates small products with LibTorch's parallel loops many
// times a second (incremental decoding: ~20 products and ~5 parallel loops per new token), the
// two pools take turns on the same cores (an idle OpenMP thread spins before it sleeps): on 2
// cores, 16-row generation ran at 1,572 tokens/s with both pools against 4,366 with LibTorch on
// one thread. Splitting the products between LibTorch's threads instead, with OpenBLAS on one,
// was slower still (one row: 1,122 tokens/s against 3,046): OpenBLAS's matrix-vector product on
// one thread reaches a quarter of what it reaches on two.

namespace txl::kernels {

// Whether the fp32 BLAS is OpenBLAS running on more than one thread of its own.
bool blas_has_own_threads();

// While it lives, LibTorch's intra-op parallelism is one thread when blas_has_own_threads(),
// and the cores are OpenBLAS's; it restores the count it found. Otherwise (MKL, whose threads
// are LibTorch's OpenMP threads; OpenBLAS on one thread) it changes nothing. Not copyable; nest
// them last-in first-out.
class CoresToBlas {
 public:
  CoresToBlas();
  ~CoresToBlas();
  CoresToBlas(const CoresToBlas&) = delete;
  CoresToBlas& operator=(const CoresToBlas&) = delete;

  bool active() const { return saved_ > 0; }

 private:
  int saved_ = 0;  // LibTorch's thread count before; 0 = unchanged
};

}  // namespace txl::kernels
