#pragma once
// One error style for txl: TXL_CHECK(cond, parts...) throws txl::Error whose message is the
// parts streamed together. Library code never exits; binaries catch txl::Error (and
// c10::Error) at the top, print the message and exit non-zero.

#include <sstream>
#include <stdexcept>
#include <string>

namespace txl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// The message a program prints for an exception: c10::Error (LibTorch) without its C++
// backtrace, anything else as what().
std::string error_message(const std::exception& error);

}  // namespace txl

// Throws txl::Error with the streamed message when `cond` is false.
#define TXL_CHECK(cond, ...)                                             \
  do {                                                                   \
    if (!(cond)) throw ::txl::Error(::txl::detail::concat(__VA_ARGS__)); \
  } while (0)

// Throws txl::Error unconditionally.
#define TXL_FAIL(...) throw ::txl::Error(::txl::detail::concat(__VA_ARGS__))
