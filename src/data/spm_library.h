#pragma once
// How tokenizer.cpp reaches sentencepiece (private to src/data): the shim libtxl_spm
// (spm_shim.h), loaded once per process into a link-map namespace of its own, and the capture of
// the chatter sentencepiece's trainer writes to stderr. The tokenizers themselves live in
// tokenizer.cpp.

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "spm_shim.h"

namespace txl::data::spm {

// The shim's functions (spm_shim.h has their contracts).
struct Library {
  decltype(&txl_spm_train) train;
  decltype(&txl_spm_load) load;
  decltype(&txl_spm_free) free;
  decltype(&txl_spm_encode) encode;
  decltype(&txl_spm_decode) decode;
  decltype(&txl_spm_piece_size) piece_size;
  decltype(&txl_spm_special_id) special_id;
  decltype(&txl_spm_id_to_piece) id_to_piece;
};

// The shim, loaded on first use and kept for the life of the process: dlmopen(LM_ID_NEWLM) of
// the first libtxl_spm.so found in $TXL_SPM_LIBRARY, the build tree, beside the executable or
// in ../lib. Throws txl::Error listing every path tried and why each failed. (Compiled with
// TXL_SPM_LINKED, as the fuzz build does, the shim is linked in instead.)
const Library& library();

// A txl_spm_bytes_sink that appends to the std::string at `ctx`.
void append_bytes(void* ctx, const char* data, std::size_t size);

// Keeps sentencepiece's training chatter off the terminal: while alive, file descriptor 2 goes
// into a pipe; a thread reads it, keeps the last lines for error messages and forwards a
// progress line (milestones, and at most one line every 2 s) under [data]. When no pipe can be
// made, the output stays visible.
class StderrCapture {
 public:
  StderrCapture();
  ~StderrCapture() { stop(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Restores stderr and returns the last captured lines.
  std::string stop();

 private:
  void pump();
  void line(const std::string& text);

  int saved_ = -1;  // the real stderr while captured
  int read_fd_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::deque<std::string> tail_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace txl::data::spm
