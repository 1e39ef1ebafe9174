#include "txl/util/device_traffic.h"

#include <atomic>
#include <cstring>

#include "txl/util/error.h"

namespace txl {

namespace {

std::atomic<std::int64_t> g_moves{0};
std::atomic<std::int64_t> g_reads{0};
std::atomic<bool> g_active{false};
thread_local int t_host_only_depth = 0;
thread_local int t_backward_depth = 0;

constexpr const char* kHostOnly = "txl::host_only";

bool is_host_only(const at::RecordFunction& fn) {
  return fn.scope() == at::RecordScope::USER_SCOPE && std::strcmp(fn.name(), kHostOnly) == 0;
}

bool has_device_argument(const at::RecordFunction& fn) {
  for (const auto& input : fn.inputs())
    if (input.isDevice()) return true;
  return false;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (is_host_only(fn)) {
    ++t_host_only_depth;
    return nullptr;
  }
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ++t_backward_depth;
    return nullptr;
  }
  if (t_host_only_depth > 0 || t_backward_depth > 0 || fn.scope() != at::RecordScope::FUNCTION)
    return nullptr;
  const char* name = fn.name();
  if (std::strcmp(name, "aten::_local_scalar_dense") == 0) {
    ++g_reads;
  } else if (std::strcmp(name, "aten::to") == 0 && has_device_argument(fn)) {
    ++g_moves;
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (is_host_only(fn)) --t_host_only_depth;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) --t_backward_depth;
}

}  // namespace

DeviceTraffic::DeviceTraffic() {
  TXL_CHECK(!g_active.exchange(true), "DeviceTraffic: another counter is already running");
  g_moves = 0;
  g_reads = 0;
  t_host_only_depth = 0;
  t_backward_depth = 0;
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                           .needsInputs(true)
                                           .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                                    at::RecordScope::USER_SCOPE}));
}

DeviceTraffic::~DeviceTraffic() {
  at::removeCallback(handle_);
  g_active = false;
}

DeviceTrafficCounts DeviceTraffic::counts() const { return {g_moves.load(), g_reads.load()}; }

}  // namespace txl
