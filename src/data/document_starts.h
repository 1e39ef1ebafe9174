#pragma once
// Which document starts an encoded split keeps: the one rule for a split encoded whole
// (encode_split) and chunk by chunk (EncodedSplitWriter).

#include <torch/torch.h>

#include <cstdint>

#include "txl/util/error.h"

namespace txl::data {

// Decides, chunk by chunk as a split's tokens arrive, which document starts to keep:
// - the split's first document starts at token 0;
// - a start at or before the last kept one (an empty document) is dropped;
// - a start at the end of a chunk waits for the next chunk's tokens, and is dropped if none come.
class DocumentStarts {
 public:
  // One chunk: `local` its starts (int64 [d], token offsets in [0, tokens], in order), the chunk
  // holding `tokens` tokens from token `offset` of the split. Calls keep(start) for every start
  // kept, in order, as a split offset.
  template <class Keep>
  void add(const torch::Tensor& local, std::int64_t offset, std::int64_t tokens, Keep&& keep) {
    if (pending_ >= 0 && tokens > 0) emit(pending_, keep);
    if (tokens > 0) pending_ = -1;
    if (!local.defined()) return;
    const auto starts = local.to(torch::kCPU, torch::kLong).contiguous();  // [d]
    const auto* s = starts.data_ptr<std::int64_t>();
    for (std::int64_t d = 0; d < starts.numel(); ++d) {
      TXL_CHECK(s[d] >= 0 && s[d] <= tokens, "document start ", s[d], " outside the chunk's ",
                tokens, " tokens");
      if (s[d] < tokens) {
        emit(offset + s[d], keep);
      } else if (offset + s[d] > last_) {
        pending_ = offset + s[d];
      }
    }
  }

  // The end of the split: keep(0) when no start was kept.
  template <class Keep>
  void finish(Keep&& keep) {
    if (last_ < 0) emit(0, keep);
  }

 private:
  template <class Keep>
  void emit(std::int64_t start, Keep& keep) {
    if (start <= last_) return;
    if (last_ < 0 && start != 0) keep(std::int64_t{0});
    keep(start);
    last_ = start;
  }

  std::int64_t last_ = -1;     // the last start kept
  std::int64_t pending_ = -1;  // a start at the end of the tokens so far
};

}  // namespace txl::data
