#include "txl/generation/generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include "txl/eval/settings.h"
#include "txl/ops/projection.h"
#include "txl/ops/sampling.h"
#include "txl/util/error.h"
#include "txl/util/random.h"

namespace txl::generation {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_request(const models::TransformerLM& model,
                   const std::vector<std::vector<std::int64_t>>& prompts, const GenerateOptions& o,
                   const data::Tokenizer* tokenizer) {
  TXL_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens = ", o.max_new_tokens,
            " must be >= 0");
  TXL_CHECK(o.temperature >= 0, "generate: temperature = ", o.temperature,
            " must be >= 0 (0 = greedy)");
  TXL_CHECK(o.top_k >= 0, "generate: top_k = ", o.top_k, " must be >= 0 (0 = all tokens)");
  TXL_CHECK(o.top_p > 0 && o.top_p <= 1, "generate: top_p = ", o.top_p,
            " must be in (0, 1] (1 = all tokens)");
  TXL_CHECK(o.batch_size >= 1, "generate: batch_size = ", o.batch_size, " must be >= 1");
  TXL_CHECK(o.stop.empty() || tokenizer != nullptr,
            "generate: stop strings need the tokenizer to read the text");
  for (const auto& s : o.stop) TXL_CHECK(!s.empty(), "generate: a stop string is empty");
  const std::int64_t vocab = model->n_token();
  for (size_t i = 0; i < prompts.size(); ++i) {
    TXL_CHECK(!prompts[i].empty() || !o.context.empty(), "generate: prompt ", i,
              " has no token; give at least one (txl-generate starts every prompt with <eos>)");
    for (auto id : prompts[i]) {
      TXL_CHECK(id >= 0 && id < vocab, "generate: prompt ", i, " holds token id ", id,
                " outside the model's vocabulary [0, ", vocab, ")");
    }
  }
  for (auto id : o.context) {
    TXL_CHECK(id >= 0 && id < vocab, "generate: the context holds token id ", id,
              " outside the model's vocabulary [0, ", vocab, ")");
  }
}

// The next token of every row, int64 [B]: argmax at temperature 0, else a filtered draw.
torch::Tensor choose(const torch::Tensor& log_probs, const GenerateOptions& o,
                     const std::vector<std::int64_t>& prompt_index, std::int64_t step) {
  if (o.temperature == 0) return ops::argmax_rows(log_probs);  // [B]
  auto uniforms = torch::empty({static_cast<std::int64_t>(prompt_index.size())}, torch::kDouble);
  auto* u = uniforms.data_ptr<double>();
  for (size_t b = 0; b < prompt_index.size(); ++b)
    u[b] = draw_uniform(o.seed, prompt_index[b], step);
  auto scores = ops::top_p_filter(ops::top_k_filter(log_probs / o.temperature, o.top_k), o.top_p);
  return ops::draw(scores, uniforms.to(log_probs.device()));  // [B]
}

// The text of a row's tokens after its prompt: the prompt's last line is decoded with them, so
// that a word joins the prompt as the tokenizer joins it.
struct TextOf {
  const data::Tokenizer* tokenizer;
  std::vector<std::int64_t> line;  // the prompt's ids after its last <eos>
  std::string line_text;

  // The row's tokens are `context` then `prompt`.
  TextOf(const data::Tokenizer* t, const std::vector<std::int64_t>& context,
         const std::vector<std::int64_t>& prompt)
      : tokenizer(t) {
    if (tokenizer == nullptr) return;
    auto eos = std::find(prompt.rbegin(), prompt.rend(), tokenizer->eos_id());
    if (eos == prompt.rend()) {
      auto in_context = std::find(context.rbegin(), context.rend(), tokenizer->eos_id());
      line.assign(in_context.base(), context.end());
    }
    line.insert(line.end(), eos.base(), prompt.end());
    line_text = tokenizer->decode(line);
  }
  std::string operator()(const std::vector<std::int64_t>& tokens) const {
    if (tokenizer == nullptr) return {};
    auto ids = line;
    ids.insert(ids.end(), tokens.begin(), tokens.end());
    const std::string all = tokenizer->decode(ids);
    return all.compare(0, line_text.size(), line_text) == 0 ? all.substr(line_text.size())
                                                            : tokenizer->decode(tokens);
  }
};

