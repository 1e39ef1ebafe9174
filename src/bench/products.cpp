#include "txl/bench/products.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "txl/bench/measure.h"
#include "txl/ops/projection.h"
#include "txl/util/error.h"

namespace txl::bench {

namespace {

// Median microseconds per call of `fn`: calls in loops of about 20 ms.
double microseconds_per_call(const std::function<void()>& fn, int repetitions) {
  for (int i = 0; i < 5; ++i) fn();
  const auto start = std::chrono::steady_clock::now();
  fn();
  const double once =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int calls = std::max(1, static_cast<int>(0.02 / std::max(once, 1e-7)));
  const auto timing = time_repeated(
      [&] {
        for (int i = 0; i < calls; ++i) fn();
      },
      1, repetitions);
  return timing.median_s / calls * 1e6;
}

ProductTiming time_one(const std::string& name, std::int64_t in, std::int64_t out,
                       std::int64_t rows, int repetitions) {
  torch::NoGradGuard no_grad;
  ProductTiming t;
  t.name = name;
  t.in = in;
  t.out = out;
  t.rows = rows;
  const auto weight =
      torch::randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)));  // [out, in]
  const auto bias = torch::randn({out});                                     // [out]
  const auto x = torch::randn({rows, in});                                   // [rows, in]
  const auto expected = torch::linear(x, weight, bias);                      // [rows, out]
  auto check = [&](const torch::Tensor& y, const char* way) {
    const double error = (y - expected).abs().max().item<double>();
    const double scale = expected.abs().max().item<double>();
    TXL_CHECK(error <= 1e-3 * scale, "products: ", way, " gives another ", name, " (", error,
              " off, at scale ", scale, ")");
  };
  t.libtorch_us = microseconds_per_call([&] { (void)torch::linear(x, weight, bias); }, repetitions);
  const auto packed = ops::Projection::packed_for_decoding(weight, bias);
  t.packed = packed.packed();
  check(packed(x), "txl's packed panels");
  t.packed_us = microseconds_per_call([&] { (void)packed(x); }, repetitions);
  try {  // LibTorch without oneDNN throws at the first call: no oneDNN figure then
    const auto w = weight.to_mkldnn();  // oneDNN's layout, once
    const auto b = bias.to_mkldnn();
    check(at::mkldnn_linear(x.to_mkldnn(), w, b).to_dense(), "oneDNN");
    t.onednn_us = microseconds_per_call(
        [&] { (void)at::mkldnn_linear(x.to_mkldnn(), w, b).to_dense(); }, repetitions);
  } catch (const c10::Error&) {
    t.onednn_us = 0;
  }
  return t;
}

}  // namespace

std::vector<ProductTiming> time_products(const config::ExperimentConfig& config, std::int64_t vocab,
                                         int repetitions) {
  const auto& m = config.model;
  const std::int64_t d = m.d_model, hd = static_cast<std::int64_t>(m.n_head) * m.d_head;
  const std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> shapes = {
      {"qkv", d, 3 * hd},
      {"out", hd, d},
      {"ff1", d, m.d_inner},
      {"ff2", m.d_inner, d},
      {"vocab", d, vocab}};
  std::vector<ProductTiming> out;
  for (const std::int64_t rows : {1, 16}) {
    for (const auto& [name, in, width] : shapes)
      out.push_back(time_one(name, in, width, rows, repetitions));
  }
  return out;
}

std::string products_table(const std::vector<ProductTiming>& timings) {
  std::string out =
      "| product | in -> out | rows | LibTorch us | oneDNN us | txl packed us | packed / best "
      "library |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& t : timings) {
    const double best = t.onednn_us > 0 ? std::min(t.libtorch_us, t.onednn_us) : t.libtorch_us;
    out += fmt::format("| {} | {} -> {} | {} | {:.1f} | {} | {:.1f}{} | {:.2f} |\n", t.name, t.in,
                       t.out, t.rows, t.libtorch_us,
                       t.onednn_us > 0 ? fmt::format("{:.1f}", t.onednn_us) : std::string("-"),
                       t.packed_us, t.packed ? "" : " (not packed)", t.packed_us / best);
  }
  return out;
}

std::string products_json(const std::vector<ProductTiming>& timings) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& t : timings) {
    rows.push_back({{"product", t.name},
                    {"in", t.in},
                    {"out", t.out},
                    {"rows", t.rows},
                    {"libtorch_us", t.libtorch_us},
                    {"onednn_us", t.onednn_us},
                    {"packed_us", t.packed_us},
                    {"packed", t.packed}});
  }
  return nlohmann::json{{"products", rows}}.dump();
}

}  // namespace txl::bench
