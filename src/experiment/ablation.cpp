// The ablation's runner: the jobs selected, run one after another in this process or several
// at a time as child processes, or submitted as a Slurm array; then the report of every job's
// current results.
#include "txl/experiment/ablation.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/train/trainer.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/process.h"

#include "jobs.h"

namespace txl::experiment {

namespace stdfs = std::filesystem;
using detail::cached_outcome;
using detail::DatasetCache;
using detail::eval_limit;
using detail::job_finished;
using detail::job_threads;
using detail::kTag;
using detail::lock_job_folder;
using detail::run_job;
using detail::VariantOutcome;
using detail::with_precision_resolved;

namespace {

// What a variant changes relative to the ablation's base (its name and folder always differ).
std::vector<std::string> changes_from_base(const config::AblationConfig& ablation,
                                           const config::ExperimentConfig& cfg) {
  std::vector<std::string> out;
  for (const auto& line : config::diff_experiments(ablation.base, cfg)) {
    if (line.rfind("run.name:", 0) == 0 || line.rfind("run.output_dir:", 0) == 0) continue;
    out.push_back(line);
  }
  return out;
}

// An ablation compares like with like: warns about variants that change the data, the seed or
// the training budget, since their differences are then not the named change alone.
void warn_unfair_variants(const config::AblationConfig& ablation) {
  for (const auto& [name, cfg] : ablation.variants) {
    for (const auto& line : changes_from_base(ablation, cfg)) {
      const bool unfair = line.rfind("data.", 0) == 0 || line.rfind("run.seed:", 0) == 0 ||
                          line.rfind("train.max_steps:", 0) == 0 ||
                          line.rfind("train.max_tokens:", 0) == 0 ||
                          line.rfind("train.max_minutes:", 0) == 0;
      if (unfair) {
        log::warn(kTag, "variant {} changes {}; its results are not comparable like for like", name,
                  line);
      }
    }
  }
}

// The jobs to run: all, those of the `only` variants, or the one labelled `options.job`.
std::vector<Job> selected_jobs(const config::AblationConfig& ablation,
                               const AblationOptions& options) {
  const std::vector<Job> jobs = ablation_jobs(ablation);
  std::string names;
  for (const auto& [name, cfg] : ablation.variants) names += (names.empty() ? "" : ", ") + name;
  for (const auto& wanted : options.only) {
    const bool known =
        std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) { return j.variant == wanted; });
    TXL_CHECK(known, "--only: ablation ", ablation.name, " has no variant '", wanted,
              "'; its variants are: ", names);
  }
  std::vector<Job> out;
  for (const Job& job : jobs) {
    const bool only = options.only.empty() || std::find(options.only.begin(), options.only.end(),
                                                        job.variant) != options.only.end();
    if (options.job.empty() ? only : job.label() == options.job) out.push_back(job);
  }
  TXL_CHECK(options.job.empty() || !out.empty(), "--job: ablation ", ablation.name, " has no job '",
            options.job, "'; its variants are: ", names,
            ablation.seeds.empty() ? "" : " (a job is VARIANT@SEED)");
  return out;
}

// What happened to the jobs that ran.
struct RunOutcome {
  int signal = 0;                   // a signal stopped them
  std::string stopped;              // the job in progress then
  std::vector<std::string> failed;  // "label: why"
};

// Runs `jobs` one after another in this process; a failed job is logged and the next one runs.
RunOutcome run_serially(const std::vector<Job>& jobs, const AblationOptions& options,
                        const std::vector<std::int64_t>& contexts) {
  RunOutcome out;
  DatasetCache datasets;
  for (const Job& job : jobs) {
    bool finished = false;
    if (util::stop_signal().load() == 0) {
      try {
        finished = run_job(job, options, contexts, datasets);
      } catch (const std::exception& e) {  // txl::Error, or LibTorch's c10::Error
        log::warn(kTag, "job {} failed: {}", job.label(), e.what());
        out.failed.push_back(job.label() + ": " + e.what());
        continue;
      }
    }
    if (!finished) {
      out.signal = util::stop_signal().load();
      out.stopped = job.label();
      log::info(kTag, "stopped during job {}; run the same command again to resume", job.label());
      return out;
    }
  }
  return out;
}