// The signal that asked generation to stop (GenerateOptions::interrupt), 0 while none did.
int interrupt_signal(const GenerateOptions& o) {
  return o.interrupt != nullptr ? o.interrupt->load() : 0;
}

// Whether `text` ends inside a UTF-8 sequence (a lead byte without all its continuation bytes)
// or with U+FFFD (sentencepiece's byte pieces of a character not complete yet): text that the
// next token may still change.
bool ends_unsettled(const std::string& text) {
  if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return true;
  for (std::size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back;
  }
  return false;
}

// A row's text as its tokens come, for streaming, at a cost per token that does not grow with
// the text: a new token is decoded after at most kContext tokens of its line (so that it joins
// them as the tokenizer joins words), and its text is what it adds to theirs. Text the next
// token may change (a character cut between tokens) waits, up to kMaxPending tokens.
struct StreamText {
  static constexpr std::size_t kContext = 16, kMaxPending = 8;
  const data::Tokenizer* tokenizer;
  std::vector<std::int64_t> context;  // ids before `pending` on the current line
  std::string context_text;           // their text
  std::vector<std::int64_t> pending;  // ids whose text is not settled yet
  std::string text;                   // the settled text so far

  StreamText(const data::Tokenizer* t, const std::vector<std::int64_t>& line) : tokenizer(t) {
    const std::size_t from = line.size() > kContext ? line.size() - kContext : 0;
    context.assign(line.begin() + static_cast<std::ptrdiff_t>(from), line.end());
    if (tokenizer != nullptr) context_text = tokenizer->decode(context);
  }

  void add(std::int64_t id) {
    if (tokenizer == nullptr) return;
    pending.push_back(id);
    const std::string& before = context_text;
    auto ids = context;
    ids.insert(ids.end(), pending.begin(), pending.end());
    const std::string after = tokenizer->decode(ids);
    const bool extends = after.compare(0, before.size(), before) == 0;
    const std::string added = extends ? after.substr(before.size()) : tokenizer->decode(pending);
    if ((!extends || ends_unsettled(added)) && pending.size() < kMaxPending) return;
    text += added;
    if (id == tokenizer->eos_id()) {
      context.clear();  // a new line: decoded on its own, as decode() reads lines
    } else {
      context.insert(context.end(), pending.begin(), pending.end());
      if (context.size() > kContext)
        context.erase(context.begin(), context.end() - static_cast<std::ptrdiff_t>(kContext));
    }
    context_text = tokenizer->decode(context);
    pending.clear();
  }
};

// One row of a batch while it generates.
struct Row {
  std::int64_t index;  // the prompt's
  TextOf text_of;
  StreamText stream;
  Generation out;
  bool done = false;
};

// A row that just stopped: its whole text (the streamed one was for display), its timing, and
// the on_finish callback.
void finish_row(Row& row, const GenerateOptions& o, Clock::time_point start,
                Clock::time_point generating) {
  row.done = true;
  row.out.seconds = seconds_since(start);
  row.out.tokens_per_s = row.out.tokens.size() / std::max(1e-9, seconds_since(generating));
  if (row.out.finish != "stop") {
    auto tokens = row.out.tokens;
    if (row.out.finish == "eos") tokens.pop_back();
    row.out.text = row.text_of(tokens);
  }
  if (o.on_finish) o.on_finish(row.index, row.out);
}

