#pragma once
// Where memory helps (issue 29 item 6): the per-token gain of one model over another on the same
// scored tokens (say rel_no_memory as a, xl as b: gain = loss_a - loss_b > 0 where memory
// helps), grouped three ways, each group with its ppl ratio, a paired bootstrap interval and its
// share of the summed gain; and the three tables as GitHub markdown for the report.
//
//   by distance    to the previous occurrence of the target's id in its document: inside the
//                  segment, only through the memory, beyond what the prediction sees, never
//   by frequency   the target id's rank among the train counts (top 100, 100-999, 1000+)
//   by case        whether the target belongs to a word whose first cased letter is uppercase
//
// Pure functions of tensors and options (no model). How each scored token sits in its segment
// and memory is reproduced from the evaluation's layout (segment_reach): it runs data::EvalStream
// itself over the token offsets (ids 0..N-1), so B parallel streams, warm-up, per-document
// resets and the last, narrow batch are exactly the evaluator's, and follows the model's memory
// rule (models/lm_memory.cpp: the last M columns of concat(memory, segment), padding included,
// emptied on a reset row). The intervals are those of paired_bootstrap_ppl_ratio (statistics.h)
// over a group's tokens in text order: a group's tokens are scattered through the text, so its
// blocks are runs of consecutive group members, not contiguous text; the interval is a guide to
// the group's spread, not the contiguous-block interval of the whole text.
//
// Legend: N tokens of the split, T scored tokens, V vocabulary, D documents, G groups.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "txl/data/dataset.h"
#include "txl/data/tokenizer.h"
#include "txl/eval/settings.h"
#include "txl/eval/statistics.h"

