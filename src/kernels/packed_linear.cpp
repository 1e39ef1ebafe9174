#include "txl/kernels/packed_linear.h"
#include "txl/kernels/vector_loops.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "txl/kernels/side_thread.h"
#include "txl/kernels/vector_math.h"
#include "txl/util/error.h"
#include "vector_clones.h"

namespace txl::kernels {

namespace {

// One vector register of 64 bytes (a zmm register; two ymm or four xmm ones elsewhere).
template <typename T>
struct Lanes {
  static constexpr int64_t kCount = 64 / static_cast<int64_t>(sizeof(T));
  typedef T Vector __attribute__((vector_size(64)));
};

// Where one call reads and writes.
template <typename T>
struct Product {
  const T* panels;  // [P, in, L]
  const T* bias;    // [P L] or null
  const T* x;       // [N, in], each block of R rows as [in, R] (transpose_blocks)
  T* y;             // [N, out]
  int64_t rows, in, out;
  bool relu;
};

// Rows [0, R) of x, transposed to [in, R], times one panel w [in, L] -> y's L columns (`cols` of
// them stored, rows `out` apart). The sum over `in` is split U ways (U chains of multiply-adds
// in flight: one row alone would wait for each add), and combined in a fixed order. Per input
// feature the R broadcasts come from one cache line (R = 16 floats): from x's rows they came
// from R lines, and at in = 1024 (64 KB of x, more than the first-level cache) the product ran
// at half the speed (one core: 52 against 95 GFLOPS).
template <typename T, int R, int U>
inline __attribute__((always_inline)) void panel_rows(const T* __restrict w, const T* __restrict x,
                                                      int64_t in, const T* __restrict bias,
                                                      bool relu, T* __restrict y, int64_t out,
                                                      int64_t cols) {
  using V = typename Lanes<T>::Vector;
  constexpr int64_t L = Lanes<T>::kCount;
  V acc[U][R];
  for (int u = 0; u < U; ++u) {
    for (int r = 0; r < R; ++r) acc[u][r] = V{};
  }
  int64_t k = 0;
  for (; k + U <= in; k += U) {
    for (int u = 0; u < U; ++u) {
      prefetch_ahead(w + (k + u) * L, 1);
      V column;  // W[p L .. p L + L - 1][k + u]
      std::memcpy(&column, w + (k + u) * L, sizeof(V));
      for (int r = 0; r < R; ++r) acc[u][r] += x[(k + u) * R + r] * column;
    }
  }
  for (; k < in; ++k) {
    V column;
    std::memcpy(&column, w + k * L, sizeof(V));
    for (int r = 0; r < R; ++r) acc[0][r] += x[k * R + r] * column;
  }
  V b = V{};
  if (bias != nullptr) std::memcpy(&b, bias, sizeof(V));
  for (int r = 0; r < R; ++r) {
    V sum = acc[0][r];
    for (int u = 1; u < U; ++u) sum += acc[u][r];
    sum += b;
    if (relu) sum = sum < V{} ? V{} : sum;  // NaN stays NaN, as torch::relu
    if (cols == L) {
      std::memcpy(y + r * out, &sum, sizeof(V));  // one store
    } else {
      std::memcpy(y + r * out, &sum, static_cast<size_t>(cols) * sizeof(T));
    }
  }
}

// Rows [r, r + R) of the product with panel p.
template <typename T, int R, int U>
inline __attribute__((always_inline)) void block(const Product<T>& c, int64_t p, int64_t r) {
  constexpr int64_t L = Lanes<T>::kCount;
  const int64_t first = p * L, cols = std::min(L, c.out - first);
  panel_rows<T, R, U>(c.panels + p * c.in * L, c.x + r * c.in, c.in,
                      c.bias != nullptr ? c.bias + first : nullptr, c.relu, c.y + r * c.out + first,
                      c.out, cols);
}

// The rows of the next block when `left` rows remain: kMaxRows while they last, then 8, 4, 2
// and 1 (each at most once). panels and transpose_blocks follow the same sequence.
constexpr int64_t next_block(int64_t left, int64_t max_rows) {
  for (int64_t rows : {max_rows, int64_t{8}, int64_t{4}, int64_t{2}}) {
    if (rows <= max_rows && left >= rows) return rows;
  }
  return 1;
}

// x [N, in] -> `to`, each block of R rows (next_block's sequence) as [in, R] where its rows
// were, at offset r in: to[r in + k R + j] = x[(r + j) in + k].
template <typename T>
void transpose_blocks(const T* __restrict x, int64_t rows, int64_t in, int64_t max_rows,
                      T* __restrict to) {
  for (int64_t r = 0; r < rows;) {
    const int64_t n = next_block(rows - r, max_rows);
    const T* from = x + r * in;
    T* block = to + r * in;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < in; ++k) block[k * n + j] = from[j * in + k];
    }
    r += n;
  }
}

