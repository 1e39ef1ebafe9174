#pragma once
// Text from a trained model: prompts (token ids) in, continuations out, decoded together in
// batches through generation::IncrementalDecoder (memory or sliding window, see incremental.h).
//
// Prompts of different lengths are left-padded into one batch; padding is never attended to and
// never scored, and every row's segments start at its own first token, so a prompt gives in a
// batch what it gives alone (greedy: the same tokens; sampling draws are per prompt too). A
// row that stops (<eos>, a stop string, max_new_tokens) leaves the batch and costs nothing more.
//
// Sampling: the log-probabilities are divided by the temperature, filtered to the top k and to
// the top p of probability mass (ops/sampling.h), and one token is drawn per row by inverse CDF
// from a uniform that is a function of (seed, the prompt's index, the step) alone (SplitMix64):
// the same seed gives the same text on every machine, whatever the batch. Temperature 0 is
// greedy (argmax), with no draw.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "txl/config/config.h"
#include "txl/data/tokenizer.h"
#include "txl/generation/incremental.h"
#include "txl/models/transformer_lm.h"

namespace txl::generation {

struct Generation {
  std::vector<std::int64_t> tokens;  // the generated ids, a stopping <eos> included
  std::string text;           // their text after the prompt's (with a tokenizer), cut before a stop
                              // string, without a stopping <eos>
  double log_prob = 0.0;      // sum over the tokens of log p(token | context) under the model
                              // (temperature 1, no filter): the text's own likelihood
  std::string finish;         // "eos", "stop" (a stop string), "length" (max_new_tokens) or
                              // "interrupted" (GenerateOptions::interrupt)
  double seconds = 0.0;       // from the start of its batch (reading included) to its last token
  double tokens_per_s = 0.0;  // tokens / the time spent generating them (reading excluded)
};

struct GenerateOptions {
  std::int64_t max_new_tokens = 100;  // tokens generated per prompt at most; 0 = none
  double temperature = 1.0;           // 0 = greedy (argmax); else divides the log-probabilities
  std::int64_t top_k = 0;             // draw among the k most probable tokens; 0 = all
  double top_p = 1.0;                 // draw among the smallest set of mass >= p; 1 = all
  std::uint64_t seed = 1;             // the draws: a function of (seed, prompt index, step)
  std::int64_t eos_id = -1;           // a row stops after generating this id; -1 = never
  std::vector<std::string> stop;      // a row stops once its text holds one (needs a tokenizer)
  std::int64_t batch_size = 16;       // prompts decoded together
  bool drop_finished = true;          // a stopped row leaves the batch (false: it is still
                                      // computed, and its outputs ignored; for measurement)
  generation::DecodeOptions lengths;  // segments, memory, clamp_len, same_length
  // Token ids every row reads before its prompt (a book, say), read once for all prompts with
  // memory: each prompt then reads on from a copy of that memory, and may be empty. A sliding
  // window reads only its last tgt_len tokens: there it goes before each prompt.
  std::vector<std::int64_t> context;
  // Streaming (optional), called from generate's thread. on_text: after each token a row takes
  // and does not stop at, with the row's settled text so far (what later tokens cannot change:
  // a character cut between two tokens waits for its last byte). on_finish: once per prompt,
  // with its whole Generation, as the row stops (rows finish in any order). Either may throw
  // (e.g. a write to a full disk): generation then ends with that exception.
  std::function<void(std::int64_t prompt, const std::string& text_so_far)> on_text;
  std::function<void(std::int64_t prompt, const Generation& finished)> on_finish;
  // Read before every step (e.g. &util::stop_signal()): once it holds a signal number, every row
  // ends with finish "interrupted", those in progress with what they have generated.
  const std::atomic<int>* interrupt = nullptr;
  // Batches take the prompts in their order (more padding), so that the first prompts are
  // generated first: for text streamed in the prompts' order. Otherwise prompts of similar
  // lengths share a batch. Either way a prompt gives what it gives alone.
  bool in_order = false;
};

struct GenerateResult {
  std::vector<Generation> rows;     // one per prompt, in the prompts' order
  std::int64_t read_tokens = 0;     // prompt tokens read (padding excluded)
  double read_seconds = 0.0;        // time spent reading them
  std::int64_t context_tokens = 0;  // options.context's tokens
  bool context_once = false;        // read once with memory (false: a sliding window, where
                                    // they count in read_tokens and read_seconds)
  double context_seconds = 0.0;     // time spent reading them once
  std::int64_t new_tokens = 0;      // tokens generated
  double generate_seconds = 0.0;    // time spent generating them (reading excluded)
  int stopped_by = 0;               // the signal GenerateOptions::interrupt held (0: it never did)
};

// Continues every prompt (token ids of the model's vocabulary, at least one each unless there
// is a context: options.context, then the prompt, is what a row reads) with `model`
// (set to evaluation mode; its device and dtype). `tokenizer` (optional) gives the texts and is
// needed for stop strings. Throws txl::Error for an empty prompt, an id outside the vocabulary
// or an option out of range (temperature < 0, top_k < 0, top_p outside (0, 1],
// max_new_tokens < 0, batch_size < 1, stop strings without a tokenizer), and for lengths the
// decoder refuses.
GenerateResult generate(models::TransformerLM& model,
                        const std::vector<std::vector<std::int64_t>>& prompts,
                        const GenerateOptions& options, const data::Tokenizer* tokenizer = nullptr);

// The uniform in [0, 1) of draw `step` of prompt `index` under `seed` (53 bits of SplitMix64).
double draw_uniform(std::uint64_t seed, std::int64_t index, std::int64_t step);

// The decoding lengths of an experiment: eval.tgt_len, eval.mem_len (memory mode), clamp_len and
// same_length as evaluation resolves them.
DecodeOptions decode_options(const config::ExperimentConfig& config);

}  // namespace txl::generation
