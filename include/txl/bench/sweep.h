#pragma once
// txl-bench --sweep: how training speed and memory scale (docs/performance.md, "Scaling").
// Two lines of points around the configured model:
//   length  tgt_len = mem_len = 128 .. 1024 at a fixed batch (default 4, so that the longest
//           point fits a few steps in seconds);
//   batch   batch 1 .. 32 at the configured tgt_len and mem_len;
// and the per-token cost of one attention block against mem_len at a fixed segment length,
// which must grow linearly (a least-squares line and its r2). Few steps per point: the sweep
// shows shapes and trends, txl-bench's main figures are the ones of record.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "txl/bench/measure.h"
#include "txl/config/config.h"

namespace txl::bench {

struct SweepOptions {
  std::filesystem::path out_dir = "runs/bench";
  std::int64_t vocab = 12871;
  std::vector<std::int64_t> lengths = {128, 256, 512, 1024};  // tgt_len = mem_len
  std::int64_t length_batch = 4;
  std::vector<std::int64_t> batches = {1, 2, 4, 8, 16, 32};
  std::vector<std::int64_t> attention_mem_lens = {0, 128, 256, 512, 1024, 2048};
  std::int64_t attention_batch = 4;
  int warmup = 1;       // per point
  int repetitions = 2;  // per point (median)
  bool plot = true;     // draw sweep.png (plot_report.py bench-sweep; python + matplotlib)
  std::string python;   // plot interpreter; "" = plot::python_interpreter()
};

struct SweepPoint {
  std::string series;  // "length" or "batch"
  std::int64_t batch = 0, tgt_len = 0, mem_len = 0;
  double tokens_per_s = 0.0;
  double step_ms = 0.0;
  double peak_rss_mb = 0.0;      // the point's peak (cumulative if the kernel refuses resets)
  double flops_per_token = 0.0;  // training
  double gflops = 0.0;
};

struct SweepResult {
  std::vector<SweepPoint> points;
  AttentionCostFit attention;
  std::vector<std::filesystem::path> files;  // written, in order
  bool plotted = false;
  std::string plot_message;  // why no plot, when plotted is false
};

// Measures every point (training as measure_training, fp32) and writes into out_dir:
// sweep.md (the tables, ready for docs/performance.md), sweep.csv, sweep.json and, when matplotlib
// is available, sweep.png (redraw it with `plot_report.py bench-sweep sweep.json sweep.png`).
// Throws txl::Error when out_dir cannot be written; a missing plotter is a warning.
SweepResult run_sweep(const config::ExperimentConfig& config, const SweepOptions& options);

// The markdown tables of a sweep.
std::string sweep_markdown(const SweepResult& sweep);

}  // namespace txl::bench