// Panels [begin, end) for every row: each panel is read from memory once, and again from the
// first-level cache for each further block of rows. Blocks of at most kMaxRows rows (registers:
// 16 sums of a zmm each with AVX-512, 4 sums elsewhere); fewer rows split the sum over `in`.
// x's blocks come transposed (transpose_blocks).
template <typename T, int kMaxRows>
inline __attribute__((always_inline)) void panels(const Product<T>& c, int64_t begin, int64_t end) {
  for (int64_t p = begin; p < end; ++p) {
    for (int64_t r = 0; r < c.rows;) {
      // n is kMaxRows, or one of 8, 4, 2, 1 below it (next_block): no branch skips rows.
      const int64_t n = next_block(c.rows - r, kMaxRows);
      if (n == kMaxRows) {
        block<T, kMaxRows, 1>(c, p, r);
      } else if (n == 8) {
        if constexpr (kMaxRows > 8) block<T, 8, 1>(c, p, r);
      } else if (n == 4) {
        if constexpr (kMaxRows > 4) block<T, 4, 2>(c, p, r);
      } else if (n == 2) {
        block<T, 2, 4>(c, p, r);
      } else {
        block<T, 1, 8>(c, p, r);
      }
      r += n;
    }
  }
}

// Rows per block of each kernel.
constexpr int kPortableRows = 4;
constexpr int kAvx512Rows = 16;

template <typename T>
void panels_portable(const Product<T>& c, int64_t begin, int64_t end) {
  panels<T, kPortableRows>(c, begin, end);
}

#ifdef TXL_HAS_AVX512
TXL_AVX512 void panels_avx512(const Product<float>& c, int64_t begin, int64_t end) {
  panels<float, kAvx512Rows>(c, begin, end);
}
TXL_AVX512 void panels_avx512(const Product<double>& c, int64_t begin, int64_t end) {
  panels<double, kAvx512Rows>(c, begin, end);
}
#else
template <typename T>
void panels_avx512(const Product<T>& c, int64_t begin, int64_t end) {
  panels_portable(c, begin, end);
}
#endif

template <typename T>
void run(const at::Tensor& x, const PackedWeight& w, const LinearOptions& o, at::Tensor& y) {
  Product<T> c;
  c.panels = w.panels.data_ptr<T>();
  c.bias = w.bias.defined() ? w.bias.data_ptr<T>() : nullptr;
  c.y = y.data_ptr<T>();
  c.in = w.in();
  c.out = w.out;
  c.rows = x.numel() / c.in;
  c.relu = o.relu;
  const bool vectorised = o.kernel == PackedKernel::kBest && cpu_has_avx512();
  at::Tensor blocks;  // [N in]: x's blocks transposed; one row is its own transpose
  if (c.rows > 1) {
    blocks = at::empty({x.numel()}, x.options());
    transpose_blocks(x.data_ptr<T>(), c.rows, c.in, vectorised ? kAvx512Rows : kPortableRows,
                     blocks.data_ptr<T>());
  }
  c.x = c.rows > 1 ? blocks.data_ptr<T>() : x.data_ptr<T>();
  // One panel costs rows x in x L multiply-adds; with few rows, reading it costs more.
  split_work(w.panels.size(0), std::max<int64_t>(c.rows, 4) * c.in * Lanes<T>::kCount,
             [&](int64_t begin, int64_t end) {
               if (vectorised) {
                 panels_avx512(c, begin, end);
               } else {
                 panels_portable(c, begin, end);
               }
             });
}

