// run.precision: auto for an ablation: one answer for every job (paired comparisons need one
// precision), measured once and kept in <ablation dir>/precision.json, which later runs of the
// ablation and every job process read. Delete the file to measure again.

#include <algorithm>
#include <filesystem>

#include "jobs.h"
#include "txl/config/device.h"
#include "txl/train/precision.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"
#include "txl/util/process_setup.h"
#include "txl/util/run_lock.h"
#include "txl/util/stop.h"

namespace txl::experiment::detail {

namespace stdfs = std::filesystem;

namespace {

bool asks_auto(const config::ExperimentConfig& c) {
  return c.run.precision == config::Precision::kAuto;
}

config::Precision read_precision(const stdfs::path& path) {
  const std::string text = fs::read_file(path);
  TXL_CHECK(!json::nested_deeper_than(text), path.string(), " is not txl's precision record");
  const json::Json j = json::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  TXL_CHECK(j.is_object() && j.contains("precision") && j["precision"].is_string(), path.string(),
            " is not txl's precision record (no \"precision\"); delete it to measure again");
  const auto precision = config::parse_enum<config::Precision>(j["precision"].get<std::string>());
  TXL_CHECK(precision && *precision != config::Precision::kAuto, path.string(),
            ": \"precision\" must be fp32 or bf16; delete it to measure again");
  return *precision;
}

// Measures with the first job that asks for auto, as a job runs: its data, its device and the
// threads one job gets.
train::PrecisionChoice measure(const config::AblationConfig& ablation,
                               const AblationOptions& options) {
  const std::vector<Job> jobs = ablation_jobs(ablation);
  const auto job =
      std::find_if(jobs.begin(), jobs.end(), [](const Job& j) { return asks_auto(j.config); });
  const config::ExperimentConfig& cfg = job->config;
  const std::int64_t vocab = data::load_dataset(cfg.data).tokenizer->vocab_size();
  const int before = compute_threads();
  set_compute_threads(job_threads(options, options.jobs > 1 && jobs.size() > 1));
  try {
    const auto choice = train::choose_precision(cfg, vocab, config::resolve_device(cfg.run.device),
                                                cfg.train.batch_size);
    set_compute_threads(before);
    return choice;
  } catch (...) {
    set_compute_threads(before);
    throw;
  }
}

}  // namespace

config::AblationConfig with_precision_resolved(const config::AblationConfig& ablation,
                                               const AblationOptions& options) {
  bool any = asks_auto(ablation.base);
  for (const auto& [name, cfg] : ablation.variants) any = any || asks_auto(cfg);
  if (!any) return ablation;
  const stdfs::path dir = ablation_dir(ablation), path = dir / kPrecisionFile;
  // One process measures; another that starts meanwhile waits and reads its answer.
  const fs::RunLock lock = fs::RunLock::acquire_waiting(
      dir,
      [&](const fs::LockHolder& holder) {
        log::info(kTag, "run.precision auto: waiting for {}, which holds {}", holder.describe(),
                  dir.string());
      },
      &util::stop_signal());
  TXL_CHECK(lock.held(), "stopped while waiting for the lock of ", dir.string());
  std::error_code ec;
  config::Precision precision;
  if (stdfs::exists(path, ec)) {
    precision = read_precision(path);
    log::info(kTag, "run.precision auto: {}, as {} records (delete it to measure again)",
              config::to_string(precision), path.string());
  } else {
    const train::PrecisionChoice choice = measure(ablation, options);
    precision = choice.precision;
    json::OrderedJson j;
    j["precision"] = config::to_string(precision);
    j["reason"] = choice.reason;
    json::put_number(j, "fp32_seconds", choice.fp32_seconds);
    json::put_number(j, "bf16_seconds", choice.bf16_seconds);
    fs::write_atomic(path, j.dump(2) + "\n");
    log::info(kTag, "run.precision auto: {} (kept in {})", choice.reason, path.string());
  }
  config::AblationConfig out = ablation;
  if (asks_auto(out.base)) out.base.run.precision = precision;
  for (auto& [name, cfg] : out.variants) {
    if (asks_auto(cfg)) cfg.run.precision = precision;
  }
  return out;
}

}  // namespace txl::experiment::detail