// Appends `token` to the row and decides whether it stops there.
void extend(Row& row, std::int64_t token, double log_prob, const GenerateOptions& o) {
  row.out.tokens.push_back(token);
  row.out.log_prob += log_prob;
  if (token == o.eos_id) {
    row.out.finish = "eos";
  } else if (!o.stop.empty()) {
    const std::string text = row.text_of(row.out.tokens);
    for (const auto& s : o.stop) {
      const auto at = text.find(s);
      if (at == std::string::npos) continue;
      row.out.finish = "stop";
      row.out.text = text.substr(0, at);
      break;
    }
  }
  if (row.out.finish.empty() &&
      static_cast<std::int64_t>(row.out.tokens.size()) >= o.max_new_tokens)
    row.out.finish = "length";
  row.done = !row.out.finish.empty();
}

struct BatchInput {
  torch::Tensor tokens;   // int64 [B, P], left-padded
  torch::Tensor real;     // bool [B, P]
  std::int64_t read = 0;  // real tokens
};

BatchInput left_padded(const std::vector<std::vector<std::int64_t>>& prompts,
                       const std::vector<std::int64_t>& rows) {
  std::int64_t longest = 0;
  for (auto r : rows) longest = std::max<std::int64_t>(longest, prompts[r].size());
  const auto batch = static_cast<std::int64_t>(rows.size());
  BatchInput in;
  in.tokens = torch::zeros({batch, longest}, torch::kLong);  // [B, P]
  in.real = torch::zeros({batch, longest}, torch::kBool);    // [B, P]
  auto t = in.tokens.accessor<std::int64_t, 2>();
  auto m = in.real.accessor<bool, 2>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& p = prompts[rows[b]];
    const auto pad = longest - static_cast<std::int64_t>(p.size());
    for (size_t j = 0; j < p.size(); ++j) {
      t[b][pad + j] = p[j];
      m[b][pad + j] = true;
    }
    in.read += static_cast<std::int64_t>(p.size());
  }
  return in;
}

// A decoder after what it has read (a batch's prompts, or the context alone in one row), and
// the log-probabilities of each row's next token.
struct Started {
  generation::IncrementalDecoder decoder;
  torch::Tensor log_probs;  // [B, V]
};

// Rows `rows` after their prompts: one read of the left-padded batch.
Started read_prompts(const generation::DecoderWeights& weights,
                     const std::vector<std::vector<std::int64_t>>& prompts,
                     const std::vector<std::int64_t>& rows, GenerateResult& result) {
  const auto in = left_padded(prompts, rows);
  generation::IncrementalDecoder decoder(weights, static_cast<std::int64_t>(rows.size()));
  auto log_probs = decoder.read(in.tokens, in.real);  // [B, V]
  result.read_tokens += in.read;
  return {std::move(decoder), log_probs};
}

// Rows `rows` after the primed context and their prompts: each prompt read by a copy of the
// primed decoder (an empty one reads nothing), the copies stacked into one batch.
Started read_after_context(const Started& primed,
                           const std::vector<std::vector<std::int64_t>>& prompts,
                           const std::vector<std::int64_t>& rows, GenerateResult& result) {
  std::vector<generation::IncrementalDecoder> parts;
  std::vector<torch::Tensor> log_probs;  // per row [1, V]
  for (auto r : rows) {
    parts.push_back(primed.decoder.clone());
    const auto& prompt = prompts[static_cast<size_t>(r)];
    if (prompt.empty()) {
      log_probs.push_back(primed.log_probs);
      continue;
    }
    auto ids = torch::tensor(prompt, torch::kLong).view({1, -1});  // [1, P]
    log_probs.push_back(parts.back().read(ids));                   // [1, V]
    result.read_tokens += static_cast<std::int64_t>(prompt.size());
  }
  return {generation::IncrementalDecoder::stack(parts), torch::cat(log_probs, 0)};  // [B, V]
}

