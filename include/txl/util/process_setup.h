#pragma once
// The settings of the whole process, made by a program's main in one explicit call: LibTorch's
// intra-op threads, the C allocator's policy, how long idle OpenMP threads spin and what a bus
// error in a mapped data file says. For mains only (tools/*/main.cpp, and tests that run the
// library as a program would): no library code calls it, so the library never re-executes the
// program, sets environment variables, calls mallopt or installs a SIGBUS handler.
//
//   int main(int argc, char** argv) {
//     ... parse flags, load the experiment ...
//     txl::ProcessSetup setup;
//     setup.threads = config.run.threads;
//     setup.processes_per_node = env.local_world_size;  // a data-parallel job
//     setup.apply(argv);  // before any computation and before the job's rendezvous
//     ...
//   }

#include <string>

namespace txl {

struct ProcessSetup {
  // LibTorch intra-op threads, e.g. run.threads; <= 0: this machine's cores divided among
  // processes_per_node (at least 1). OpenBLAS's own threads too, where LibTorch multiplies with
  // it (Debian's): left alone, OpenBLAS takes every core in every process, so that two ablation
  // jobs of one thread each on 2 cores ran 4 matrix threads (6,000 training tokens/s each
  // against 7,900 with one each; docs/performance.md, 2026-12-07, third entry).
  int threads = 0;
  // Processes of one data-parallel job on this node, which share its cores (LOCAL_WORLD_SIZE,
  // dist::LaunchEnv::local_world_size); 1 for a process alone.
  int processes_per_node = 1;
  // glibc serves every block from the heap and keeps what is freed (up to 2 GiB at the top) for
  // the next step. A training step allocates and frees the same large tensors every time (the
  // [N, V] logits and their gradient, the [H, B, Q, K] attention scores); by default glibc
  // serves blocks above its mmap threshold with mmap, gives them back with munmap and trims the
  // heap, so every step page-faults that memory in again (docs/performance.md gives the cost).
  // The resident size then stays near the peak between steps. Nothing happens with another C
  // library.
  bool keep_freed_memory = true;
  // Idle OpenMP threads stop spinning after 30,000 rounds instead of libgomp's 300,000, so that
  // OpenBLAS, which runs fp32 matrix products on its own threads, gets the cores
  // (docs/performance.md). libgomp reads GOMP_SPINCOUNT once, when it is loaded, so apply()
  // sets it and re-executes the program once, unless the user set GOMP_SPINCOUNT or
  // OMP_WAIT_POLICY (their choice is kept).
  bool limit_openmp_spinning = true;
  // OpenBLAS 0.3.21 (Debian bookworm's, which multiplies Debian LibTorch's fp32 matrices) does not
  // know newer CPUs with AVX-512: on newer Intel Xeons it falls back to its generic "Prescott"
  // kernels (fp32 matmul at 65 GFLOP/s instead of 290 on a 2-core Xeon), on AMD's Zen 4 to its
  // AVX2 "Haswell" ones (247 GFLOP/s instead of 450 on a 2-core EPYC; training 3,551 tokens/s
  // instead of 5,201). OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded, so when it chose
  // a core without AVX-512 kernels on a CPU with AVX-512 apply() sets OPENBLAS_CORETYPE=SkylakeX
  // and re-executes the program once (a value the user set is kept).
  bool choose_openblas_core = true;
  // A data file mapped into memory (a cache's token ids, a checkpoint being read) that another
  // program truncates, or a copy onto it that stops on a full disk, makes the next read of it a
  // SIGBUS, which ends the process with "Bus error" (exit 135) and no word of the cause. apply()
  // installs a SIGBUS handler: a fault inside a file mapped with fs::MappedFile writes one line
  // naming the file to stderr ("error: <file> changed while this process read it ...") and ends
  // the process with kExitMappedFileChanged (only async-signal-safe calls: the line is written
  // when the file is mapped); any other SIGBUS goes to the action that was there before (a
  // sanitizer's report, or the default: the process ends with SIGBUS).
  bool report_changed_mapped_files = true;
  // The exit status of a process that a changed mapped file stopped (EX_IOERR of sysexits.h): a
  // damaged cache is rebuilt at the next load (its checksum fails); a run resumes with --resume.
  static constexpr int kExitMappedFileChanged = 74;

  // The intra-op thread count apply() sets: `threads`, or the cores divided among
  // processes_per_node.
  int resolved_threads() const;

  // Makes the settings, once per process, before any computation. With limit_openmp_spinning
  // and neither variable set, this call does not return: it sets GOMP_SPINCOUNT=30000 and
  // re-executes /proc/self/exe with `argv` (main then runs again from the start, parses the same
  // flags and applies the same settings, which now find GOMP_SPINCOUNT set); it returns only
  // when the re-execution fails (the default spinning stays). Returns the intra-op thread count.
  // Throws txl::Error when a re-execution is due and `argv` is null.
  int apply(char** argv) const;
};

// Sets LibTorch's intra-op threads and OpenBLAS's own (where LibTorch multiplies with it) to n,
// as apply() does with its count; e.g. a probe that must run as a job of n threads will.
void set_compute_threads(int n);

// The intra-op thread count now (LibTorch's; OpenBLAS's follows set_compute_threads).
int compute_threads();

namespace detail {
// The OPENBLAS_CORETYPE apply() sets for the core OpenBLAS chose: "SkylakeX" for a core without
// AVX-512 kernels (Prescott, Haswell, Zen, ...) on a CPU with AVX-512 (F, BW, VL, DQ), else ""
// (nothing to change; "" for `core` = not OpenBLAS).
std::string openblas_core_override(const std::string& core, bool cpu_has_avx512);
}  // namespace detail

}  // namespace txl
