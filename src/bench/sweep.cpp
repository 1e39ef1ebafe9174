#include "txl/bench/sweep.h"

#include <fmt/format.h>

#include "txl/models/flops.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"
#include "txl/util/plot.h"

namespace txl::bench {

namespace {

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
  using json::OrderedJson;
  OrderedJson points = OrderedJson::array();
  for (const auto& p : s.points) {
    OrderedJson o;
    o["series"] = p.series;
    o["batch"] = p.batch;
    o["tgt_len"] = p.tgt_len;
    o["mem_len"] = p.mem_len;
    json::put_number(o, "tokens_per_s", p.tokens_per_s);
    json::put_number(o, "step_ms", p.step_ms);
    json::put_number(o, "peak_rss_mb", p.peak_rss_mb);
    json::put_number(o, "flops_per_token", p.flops_per_token);
    json::put_number(o, "gflops", p.gflops);
    points.push_back(std::move(o));
  }
  OrderedJson attention;
  attention["batch"] = attention_batch;
  attention["tgt_len"] = attention_tgt_len;
  attention["points"] = OrderedJson::array();
  for (const auto& p : s.attention.points) {
    OrderedJson o;
    o["mem_len"] = p.mem_len;
    json::put_number(o, "us_per_token", p.us_per_token);
    attention["points"].push_back(std::move(o));
  }
  json::put_number(attention, "intercept_us", s.attention.intercept_us);
  json::put_number(attention, "slope_us", s.attention.slope_us);
  json::put_number(attention, "r2", s.attention.r2);
  OrderedJson out;
  out["points"] = std::move(points);
  out["attention"] = std::move(attention);
  return out.dump() + "\n";
}

// sweep.png from sweep.json with the plot script's bench-sweep subcommand (plot.h); a missing
// plotter leaves a warning and the data.
void plot_sweep(const SweepOptions& o, SweepResult* s) {
  const auto json = o.out_dir / "sweep.json";
  const auto png = o.out_dir / "sweep.png";
  const auto run = plot::run_script({"bench-sweep", json.string(), png.string()}, {o.python, {}});
  if (run.drawn()) {
    s->plotted = true;
    s->files.push_back(png);
    return;
  }
  s->plot_message = fmt::format("no plot: {} (the data is in {})", run.note, json.string());
  log::warn("bench", "{}", s->plot_message);
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
  if (o.plot) {
    plot_sweep(o, &s);
  } else {
    s.plot_message = "plot not requested";
  }
  return s;
}

}  // namespace txl::bench
