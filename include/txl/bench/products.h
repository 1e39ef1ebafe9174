#pragma once
// The matrix products of a generated token at the model's shapes, of 1 and 16 rows, measured
// three ways side by side in one process (txl-bench --products): LibTorch's linear (the system
// BLAS: OpenBLAS on Debian's 1.13, MKL on PyPI's 2.x); oneDNN's linear with the weight put in
// oneDNN's layout once (at::mkldnn_linear, in LibTorch 1.13 and 2.x where built with oneDNN; the
// rows go to oneDNN's layout and back at every product, as a decoding step would need); and
// txl's packed panels (ops::Projection::packed_for_decoding, the hand-written AVX-512 kernel
// where the CPU has it, else LibTorch's linear). The question it answers: does the hand-written
// kernel still win by more than 10% against the maintained libraries?
//
// Legend: d model width, H D heads times head size, F feed-forward width, V vocabulary.

#include <cstdint>
#include <string>
#include <vector>

#include "txl/config/config.h"

namespace txl::bench {

struct ProductTiming {
  std::string name;  // qkv (d -> 3 H D), out (H D -> d), ff1 (d -> F), ff2 (F -> d), vocab (d -> V)
  std::int64_t in = 0, out = 0, rows = 0;
  double libtorch_us = 0;  // median microseconds per product
  double onednn_us = 0;    // 0 where this LibTorch has no oneDNN
  double packed_us = 0;    // txl's packed panels (or what Projection takes without them)
  bool packed = false;     // whether the packed AVX-512 kernel ran (the CPU has AVX-512)
};

// Every product of the model of `config` (its d_model, heads, d_inner) and `vocab`, at 1 and 16
// rows, fp32, on the CPU with the current threads: median of `repetitions` timings of a loop of
// calls sized to about 20 ms, after warm-up. Results agree within 1e-3 relative of each
// other (checked; a disagreement throws txl::Error naming the product).
std::vector<ProductTiming> time_products(const config::ExperimentConfig& config, std::int64_t vocab,
                                         int repetitions);

// A markdown table (one row per product and row count, with packed / best library ratios) and
// one JSON object.
std::string products_table(const std::vector<ProductTiming>& timings);
std::string products_json(const std::vector<ProductTiming>& timings);

}  // namespace txl::bench
