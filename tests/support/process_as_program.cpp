#include "support/process_as_program.h"

#include "txl/util/process_setup.h"

namespace txl::test {

void ProcessAsProgram::SetUp() {
  ProcessSetup setup;
  setup.threads = threads_;
  setup.limit_openmp_spinning = false;
  setup.choose_openblas_core = false;
  setup.apply(nullptr);
}

}  // namespace txl::test
