#pragma once
// File helpers. Every result txl writes goes through write_atomic: the bytes land in a
// temporary file beside the target, are flushed to disk, then renamed over it, so a crash,
// Ctrl-C or a full disk never leaves a half-written file where a good one was.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

namespace txl::fs {

namespace stdfs = std::filesystem;

// Whole file as bytes; throws txl::Error naming the path when missing or unreadable.
std::string read_file(const stdfs::path& path);

// A file mapped into memory (mmap), for reading large files without copying them. The bytes stay
// valid while the object lives; an empty file gives empty bytes.
//
// A mapped file that another program truncates (or a copy onto it that fails half-way) turns a
// read past its new end into SIGBUS, which ends a process without a word (exit 135). So each
// mapping is entered, while it lives, in a fixed table of the process (lock-free, no allocation)
// that the SIGBUS handler of txl::ProcessSetup reads: a fault inside a mapped file ends the
// program with one line naming the file (mapped_file_fault_message) and exit status
// ProcessSetup::kExitMappedFileChanged. txl's own rewrites put a new file in place by rename,
// which leaves a mapping of the old one intact.
class MappedFile {
 public:
  enum class Access {
    kReadOnly,     // PROT_READ, read ahead in order (MADV_SEQUENTIAL)
    kCopyOnWrite,  // readable and writable, private: a write copies the page, never the file
  };
  // Maps the file at `path` read-only. On failure `error` receives the OS reason and bytes() is
  // empty; without `error`, failure throws txl::Error naming the path.
  explicit MappedFile(const stdfs::path& path, std::string* error = nullptr);
  // Maps the first `size` bytes of the open file `fd` (still the caller's to close; the mapping
  // does not need it), which is `path` (named if it changes while mapped). Failure as above.
  MappedFile(int fd, std::uint64_t size, const stdfs::path& path, Access access,
             std::string* error = nullptr);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {data_, size_}; }
  // The bytes to write into (kCopyOnWrite), or to hand to a tensor that never writes.
  char* data() const { return data_; }

 private:
  void map(int fd, const stdfs::path& path, Access access, std::string* error);
  char* data_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;              // its entry in the table of mapped files; -1 = none
  std::string fault_message_;  // the line the SIGBUS handler writes for a fault inside it
};

// The line to print when a SIGBUS hit `address`: "error: <file> changed while this process read
// it ...\n" when the address lies in a mapped file's bytes, else empty. Async-signal-safe (reads
// the table of mapped files with atomic loads only), for txl::ProcessSetup's SIGBUS handler.
std::string_view mapped_file_fault_message(const void* address);

// A file written piece by piece and put in place atomically: the bytes go to a temporary file
// beside `path` (created with the writer), and commit() flushes it to disk and renames it over
// `path`. Destroyed without commit() (an error unwinding), the temporary file is removed and
// `path` is untouched. Errors throw txl::Error naming `path` and the OS reason (e.g. "No space
// left on device").
class AtomicWriter {
 public:
  explicit AtomicWriter(const stdfs::path& path);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  void write(std::string_view data);                           // appends
  void write_at(std::uint64_t offset, std::string_view data);  // overwrites written bytes
  std::uint64_t size() const { return size_; }                 // bytes appended so far
  void commit();

 private:
  [[noreturn]] void fail(const char* what, int err);
  stdfs::path path_, tmp_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Writes `data` to `path` atomically (an AtomicWriter). Throws txl::Error naming the path and
// the OS reason (e.g. "No space left on device"); the previous file stays intact.
void write_atomic(const stdfs::path& path, std::string_view data);

// Same, with the content produced by a writer callback into a binary stream.
void write_atomic(const stdfs::path& path, const std::function<void(std::ostream&)>& writer);

// Flushes `out` (and C's stdout when `out` is std::cout, which shares its buffer) and throws
// txl::Error naming `what` and the OS reason ("No space left on device") when any byte written to
// it since the start did not get through: a program's output on a full disk or /dev/full is an
// error, never an empty file and exit status 0 (a closed pipe ends the program with SIGPIPE). E.g.
// flush_output(std::cout, "standard output") before a main returns 0, and after each piece of
// streamed output.
void flush_output(std::ostream& out, const std::string& what);

// Creates the directory and its parents; throws txl::Error naming it on failure.
void ensure_dir(const stdfs::path& dir);

// 64-bit FNV-1a, for fingerprints of corpora, tokenizers and configs.
std::uint64_t fnv1a(std::string_view data, std::uint64_t seed = 1469598103934665603ull);

// Fingerprint of a file's bytes (reads it in chunks).
std::uint64_t fingerprint_file(const stdfs::path& path);

// Hex string of a 64-bit value, 16 characters.
std::string hex64(std::uint64_t value);

}  // namespace txl::fs
