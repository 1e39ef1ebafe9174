#include "txl/util/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "txl/util/error.h"

namespace txl::fs {

std::string read_file(const stdfs::path& path) {
  std::error_code ec;
  TXL_CHECK(stdfs::exists(path, ec), "file not found: ", path.string());
  TXL_CHECK(!stdfs::is_directory(path, ec), "expected a file, found a directory: ", path.string());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TXL_CHECK(fd >= 0, "cannot open ", path.string(), ": ", std::strerror(errno));
  // Read straight into one string of the file's size (growing it only for files that grow, or
  // that report no size, like pipes): one copy instead of a stream's several.
  struct stat info {};
  std::string bytes;
  bytes.resize(::fstat(fd, &info) == 0 && info.st_size > 0 ? static_cast<size_t>(info.st_size) : 0);
  size_t used = 0;
  int err = 0;
  while (true) {
    if (used == bytes.size()) bytes.resize(std::max<size_t>(2 * bytes.size(), 65536));
    const ssize_t n = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    used += static_cast<size_t>(n);
  }
  ::close(fd);
  TXL_CHECK(err == 0, "error reading ", path.string(), ": ", std::strerror(err));
  bytes.resize(used);
  return bytes;
}

namespace {

// Writes all bytes to fd, retrying short writes; returns errno on failure, 0 on success.
int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

AtomicWriter::AtomicWriter(const stdfs::path& path) : path_(path), tmp_(path) {
  if (path.has_parent_path()) ensure_dir(path.parent_path());
  tmp_ += ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TXL_CHECK(fd_ >= 0, "cannot create ", tmp_.string(), ": ", std::strerror(errno));
}

AtomicWriter::~AtomicWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicWriter::fail(const char* what, int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  TXL_FAIL("cannot ", what, " ", path_.string(), ": ", std::strerror(err),
           " (the previous version, if any, is intact)");
}

void AtomicWriter::write(std::string_view data) {
  TXL_CHECK(fd_ >= 0, "AtomicWriter: ", path_.string(), " is already committed");
  if (const int err = write_all(fd_, data.data(), data.size())) fail("write", err);
  size_ += data.size();
}

void AtomicWriter::write_at(std::uint64_t offset, std::string_view data) {
  TXL_CHECK(fd_ >= 0 && offset + data.size() <= size_, "AtomicWriter: write_at outside the ", size_,
            " bytes written to ", path_.string());
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", errno);
    done += static_cast<size_t>(n);
  }
}

void AtomicWriter::commit() {
  TXL_CHECK(fd_ >= 0, "AtomicWriter: ", path_.string(), " is already committed");
  if (::fsync(fd_) != 0) fail("write", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    TXL_FAIL("cannot write ", path_.string(), ": ", std::strerror(err),
             " (the previous version, if any, is intact)");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    TXL_FAIL("cannot rename ", tmp_.string(), " to ", path_.string(), ": ", std::strerror(err));
  }
}

void write_atomic(const stdfs::path& path, std::string_view data) {
  AtomicWriter out(path);
  out.write(data);
  out.commit();
}

void write_atomic(const stdfs::path& path, const std::function<void(std::ostream&)>& writer) {
  std::ostringstream out(std::ios::binary);
  writer(out);
  TXL_CHECK(out.good(), "cannot serialise ", path.string());
  write_atomic(path, out.str());
}

void flush_output(std::ostream& out, const std::string& what) {
  errno = 0;
  out.flush();
  bool failed = !out.good();
  if (&out == &std::cout) failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || failed;
  // errno is the failed write's when the flush itself failed; an earlier failure (a buffer that
  // filled up mid-output) may have left another value, or none.
  TXL_CHECK(!failed, "cannot write to ", what, errno != 0 ? ": " : "",
            errno != 0 ? std::strerror(errno) : "", "; the output is incomplete");
}

void ensure_dir(const stdfs::path& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  stdfs::create_directories(dir, ec);
  TXL_CHECK(!ec, "cannot create directory ", dir.string(), ": ", ec.message());
}

std::uint64_t fnv1a(std::string_view data, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::uint64_t fingerprint_file(const stdfs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TXL_CHECK(in.good(), "cannot open ", path.string(), ": ", std::strerror(errno));
  std::uint64_t h = 1469598103934665603ull;
  std::string chunk(1 << 20, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    h = fnv1a(std::string_view(chunk.data(), static_cast<size_t>(in.gcount())), h);
  }
  return h;
}

std::string hex64(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace txl::fs
