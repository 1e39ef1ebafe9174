#pragma once
// Counts the host-device traffic of the operations this thread runs: tensors moved between
// devices (`Tensor::to(device)`, `.cpu()`, `.cuda()`) and values read to the host (`.item()`,
// which waits for the device). It sees the operations LibTorch dispatches, through a
// RecordFunction callback, so it counts on the CPU build too: a `.to(device)` counts even when
// the device is the CPU and nothing moves, exactly where a GPU run would move something.
//
// Not counted: work that only ever runs on host tensors (a data stream building its batches, a
// readable error check done only when a tensor is on the CPU), marked with TXL_HOST_ONLY_SCOPE();
// the autograd engine's backward functions, whose `to` calls are dtype casts on the device of
// the forward (txl's forward never moves a tensor that needs a gradient between devices); and a
// `to` inside another operation, which is LibTorch's own cast (under CUDA autocast a softmax
// casts its bf16 scores with `toType`, which names the scores' own device): only the `to` calls
// txl makes itself count as moves.
#include <ATen/record_function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace txl {

struct DeviceTrafficCounts {
  std::int64_t moves = 0;  // `aten::to` calls given a device, outside any other operation
  std::int64_t reads = 0;  // scalar reads to the host (`aten::_local_scalar_dense`, i.e. item())

  bool operator==(const DeviceTrafficCounts& o) const {
    return moves == o.moves && reads == o.reads;
  }
  DeviceTrafficCounts operator-(const DeviceTrafficCounts& o) const {
    return {moves - o.moves, reads - o.reads};
  }
};

// Counting on the calling thread from construction to destruction; one at a time per process.
class DeviceTraffic {
 public:
  DeviceTraffic();
  ~DeviceTraffic();
  DeviceTraffic(const DeviceTraffic&) = delete;
  DeviceTraffic& operator=(const DeviceTraffic&) = delete;

  DeviceTrafficCounts counts() const;
  // One line per counted call, in order: the operation and its inputs (each tensor's device,
  // dtype and sizes, each device, each dtype), e.g. "aten::to(cuda:0 BFloat16 [4, 12], cuda:0,
  // Float)": what a test prints when a count is not what it expects.
  std::vector<std::string> calls() const;

 private:
  at::CallbackHandle handle_ = 0;
};

}  // namespace txl

// Host-only work inside the enclosing block: not counted by DeviceTraffic.
#define TXL_HOST_ONLY_SCOPE() RECORD_USER_SCOPE("txl::host_only")