// Builds the tokenizer and encoded cache of each distinct data section once, before the jobs
// that share it start together (each would otherwise build the same files at the same time).
void prepare_data(const std::vector<Job>& jobs) {
  std::set<std::string> done;
  for (const Job& job : jobs) {
    config::ExperimentConfig probe;
    probe.data = job.config.data;
    if (!done.insert(config::fingerprint(probe)).second) continue;
    log::info(kTag, "preparing the data of {} for the jobs that share it", job.label());
    try {
      data::load_dataset(job.config.data);
    } catch (const Error& e) {  // the job meets it again, and fails with it, on its own
      log::warn(kTag, "preparing the data of {}: {}", job.label(), e.what());
    }
  }
}

// Whether a line a job wrote starts a warning ("[train] warning: ...") or continues one (an
// indented line right after it).
class WarningLines {
 public:
  bool operator()(const std::string& line) {
    const bool starts =
        line.find("] warning: ") != std::string::npos || line.rfind("warning: ", 0) == 0;
    in_warning_ = starts || (in_warning_ && line.rfind("  ", 0) == 0);
    return in_warning_;
  }

 private:
  bool in_warning_ = false;
};

// Opens a job's entry in its job.log, which keeps every run's output: a line naming the job,
// the time and the command, before the child's own lines.
void start_job_log(const stdfs::path& log, const Job& job, const std::vector<std::string>& argv) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);  // the workers start jobs at once: not gmtime's shared buffer
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  std::ofstream out(log, std::ios::app | std::ios::binary);
  out << "==== txl-ablate job " << job.label() << ", " << when << ": "
      << process::shell_command(argv) << "\n";
  out.flush();
  TXL_CHECK(out.good(), "cannot write ", log.string(), ": ", std::strerror(errno));
}

// Runs one job as a child process (options.job_command --job LABEL) with `threads` threads,
// its output appended to <run dir>/job.log (*log_file) and its warnings shown on this
// process's stderr as they come; a Ctrl-C or SIGTERM of this process reaches it. The run folder
// is locked first (waiting for another process's work on it, which may finish the job) and the
// child holds the lock with this process (--lock-held): job.log has one writer.
process::ProgramResult run_job_process(const Job& job, const AblationOptions& options,
                                       const std::vector<std::int64_t>& contexts, int threads,
                                       std::string* log_file) {
  const stdfs::path dir = train::run_dir(job.config);
  process::ProgramResult none;  // not started: stopped while waiting, or nothing to do
  const fs::RunLock lock = lock_job_folder(job);
  if (!lock.held()) return none;
  if (job_finished(job, options, contexts)) {
    log::info(kTag, "job {}: trained and evaluated by another process; nothing to do", job.label());
    none.started = true;
    none.exit_code = 0;
    return none;
  }
  std::vector<std::string> argv = options.job_command;
  for (const std::string& extra :
       {std::string("--job"), job.label(), std::string("--lock-held"), std::string("--quiet"),
        std::string("--no-plots"), std::string("--set"), fmt::format("run.threads={}", threads)}) {
    argv.push_back(extra);
  }
  process::RunOptions run;
  run.output_file = (dir / "job.log").string();
  run.append_output = true;
  run.forward_signal = &util::stop_signal();
  run.keep_fd = lock.fd();
  run.on_output_line = [label = job.label(),
                        warning = WarningLines()](const std::string& line) mutable {
    if (warning(line)) log::write(kTag, fmt::format("job {}: {}", label, line));
  };
  *log_file = run.output_file;
  start_job_log(run.output_file, job, argv);
  log::info(kTag, "job {}: started (log: {})", job.label(), run.output_file);
  return process::run_program(argv, run);
}

