#include "txl-ablate/ablate_program.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "txl/config/load.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"
#include "txl/util/process_setup.h"
#include "txl/util/stop.h"

namespace txl::ablate {

namespace {

// The command that runs one job of this ablation: this program, the file, the --set overrides
// and the options that change what a job computes.
std::vector<std::string> job_command(const config::CommandLine& line,
                                     const experiment::AblationOptions& options) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::string> argv = {ec ? std::string("txl-ablate") : self.string(), "--config",
                                   std::filesystem::absolute(line.config_path).string()};
  for (const auto& o : line.overrides) argv.insert(argv.end(), {"--set", o});
  if (options.eval_max_tokens > 0)
    argv.insert(argv.end(), {"--eval-max-tokens", std::to_string(options.eval_max_tokens)});
  if (!options.sweep) argv.push_back("--no-sweep");
  return argv;
}

// Small models train faster as several single-thread processes than as one process with every
// core (measured here: two 1-thread KJV trainings at once did 1.45x the steps per second of one
// 2-thread training), so on the CPU one job runs per core; a GPU takes one job at a time.
int default_jobs(const config::AblationConfig& ablation) {
  if (ablation.variants.front().second.run.device != config::Device::kCpu) return 1;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int report_outcome(const experiment::AblationResult& result, char** argv, int argc) {
  using experiment::AblationStatus;
  if (result.status == AblationStatus::kInterrupted) {
    std::fprintf(stderr,
                 "interrupted by signal %d during job %s; finished work is kept. Resume with the "
                 "same command:\n  %s\n",
                 result.signal, result.stopped_variant.c_str(),
                 process::shell_command(std::vector<std::string>(argv, argv + argc)).c_str());
    return 128 + result.signal;
  }
  if (!result.report.table.empty())
    std::cout << result.report.table << "\nreport: " << (result.dir / "report.md").string() << "\n";
  fs::flush_output(std::cout, "standard output");  // the table: report.md holds it too
  if (result.status == AblationStatus::kFailed) {
    std::fprintf(stderr, "error: %zu job(s) failed:\n", result.failed.size());
    for (const auto& f : result.failed) std::fprintf(stderr, "  %s\n", f.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void add_ablate_flags(CLI::App& app, AblateRequest& request) {
  config::CommandLineOptions ablation_options;
  ablation_options.config_help = "ablation YAML file (a base and named variants)";
  ablation_options.set_help = "override a setting of every variant: key.path=value (repeatable)";
  config::add_experiment_options(app, request.line, ablation_options);
  app.add_option("file", request.line.config_path, "the ablation file, as --config FILE")
      ->excludes(app.get_option("--config"));
  experiment::AblationOptions& options = request.options;
  app.add_option("--only", options.only,
                 "run only these variants (comma-separated); the others keep their cached results")
      ->delimiter(',');
  app.add_option("--eval-max-tokens", options.eval_max_tokens,
                 "score only the first N tokens of each split in every evaluation (0 = all)")
      ->check(CLI::NonNegativeNumber);
  options.jobs = 0;
  app.add_option("--jobs", options.jobs,
                 "jobs (variant x seed) run at once, each a process with threads / N threads "
                 "(default: one per core on the CPU, one on a GPU)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--job", options.job, "run only this job (VARIANT or VARIANT@SEED), no report");
  // Hidden: the parent of --jobs N holds the job's run folder lock and passes it to its child.
  app.add_flag("--lock-held", options.lock_held,
               "the job's run folder is locked for it by the txl-ablate that started it")
      ->group("");
  app.add_flag("--slurm", request.slurm,
               "submit the unfinished jobs as a Slurm job array and the report as a job after it");
  app.add_option("--sbatch", request.sbatch,
                 "an sbatch option for --slurm, e.g. --sbatch=--time=60")
      ->allow_extra_args(false);
  app.add_flag("--no-sweep", request.no_sweep, "skip the context sweep (and so RECL)");
  app.add_flag("--quiet", options.quiet, "no training progress lines");
  app.add_flag("--no-plots", request.no_plots, "skip the PNG plots");
}

int run_ablate(AblateRequest& request, int argc, char** argv) {
  const config::CommandLine& line = request.line;
  experiment::AblationOptions& options = request.options;
  options.report.plots = !request.no_plots;
  options.sweep = !request.no_sweep;
  TXL_CHECK(!line.config_path.empty(), "name the ablation file: txl-ablate --config FILE");
  const auto ablation = config::load_ablation(line.config_path, line.overrides);
  if (line.dump) {
    for (const auto& [name, config] : ablation.variants)
      std::cout << "# variant: " << name << "\n" << config::dump_experiment(config) << "\n";
    fs::flush_output(std::cout, "standard output");
    return 0;
  }
  options.job_command = job_command(line, options);
  if (request.slurm) {
    const auto plan = experiment::submit_slurm(ablation, options, request.sbatch);
    std::cout << "submitted " << plan.labels.size() << " job(s) as a Slurm array"
              << (plan.script.empty() ? "" : " (" + plan.script.string() + ")")
              << " and the report job after it\n";
    fs::flush_output(std::cout, "standard output");
    return 0;
  }
  ProcessSetup setup;
  setup.threads = ablation.variants.front().second.run.threads;  // every variant's
  options.threads = setup.threads;
  if (options.jobs == 0) options.jobs = default_jobs(ablation);
  setup.apply(argv);
  util::install_stop_handlers();
  return report_outcome(experiment::run_ablation(ablation, options), argv, argc);
}

}  // namespace txl::ablate
