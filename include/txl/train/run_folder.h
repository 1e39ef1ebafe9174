#pragma once
// The files of a run folder (runs/<run.name>/ or run.output_dir) and the rules that keep them
// safe: one process at a time writes a run (its lock), a new run never silently replaces an old
// one, a resume needs a checkpoint, leftovers of killed writes are removed, and a metrics file
// cut mid-record is repaired.

#include <cstdint>
#include <filesystem>
#include <string>

#include "txl/config/config.h"
#include "txl/util/run_lock.h"

namespace txl::train {

inline constexpr const char* kLastCheckpoint = "checkpoint_last.safetensors";
inline constexpr const char* kBestCheckpoint = "checkpoint_best.safetensors";
inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kConfigFile = "config.yaml";

// The run folder of an experiment: run.output_dir, or runs/<run.name>.
std::filesystem::path run_dir(const config::ExperimentConfig& config);

// How a training invocation treats an existing run folder.
enum class StartMode {
  kNew,        // the folder must not hold a run yet
  kResume,     // continue from checkpoint_last; it must exist
  kOverwrite,  // delete the run's files (checkpoints, metrics, config) and start again
};

// Starts a run in `dir`: takes the folder's lock (<dir>/.lock, fs::RunLock; the folder is created
// when missing), held while the result lives, before anything of the run is read or written, then
// checks `mode` against the folder (check_start). Throws txl::Error naming the folder and the
// process that holds it when another one does ("runs/x is in use: pid 4242 (txl-train) is writing
// it; ..."), or check_start's error; a refused start leaves no folder it created behind. With
// `lock` false (the caller holds the lock) only the check, and an empty lock comes back.
fs::RunLock start_run(const std::filesystem::path& dir, StartMode mode, bool lock = true);

// Checks `mode` against what `dir` holds, before anything is written; throws txl::Error saying
// what the folder holds and which flag to use (--resume or --overwrite).
void check_start(const std::filesystem::path& dir, StartMode mode);

// Removes the run's own files (kOverwrite). Other files in the folder are left alone.
void clear_run(const std::filesystem::path& dir);

// Removes "<name>.tmp.<pid>" files that write_atomic left behind when its process was killed
// (those of a live process are kept). Returns how many were removed.
int remove_stale_temporaries(const std::filesystem::path& dir);

// Keeps the records of metrics.jsonl up to `step` (all of them when step < 0), so a resumed run
// continues it exactly as an uninterrupted run would have written it. A last record cut
// mid-line (a crash during a write) is dropped with a warning; an unreadable record before it is
// an error naming the line.
void truncate_metrics(const std::filesystem::path& path, std::int64_t step);

}  // namespace txl::train
