#include "spm_library.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <type_traits>
#include <vector>

#include "txl/util/error.h"

#ifndef TXL_SPM_LINKED
#include <dlfcn.h>
#endif

namespace txl::data::spm {

#ifndef TXL_SPM_LINKED
namespace {

namespace stdfs = std::filesystem;

// Where libtxl_spm.so may be: $TXL_SPM_LIBRARY, the build tree, beside the executable, ../lib.
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("TXL_SPM_LIBRARY")) out.emplace_back(env);
#ifdef TXL_SPM_BUILD_PATH
  out.emplace_back(TXL_SPM_BUILD_PATH);
#endif
  std::error_code ec;
  auto exe = stdfs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / "libtxl_spm.so").string());
    out.push_back((exe.parent_path().parent_path() / "lib" / "libtxl_spm.so").string());
  }
  return out;
}

// The shim at `path` in a fresh link-map namespace, where sentencepiece, its embedded protobuf
// and its own libstdc++ never meet libtorch's protobuf (spm_shim.h). False, with the reason
// appended to `tried`, when it cannot be loaded.
bool load_shim(const std::string& path, Library& lib, std::string& tried) {
  std::error_code ec;
  if (!stdfs::is_regular_file(path, ec)) {
    tried += "\n  " + path + " (not found)";
    return false;
  }
  void* handle = ::dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::string why = ::dlerror();
    tried += "\n  " + path + " (" + why + ")";
    if (why.find("static TLS") != std::string::npos)
      tried +=
          "\n  (a second link-map namespace needs static TLS space: try "
          "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096)";
    return false;
  }
  auto sym = [&](auto* fn, const char* name) {
    void* p = ::dlsym(handle, name);
    TXL_CHECK(p != nullptr, path, " lacks ", name, ": rebuild txl");
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
  };
  sym(&lib.train, "txl_spm_train");
  sym(&lib.load, "txl_spm_load");
  sym(&lib.free, "txl_spm_free");
  sym(&lib.encode, "txl_spm_encode");
  sym(&lib.decode, "txl_spm_decode");
  sym(&lib.piece_size, "txl_spm_piece_size");
  sym(&lib.special_id, "txl_spm_special_id");
  sym(&lib.id_to_piece, "txl_spm_id_to_piece");
  decltype(&txl_spm_init) init = nullptr;
  sym(&init, "txl_spm_init");
  init();
  return true;
}

}  // namespace
#endif

#ifdef TXL_SPM_LINKED
// The fuzz build (tests/fuzz) links the shim and sentencepiece into a binary without torch, so
// the sanitizers and coverage see sentencepiece's parser; no second namespace is needed there.
const Library& library() {
  static const Library lib = [] {
    txl_spm_init();
    return Library{&txl_spm_train,  &txl_spm_load,       &txl_spm_free,       &txl_spm_encode,
                   &txl_spm_decode, &txl_spm_piece_size, &txl_spm_special_id, &txl_spm_id_to_piece};
  }();
  return lib;
}
#else
const Library& library() {
  static const Library lib = [] {
    std::string tried;
    Library l{};
    for (const auto& path : candidates()) {
      if (load_shim(path, l, tried)) return l;
    }
    TXL_FAIL("cannot load the sentencepiece shim libtxl_spm.so (built with txl); tried:", tried,
             "\nset TXL_SPM_LIBRARY to its path");
  }();
  return lib;
}
#endif

void append_bytes(void* ctx, const char* data, std::size_t size) {
  static_cast<std::string*>(ctx)->append(data, size);
}

// ------------------------------------------------------------------ StderrCapture

StderrCapture::StderrCapture() {
  std::fflush(stderr);
  std::cerr.flush();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;  // cannot capture: the output stays visible
  saved_ = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (saved_ < 0 || ::dup2(fds[1], 2) < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    if (saved_ >= 0) ::close(saved_);
    saved_ = -1;
    return;
  }
  ::close(fds[1]);
  read_fd_ = fds[0];
  reader_ = std::thread([this] { pump(); });
}

std::string StderrCapture::stop() {
  if (saved_ >= 0) {
    std::cerr.flush();
    std::fflush(stderr);
    ::dup2(saved_, 2);  // closes the pipe's last write end: the reader drains it, sees EOF
    reader_.join();     // the reader writes to saved_ until here
    ::close(read_fd_);
    ::close(saved_);
    saved_ = -1;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& line : tail_) out += line + "\n";
  return out;
}

void StderrCapture::pump() {
  std::string pending;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(read_fd_, buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
    if (n <= 0) continue;
    pending.append(buffer, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) line(pending);
}

void StderrCapture::line(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tail_.push_back(text);
    if (tail_.size() > 20) tail_.pop_front();
  }
  // "trainer_interface.cc(409) LOG(INFO) Loaded all 27991 sentences" -> the message.
  size_t tag = text.find(") LOG(");
  if (tag == std::string::npos) return;
  size_t close = text.find(") ", tag + 6);
  std::string message = close == std::string::npos ? text : text.substr(close + 2);
  // Milestones of unigram / bpe training: sentences loaded, alphabet, seed pieces, the
  // vocabulary size after each EM pruning round, saving. Other lines at most every 2 s.
  static const char* const kMilestones[] = {"Loaded all",  "Alphabet size", "Making suffix",
                                            "Initialized", "EM sub_iter=1", "Saving model"};
  bool milestone = text.find("LOG(WARNING)") != std::string::npos ||
                   text.find("LOG(ERROR)") != std::string::npos;
  for (const char* m : kMilestones) milestone = milestone || message.rfind(m, 0) == 0;
  if (message.rfind("Starts training", 0) == 0 || message.rfind("Adding meta", 0) == 0) return;
  auto now = std::chrono::steady_clock::now();
  if (!milestone && now - last_ < std::chrono::seconds(2)) return;
  last_ = now;
  std::string out = "[data] sentencepiece: " + message + "\n";
  if (saved_ >= 0) (void)!::write(saved_, out.data(), out.size());
}

}  // namespace txl::data::spm
