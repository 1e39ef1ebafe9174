// fs::MappedFile's table of mapped files, and ProcessSetup's SIGBUS handler that reads it (issue
// 44): a read of a mapped file that another program truncated ends the process with one line
// naming the file and exit status 74, never a bare "Bus error" (135). The handler ends the
// process, so those tests run in a child (gtest's death tests).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "support/test_support.h"
#include "txl/util/fs.h"
#include "txl/util/process_setup.h"

namespace {

namespace stdfs = std::filesystem;
using txl::fs::MappedFile;
using txl::test::TempDir;

constexpr size_t kFileBytes = 64 * 1024;  // 16 pages of 4 KiB: the last ones past the truncation

stdfs::path file_of(const TempDir& dir, const std::string& name) {
  const stdfs::path path = dir / name;
  txl::test::write_text(path, std::string(kFileBytes, 'x'));
  return path;
}

// A read the compiler cannot drop.
char read_at(const char* p) { return *static_cast<const volatile char*>(p); }

TEST(MappedFile, EachLiveMappingNamesItsFileForAFaultInsideIt) {
  TempDir dir;
  const stdfs::path path = file_of(dir, "train.bin");
  auto file = std::make_unique<MappedFile>(path);
  const char* data = file->bytes().data();
  const std::string message(txl::fs::mapped_file_fault_message(data + kFileBytes - 1));
  EXPECT_EQ(message.rfind("error: " + path.string() + " changed while this process read it", 0), 0u)
      << message;
  EXPECT_EQ(message.back(), '\n');
  EXPECT_EQ(message.find('\n'), message.size() - 1) << "one line";
  EXPECT_EQ(txl::fs::mapped_file_fault_message(data + kFileBytes), "");  // past its end
  EXPECT_EQ(txl::fs::mapped_file_fault_message(&message), "");
  file.reset();
  EXPECT_EQ(txl::fs::mapped_file_fault_message(data), "") << "unmapped, yet still listed";
}

// The table has a fixed size: an unmapped file gives its entry back, or the 257th file of a
// long run would be mapped without one.
TEST(MappedFile, UnmappedFilesGiveTheirEntryBack) {
  TempDir dir;
  const stdfs::path path = file_of(dir, "valid.bin");
  for (int i = 0; i < 1000; ++i) {
    MappedFile file(path);
    ASSERT_NE(txl::fs::mapped_file_fault_message(file.bytes().data()), "") << "file " << i;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  MappedFile shared(fd, kFileBytes, path, MappedFile::Access::kCopyOnWrite);
  ::close(fd);
  shared.data()[0] = 'y';  // a private copy of the page: the file keeps its byte
  EXPECT_EQ(txl::fs::read_file(path).substr(0, 1), "x");
  EXPECT_NE(txl::fs::mapped_file_fault_message(shared.data() + 5), "");
}

// What a program's main sets up (no re-execution, which the death test's child does not need).
void setup_as_a_program() {
  txl::ProcessSetup setup;
  setup.threads = 1;
  setup.limit_openmp_spinning = false;
  setup.choose_openblas_core = false;
  setup.apply(nullptr);
}

// The death tests' child: maps a file of 64 KiB (as `access`, or with a plain mmap when not
// `listed`), truncates it to 100 bytes as another program's `truncate -s 100` would, and reads its
// last byte. Its folder is removed before (the file lives on while open): the child ends without
// unwinding, so a TempDir would stay behind.
void truncated_then_read(bool setup, MappedFile::Access access, bool listed = true) {
  if (setup) setup_as_a_program();
  const stdfs::path dir = stdfs::temp_directory_path() / ("txl-bus-" + std::to_string(::getpid()));
  const stdfs::path path = dir / "train.bin";
  txl::test::write_text(path, std::string(kFileBytes, 'x'));
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  MappedFile file(fd, kFileBytes, path, access);
  void* raw = listed ? nullptr : ::mmap(nullptr, kFileBytes, PROT_READ, MAP_PRIVATE, fd, 0);
  txl::test::remove_tree(dir);
  if (::ftruncate(fd, 100) != 0) return;
  read_at((listed ? file.data() : static_cast<char*>(raw)) + kFileBytes - 1);
}

class MappedFileDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(MappedFileDeathTest, ATruncatedFileEndsTheProgramWithALineNamingIt) {
  EXPECT_EXIT(truncated_then_read(true, MappedFile::Access::kReadOnly),
              ::testing::ExitedWithCode(txl::ProcessSetup::kExitMappedFileChanged),
              "^error: .*/train\\.bin changed while this process read it .*--resume\n$");
  EXPECT_EXIT(truncated_then_read(true, MappedFile::Access::kCopyOnWrite),
              ::testing::ExitedWithCode(txl::ProcessSetup::kExitMappedFileChanged),
              "train\\.bin changed while this process read it");
  // The control: without the program's setup, the same read dies of the bus error, unexplained.
  EXPECT_EXIT(truncated_then_read(false, MappedFile::Access::kReadOnly),
              ::testing::KilledBySignal(SIGBUS), "");
}

// A bus error outside the files txl maps (another library's mapping of a file, a kill -BUS)
// keeps its own action: the process ends with SIGBUS as before, blaming no file.
TEST_F(MappedFileDeathTest, AFaultOutsideMappedFilesKeepsTheDefaultAction) {
  EXPECT_EXIT(truncated_then_read(true, MappedFile::Access::kReadOnly, false),
              ::testing::KilledBySignal(SIGBUS), "");
  EXPECT_EXIT(
      {
        setup_as_a_program();
        ::raise(SIGBUS);  // no faulting address
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
