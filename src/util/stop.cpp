#include "txl/util/stop.h"

#include <csignal>

namespace txl::util {

std::atomic<int>& stop_signal() {
  static std::atomic<int> signal{0};
  return signal;
}

void install_stop_handlers() {
  // The first signal asks for a clean stop after the piece of work in flight; a second one (a
  // user's second Ctrl-C, a launcher's escalation) ends the process at once.
  auto handler = [](int sig) {
    if (stop_signal().exchange(sig) != 0) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
  };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
}

}  // namespace txl::util
