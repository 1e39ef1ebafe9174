// ProcessSetup: the thread count it resolves and sets, the allocator policy, and the one
// re-execution that limits OpenMP spinning (seen from a child test binary), which never
// overrides the user's own choice.
#include "txl/util/process_setup.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <torch/torch.h>

#include "support/test_support.h"
#include "txl/util/fs.h"
#include "txl/util/process.h"

namespace {

namespace stdfs = std::filesystem;

constexpr const char* kChildTest = "ProcessSetup.ChildAppliesAndReportsItsSpinCount";

TEST(ProcessSetup, ResolvesThreadsAndSetsThem) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  txl::ProcessSetup setup;
  setup.limit_openmp_spinning = false;
  setup.choose_openblas_core = false;
  EXPECT_EQ(setup.resolved_threads(), cores);
  setup.processes_per_node = cores * 4;  // more processes than cores: still one thread each
  EXPECT_EQ(setup.resolved_threads(), 1);
  setup.processes_per_node = 2;
  EXPECT_EQ(setup.resolved_threads(), std::max(1, cores / 2));
  setup.threads = 3;  // asked for: taken as is
  EXPECT_EQ(setup.resolved_threads(), 3);
  // OpenBLAS's threads follow (where it is loaded: Debian's LibTorch).
  using GetThreads = int (*)();
  const auto openblas =
      reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const int openblas_before = openblas != nullptr ? openblas() : 0;
  for (int threads : {1, 3}) {
    setup.threads = threads;
    EXPECT_EQ(setup.apply(nullptr), threads);
    EXPECT_EQ(torch::get_num_threads(), threads);
    if (openblas != nullptr) EXPECT_EQ(openblas(), threads);
  }
  if (openblas != nullptr) {
    setup.threads = openblas_before;
    setup.apply(nullptr);
  }
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
// With freed memory kept, even a 64 MiB block comes from the heap: glibc's default serves any
// block above its mmap threshold (at most 32 MiB) with mmap.
TEST(ProcessSetup, KeepsFreedMemoryInTheHeap) {
  txl::ProcessSetup setup;
  setup.limit_openmp_spinning = false;
  setup.choose_openblas_core = false;
  setup.apply(nullptr);
  const auto mapped = mallinfo2().hblkhd;
  void* block = std::malloc(64u << 20);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(mallinfo2().hblkhd, mapped);
  std::free(block);
}
#endif

// Runs only as the child of the tests below: applies the setup with its own argv and appends
// the GOMP_SPINCOUNT it then sees to $TXL_TEST_SPIN_OUT. A re-execution runs this test again
// from the start, so the file holds one line per run that got past apply().
TEST(ProcessSetup, ChildAppliesAndReportsItsSpinCount) {
  const char* out = std::getenv("TXL_TEST_SPIN_OUT");
  if (out == nullptr) GTEST_SKIP() << "runs only as a child of ProcessSetup.*SpinCount* tests";
  std::string self = stdfs::read_symlink("/proc/self/exe").string();
  std::string filter = std::string("--gtest_filter=") + kChildTest;
  char* argv[] = {self.data(), filter.data(), nullptr};
  txl::ProcessSetup setup;
  setup.threads = 1;
  setup.apply(argv);
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const std::string before = stdfs::exists(out) ? txl::fs::read_file(out) : "";
  txl::fs::write_atomic(out, before + (spin ? spin : "(unset)") + "\n");
}

void set_or_unset(const char* name, const std::string& value) {
  if (value.empty()) {
    unsetenv(name);
  } else {
    setenv(name, value.c_str(), 1);
  }
}

// The child's report, run with the variables as given ("" = unset).
std::string child_report(const std::string& spin_count, const std::string& wait_policy) {
  txl::test::TempDir dir;
  const auto out = dir / "spin.txt";
  std::vector<std::pair<const char*, std::string>> vars = {{"GOMP_SPINCOUNT", spin_count},
                                                           {"OMP_WAIT_POLICY", wait_policy}};
  std::vector<std::pair<const char*, std::string>> saved;
  for (const auto& [name, value] : vars) {
    const char* old = std::getenv(name);
    saved.emplace_back(name, old ? old : "");
    set_or_unset(name, value);
  }
  const auto self = stdfs::read_symlink("/proc/self/exe").string();
  txl::process::RunOptions options;
  options.stdout_mode = txl::process::Stdout::kDiscard;
  options.extra_env = {"TXL_TEST_SPIN_OUT=" + out.string()};
  const auto r =
      txl::process::run_program({self, std::string("--gtest_filter=") + kChildTest}, options);
  for (const auto& [name, value] : saved) set_or_unset(name, value);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << r.stderr_tail;
  return stdfs::exists(out) ? txl::fs::read_file(out) : "(no report)";
}

TEST(ProcessSetup, ReexecutesOnceWithTheSpinCountLimited) {
  EXPECT_EQ(child_report("", ""), "30000\n");
}

TEST(ProcessSetup, KeepsTheUsersSpinChoiceWithoutReexecuting) {
  EXPECT_EQ(child_report("123", ""), "123\n");
  EXPECT_EQ(child_report("", "passive"), "(unset)\n");
}

TEST(ProcessSetup, ReplacesOpenBlasGenericKernelsOnlyOnAnAvx512Cpu) {
  using txl::detail::openblas_core_override;
  EXPECT_EQ(openblas_core_override("Prescott", true), "SkylakeX");
  EXPECT_EQ(openblas_core_override("Prescott", false), "");
  EXPECT_EQ(openblas_core_override("Haswell", true), "SkylakeX");  // Zen 4 in OpenBLAS 0.3.21
  EXPECT_EQ(openblas_core_override("Zen", true), "SkylakeX");
  EXPECT_EQ(openblas_core_override("Haswell", false), "");
  EXPECT_EQ(openblas_core_override("SkylakeX", true), "");
  EXPECT_EQ(openblas_core_override("Cooperlake", true), "");
  EXPECT_EQ(openblas_core_override("SapphireRapids", true), "");
  EXPECT_EQ(openblas_core_override("", true), "");  // not OpenBLAS (MKL)
}

TEST(ProcessSetup, ReexecutionNeedsArgv) {
  if (std::getenv("GOMP_SPINCOUNT") || std::getenv("OMP_WAIT_POLICY"))
    GTEST_SKIP() << "the environment chose the spinning: no re-execution is due";
  txl::ProcessSetup setup;
  TXL_EXPECT_THROW_WITH(setup.apply(nullptr), "need main's argv");
}

}  // namespace
