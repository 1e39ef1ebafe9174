#include "txl/bench/sweep.h"

#include <cstdlib>

#include <fmt/format.h>

#include "txl/models/flops.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace txl::bench {

namespace {

// Written next to the data so that the plot can be redrawn (or restyled) without rerunning.
constexpr const char* kPlotScript = R"PY(#!/usr/bin/env python3
"""Plots runs/bench/sweep.json written by txl-bench --sweep: usage plot_sweep.py sweep.json out.png"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

data = json.load(open(sys.argv[1]))
fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
for ax, series, key, label in ((axes[0], "length", "tgt_len", "tgt_len = mem_len"),
                               (axes[1], "batch", "batch", "batch")):
    pts = [p for p in data["points"] if p["series"] == series]
    xs = [p[key] for p in pts]
    ax.plot(xs, [p["tokens_per_s"] for p in pts], "o-", color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(label)
    ax.set_ylabel("training tokens/s", color="tab:blue")
    twin = ax.twinx()
    twin.plot(xs, [p["peak_rss_mb"] for p in pts], "s--", color="tab:red")
    twin.set_ylabel("peak RSS (MB)", color="tab:red")
    fixed = f"batch {pts[0]['batch']}" if series == "length" else f"tgt_len {pts[0]['tgt_len']}"
    ax.set_title(f"training fp32 vs {label} ({fixed})")
att = data["attention"]
ms = [p["mem_len"] for p in att["points"]]
axes[2].plot(ms, [p["us_per_token"] for p in att["points"]], "o", label="measured")
axes[2].plot(ms, [att["intercept_us"] + att["slope_us"] * m for m in ms], "-",
             label=f"least squares, r2 = {att['r2']:.3f}")
axes[2].set_xlabel("mem_len")
axes[2].set_ylabel("attention block, us per query token")
axes[2].set_title(f"attention cost vs memory (tgt_len {att['tgt_len']}, batch {att['batch']})")
axes[2].legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";

SweepPoint measure_point(const config::ExperimentConfig& base, const SweepOptions& o,
                         const std::string& series, std::int64_t batch, std::int64_t tgt_len,
                         std::int64_t mem_len) {
  auto config = base;
  config.model.tgt_len = static_cast<int>(tgt_len);
  config.model.mem_len = static_cast<int>(mem_len);
  PhaseOptions phase;
  phase.batch_size = batch;
  phase.warmup = o.warmup;
  phase.repetitions = o.repetitions;
  phase.seed = base.run.seed;
  log::info("bench", "sweep {}: batch {}, tgt_len {}, mem_len {}", series, batch, tgt_len, mem_len);
  auto r = measure_training(config, o.vocab, phase);
  SweepPoint p;
  p.series = series;
  p.batch = batch;
  p.tgt_len = tgt_len;
  p.mem_len = mem_len;
  p.tokens_per_s = r.tokens_per_s;
  p.step_ms = 1e3 * r.timing.median_s;
  p.peak_rss_mb = r.peak_rss_mb;
  p.flops_per_token =
      models::count_flops_per_token(config.model, o.vocab, tgt_len, mem_len).training;
  p.gflops = p.tokens_per_s * p.flops_per_token / 1e9;
  return p;
}

std::string sweep_json(const SweepResult& s, std::int64_t attention_batch,
                       std::int64_t attention_tgt_len) {
  std::string points;
  for (const auto& p : s.points) {
    if (!points.empty()) points += ",";
    points += fmt::format(
        "{{\"series\":\"{}\",\"batch\":{},\"tgt_len\":{},\"mem_len\":{},\"tokens_per_s\":{:.7g},"
        "\"step_ms\":{:.7g},\"peak_rss_mb\":{:.7g},\"flops_per_token\":{:.7g},\"gflops\":{:.7g}}}",
        p.series, p.batch, p.tgt_len, p.mem_len, p.tokens_per_s, p.step_ms, p.peak_rss_mb,
        p.flops_per_token, p.gflops);
  }
  std::string attention;
  for (const auto& p : s.attention.points) {
    if (!attention.empty()) attention += ",";
    attention +=
        fmt::format("{{\"mem_len\":{},\"us_per_token\":{:.7g}}}", p.mem_len, p.us_per_token);
  }
  return fmt::format(
      "{{\"points\":[{}],\"attention\":{{\"batch\":{},\"tgt_len\":{},\"points\":[{}],"
      "\"intercept_us\":{:.7g},\"slope_us\":{:.7g},\"r2\":{:.7g}}}}}\n",
      points, attention_batch, attention_tgt_len, attention, s.attention.intercept_us,
      s.attention.slope_us, s.attention.r2);
}

}  // namespace

std::string sweep_markdown(const SweepResult& s) {
  std::string md;
  for (const char* series : {"length", "batch"}) {
    md += std::string(series) == "length"
              ? "Training (fp32) as tgt_len = mem_len grow, at a fixed batch:\n\n"
              : "\nTraining (fp32) as the batch grows, at the configured tgt_len and mem_len:\n\n";
    md += "| batch | tgt_len | mem_len | tokens/s | ms/step | GFLOP/s | peak RSS MB |\n";
    md += "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const auto& p : s.points) {
      if (p.series != series) continue;
      md += fmt::format("| {} | {} | {} | {:.0f} | {:.1f} | {:.1f} | {:.0f} |\n", p.batch,
                        p.tgt_len, p.mem_len, p.tokens_per_s, p.step_ms, p.gflops, p.peak_rss_mb);
    }
  }
  md += "\nOne attention block (forward, no gradient) per query token against mem_len:\n\n";
  md += "| mem_len | us per token | line |\n| ---: | ---: | ---: |\n";
  for (const auto& p : s.attention.points) {
    md += fmt::format("| {} | {:.2f} | {:.2f} |\n", p.mem_len, p.us_per_token,
                      s.attention.intercept_us + s.attention.slope_us * p.mem_len);
  }
  md += fmt::format("\nLeast-squares line: {:.3f} us + {:.5f} us x mem_len, r2 = {:.4f}.\n",
                    s.attention.intercept_us, s.attention.slope_us, s.attention.r2);
  return md;
}

SweepResult run_sweep(const config::ExperimentConfig& config, const SweepOptions& o) {
  SweepResult s;
  for (std::int64_t q : o.lengths) {
    s.points.push_back(measure_point(config, o, "length", o.length_batch, q, q));
  }
  for (std::int64_t b : o.batches) {
    s.points.push_back(
        measure_point(config, o, "batch", b, config.model.tgt_len, config.model.mem_len));
  }
  log::info("bench", "sweep: attention cost against mem_len");
  s.attention = attention_cost_by_mem_len(config.model, o.attention_batch, config.model.tgt_len,
                                          o.attention_mem_lens, o.warmup, o.repetitions + 1);

  fs::ensure_dir(o.out_dir);
  auto write = [&](const std::string& name, const std::string& text) {
    fs::write_atomic(o.out_dir / name, text);
    s.files.push_back(o.out_dir / name);
  };
  write("sweep.md", sweep_markdown(s));
  std::string csv =
      "series,batch,tgt_len,mem_len,tokens_per_s,step_ms,gflops,peak_rss_mb,"
      "attention_us_per_token\n";
  for (const auto& p : s.points) {
    csv += fmt::format("{},{},{},{},{:.1f},{:.2f},{:.2f},{:.1f},\n", p.series, p.batch, p.tgt_len,
                       p.mem_len, p.tokens_per_s, p.step_ms, p.gflops, p.peak_rss_mb);
  }
  for (const auto& p : s.attention.points) {
    csv += fmt::format("attention,{},{},{},,,,,{:.4f}\n", o.attention_batch, config.model.tgt_len,
                       p.mem_len, p.us_per_token);
  }
  write("sweep.csv", csv);
  write("sweep.json", sweep_json(s, o.attention_batch, config.model.tgt_len));
  write("plot_sweep.py", kPlotScript);

  if (!o.plot) {
    s.plot_message = "plot not requested";
    return s;
  }
  const auto png = o.out_dir / "sweep.png";
  const std::string check = o.python + " -c 'import matplotlib' >/dev/null 2>&1";
  if (std::system(check.c_str()) != 0) {
    s.plot_message = fmt::format("{} with matplotlib not found: no plot (the data is in {})",
                                 o.python, (o.out_dir / "sweep.json").string());
    log::warn("bench", "{}", s.plot_message);
    return s;
  }
  const std::string command =
      fmt::format("{} '{}' '{}' '{}'", o.python, (o.out_dir / "plot_sweep.py").string(),
                  (o.out_dir / "sweep.json").string(), png.string());
  if (std::system(command.c_str()) == 0) {
    s.plotted = true;
    s.files.push_back(png);
  } else {
    s.plot_message = "plot_sweep.py failed: no plot";
    log::warn("bench", "{}", s.plot_message);
  }
  return s;
}

}  // namespace txl::bench