// Runs `jobs` options.jobs at a time, each as a child process (options.job_command) with its
// share of the threads and its output in <run dir>/job.log.
RunOutcome run_in_processes(const std::vector<Job>& all, const AblationOptions& options,
                            const std::vector<std::int64_t>& contexts) {
  std::vector<Job> jobs;  // those with work left: a finished one starts no process
  for (const Job& job : all) {
    if (job_finished(job, options, contexts)) {
      log::info(kTag, "job {}: trained and evaluated earlier; nothing to do", job.label());
    } else {
      jobs.push_back(job);
    }
  }
  if (jobs.empty()) return {};
  prepare_data(jobs);
  const int per_job = job_threads(options, true);
  log::info(kTag, "running {} job(s), {} at a time with {} thread(s) each", jobs.size(),
            options.jobs, per_job);
  RunOutcome out;
  std::mutex mutex;
  size_t next = 0;
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (next >= jobs.size() || util::stop_signal().load() != 0) return;
        i = next++;
      }
      const Job& job = jobs[i];
      process::ProgramResult result;
      std::string log_file, error;
      try {  // a worker thread must not let an exception escape (std::terminate)
        result = run_job_process(job, options, contexts, per_job, &log_file);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (error.empty() && result.ok()) {
        log::info(kTag, "job {}: finished", job.label());
      } else if (util::stop_signal().load() != 0) {  // Ctrl-C reached the children too
        out.signal = util::stop_signal().load();
        out.stopped = job.label();
      } else {
        out.failed.push_back(!error.empty()
                                 ? fmt::format("{}: {}", job.label(), error)
                                 : fmt::format("{}: the job {}; the end of {}:\n{}", job.label(),
                                               result.status(), log_file, result.stderr_tail));
        log::warn(kTag, "{}", out.failed.back());
      }
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min<int>(options.jobs, static_cast<int>(jobs.size())); ++w) {
    workers.emplace_back(worker);
  }
  for (auto& w : workers) w.join();
  if (out.signal == 0) out.signal = util::stop_signal().load();
  return out;
}

// The report's per-variant notes: what each variant changes relative to the base.
ReportOptions report_options(const config::AblationConfig& ablation,
                             const AblationOptions& options) {
  ReportOptions report = options.report;
  for (const auto& [name, cfg] : ablation.variants) {
    std::string changes;
    for (const auto& line : changes_from_base(ablation, cfg)) {
      changes += (changes.empty() ? "" : "; ") + line;
    }
    report.variant_changes.emplace_back(name, changes);
  }
  return report;
}

}  // namespace

AblationResult run_ablation(const config::AblationConfig& asked, const AblationOptions& options) {
  TXL_CHECK(!asked.variants.empty(), "ablation ", asked.name,
            " has no variants; list them under `variants:`");
  TXL_CHECK(options.jobs >= 1, "--jobs must be at least 1, got ", options.jobs);
  TXL_CHECK(!options.lock_held || !options.job.empty(),
            "--lock-held is for the one job (--job) of a txl-ablate that holds its lock");
  const config::AblationConfig ablation = with_precision_resolved(asked, options);
  const std::vector<Job> jobs = selected_jobs(ablation, options);
  const std::vector<std::int64_t> contexts = sweep_contexts(ablation);
  AblationResult result;
  result.dir = ablation_dir(ablation);
  fs::ensure_dir(result.dir);
  if (options.job.empty()) {
    log::info(kTag, "ablation {}: {} variant(s), {} job(s) to run, report in {}", ablation.name,
              ablation.variants.size(), jobs.size(), result.dir.string());
    warn_unfair_variants(ablation);
  }
  const bool in_processes = options.jobs > 1 && options.job.empty() && jobs.size() > 1;
  TXL_CHECK(!in_processes || !options.job_command.empty(),
            "--jobs needs the command that runs one job (AblationOptions::job_command)");
  const RunOutcome ran = in_processes ? run_in_processes(jobs, options, contexts)
                                      : run_serially(jobs, options, contexts);
  result.failed = ran.failed;
  if (ran.signal != 0) {
    result.status = AblationStatus::kInterrupted;
    result.signal = ran.signal;
    result.stopped_variant = ran.stopped;
    return result;
  }
  if (!result.failed.empty()) result.status = AblationStatus::kFailed;
  if (!options.job.empty()) return result;  // one job of many: the parent writes the report
  std::vector<TrainingCurve> curves;
  for (const Job& job : ablation_jobs(ablation)) {
    VariantOutcome outcome = cached_outcome(job, options, contexts);
    if (outcome.records.empty()) {
      log::info(kTag, "job {}: no current results; left out of the report", job.label());
      continue;
    }
    curves.push_back(outcome.curve);
    result.records.insert(result.records.end(), outcome.records.begin(), outcome.records.end());
  }
  ReportOptions report = report_options(ablation, options);
  report.failed = result.failed;
  report.contexts = contexts;
  report.eval_max_tokens = eval_limit(ablation.base, options);
  report.memory_help = where_memory_helps(ablation, result.records);
  result.report = write_report(result.dir, ablation.name, result.records, curves, report);
  return result;
}

