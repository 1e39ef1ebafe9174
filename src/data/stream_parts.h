#pragma once
// What the streams (stream.cpp) share with their layouts (layout.cpp: a batch gathered from the
// token ids, document mode's dealing of documents to streams) and their saved position
// (stream_state.cpp). Private to src/data.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "txl/data/stream.h"

namespace txl::data::detail {

// The name of a stream kind in messages ("train", "eval", "sliding"), and a kind read back.
const char* kind_name(StreamKind kind);
StreamKind kind_from_int(std::int64_t value);

torch::Tensor to_tensor(const std::vector<std::int64_t>& values);  // int64 [n]
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// columns [score_lo[b], score_hi[b]). With period > 0 the row is a rolled stream: column c reads
// base[b] + (first[b] + c) mod period, and the target after the stream's last token is unscored.
struct Layout {
  torch::Tensor first, base, lo, hi, score_lo, score_hi;  // int64 [B]
  torch::Tensor reset;                                    // bool [B]
  std::int64_t width = 0;                                 // T
  std::int64_t period = 0;
  // Rows [read_begin, read_end) are read out of the ids; the others hold pad_id under the same
  // masks (a data-parallel rank reads only its own rows). read_end < 0: every row.
  std::int64_t read_begin = 0, read_end = -1;
};

// The batch `index` that `layout` reads out of `ids`, padding with `pad_id`.
Batch gather(const torch::Tensor& ids, const Layout& layout, std::int64_t pad_id,
             std::int64_t index);

// Rows whose first input is at starts[b], with n[b] real inputs (all scored) preceded by up to
// context[b] unscored ones: columns [E - context[b], E) are the context, [E, E + n[b]) the
// segment, where E = max context; shorter rows are padded on both sides.
Layout segment_layout(const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& n,
                      const std::vector<std::int64_t>& context, torch::Tensor reset);

// Checks doc_starts and keeps the documents that have a target.
Documents parse_documents(const torch::Tensor& doc_starts, std::int64_t n, const char* who);

// Training in document mode with fewer documents than streams: the longest document (the first
// of equally long ones) is cut into two contiguous halves until every stream has one or no
// document has 4 tokens (2 per part); each part is then a document of its own (memory resets at
// its start, its first token is no target). Returns the number of cuts.
std::int64_t cut_documents(Documents& docs, std::int64_t streams);

// Deals the documents, starting from document `first_doc` and wrapping around, each to the
// stream that is shortest so far (ties: the lowest stream index), in segments of q targets with
// up to e tokens of context from inside the document.
DocumentLayout deal_documents(const Documents& docs, std::int64_t b, std::int64_t q, std::int64_t e,
                              std::int64_t first_doc);

// The "[data] <what> document mode: ..." line: documents, streams, batches and padding.
void log_document_layout(const Documents& docs, const DocumentLayout& layout, std::int64_t b,
                         std::int64_t q, const char* what);

// Batch i of a document layout; every row of batch 0 is reset. Rows [read_begin, read_end) are
// read (Layout::read_begin); read_end < 0: every row.
Batch document_batch(const torch::Tensor& ids, const DocumentLayout& layout, std::int64_t i,
                     std::int64_t pad_id, std::int64_t read_begin = 0, std::int64_t read_end = -1);

}  // namespace txl::data::detail
