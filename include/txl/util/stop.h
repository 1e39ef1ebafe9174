#pragma once
// The stop request of a program: SIGINT or SIGTERM set a flag that long work (training steps, an
// ablation's jobs, generated tokens) reads between two pieces of work, so that it ends cleanly
// (a checkpoint written, the output so far printed) instead of dying mid-write.

#include <atomic>

namespace txl::util {

// The signal number that asked the process to stop (SIGINT, SIGTERM), 0 while none did. Set by
// the handlers of install_stop_handlers; tests set and reset it directly.
std::atomic<int>& stop_signal();

// Installs SIGINT and SIGTERM handlers that set stop_signal() (for the programs' mains); a
// second signal ends the process at once, with the default action of that signal.
void install_stop_handlers();

}  // namespace txl::util
