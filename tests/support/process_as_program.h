#pragma once
// The settings a program's main makes for its process (txl::ProcessSetup), made before the
// tests of one binary, for tests that run the library's entry points (trainer, ablation, bench,
// txl-eval's run) as the program would: `threads` intra-op threads (tiny_experiment's
// run.threads is 1) and freed memory kept. No re-execution: GOMP_SPINCOUNT stays the test
// environment's. Register once in a test file:
//   const auto* const kProcess =
//       ::testing::AddGlobalTestEnvironment(new txl::test::ProcessAsProgram(1));

#include <gtest/gtest.h>

namespace txl::test {

class ProcessAsProgram : public ::testing::Environment {
 public:
  explicit ProcessAsProgram(int threads) : threads_(threads) {}
  void SetUp() override;

 private:
  int threads_;
};

}  // namespace txl::test
