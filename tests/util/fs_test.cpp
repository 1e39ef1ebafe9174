#include "txl/util/fs.h"

#include <sys/resource.h>

#include <csignal>

#include "support/test_support.h"
#include "txl/util/error.h"

namespace {

using txl::test::TempDir;

TEST(Fs, WriteAtomicRoundTripsAndReplaces) {
  TempDir dir;
  auto path = dir / "sub" / "file.bin";
  txl::fs::write_atomic(path, std::string("first\0x", 7));
  EXPECT_EQ(txl::fs::read_file(path), std::string("first\0x", 7));
  txl::fs::write_atomic(path, "second");
  EXPECT_EQ(txl::fs::read_file(path), "second");
  // No temporary file is left beside it.
  int files = 0;
  for (auto& entry : std::filesystem::directory_iterator(dir / "sub")) (void)entry, ++files;
  EXPECT_EQ(files, 1);
}

TEST(Fs, FailedWriteKeepsPreviousFile) {
  TempDir dir;
  auto path = dir / "ckpt.bin";
  txl::fs::write_atomic(path, "good");
  // A write that fails midway (the writer throws) must not touch the existing file.
  EXPECT_THROW(txl::fs::write_atomic(path, [](std::ostream&) { throw txl::Error("injected"); }),
               txl::Error);
  EXPECT_EQ(txl::fs::read_file(path), "good");
  // A full disk, simulated by a file-size limit (SIGXFSZ ignored so write() returns EFBIG).
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 16;
  setrlimit(RLIMIT_FSIZE, &small);
  TXL_EXPECT_THROW_WITH(txl::fs::write_atomic(path, std::string(1000, 'x')), "cannot write");
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(txl::fs::read_file(path), "good");
}

TEST(Fs, ReadMissingFileNamesIt) {
  TXL_EXPECT_THROW_WITH(txl::fs::read_file("/nonexistent/txl/file.txt"),
                        "/nonexistent/txl/file.txt");
}

TEST(Fs, FingerprintDependsOnContent) {
  TempDir dir;
  txl::test::write_text(dir / "a", "hello");
  txl::test::write_text(dir / "b", "hellp");
  EXPECT_NE(txl::fs::fingerprint_file(dir / "a"), txl::fs::fingerprint_file(dir / "b"));
  EXPECT_EQ(txl::fs::fingerprint_file(dir / "a"), txl::fs::fnv1a("hello"));
  EXPECT_EQ(txl::fs::hex64(0xabcULL), "0000000000000abc");
}

}  // namespace