// What linear_packed reads of a PackedWeight, as pack_weight makes it (its fields are open).
void check_layout(const PackedWeight& w) {
  const auto& p = w.panels;
  const int64_t lanes = 64 / static_cast<int64_t>(p.element_size());
  TXL_CHECK(vector_loops_take(p) && p.dim() == 3 && p.is_contiguous() && p.size(2) == lanes &&
                w.out >= 1 && p.size(0) == (w.out + lanes - 1) / lanes,
            "linear_packed: panels must be contiguous [ceil(out / ", lanes, "), in, ", lanes,
            "] as pack_weight makes them, got ", p.sizes(), " for out = ", w.out);
  TXL_CHECK(!w.bias.defined() || (w.bias.dim() == 1 && w.bias.size(0) == p.size(0) * lanes &&
                                  w.bias.is_contiguous() &&
                                  w.bias.scalar_type() == p.scalar_type() && w.bias.is_cpu()),
            "linear_packed: the packed bias must be contiguous [", p.size(0) * lanes,
            "] of the panels' dtype");
}

}  // namespace

bool packed_takes(const at::Tensor& weight) {
  return vector_loops_take(weight) && weight.dim() == 2 && weight.size(0) >= 1 &&
         weight.size(1) >= 1;
}

bool packed_kernel_vectorised() { return cpu_has_avx512(); }

PackedWeight pack_weight(const at::Tensor& weight, const at::Tensor& bias) {
  TXL_CHECK(packed_takes(weight), "pack_weight: weight must be a CPU float or double [out, in]",
            " with out, in >= 1, got ", weight.defined() ? weight.sizes() : at::IntArrayRef{});
  const int64_t out = weight.size(0), in = weight.size(1);
  TXL_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out &&
                                bias.scalar_type() == weight.scalar_type() && bias.is_cpu()),
            "pack_weight: bias must be [out = ", out, "] of the weight's dtype");
  at::NoGradGuard no_grad;
  const int64_t lanes = 64 / static_cast<int64_t>(weight.element_size());
  const int64_t count = (out + lanes - 1) / lanes;
  const auto w = weight.detach();
  PackedWeight packed;
  packed.out = out;
  auto padded = at::zeros({count * lanes, in}, w.options());  // [P L, in]
  padded.narrow(0, 0, out).copy_(w);
  packed.panels = padded.view({count, lanes, in}).transpose(1, 2).contiguous();  // [P, in, L]
  if (bias.defined()) {
    packed.bias = at::zeros({count * lanes}, w.options());  // [P L]
    packed.bias.narrow(0, 0, out).copy_(bias.detach());
  }
  return packed;
}

at::Tensor linear_packed(const at::Tensor& x, const PackedWeight& w, const LinearOptions& options) {
  TXL_CHECK(w.defined(), "linear_packed: the weight is not packed (pack_weight)");
  check_layout(w);
  TXL_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == w.in() && x.is_contiguous() &&
                x.scalar_type() == w.panels.scalar_type() && x.is_cpu(),
            "linear_packed: x must be a contiguous CPU [..., in = ", w.in(),
            "] of the weight's dtype, got ", x.defined() ? x.sizes() : at::IntArrayRef{});
  RECORD_FUNCTION("txl::linear_packed", std::vector<c10::IValue>({x}));  // in profiles
  auto sizes = x.sizes().vec();
  sizes.back() = w.out;
  auto y = at::empty(sizes, x.options());  // [..., out]
  if (x.numel() == 0) return y;
  for_vector_dtype(x, [&](auto zero) { run<decltype(zero)>(x, w, options, y); });
  return y;
}

}  // namespace txl::kernels