// The rows of one batch (prompt indices `rows`), generated to the end; after the context read
// by `primed` when there is one.
void generate_batch(const generation::DecoderWeights& weights, const Started* primed,
                    const std::vector<std::vector<std::int64_t>>& prompts,
                    const std::vector<std::int64_t>& rows, const GenerateOptions& o,
                    const data::Tokenizer* tokenizer, GenerateResult& result) {
  const auto start = Clock::now();
  auto started = primed != nullptr ? read_after_context(*primed, prompts, rows, result)
                                   : read_prompts(weights, prompts, rows, result);
  auto& decoder = started.decoder;
  auto log_probs = started.log_probs;  // [B, V]
  std::vector<Row> state;
  for (auto r : rows) {
    TextOf text_of(tokenizer, o.context, prompts[r]);
    StreamText stream(tokenizer, text_of.line);
    state.push_back({r, std::move(text_of), std::move(stream), {}, false});
  }
  std::vector<size_t> live(rows.size());  // decoder row -> state row
  std::iota(live.begin(), live.end(), 0);
  const auto generating = Clock::now();
  result.read_seconds += std::chrono::duration<double>(generating - start).count();
  for (std::int64_t step = 0;; ++step) {
    if (const int sig = interrupt_signal(o); sig != 0) {
      result.stopped_by = sig;
      for (auto s : live) {
        if (state[s].done) continue;
        state[s].out.finish = "interrupted";
        finish_row(state[s], o, start, generating);
      }
      break;
    }
    std::vector<std::int64_t> index;
    for (auto s : live) index.push_back(state[s].index);
    auto next = choose(log_probs, o, index, step);                                       // [B]
    auto chosen = log_probs.gather(1, next.unsqueeze(1)).squeeze(1).to(torch::kDouble);  // [B]
    const auto next_host = next.to(torch::kCPU).contiguous();
    const auto chosen_host = chosen.to(torch::kCPU).contiguous();
    const auto* next_id = next_host.data_ptr<std::int64_t>();
    const auto* next_log_prob = chosen_host.data_ptr<double>();
    std::vector<std::int64_t> keep;
    for (size_t b = 0; b < live.size(); ++b) {
      Row& row = state[live[b]];
      if (row.done) continue;  // kept in the batch (drop_finished false): ignored
      extend(row, next_id[b], next_log_prob[b], o);
      if (row.done) {
        finish_row(row, o, start, generating);
      } else {
        keep.push_back(static_cast<std::int64_t>(b));
        if (o.on_text) {
          row.stream.add(next_id[b]);
          o.on_text(row.index, row.stream.text);
        }
      }
    }
    if (keep.empty()) break;
    if (o.drop_finished && keep.size() < live.size()) {
      auto kept = torch::tensor(keep, torch::kLong);  // [B']
      decoder.keep_rows(kept);
      next = next.index_select(0, kept.to(next.device()));  // [B']
      std::vector<size_t> still;
      for (auto b : keep) still.push_back(live[b]);
      live = std::move(still);
    }
    log_probs = decoder.read(next.unsqueeze(1));  // [B', V]
  }
  result.generate_seconds += seconds_since(generating);
  for (auto& row : state) {
    result.new_tokens += static_cast<std::int64_t>(row.out.tokens.size());
    result.rows[row.index] = std::move(row.out);
  }
}

// The context read once, by a decoder of one row (memory decoders only).
Started prime(const generation::DecoderWeights& weights, const std::vector<std::int64_t>& context,
              GenerateResult& result) {
  const auto start = Clock::now();
  generation::IncrementalDecoder decoder(weights, 1);
  auto ids = torch::tensor(context, torch::kLong).view({1, -1});  // [1, N]
  auto log_probs = decoder.read(ids);                             // [1, V]
  result.context_once = true;
  result.context_seconds = seconds_since(start);
  return {std::move(decoder), log_probs};
}

