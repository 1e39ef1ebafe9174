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

// A file mapped read-only into memory (mmap), for reading large files without copying them.
// The bytes stay valid while the object lives; an empty file gives empty bytes.
class MappedFile {
 public:
  // On failure `error` receives the OS reason and bytes() is empty; without `error`, failure
  // throws txl::Error naming the path.
  explicit MappedFile(const stdfs::path& path, std::string* error = nullptr);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {data_, size_}; }

 private:
  int fd_ = -1;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

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
