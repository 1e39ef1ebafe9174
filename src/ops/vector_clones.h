#pragma once
// TXL_VECTOR_CLONES before a function compiles it for AVX-512, AVX2 and the baseline, the best
// picked at load time (GCC's function multi-versioning); with `omp simd` (-fopenmp-simd, no
// OpenMP runtime) on the file, reductions use vector registers. Empty elsewhere (clang, other
// architectures): the baseline only.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TXL_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TXL_VECTOR_CLONES
#endif