// Batches of options.batch_size prompts, in `order`.
void generate_in_batches(const generation::DecoderWeights& weights, const Started* primed,
                         const std::vector<std::vector<std::int64_t>>& prompts,
                         const std::vector<std::int64_t>& order, const GenerateOptions& options,
                         const data::Tokenizer* tokenizer, GenerateResult& result) {
  for (size_t begin = 0; begin < order.size(); begin += options.batch_size) {
    const size_t end = std::min(order.size(), begin + static_cast<size_t>(options.batch_size));
    if (const int sig = interrupt_signal(options); sig != 0) {
      result.stopped_by = sig;  // the prompts not started: interrupted, with nothing generated
      for (size_t i = begin; i < order.size(); ++i) {
        Generation& row = result.rows[order[i]];
        row.finish = "interrupted";
        if (options.on_finish) options.on_finish(order[i], row);
      }
      return;
    }
    generate_batch(weights, primed, prompts, {order.begin() + begin, order.begin() + end}, options,
                   tokenizer, result);
  }
}

}  // namespace

double draw_uniform(std::uint64_t seed, std::int64_t index, std::int64_t step) {
  const std::uint64_t stream = splitmix64(seed + static_cast<std::uint64_t>(index) * kGoldenGamma);
  const std::uint64_t bits = splitmix64(stream + static_cast<std::uint64_t>(step) * kGoldenGamma);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

GenerateResult generate(models::TransformerLM& model,
                        const std::vector<std::vector<std::int64_t>>& prompts,
                        const GenerateOptions& options, const data::Tokenizer* tokenizer) {
  check_request(model, prompts, options, tokenizer);
  model->eval();
  torch::NoGradGuard no_grad;
  ops::ProductThreads product_threads;  // one pool of threads, not two taking turns
  GenerateResult result;
  result.rows.resize(prompts.size());
  result.context_tokens = static_cast<std::int64_t>(options.context.size());
  if (options.max_new_tokens == 0) {
    for (size_t i = 0; i < result.rows.size(); ++i) {
      result.rows[i].finish = "length";
      if (options.on_finish) options.on_finish(static_cast<std::int64_t>(i), result.rows[i]);
    }
    return result;
  }
  // Prompts of similar lengths share a batch (less padding), unless they go in order.
  std::vector<std::int64_t> order(prompts.size());
  std::iota(order.begin(), order.end(), 0);
  if (!options.in_order) {
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return prompts[a].size() < prompts[b].size();
    });
  }
  // The decoders of every batch share one preparation of the weights (packing, encodings).
  const auto start = Clock::now();
  const auto weights = generation::prepare_decoder(model, options.lengths);
  result.read_seconds += seconds_since(start);
  if (!options.context.empty() && weights.sliding) {
    // A sliding window reads only its last tgt_len tokens: the context goes before each prompt.
    GenerateOptions joined = options;
    joined.context.clear();
    auto with_context = prompts;
    for (auto& p : with_context)
      p.insert(p.begin(), options.context.begin(), options.context.end());
    generate_in_batches(weights, nullptr, with_context, order, joined, tokenizer, result);
    if (result.stopped_by == 0) result.stopped_by = interrupt_signal(options);
    return result;
  }
  std::optional<Started> primed;
  if (!options.context.empty()) primed = prime(weights, options.context, result);
  generate_in_batches(weights, primed ? &*primed : nullptr, prompts, order, options, tokenizer,
                      result);
  // A signal during the last step: every row finished, but the program was asked to stop.
  if (result.stopped_by == 0) result.stopped_by = interrupt_signal(options);
  return result;
}

DecodeOptions decode_options(const config::ExperimentConfig& config) {
  config::ExperimentConfig memory = config;
  memory.eval.mode = eval::Mode::kMemory;  // generation reads with memory whatever eval.mode says
  const eval::Settings s = eval::resolve_settings(memory);
  DecodeOptions o;
  o.tgt_len = s.tgt_len;
  o.mem_len = s.mem_len;
  o.clamp_len = s.clamp_len;
  o.same_length = s.same_length;
  o.zero_memory = s.zero_memory;  // eval.mem_init, or the model's
  return o;
}

}  // namespace txl::generation
