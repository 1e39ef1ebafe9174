#include "txl/util/device_traffic.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>

#include "txl/util/error.h"

namespace txl {

namespace {

std::atomic<std::int64_t> g_moves{0};
std::atomic<std::int64_t> g_reads{0};
std::atomic<bool> g_active{false};
std::mutex g_calls_mutex;
std::vector<std::string> g_calls;  // guarded by g_calls_mutex
thread_local int t_host_only_depth = 0;
thread_local int t_backward_depth = 0;
thread_local int t_op_depth = 0;  // operations under way on this thread (FUNCTION scope)

constexpr const char* kHostOnly = "txl::host_only";

bool is_host_only(const at::RecordFunction& fn) {
  return fn.scope() == at::RecordScope::USER_SCOPE && std::strcmp(fn.name(), kHostOnly) == 0;
}

// LibTorch 2.11 built without NDEBUG asserts in inputs() where it kept none (seen for
// `aten::to.dtype`, which has no device): such a call names no device.
bool has_device_argument(const at::RecordFunction& fn) {
  try {
    for (const auto& input : fn.inputs())
      if (input.isDevice()) return true;
  } catch (const c10::Error&) {
  }
  return false;
}

// "name(input, ...)": each tensor's device, dtype and sizes, each device and dtype argument.
void record_call(const at::RecordFunction& fn) {
  std::ostringstream line;
  line << fn.name() << "(";
  const char* separator = "";
  for (const auto& input : fn.inputs()) {
    line << separator;
    separator = ", ";
    if (input.isTensor()) {
      const auto& t = input.toTensor();
      if (t.defined()) {
        line << t.device() << " " << t.scalar_type() << " " << t.sizes();
      } else {
        line << "undefined";
      }
    } else if (input.isDevice()) {
      line << input.toDevice();
    } else if (input.isInt()) {  // a dtype argument too (its enum value)
      line << input.toInt();
    } else {
      line << input.tagKind();
    }
  }
  line << ")";
  std::lock_guard<std::mutex> lock(g_calls_mutex);
  g_calls.push_back(line.str());
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
  if (fn.scope() != at::RecordScope::FUNCTION) return nullptr;
  const int depth = t_op_depth++;
  if (t_host_only_depth > 0 || t_backward_depth > 0) return nullptr;
  const char* name = fn.name();
  if (std::strcmp(name, "aten::_local_scalar_dense") == 0) {
    // A read waits for the device wherever it is called from (item() calls it inside aten::item).
    ++g_reads;
    record_call(fn);
  } else if (depth == 0 && std::strcmp(name, "aten::to") == 0 && has_device_argument(fn)) {
    // Only a `to` called by txl itself, not one inside another operation: LibTorch's own casts
    // (a softmax's toType under CUDA autocast) name the tensor's own device and move nothing.
    ++g_moves;
    record_call(fn);
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (fn.scope() == at::RecordScope::FUNCTION && t_op_depth > 0) --t_op_depth;
  if (is_host_only(fn)) --t_host_only_depth;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) --t_backward_depth;
}

}  // namespace

DeviceTraffic::DeviceTraffic() {
  TXL_CHECK(!g_active.exchange(true), "DeviceTraffic: another counter is already running");
  g_moves = 0;
  g_reads = 0;
  {
    std::lock_guard<std::mutex> lock(g_calls_mutex);
    g_calls.clear();
  }
  t_host_only_depth = 0;
  t_backward_depth = 0;
  t_op_depth = 0;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_start, on_end)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                   at::RecordScope::USER_SCOPE}));
}

DeviceTraffic::~DeviceTraffic() {
  at::removeCallback(handle_);
  g_active = false;
}

DeviceTrafficCounts DeviceTraffic::counts() const { return {g_moves.load(), g_reads.load()}; }

std::vector<std::string> DeviceTraffic::calls() const {
  std::lock_guard<std::mutex> lock(g_calls_mutex);
  return g_calls;
}

}  // namespace txl
