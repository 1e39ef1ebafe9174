// fs::MappedFile, and the table of mapped files that txl::ProcessSetup's SIGBUS handler reads.
//
// Why a handler, and not a mapping that cannot fault: a training run maps its cache's token ids
// (data::read_encoded_split) so that a corpus of any size trains in the same memory; a private
// copy of each split would give that up, and a lease (fcntl F_SETLEASE) is granted only to the
// file's owner, breaks other readers' opens and tells nothing to a program that truncates the
// file. A process cannot stop another from truncating a file it maps, and a page past the new
// end cannot be read again: the run has to stop. What it must not do is stop without a word, so
// the fault is turned into one line that names the file and says how to go on (a damaged cache
// fails its checksum at the next load and is rebuilt from the corpus; a run resumes from its last
// checkpoint), and an exit status of its own.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"

namespace txl::fs {

namespace {

// The mapped files of the process, each [begin, end) with the line to print for it. A signal
// handler may read it at any moment, so it is a fixed array of lock-free atomics, constant-
// initialised (there before main), written without a lock and read without allocating.
constexpr int kSlots = 256;
enum SlotState : int { kFree = 0, kFilling = 1, kMapped = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<std::uintptr_t> begin{0}, end{0};
  std::atomic<const char*> message{nullptr};
  std::atomic<std::size_t> length{0};
};
static_assert(std::atomic<int>::is_always_lock_free &&
                  std::atomic<std::uintptr_t>::is_always_lock_free &&
                  std::atomic<const char*>::is_always_lock_free &&
                  std::atomic<std::size_t>::is_always_lock_free,
              "the SIGBUS handler reads the table of mapped files with lock-free atomics only");

Slot g_slots[kSlots];

// Enters [data, data + size) with `message` (which must outlive the entry); its slot, or -1 when
// the table is full.
int enter_mapping(const char* data, size_t size, const std::string& message) {
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[i];
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kFilling, std::memory_order_acquire))
      continue;
    slot.begin.store(reinterpret_cast<std::uintptr_t>(data), std::memory_order_relaxed);
    slot.end.store(reinterpret_cast<std::uintptr_t>(data + size), std::memory_order_relaxed);
    slot.message.store(message.data(), std::memory_order_relaxed);
    slot.length.store(message.size(), std::memory_order_relaxed);
    slot.state.store(kMapped, std::memory_order_release);
    return i;
  }
  return -1;
}

void fail(const char* what, const stdfs::path& path, int err, std::string* error) {
  const std::string reason = std::strerror(err);
  if (error == nullptr) TXL_FAIL("cannot ", what, " ", path.string(), ": ", reason);
  *error = reason;
}

}  // namespace

std::string_view mapped_file_fault_message(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  for (const Slot& slot : g_slots) {
    if (slot.state.load(std::memory_order_acquire) != kMapped) continue;
    if (at >= slot.begin.load(std::memory_order_relaxed) &&
        at < slot.end.load(std::memory_order_relaxed))
      return {slot.message.load(std::memory_order_relaxed),
              slot.length.load(std::memory_order_relaxed)};
  }
  return {};
}

MappedFile::MappedFile(const stdfs::path& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info {};
  if (fd < 0 || ::fstat(fd, &info) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    fail("open", path, err, error);
    return;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  size_ = static_cast<size_t>(info.st_size);
  map(fd, path, Access::kReadOnly, error);
}

MappedFile::MappedFile(int fd, std::uint64_t size, const stdfs::path& path, Access access,
                       std::string* error)
    : size_(static_cast<size_t>(size)) {
  map(fd, path, access, error);
}

void MappedFile::map(int fd, const stdfs::path& path, Access access, std::string* error) {
  if (size_ == 0) return;
  const int protection = access == Access::kReadOnly ? PROT_READ : PROT_READ | PROT_WRITE;
  void* data = ::mmap(nullptr, size_, protection, MAP_PRIVATE, fd, 0);
  if (data == MAP_FAILED) {
    size_ = 0;
    fail("map", path, errno, error);
    return;
  }
  if (access == Access::kReadOnly) ::madvise(data, size_, MADV_SEQUENTIAL);
  data_ = static_cast<char*>(data);
  fault_message_ = "error: " + path.string() +
                   " changed while this process read it (truncated or rewritten in place by "
                   "another program, or unreadable); stopped, since nothing read from it can be "
                   "trusted. A cache file is rebuilt by the next run; a training run continues "
                   "from its last checkpoint with --resume\n";
  slot_ = enter_mapping(data_, size_, fault_message_);
  static std::atomic<bool> warned{false};
  if (slot_ < 0 && !warned.exchange(true))
    log::warn("fs",
              "over {} files mapped at once: should {} change while mapped, the process "
              "ends with a bare bus error",
              kSlots, path.string());
}

MappedFile::~MappedFile() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree, std::memory_order_release);
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace txl::fs
