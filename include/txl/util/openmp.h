#pragma once
// How long idle OpenMP threads spin, for the programs. LibTorch's element-wise kernels run on
// OpenMP threads while fp32 matrix products run on OpenBLAS's own threads; with libgomp's
// default the idle OpenMP threads spin for about 300,000 rounds after every parallel region and
// take the cores OpenBLAS needs. On this project's 2-core machine (txl-bench, bench model,
// 2 threads, tokens/s):
//
//   spin rounds (GOMP_SPINCOUNT)   training fp32   training bf16   evaluation fp32
//   default (300,000)              1,400-1,700     4,500-5,400     3,600-4,200
//   0 (OMP_WAIT_POLICY=passive)    2,600-2,700     3,800-4,300     7,600-8,200
//   3,000                          2,440           3,970           8,710
//   30,000                         2,760           5,270           8,220
//
// libgomp reads these settings once, when it is loaded, so a program that wants other ones must
// set them and start itself again.

namespace txl {

// When neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY is set: sets GOMP_SPINCOUNT=30000 and
// re-executes this program (/proc/self/exe) with the same arguments; returns only when nothing
// needs doing or the re-execution failed. Settings the user made are kept.
void limit_openmp_spinning(char** argv);

// Sets LibTorch's intra-op threads to `requested`, or when it is <= 0 to this machine's cores
// divided among `processes_per_node` processes (at least 1), keeps freed memory in the heap
// (keep_freed_memory), and returns the thread count. Every program and library entry point that
// computes calls it once.
int use_threads(int requested, int processes_per_node = 1);

}  // namespace txl
