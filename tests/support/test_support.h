#pragma once
// Test helpers shared by every txl test binary.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace txl::test {

// Passes when `actual` and `expected` have the same shape and |a - e| <= atol + rtol * |e|
// everywhere; otherwise the message names the shapes or the first mismatching index and values.
::testing::AssertionResult tensor_near(const torch::Tensor& actual, const torch::Tensor& expected,
                                       double atol = 1e-5, double rtol = 1e-5);

// Exact equality (shape, dtype-independent values), with the first mismatch on failure.
::testing::AssertionResult tensor_equal(const torch::Tensor& actual, const torch::Tensor& expected);

// int64 [n] of `values`, for expected offsets and ids.
inline torch::Tensor longs(const std::vector<std::int64_t>& values) {
  return torch::tensor(values, torch::kInt64);
}

// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Removes `path` and everything below it (a link is removed, not followed), ignoring what cannot
// be removed. Tests call this, never std::filesystem::remove_all: PyPI's torch 2.11 (cu130)
// exports its own copy of remove_all from libtorch.so, which a test's call binds to and which
// jumps to address 0 (an H200 machine with Ubuntu 24.04 and GCC 13, 2026-12-04: every test that
// removed a TempDir crashed). txl's library removes only single files (std::filesystem::remove).
void remove_tree(const std::filesystem::path& path);

// Writes `content` to `path` (creating parent directories).
void write_text(const std::filesystem::path& path, const std::string& content);

// A folder name a shell would take apart (quote, `;`, `$(...)`, backticks, spaces): files
// written under it by a child program (plots) must run nothing; see nothing_executed.
inline const std::string kShellHostileName = "it's; $(touch PWNED) `touch PWNED` a  b";

// Succeeds when no file PWNED exists in the working directory, in `dir` or in its parent: what
// a shell given kShellHostileName would have created.
::testing::AssertionResult nothing_executed(const std::filesystem::path& dir);

// The repository root (from TXL_SOURCE_DIR, set by ctest) and build/bin (TXL_BIN_DIR, else
// the build folder the tests were compiled in).
std::filesystem::path source_dir();
std::filesystem::path bin_dir();

// The Python of the build's virtual environment (tools/setup.sh: build/venv, with the pinned
// packages of tools/requirements.txt), or $TXL_TEST_PYTHON. Cross-check tests skip when it is
// missing or lacks a package.
std::string python();

// OpenBLAS's own thread count, for tests of code that looks at it (kernels::blas_has_own_threads):
// set() changes it, and the count found at construction comes back when the object dies.
// available() is false where the BLAS is not OpenBLAS (PyPI's LibTorch: MKL); set() then does
// nothing.
class OpenBlasThreads {
 public:
  OpenBlasThreads();
  ~OpenBlasThreads();
  OpenBlasThreads(const OpenBlasThreads&) = delete;
  OpenBlasThreads& operator=(const OpenBlasThreads&) = delete;
  bool available() const { return set_ != nullptr && get_ != nullptr; }
  void set(int threads) const;

 private:
  void (*set_)(int) = nullptr;
  int (*get_)() = nullptr;
  int before_ = 0;
};

}  // namespace txl::test

// Expects `statement` to throw an exception (any std::exception or c10::Error) whose what()
// contains `substring`.
#define TXL_EXPECT_THROW_WITH(statement, substring)                                           \
  do {                                                                                        \
    bool txl_thrown_ = false;                                                                 \
    try {                                                                                     \
      statement;                                                                              \
    } catch (const std::exception& txl_e_) {                                                  \
      txl_thrown_ = true;                                                                     \
      EXPECT_NE(std::string(txl_e_.what()).find(substring), std::string::npos)                \
          << "message was: " << txl_e_.what();                                                \
    }                                                                                         \
    EXPECT_TRUE(txl_thrown_) << "expected an exception containing \"" << (substring) << "\""; \
  } while (0)
