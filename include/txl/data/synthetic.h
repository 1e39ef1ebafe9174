#pragma once
// A deterministic long-range recall corpus: the task that needs memory beyond one segment.
//
// Each document is a few lines of space-separated words, every word one token for a word-level
// tokenizer:
//
//   k2 = v41 ; k0 = v7 ; k3 = v7 ; k1 = v60 ;        statements: every key k0..k{keys-1} once,
//                                                    in random order, values uniform in v0..v63
//   n5 n17 n5 n30 ...                                `gap` noise words, uniform over the
//   ...                                              `alphabet` words n0..n{alphabet-1}, at most
//                                                    kNoiseWordsPerLine a line
//   ? k3 v7 ? k1 v60 ? k0 v7 ? k2 v41                queries: every key once, in a fresh random
//                                                    order, each followed by its stated value
//
// What is learnable, per token of the query line (in nats):
//   "?"      always 0 (fixed pattern)
//   key      the i-th query key (0-based) is uniform over the keys - i not yet queried:
//            best loss ln(keys - i), mean over the line (1/keys) * sum_i ln(keys - i)
//   value    the recall tokens: the value is a deterministic function of the statement line,
//            so the best achievable loss is 0; a model that cannot see the statement (it lies
//            more than `gap` tokens back, beyond one segment without memory) can do no better
//            than ln(kSyntheticValues) = ln 64 = 4.159 nats (values are uniform and independent
//            of everything else in the document).
// Noise words are uniform, so their best loss is ln(alphabet), the statements' values ln 64.
//
// Splits: train has cfg.documents documents, valid and test max(1, documents / 10) each, each
// split drawn from its own stream of a SplitMix64 generator seeded from (seed, split), so the
// same seed gives byte-identical text on every platform.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/data/corpus.h"
#include "txl/data/tokenizer.h"

namespace txl::data {

constexpr int kSyntheticValues = 64;    // values v0..v63
constexpr int kNoiseWordsPerLine = 32;  // noise is wrapped into lines of at most this many

// One generated document with its ground truth, for tests and recall evaluation.
struct SyntheticDocument {
  std::vector<std::string> lines;  // the text, as written into the corpus
  std::vector<int> values;         // values[k] = stated value of key k
  std::vector<int> query_order;    // keys in the order they are queried
};

// Generates split "train" | "valid" | "test" of the synthetic corpus. Throws txl::Error for
// keys < 1, gap < 0, alphabet < 1 or documents < 1, naming the data.synthetic key.
std::vector<SyntheticDocument> generate_synthetic_documents(const config::SyntheticConfig& cfg,
                                                            const std::string& split);

// One split as corpus text (documents in order, one document = its lines).
CorpusSplit generate_synthetic_split(const config::SyntheticConfig& cfg, const std::string& split);

// The three splits as corpus text.
CorpusText generate_synthetic_corpus(const config::SyntheticConfig& cfg);

// Marks the recall tokens of encoded synthetic text: the value token of every query
// "? kX vY", i.e. position p where ids[p - 2] is "?". `ids` is int64 [N]; the result is bool [N].
// Evaluation averages the loss over these positions to measure long-range recall (best
// achievable 0 nats, ln 64 without access to the statement). Needs a word tokenizer (one
// token per word); anything else is a txl::Error.
torch::Tensor synthetic_recall_mask(const torch::Tensor& ids, const Tokenizer& tokenizer);

}  // namespace txl::data