namespace {

// A batch script: #SBATCH lines, then one command, every word quoted for the shell Slurm runs.
std::string batch_script(const std::vector<std::string>& directives, const std::string& prelude,
                         const std::string& command) {
  std::string text = "#!/bin/bash\n# Written by txl-ablate --slurm.\n";
  for (const auto& d : directives) text += "#SBATCH " + d + "\n";
  return text + prelude + "exec " + command + "\n";
}

// sbatch --parsable's answer: "<id>" or "<id>;<cluster>".
std::string submitted_id(const process::ProgramResult& r, const std::string& what) {
  TXL_CHECK(r.ok(), "sbatch (", what, ") ", r.status(), r.stderr_tail.empty() ? "" : ": ",
            r.stderr_tail);
  std::string id = r.out.substr(0, r.out.find_first_of(";\n"));
  TXL_CHECK(!id.empty() && id.find_first_not_of("0123456789_") == std::string::npos, "sbatch (",
            what, ") answered '", r.out, "', not a job id");
  return id;
}

}  // namespace

SlurmPlan submit_slurm(const config::AblationConfig& ablation, const AblationOptions& options,
                       const std::vector<std::string>& sbatch_options) {
  TXL_CHECK(!options.job_command.empty(), "--slurm needs the command that runs one job");
  const std::vector<std::int64_t> contexts = sweep_contexts(ablation);
  SlurmPlan plan;
  for (const Job& job : selected_jobs(ablation, options)) {
    if (!job_finished(job, options, contexts)) plan.labels.push_back(job.label());
  }
  const stdfs::path dir = ablation_dir(ablation) / "slurm";
  fs::ensure_dir(dir);
  std::vector<std::string> opts = ablation.sbatch;
  opts.insert(opts.end(), sbatch_options.begin(), sbatch_options.end());
  std::string labels;
  for (const auto& l : plan.labels) labels += " " + process::shell_command({l});
  std::vector<std::string> job_argv = options.job_command;
  for (const char* a : {"--quiet", "--no-plots"}) job_argv.push_back(a);
  const std::string abs_dir = stdfs::absolute(dir).string();
  std::string report_id;
  if (!plan.labels.empty()) {
    plan.script = dir / "jobs.sh";
    fs::write_atomic(plan.script, batch_script({"--job-name=txl-" + ablation.name,
                                                fmt::format("--array=0-{}", plan.labels.size() - 1),
                                                "--output=" + abs_dir + "/job_%a.log"},
                                               "labels=(" + labels + ")\n",
                                               process::shell_command(job_argv) +
                                                   " --job \"${labels[$SLURM_ARRAY_TASK_ID]}\""));
    plan.array_command = {"sbatch", "--parsable"};
    plan.array_command.insert(plan.array_command.end(), opts.begin(), opts.end());
    plan.array_command.push_back(plan.script.string());
    report_id = submitted_id(process::run_program(plan.array_command), "job array");
  }
  const stdfs::path report_script = dir / "report.sh";
  std::vector<std::string> report_argv = options.job_command;
  report_argv.push_back("--quiet");
  fs::write_atomic(report_script, batch_script({"--job-name=txl-" + ablation.name + "-report",
                                                "--output=" + abs_dir + "/report.log"},
                                               "", process::shell_command(report_argv)));
  plan.report_command = {"sbatch", "--parsable"};
  if (!report_id.empty()) plan.report_command.push_back("--dependency=afterany:" + report_id);
  plan.report_command.insert(plan.report_command.end(), opts.begin(), opts.end());
  plan.report_command.push_back(report_script.string());
  submitted_id(process::run_program(plan.report_command), "report");
  return plan;
}

}  // namespace txl::experiment
