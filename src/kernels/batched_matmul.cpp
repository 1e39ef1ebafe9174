#include "txl/kernels/batched_matmul.h"
#include "txl/kernels/vector_loops.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "txl/kernels/side_thread.h"
#include "txl/util/error.h"
#include "vector_clones.h"

namespace txl::kernels {

namespace {

// A vector of Bytes bytes: one register of the level's (vector_clones.h, TXL_VECTOR_WIDTHS).
template <typename T, int Bytes>
struct Lanes {
  static constexpr int64_t kCount = Bytes / static_cast<int64_t>(sizeof(T));
  typedef T Vector __attribute__((vector_size(Bytes)));
};

// Vectors of columns per tile: 4 rows by 2 vectors keep 8 sums in registers, 2 loads of b and
// 4 broadcasts of a for 8 multiply-adds per k.
constexpr int64_t kTileVectors = 2;
// Columns of a tile at the widest level: b's copies are padded to a whole number of them.
template <typename T>
constexpr int64_t kWidestTile = kTileVectors * 64 / static_cast<int64_t>(sizeof(T));

// One product's operands: a[r][k] at a + r ar + k ak; b's rows whole tiles, row k at b + k bk;
// c [M, N] contiguous.
template <typename T>
struct Operands {
  const T* a;
  int64_t ar, ak;
  const T* b;
  int64_t bk;
  T* c;
  int64_t m, n, k;
};

// Rows [r, r + R) of c by columns [j, j + cols) (cols <= one tile's, b holding a whole tile
// there): the sums over k in order, one multiply-add per k for each.
template <typename T, int Bytes, int R>
inline __attribute__((always_inline)) void tile(const Operands<T>& o, int64_t r, int64_t j,
                                                int64_t cols) {
  using V = typename Lanes<T, Bytes>::Vector;
  constexpr int64_t L = Lanes<T, Bytes>::kCount;
  V acc[R][kTileVectors];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < kTileVectors; ++v) acc[i][v] = V{};
  }
  const T* a = o.a + r * o.ar;
  for (int64_t k = 0; k < o.k; ++k) {
    V column[kTileVectors];  // b[k][j .. j + 2 L), one load per vector
    for (int v = 0; v < kTileVectors; ++v) {
      std::memcpy(&column[v], o.b + k * o.bk + j + v * L, sizeof(V));
    }
    for (int i = 0; i < R; ++i) {
      const T x = a[i * o.ar + k * o.ak];
      for (int v = 0; v < kTileVectors; ++v) acc[i][v] += x * column[v];
    }
  }
  // Stored through copies: the sums' own address never taken, they stay in registers.
  for (int i = 0; i < R; ++i) {
    T* row = o.c + (r + i) * o.n + j;
    for (int v = 0; v < kTileVectors; ++v) {
      const V sum = acc[i][v];
      const int64_t n = std::min(L, cols - v * L);
      if (n == L) {
        std::memcpy(row + v * L, &sum, sizeof(V));
      } else if (n > 0) {
        std::memcpy(row + v * L, &sum, static_cast<size_t>(n) * sizeof(T));
      }
    }
  }
}

// c = a b for one product: blocks of 4 rows (then 2, 1) by one tile of columns.
template <typename T, int Bytes>
inline __attribute__((always_inline)) void product(const Operands<T>& o) {
  constexpr int64_t kTile = kTileVectors * Lanes<T, Bytes>::kCount;
  for (int64_t j = 0; j < o.n; j += kTile) {
    const int64_t cols = std::min(kTile, o.n - j);
    int64_t r = 0;
    for (; r + 4 <= o.m; r += 4) tile<T, Bytes, 4>(o, r, j, cols);
    if (r + 2 <= o.m) {
      tile<T, Bytes, 2>(o, r, j, cols);
      r += 2;
    }
    if (r < o.m) tile<T, Bytes, 1>(o, r, j, cols);
  }
}

