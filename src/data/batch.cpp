#include "txl/data/batch.h"

#include <algorithm>
#include <cstring>

#include "txl/util/device_traffic.h"
#include "txl/util/error.h"

namespace txl::data {

namespace {

// True entries of a target mask: free on the host, a wait for the device elsewhere.
std::int64_t count_scored(const torch::Tensor& target_mask) {
  if (!target_mask.is_cpu()) return target_mask.sum().item<std::int64_t>();
  TXL_HOST_ONLY_SCOPE();
  return target_mask.sum().item<std::int64_t>();
}

}  // namespace

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  Batch out;
  out.tokens = tokens.to(device, non_blocking);
  out.targets = targets.to(device, non_blocking);
  out.input_mask = input_mask.to(device, non_blocking);
  out.target_mask = target_mask.to(device, non_blocking);
  out.reset = reset.to(device, non_blocking);
  out.n_scored = n_scored;
  out.index = index;
  return out;
}

Batch Batch::narrow_rows(std::int64_t begin, std::int64_t count) const {
  TXL_CHECK(begin >= 0 && count >= 0 && begin + count <= rows(), "Batch::narrow_rows: rows [",
            begin, ", ", begin + count, ") of a batch of ", rows());
  if (begin == 0 && count == rows()) return *this;  // the whole batch: nothing to recount
  Batch out;
  out.tokens = tokens.narrow(0, begin, count);
  out.targets = targets.narrow(0, begin, count);
  out.input_mask = input_mask.narrow(0, begin, count);
  out.target_mask = target_mask.narrow(0, begin, count);
  out.reset = reset.narrow(0, begin, count);
  out.n_scored = count_scored(out.target_mask);
  out.index = index;
  return out;
}

PaddedBatch pad_sequences(const std::vector<std::vector<std::int64_t>>& seqs, std::int64_t pad_id,
                          PadSide side) {
  TXL_CHECK(!seqs.empty(), "pad_sequences: no sequences given; a batch needs at least one row");
  const auto rows = static_cast<std::int64_t>(seqs.size());
  std::int64_t width = 0;
  for (const auto& s : seqs) width = std::max(width, static_cast<std::int64_t>(s.size()));

  auto ids = torch::full({rows, width}, pad_id, torch::kInt64);  // [B, T]
  auto mask = torch::zeros({rows, width}, torch::kBool);         // [B, T]
  auto lengths = torch::empty({rows}, torch::kInt64);            // [B]
  auto* ids_data = ids.data_ptr<std::int64_t>();
  auto* mask_data = mask.data_ptr<bool>();
  auto* len_data = lengths.data_ptr<std::int64_t>();
  // One memcpy per row: the rows are host vectors already, so this is the cheapest copy.
  for (std::int64_t b = 0; b < rows; ++b) {
    const auto& s = seqs[static_cast<size_t>(b)];
    const auto n = static_cast<std::int64_t>(s.size());
    const std::int64_t offset = side == PadSide::kRight ? 0 : width - n;
    if (n > 0) {
      std::memcpy(ids_data + b * width + offset, s.data(), sizeof(std::int64_t) * n);
      std::fill_n(mask_data + b * width + offset, n, true);
    }
    len_data[b] = n;
  }
  return {ids, mask, lengths};
}

}  // namespace txl::data
