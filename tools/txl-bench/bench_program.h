#pragma once
// txl-bench's flags, beside its main (tools/txl-bench/README.md defines each).

#include "txl/bench/run.h"
#include "txl/config/command_line.h"

namespace CLI {
class App;
}

namespace txl::bench {

// Every flag of txl-bench on `app`: the experiment's (--config, --set, --dump-config) and
// --threads into `line`, what to measure into `request`, and --quiet into `*quiet`.
void add_bench_flags(CLI::App& app, config::CommandLine& line, BenchRequest& request, bool* quiet);

}  // namespace txl::bench