template <int Bytes>
inline __attribute__((always_inline)) void product_float(const Operands<float>& o) {
  product<float, Bytes>(o);
}
template <int Bytes>
inline __attribute__((always_inline)) void product_double(const Operands<double>& o) {
  product<double, Bytes>(o);
}

TXL_VECTOR_WIDTHS(void, product_of, product_float, (const Operands<float>& o), (o))
TXL_VECTOR_WIDTHS(void, product_of, product_double, (const Operands<double>& o), (o))

// b [k, n] (strides sk, sn) into `to` [k, width], reading along b's adjacent elements: a
// transposed b (the keys of q k^T, sk 1) by its columns.
template <typename T>
void copy_rows(const T* __restrict b, int64_t sk, int64_t sn, int64_t k, int64_t n,
               T* __restrict to, int64_t width) {
  if (sk < sn) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) to[kk * width + j] = b[kk * sk + j * sn];
    }
    return;
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t j = 0; j < n; ++j) to[kk * width + j] = b[kk * sk + j * sn];
  }
}

// Products [begin, end): each b copied into `block` [K, whole tiles] first unless its rows are
// whole tiles of adjacent columns already.
template <typename T>
void products(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int64_t begin, int64_t end) {
  constexpr int64_t kTile = kWidestTile<T>;
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  const int64_t width = (n + kTile - 1) / kTile * kTile;
  const bool direct = b.stride(2) == 1 && n % kTile == 0;
  std::vector<T> block(direct ? 0 : static_cast<size_t>(k * width), T(0));
  const T* ap = a.data_ptr<T>();
  const T* bp = b.data_ptr<T>();
  T* cp = c.data_ptr<T>();
  for (int64_t s = begin; s < end; ++s) {
    Operands<T> o{ap + s * a.stride(0), a.stride(1), a.stride(2), nullptr, 0,
                  cp + s * m * n,       m,           n,           k};
    const T* bs = bp + s * b.stride(0);
    if (direct) {
      o.b = bs;
      o.bk = b.stride(1);
    } else {
      copy_rows(bs, b.stride(1), b.stride(2), k, n, block.data(), width);
      o.b = block.data();
      o.bk = width;
    }
    product_of(o);
  }
}

}  // namespace

void batched_matmul_into(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  TXL_CHECK(vector_loops_take(a) && a.dim() == 3,
            "batched_matmul: a must be a CPU float or double [S, M, K]");
  TXL_CHECK(b.defined() && b.dim() == 3 && b.size(0) == a.size(0) && b.size(1) == a.size(2) &&
                b.scalar_type() == a.scalar_type() && b.is_cpu(),
            "batched_matmul: b must be [S = ", a.size(0), ", K = ", a.size(2),
            ", N] of a's dtype on the CPU, got ", b.defined() ? b.sizes() : at::IntArrayRef{});
  TXL_CHECK(c.defined() && c.dim() == 3 && c.size(0) == a.size(0) && c.size(1) == a.size(1) &&
                c.size(2) == b.size(2) && c.is_contiguous() && c.scalar_type() == a.scalar_type() &&
                c.is_cpu(),
            "batched_matmul: c must be contiguous [S = ", a.size(0), ", M = ", a.size(1),
            ", N = ", b.size(2), "] of a's dtype on the CPU");
  RECORD_FUNCTION("txl::batched_matmul", std::vector<c10::IValue>({a, b}));  // in profiles
  if (c.numel() == 0) return;
  if (a.size(2) == 0) {
    c.zero_();
    return;
  }
  for_vector_dtype(a, [&](auto zero) {
    using T = decltype(zero);
    split_work(a.size(0), a.size(1) * a.size(2) * b.size(2),
               [&](int64_t begin, int64_t end) { products<T>(a, b, c, begin, end); });
  });
}

at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b) {
  TXL_CHECK(a.defined() && a.dim() == 3 && b.defined() && b.dim() == 3,
            "batched_matmul: a [S, M, K] and b [S, K, N]");
  auto c = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());  // [S, M, N]
  batched_matmul_into(a, b, c);
  return c;
}

}  // namespace txl::kernels
