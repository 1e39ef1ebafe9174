// How a batch is read out of the token ids (a layout gathered into a padded Batch), and document
// mode's documents: checked, cut when there are fewer than streams, dealt to the streams.
#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "stream_parts.h"
#include "txl/util/device_traffic.h"
#include "txl/util/error.h"
#include "txl/util/log.h"

namespace txl::data::detail {

torch::Tensor to_tensor(const std::vector<std::int64_t>& values) {
  return torch::tensor(values, torch::kInt64);
}

Batch gather(const torch::Tensor& ids, const Layout& layout, std::int64_t pad_id,
             std::int64_t index) {
  auto col = torch::arange(layout.width, torch::kInt64).unsqueeze(0);  // [1, T]
  auto input_mask =
      col.ge(layout.lo.unsqueeze(1)).logical_and(col.lt(layout.hi.unsqueeze(1)));  // [B, T]
  auto target_mask = col.ge(layout.score_lo.unsqueeze(1))
                         .logical_and(col.lt(layout.score_hi.unsqueeze(1)))
                         .logical_and(input_mask);  // [B, T]
  auto pos = layout.first.unsqueeze(1) + col;       // [B, T]
  torch::Tensor input_index, target_index;
  if (layout.period > 0) {
    auto local = pos.remainder(layout.period);                                       // [B, T]
    input_index = layout.base.unsqueeze(1) + local;                                  // [B, T]
    target_index = layout.base.unsqueeze(1) + (local + 1).remainder(layout.period);  // [B, T]
    // The rolled stream's seam: its last token is followed by its first, not by real text.
    target_mask = target_mask.logical_and(local.ne(layout.period - 1));
  } else {
    input_index = pos;
    target_index = pos + 1;
  }
  const std::int64_t rows = layout.first.size(0);
  const std::int64_t read_end = layout.read_end < 0 ? rows : layout.read_end;
  TXL_CHECK(0 <= layout.read_begin && layout.read_begin <= read_end && read_end <= rows,
            "rows to read [", layout.read_begin, ", ", read_end, ") outside the batch's ", rows);
  auto take = [&](const torch::Tensor& index_bt, const torch::Tensor& mask) {
    auto hidden = mask.logical_not().narrow(0, layout.read_begin, read_end - layout.read_begin);
    auto safe = index_bt.narrow(0, layout.read_begin, read_end - layout.read_begin)
                    .masked_fill(hidden, 0);  // [R, T]
    auto read = ids.index_select(0, safe.reshape(-1))
                    .to(torch::kInt64)
                    .view(safe.sizes())
                    .masked_fill(hidden, pad_id);  // [R, T]
    if (read_end - layout.read_begin == rows) return read;
    auto all = torch::full(index_bt.sizes(), pad_id, torch::kInt64);  // [B, T]
    all.narrow(0, layout.read_begin, read_end - layout.read_begin).copy_(read);
    return all;
  };
  Batch batch;
  batch.tokens = take(input_index, input_mask);     // [B, T]
  batch.targets = take(target_index, target_mask);  // [B, T]
  batch.input_mask = input_mask;
  batch.target_mask = target_mask;
  batch.reset = layout.reset;
  {
    TXL_HOST_ONLY_SCOPE();  // a stream's ids are on the CPU (checked_ids)
    batch.n_scored = target_mask.sum().item<std::int64_t>();
  }
  batch.index = index;
  return batch;
}

// Rows whose first input is at starts[b], with n[b] real inputs (all scored) preceded by up to
// context[b] unscored ones: columns [E - context[b], E) are the context, [E, E + n[b]) the

Layout segment_layout(const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& n,
                      const std::vector<std::int64_t>& context, torch::Tensor reset) {
  const std::int64_t e = *std::max_element(context.begin(), context.end());
  const std::int64_t q = *std::max_element(n.begin(), n.end());
  Layout layout;
  auto start_t = to_tensor(starts), n_t = to_tensor(n), ctx_t = to_tensor(context);  // [B]
  layout.first = start_t - e;
  layout.lo = e - ctx_t;
  layout.hi = n_t + e;
  layout.score_lo = torch::full_like(n_t, e);
  layout.score_hi = layout.hi;
  layout.reset = std::move(reset);
  layout.width = e + q;
  return layout;
}

// Checks doc_starts and keeps the documents that have a target.
Documents parse_documents(const torch::Tensor& doc_starts, std::int64_t n, const char* who) {
  TXL_CHECK(doc_starts.dim() == 1 && doc_starts.scalar_type() == torch::kInt64, who,
            ": doc_starts must be a 1-D int64 tensor, got ", doc_starts.scalar_type(), " of shape ",
            doc_starts.sizes());
  auto starts = doc_starts.to(torch::kCPU).contiguous();
  const auto* s = starts.data_ptr<std::int64_t>();
  Documents docs;
  docs.given = starts.size(0);
  TXL_CHECK(docs.given >= 1 && s[0] == 0, who,
            ": doc_starts must begin with 0 (the first document starts the corpus)");
  for (std::int64_t d = 0; d < docs.given; ++d) {
    const std::int64_t begin = s[d], end = d + 1 < docs.given ? s[d + 1] : n;
    TXL_CHECK(end > begin && end <= n, who,
              ": doc_starts must be strictly increasing offsets below N = ", n, "; entry ", d,
              " = ", begin, " is followed by ", end);
    if (end - begin < 2) continue;  // no target inside the document
    docs.begin.push_back(begin);
    docs.end.push_back(end);
    docs.targets += end - begin - 1;
  }
  return docs;
}

// Training in document mode with fewer documents than streams: the longest document (the first
// of equally long ones) is cut into two contiguous halves until every stream has one or no
// document has 4 tokens (2 per part); each part is then a document of its own (memory resets at
// its start, its first token is no target). Returns the number of cuts.
std::int64_t cut_documents(Documents& docs, std::int64_t streams) {
  std::int64_t cuts = 0;
  while (static_cast<std::int64_t>(docs.begin.size()) < streams) {
    size_t longest = 0;
    for (size_t d = 1; d < docs.begin.size(); ++d) {
      if (docs.end[d] - docs.begin[d] > docs.end[longest] - docs.begin[longest]) longest = d;
    }
    const std::int64_t length = docs.end[longest] - docs.begin[longest];
    if (length < 4) break;
    const std::int64_t middle = docs.begin[longest] + length / 2;
    docs.end.insert(docs.end.begin() + static_cast<std::ptrdiff_t>(longest), middle);
    docs.begin.insert(docs.begin.begin() + static_cast<std::ptrdiff_t>(longest) + 1, middle);
    docs.targets -= 1;  // the second part's first token
    ++cuts;
  }
  return cuts;
}

// Deals the documents, starting from document `first_doc` and wrapping around, each to the
// stream that is shortest so far (ties: the lowest stream index), in segments of q targets with
// up to e tokens of context from inside the document.
DocumentLayout deal_documents(const Documents& docs, std::int64_t b, std::int64_t q, std::int64_t e,
                              std::int64_t first_doc) {
  const auto n_docs = static_cast<std::int64_t>(docs.begin.size());
  using Slot = std::pair<std::int64_t, std::int64_t>;  // (segments so far, stream)
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> shortest;
  for (std::int64_t r = 0; r < b; ++r) shortest.push({0, r});
  DocumentLayout layout;
  layout.streams.resize(static_cast<size_t>(b));
  layout.q = q;
  layout.e = e;
  for (std::int64_t k = 0; k < n_docs; ++k) {
    const auto d = static_cast<size_t>((first_doc + k) % n_docs);
    const auto [at, row] = shortest.top();
    shortest.pop();
    const std::int64_t targets = docs.end[d] - docs.begin[d] - 1;
    auto& stream = layout.streams[static_cast<size_t>(row)];
    stream.begin.push_back(docs.begin[d]);
    stream.targets.push_back(targets);
    stream.first_batch.push_back(at);
    shortest.push({at + ceil_div(targets, q), row});
    layout.n_batches = std::max(layout.n_batches, at + ceil_div(targets, q));
  }
  return layout;
}

void log_document_layout(const Documents& docs, const DocumentLayout& layout, std::int64_t b,
                         std::int64_t q, const char* what) {
  const std::int64_t slots = layout.n_batches * b * q;
  log::info("data",
            "{} document mode: {} documents in {} streams, {} batches of {} tokens; padding "
            "overhead {:.1f}% ({} of {} target slots)",
            what, docs.begin.size(), b, layout.n_batches, q, 100.0 * (slots - docs.targets) / slots,
            slots - docs.targets, slots);
}

// Batch i of a document layout; every row of batch 0 is reset.
Batch document_batch(const torch::Tensor& ids, const DocumentLayout& layout, std::int64_t i,
                     std::int64_t pad_id, std::int64_t read_begin, std::int64_t read_end) {
  DocumentLayout::Rows cells = layout.rows(i);
  if (i == 0) cells.resets.fill_(true);
  Layout rows = segment_layout(cells.starts, cells.lengths, cells.context, cells.resets);
  rows.read_begin = read_begin;
  rows.read_end = read_end;
  return gather(ids, rows, pad_id, i);
}

DocumentLayout::Rows DocumentLayout::rows(std::int64_t i) const {
  const auto b = static_cast<std::int64_t>(streams.size());
  Rows out;
  out.starts.assign(static_cast<size_t>(b), 0);
  out.lengths.assign(static_cast<size_t>(b), 0);
  out.context.assign(static_cast<size_t>(b), 0);
  out.resets = torch::zeros({b}, torch::kBool);  // [B]
  auto* resets = out.resets.data_ptr<bool>();
  for (std::int64_t r = 0; r < b; ++r) {
    const Stream& s = streams[static_cast<size_t>(r)];
    // The stream's last document starting at or before batch i.
    const auto after = std::upper_bound(s.first_batch.begin(), s.first_batch.end(), i);
    if (after == s.first_batch.begin()) continue;
    const auto d = static_cast<size_t>(after - s.first_batch.begin() - 1);
    const std::int64_t done = (i - s.first_batch[d]) * q;  // targets of earlier segments
    if (done >= s.targets[d]) continue;                    // the stream has run out
    out.starts[static_cast<size_t>(r)] = s.begin[d] + done;
    out.lengths[static_cast<size_t>(r)] = std::min(q, s.targets[d] - done);
    out.context[static_cast<size_t>(r)] = std::min(e, done);
    resets[r] = done == 0;
  }
  return out;
}

}  // namespace txl::data::detail