namespace txl::eval {

// --------------------------------------------------------------------- segments and memory

// The layout an evaluation scored the tokens in (memory or segments mode; model.ext_len 0).
struct ReachOptions {
  std::int64_t batch_size = 16;  // B parallel streams (eval.batch_size)
  std::int64_t tgt_len = 128;    // Q (eval.tgt_len, resolved)
  std::int64_t mem_len = 0;      // M positions of memory (EvalResult::mem_len; 0 = none)
  std::int64_t warmup = 0;       // W unscored tokens priming each stream's memory (eval.warmup)
  bool same_length = false;      // every query sees the last M keys only (eval.same_length)
  bool documents = false;        // per-document reset (data.document_mode): else one stream
};

// The options of `settings` (memory or segments mode). mem_len is settings.mem_len in memory
// mode, 0 otherwise: pass EvalResult::mem_len instead when the model carries no memory (absolute
// positions). Throws txl::Error for sliding mode or model.ext_len > 0 (a segment then starts
// with unscored context columns: not modelled).
ReachOptions reach_options(const Settings& settings);

// Where each scored token sits, in text order (by target offset). For the target at offset u,
// predicted from inputs up to u - 1:
//   segment_begin  the offset of its segment's first input: the segment shows it the
//                  u - segment_begin inputs [segment_begin, u) (its position, 1..Q)
//   visible_begin  the earliest offset it attends to directly, memory included: every input in
//                  [visible_begin, u) is a key of its attention. visible_begin < segment_begin
//                  where the memory holds tokens; == segment_begin at a stream's or document's
//                  start, in segments mode and with M = 0
// A previous occurrence at offset p (distance d = u - p) is then in the segment when
// d <= position, in the memory when position < d <= u - visible_begin (M tokens at most),
// beyond them otherwise. "Beyond" is what no attention of the target's own query reaches: it
// includes a repeat within M tokens when the memory was empty (a stream's first segment
// without warm-up, a document's start), and what only deeper layers' memories, a compressive
// memory (model.cmem_len) or memory tokens (model.mem_tokens) carry.
struct SegmentReach {
  torch::Tensor target;         // int64 [T] the target offsets, increasing
  torch::Tensor segment_begin;  // int64 [T]
  torch::Tensor visible_begin;  // int64 [T]
};

// The reach of every scored token of an evaluation of a split of `n_tokens` tokens (after
// scored_prefix) with `doc_starts` (int64 [D] starting with 0, strictly increasing; used only
// when options.documents). T = N - 1 (plain text) or N - D (documents of 2 or more tokens): the
// tokens of EvalResult::token_losses, in the same (text) order in both modes.
// Throws txl::Error for bad lengths or documents (as data::EvalStream does).
SegmentReach segment_reach(std::int64_t n_tokens, const torch::Tensor& doc_starts,
                           const ReachOptions& options);

// --------------------------------------------------------------------- per-token groups

// int64 [N]: the offset of the previous occurrence of ids[u] in u's document, -1 for none.
// ids int64 [N]; doc_starts int64 [D] (first 0, strictly increasing, < N) or undefined (one
// document).
torch::Tensor previous_occurrence(const torch::Tensor& ids, const torch::Tensor& doc_starts);

enum DistanceGroup : std::int64_t {
  kInSegment = 0,     // the previous occurrence is an input of the target's own segment
  kInMemory = 1,      // it is visible only through the memory
  kBeyondMemory = 2,  // it is in the document but not attended to directly
  kFirstInDocument = 3,
};
inline constexpr int kDistanceGroups = 4;
const char* distance_group_name(std::int64_t group);  // "in segment", ...

// int64 [T]: the DistanceGroup of each scored target of `reach` (ids int64 [N], doc_starts as
// for previous_occurrence). Throws txl::Error when reach's targets are not offsets of ids.
torch::Tensor distance_groups(const torch::Tensor& ids, const torch::Tensor& doc_starts,
                              const SegmentReach& reach);

// int64 [V]: each id's rank by its train count, 0 for the most frequent: the number of ids with
// a strictly larger count, so tied ids share a rank (1224 ranking) and a tie across a class
// edge stays in the lower class. counts: int64 [V], >= 0.
torch::Tensor frequency_ranks(const torch::Tensor& train_counts);

// int64 [T]: the class of each id of `targets` (int64 [T]) by its rank: class k holds ranks
// [edges[k-1], edges[k]) (edges strictly increasing, > 0; class 0 from rank 0, the last class
// open). Throws txl::Error for bad edges or an id outside the ranks.
torch::Tensor frequency_groups(const torch::Tensor& targets, const torch::Tensor& ranks,
                               const std::vector<std::int64_t>& edges);

// What a token's own text says about words, per id [V].
struct WordFlags {
  std::vector<std::uint8_t> separator;    // not part of a word: pad, eos, a whitespace byte
  std::vector<std::uint8_t> starts_word;  // begins a word ('▁' piece, every word-tokenizer word)
  std::vector<std::int8_t> first_case;    // its first cased letter: 1 upper, -1 lower, 0 none
};

// The flags of pieces (ids 0..V-1) as sentencepiece writes them: a piece starting with U+2581
// starts a word; the ids in `separators` are none of a word; "<unk>"-like ids given as
// separators or not are the caller's choice. Cased letters: ASCII, Latin-1, Greek and Cyrillic
// (other scripts count as no cased letter).
WordFlags word_flags_of_pieces(const std::vector<std::string>& pieces,
                               const std::vector<std::int64_t>& separators);

// The flags of a tokenizer: sentencepiece by its pieces (pad and eos separators, unk inside a
// word); word: every token starts a word (pad and eos separators, unk a word of no case); byte:
// whitespace bytes (9-13, 32), pad and eos are separators, ASCII letters are cased, other
// bytes are word characters of no case (a multi-byte letter's case is not read).
WordFlags word_flags(const data::Tokenizer& tokenizer);

enum CaseGroup : std::int64_t {
  kCapitalisedWord = 0,  // in a word whose first cased letter is uppercase (names, sentence starts)
  kLowercaseWord = 1,    // in a word whose first cased letter is lowercase
  kNoCase = 2,           // a separator, or a word without a cased letter
};
inline constexpr int kCaseGroups = 3;
const char* case_group_name(std::int64_t group);

// int64 [N]: the CaseGroup of every token of ids (int64 [N]). A word is a run of non-separator
// tokens; a new one starts at a starts_word token, after a separator and at a document start;
// its case is that of its first token with a cased letter, so every token of the word shares it.
torch::Tensor case_groups(const torch::Tensor& ids, const torch::Tensor& doc_starts,
                          const WordFlags& flags);

// --------------------------------------------------------------------- the gain tables

struct GainOptions {
  std::vector<std::int64_t> rank_edges = {100, 1000};  // frequency classes (frequency_groups)
  std::int64_t block = 64;                             // paired_bootstrap_ppl_ratio's settings
  int samples = 1000;
  std::uint64_t seed = 1;
  double confidence = 0.95;
};

struct GainRow {
  std::string group;
  std::int64_t tokens = 0;
  double loss_a = 0.0, loss_b = 0.0;  // mean nats per token (NaN without tokens)
  RatioInterval ratio;                // ppl_a / ppl_b = exp(loss_a - loss_b) (NaN without tokens)
  double gain = 0.0;                  // sum of loss_a - loss_b over the group, nats
  double share = 0.0;                 // gain / the total gain (0 for an empty group, NaN when the
                                      // total is 0); shares sum to 1, may be < 0 or > 1
};

struct GainTable {
  std::string title;  // "by distance to the previous occurrence", ...
  std::vector<GainRow> rows;
};

struct MemoryGain {
  GainRow total;  // every scored token
  GainTable by_distance, by_frequency, by_case;
};

struct GainInputs {
  torch::Tensor loss_a, loss_b;  // float [T] (any floating type), text order
  torch::Tensor ids;             // int64 [N] the split (after scored_prefix)
  torch::Tensor doc_starts;      // int64 [D], or undefined: one document
  SegmentReach reach;            // segment_reach of the evaluation (b's, the one with memory)
  torch::Tensor train_counts;    // int64 [V] count of each id in the train split
  WordFlags words;               // word_flags of the tokenizer, [V] each
};

// Groups and tables. Throws txl::Error for sizes that do not match (T, N, V), a non-finite loss
// or bad options (block, samples, confidence, edges).
MemoryGain memory_gain(const GainInputs& inputs, const GainOptions& options = {});

// memory_gain of two evaluations of `split`: loss_a and loss_b their EvalResult::token_losses,
// b's settings the scored prefix (max_tokens) and the segment and memory layout (reach_options),
// train_counts (int64 [V]) the frequency ranks, words the tokenizer's word_flags.
MemoryGain compare_memory(const torch::Tensor& loss_a, const torch::Tensor& loss_b,
                          const data::EncodedSplit& split, const Settings& settings_b,
                          const torch::Tensor& train_counts, const WordFlags& words,
                          const GainOptions& options = {});

// The three tables as GitHub markdown, one per grouping, the model names in the header.
std::string gain_markdown(const MemoryGain& gain, const std::string& name_a,
                          const std::string& name_b);

}  // namespace txl::eval
