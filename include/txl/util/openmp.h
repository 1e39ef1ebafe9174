#pragma once
// Transitional, for txl-eval alone until its main makes its settings with txl::ProcessSetup
// (txl/util/process_setup.h) and eval::run stops setting threads; this header goes then. Every
// other program calls ProcessSetup::apply.

namespace txl {

// ProcessSetup{}.apply(argv): limited OpenMP spinning (one re-execution), freed memory kept, all
// cores (until use_threads below).
void limit_openmp_spinning(char** argv);

// Sets LibTorch's intra-op threads to `requested`, or when it is <= 0 to this machine's cores
// divided among `processes_per_node` (ProcessSetup::resolved_threads), and returns the count.
// Sets nothing else.
int use_threads(int requested, int processes_per_node = 1);

}  // namespace txl
