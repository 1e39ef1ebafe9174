#pragma once
// The ablation's results: one record per (variant, split, evaluation mode and context), with the
// variant's training figures, as results.json, results.csv and the evaluation caches hold them.
// Its fields are listed once (records.cpp), for JSON out, JSON in and CSV.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "txl/config/enums.h"

namespace txl::eval {
struct EvalResult;
struct Settings;
}  // namespace txl::eval

namespace txl::experiment {

// One evaluation of one trained variant, with that variant's training figures repeated so that
// every row of results.csv stands on its own.
struct ResultRecord {
  // What was evaluated.
  std::string variant;    // ablation variant name, e.g. "xl"
  std::int64_t seed = 0;  // run.seed of the trained model (one replicate of `seeds:`)
  // A point of the context sweep (report "Context sweep", RECL): memory mode with same_length
  // and M = the context, or sliding with L = the context; false for the main evaluations.
  bool sweep = false;
  config::AttnType attn_type = config::AttnType::kXl;      // model.attn_type
  config::EvalMode eval_mode = config::EvalMode::kMemory;  // eval.mode
  std::string split;                                       // valid | test
  int tgt_len = 0;                                         // evaluation segment length Q
  int mem_len = 0;  // evaluation memory length M (memory mode; 0 otherwise)
  int window = 0;   // sliding window L (sliding mode; 0 otherwise)
  int stride = 0;   // sliding stride s (sliding mode; 0 otherwise)
  // Where memory resets: "stream" (the split read as one text, memory carried across documents)
  // or "document" (data.document_mode: every document on its own, memory reset at its start).
  std::string reset = "stream";
  std::int64_t max_tokens = 0;  // what is scored: the split's first max_tokens targets (0 = all)
  // Evaluation figures.
  double loss = 0.0;           // mean negative log-likelihood per scored token, nats
  double ppl = 0.0;            // exp(loss)
  double bits_per_byte = 0.0;  // bits per UTF-8 byte of the original text (0 = not reported)
  double bits_per_char = 0.0;  // bits per character (byte and char corpora; else 0)
  // exp(summed nll / words): word-level perplexity, words counted by data::count_words's rule
  // (data/README.md); 0 = not reported (no word count, or a record of an older version).
  double word_ppl = 0.0;
  std::int64_t words = 0;     // the words of the scored text
  std::int64_t tokens = 0;    // scored tokens
  double tokens_per_s = 0.0;  // scored tokens per second
  double seconds = 0.0;       // evaluation wall time
  // Synthetic recall corpus: mean loss on the recalled values (ln 64 = 4.159 nats is chance,
  // 0 perfect recall) and their count; 0 / 0 on other corpora.
  double recall_loss = 0.0;
  std::int64_t recall_tokens = 0;
  // Mean loss at each position 0..Q-1 of the segment (memory and segments modes without
  // model.ext_len; empty otherwise, and in records of older versions).
  std::vector<double> loss_by_position;
  // Mean loss by position in the document, in buckets of powers of two (eval::
  // loss_by_document_position: 0, 1-2, 3-6, ...), when the corpus marks documents and the
  // evaluation kept per-token losses; empty otherwise.
  std::vector<double> loss_by_document_position;
  // float [tokens] per-token losses in text order (bootstrap intervals, RECL); undefined when not
  // kept. Not in results.json: the ablation caches them in token_losses.safetensors.
  torch::Tensor token_losses;
  // Training figures of the variant.
  int train_tgt_len = 0;            // model.tgt_len
  int train_mem_len = 0;            // model.mem_len
  std::int64_t train_steps = 0;     // optimizer steps done
  std::int64_t train_tokens = 0;    // training tokens seen
  double train_tokens_per_s = 0.0;  // training throughput
  double train_seconds = 0.0;       // training wall time (all invocations)
  std::int64_t params = 0;          // parameter count

  // Evaluation cost: wall seconds per scored token (0 when nothing was scored).
  double seconds_per_token() const;
  // The evaluation context length: mem_len for memory mode, window for sliding, tgt_len for
  // segments (the longest context any scored token sees).
  int context() const;
};

// The evaluation part of a record (what was evaluated, from `settings` through eval::shape_of,
// and the figures of `result`, its split included); the caller adds the variant and the
// training figures.
ResultRecord make_record(const eval::EvalResult& result, const eval::Settings& settings);

// Records as JSON (a list of objects with the fields above) and as CSV (a header line, then one
// line per record: the same fields in the same order, without the lists), and back from JSON
// (for caching evaluations between runs). A record read back whose field is missing (but for
// the optional ones) or of the wrong type is a txl::Error naming `origin` and the field.
std::string to_json(const std::vector<ResultRecord>& records);
std::string to_csv(const std::vector<ResultRecord>& records);
std::vector<ResultRecord> records_from_json(const std::string& text, const std::string& origin);

}  // namespace txl::experiment
