#include "txl/util/openmp.h"

#include <torch/torch.h>

#include "txl/util/process_setup.h"

namespace txl {

void limit_openmp_spinning(char** argv) { ProcessSetup{}.apply(argv); }

int use_threads(int requested, int processes_per_node) {
  ProcessSetup setup;
  setup.threads = requested;
  setup.processes_per_node = processes_per_node;
  const int threads = setup.resolved_threads();
  torch::set_num_threads(threads);
  return threads;
}

}  // namespace txl
