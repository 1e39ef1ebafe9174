#include "txl/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/data/stream.h"
#include "txl/data/synthetic.h"
#include "txl/eval/evaluator.h"
#include "txl/models/transformer_lm.h"
#include "txl/models/checkpoint.h"
#include "txl/train/schedule.h"
#include "txl/util/autocast.h"
#include "txl/util/device.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/log.h"
#include "txl/util/openmp.h"

namespace txl::train {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int>& stop_signal() {
  static std::atomic<int> signal{0};
  return signal;
}

void install_stop_handlers() {
  // The first signal asks for a checkpoint after the step in flight; a second one (a user's
  // second Ctrl-C, a launcher's escalation) ends the process at once.
  auto handler = [](int sig) {
    if (stop_signal().exchange(sig) != 0) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
  };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
}

stdfs::path run_dir(const config::ExperimentConfig& config) {
  return config.run.output_dir.empty() ? stdfs::path("runs") / config.run.name
                                       : stdfs::path(config.run.output_dir);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::TrainConfig& t,
                                                        std::vector<torch::Tensor> params) {
  if (t.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(t.lr).weight_decay(t.weight_decay));
  }
  if (t.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(t.lr).weight_decay(t.weight_decay));
  }
  if (t.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(t.lr).momentum(t.momentum).weight_decay(t.weight_decay));
  }
  TXL_FAIL("train.optimizer: '", t.optimizer, "' is not one of adam | adamw | sgd");
}

namespace {

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<std::int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// Memory pieces (gradient-accumulation chunks, ranks) of consecutive rows joined into one:
// layers [rows, M, d], key mask bool [rows, M] (defined when any piece has one).
models::Memory join_rows(const std::vector<models::Memory>& pieces) {
  models::Memory out;
  if (pieces.empty() || pieces.front().empty()) return out;
  bool any_mask = false;
  for (const auto& p : pieces) any_mask = any_mask || p.key_mask.defined();
  for (size_t l = 0; l < pieces.front().layers.size(); ++l) {
    std::vector<torch::Tensor> rows;
    for (const auto& p : pieces) rows.push_back(p.layers.at(l));
    out.layers.push_back(torch::cat(rows, 0));
  }
  if (any_mask) {
    std::vector<torch::Tensor> masks;
    for (const auto& p : pieces)
      masks.push_back(p.key_mask.defined()
                          ? p.key_mask
                          : torch::ones({p.layers.front().size(0), p.length()},
                                        torch::dtype(torch::kBool).device(p.layers.front().device())));
    out.key_mask = torch::cat(masks, 0);
  }
  return out;
}

// Rows [begin, begin + count) of a memory.
models::Memory narrow_rows(const models::Memory& memory, std::int64_t begin, std::int64_t count) {
  models::Memory out;
  for (const auto& t : memory.layers) out.layers.push_back(t.narrow(0, begin, count));
  if (memory.key_mask.defined()) out.key_mask = memory.key_mask.narrow(0, begin, count);
  return out;
}

// Checkpoints hold the memory of the whole batch (every rank's rows, every chunk) as groups:
// the number of layer tensors, the layers, the key mask. Checkpoints of older versions held
// one group per chunk; concatenated in order they are the same rows.
std::vector<torch::Tensor> flatten_memory(const models::Memory& m) {
  std::vector<torch::Tensor> flat;
  flat.push_back(torch::tensor(static_cast<std::int64_t>(m.layers.size())));
  for (const auto& t : m.layers) flat.push_back(t);
  flat.push_back(m.key_mask.defined() ? m.key_mask : torch::zeros({0}, torch::kBool));
  return flat;
}

models::Memory unflatten_memory(const std::vector<torch::Tensor>& flat) {
  std::vector<models::Memory> groups;
  size_t i = 0;
  while (i < flat.size()) {
    models::Memory g;
    auto n = flat[i++].item<std::int64_t>();
    for (std::int64_t l = 0; l < n; ++l) g.layers.push_back(flat.at(i++));
    auto mask = flat.at(i++);
    if (n > 0 && mask.numel() > 0) g.key_mask = mask;
    if (n > 0) groups.push_back(std::move(g));
  }
  return join_rows(groups);
}

// The whole batch's memory from every rank's rows (rank order = row order), for a checkpoint.
// Sent through the CPU as fp32 and uint8, which every backend carries, and returned on the
// memory's own device and dtypes.
models::Memory gather_memory(dist::Group& group, const models::Memory& mine) {
  if (!group.distributed() || mine.empty()) return mine;
  models::Memory out;
  for (const auto& t : mine.layers)
    out.layers.push_back(group.all_gather_rows(t.to(torch::kCPU, torch::kFloat)).to(t.device(), t.scalar_type()));
  auto mask = mine.key_mask.defined()
                  ? mine.key_mask
                  : torch::ones({mine.layers.front().size(0), mine.length()},
                                torch::dtype(torch::kBool).device(mine.layers.front().device()));
  out.key_mask = group.all_gather_rows(mask.to(torch::kCPU, torch::kUInt8)).to(mask.device(), torch::kBool);
  return out;
}

// metrics.jsonl keeps one JSON object per line; on resume, the records after the checkpoint's
// step are dropped so the file continues exactly as an uninterrupted run's would.
void truncate_metrics(const stdfs::path& path, std::int64_t step) {
  if (!stdfs::exists(path)) return;
  std::istringstream in(fs::read_file(path));
  std::string kept, line;
  while (std::getline(in, line)) {
    auto pos = line.find("\"step\":");
    if (pos == std::string::npos) continue;
    if (std::stoll(line.substr(pos + 7)) <= step) kept += line + "\n";
  }
  fs::write_atomic(path, kept);
}

class MetricsWriter {
 public:
  explicit MetricsWriter(const stdfs::path& path) : out_(path, std::ios::app) {
    TXL_CHECK(out_.good(), "cannot open ", path.string(), " for writing");
  }
  void write(const std::string& line) {
    out_ << line << '\n';
    out_.flush();
    TXL_CHECK(out_.good(), "cannot write metrics (disk full?)");
  }

 private:
  std::ofstream out_;
};

}  // namespace

TrainSummary train(const config::ExperimentConfig& config, const TrainOptions& options) {
  const auto& t = config.train;
  const auto& m = config.model;
  const auto dir = run_dir(config);
  fs::ensure_dir(dir);
  const auto last_path = dir / "checkpoint_last.pt";
  const auto best_path = dir / "checkpoint_best.pt";
  const auto metrics_path = dir / "metrics.jsonl";

  // Data parallel: rank r trains rows `mine` of every global batch; rank 0 writes the files.
  const auto group = options.group ? options.group : std::make_shared<dist::Group>();
  const int rank = group->rank(), world = group->world_size();
  const bool main_rank = group->is_main();
  TXL_CHECK(t.batch_size % world == 0, "train.batch_size = ", t.batch_size,
            " must be divisible by the number of processes (", world, ")");
  const dist::RowRange mine = dist::shard_rows(t.batch_size, rank, world);
  TXL_CHECK(mine.size() % t.batch_chunk == 0, "train.batch_chunk = ", t.batch_chunk,
            " must divide the rows of each process (train.batch_size / processes = ", mine.size(), ")");
  const std::int64_t chunk_rows = mine.size() / t.batch_chunk;

  // Threads: all cores by default, shared among the processes of one node.
  const int threads = use_threads(config.run.threads, group->env().local_world_size);
  torch::manual_seed(config.run.seed);
  const torch::Device device = resolve_device(config.run.device, group->env().local_rank);
  const bool bf16 = config.run.precision == "bf16";

  // config -> tokenizer -> cached token ids (rank 0 trains the tokenizer and writes the cache
  // first; the other ranks then read it)
  data::Dataset dataset = dist::main_rank_first(*group, [&] { return data::load_dataset(config.data); });
  const std::int64_t vocab = dataset.tokenizer->vocab_size();

  // -> model and optimizer (every rank starts from rank 0's parameters)
  models::TransformerLM model(m, vocab);
  model->to(device);
  auto optimizer = make_optimizer(t, model->parameters());
  std::int64_t n_params = 0;
  for (const auto& p : model->parameters()) n_params += p.numel();
  dist::GradientReducer reducer(group, model->parameters());
  // Dropout draws differ between ranks, as their rows do; rank 0 keeps the single-process stream.
  const std::uint64_t rank_seed = config.run.seed + 7919 * static_cast<std::uint64_t>(rank);
  if (rank > 0) torch::manual_seed(rank_seed);

  // -> ordered segment stream
  // Every rank reads the same global stream and keeps its own rows.
  data::TrainStream stream(dataset.train.ids,
                           data::train_stream_options(config, dataset.tokenizer->pad_id()),
                           config.data.document_mode ? dataset.train.doc_starts : torch::Tensor());

  models::TrainState state;
  std::vector<models::Memory> memory(static_cast<size_t>(t.batch_chunk));  // this rank's, per chunk
  // Resumable with another number of processes: the stream position and the memory are those of
  // the whole batch, re-sharded here; only the dropout streams start afresh.
  if (options.resume && stdfs::exists(last_path)) {
    state = models::load_train_state(last_path, model, *optimizer, device);
    stream.restore(data::StreamState::from_string(state.stream_state));
    const models::Memory all = unflatten_memory(state.memory);
    if (!all.empty()) {
      TXL_CHECK(all.layers.front().size(0) == t.batch_size, "checkpoint ", last_path.string(),
                " holds memory for ", all.layers.front().size(0), " rows, but train.batch_size is ",
                t.batch_size, "; resume with the batch size it was trained with");
      for (std::int64_t c = 0; c < t.batch_chunk; ++c)
        memory[static_cast<size_t>(c)] = narrow_rows(all, mine.begin + c * chunk_rows, chunk_rows);
    }
    if (state.rng_state.defined()) {
      const auto states = state.rng_state.dim() == 2 ? state.rng_state : state.rng_state.unsqueeze(0);
      at::Generator generator = default_generator(device);
      const auto own_state = states.size(0) == world ? states[rank].contiguous() : torch::Tensor();
      bool restored = false;
      if (own_state.defined()) {
        std::lock_guard<std::mutex> lock(generator.mutex());
        try {  // a CPU generator's state does not fit a GPU's and the other way round
          generator.set_state(own_state);
          restored = true;
        } catch (const c10::Error&) {
        }
      }
      if (!restored) {
        torch::manual_seed(rank_seed + 104729 * static_cast<std::uint64_t>(state.step));
        if (main_rank)
          log::warn("train", "the checkpoint was written by {} processes on another device kind "
                    "or count than this job's {}: memory and data position are restored exactly, "
                    "dropout draws start afresh", states.size(0), world);
      }
    }
    if (main_rank) truncate_metrics(metrics_path, state.step);
    log::info("train", "resumed {} at step {} ({} tokens)", dir.string(), state.step, state.tokens);
  } else if (main_rank && stdfs::exists(metrics_path)) {
    stdfs::remove(metrics_path);
  }
  if (group->distributed()) {
    torch::NoGradGuard no_grad;
    auto params = model->parameters();
    group->broadcast(params);
  }
  std::optional<MetricsWriter> metrics;
  if (main_rank) {
    fs::write_atomic(dir / "config.yaml", config::dump_experiment(config));
    metrics.emplace(metrics_path);
  }
  auto record = [&](const std::string& line) {
    if (metrics) metrics->write(line);
  };

  log::info("train", "{}: {} layers, d_model {}, {} heads of {}, attn {}, {:.2f}M parameters, "
            "vocab {}, {} train tokens, batch {} x {} (mem {}), {}{}{}",
            config.run.name, m.n_layer, m.d_model, m.n_head, m.d_head, m.attn_type,
            n_params / 1e6, vocab, dataset.train.ids.numel(), t.batch_size, m.tgt_len,
            m.mem_len, device.is_cuda() ? device.str() : fmt::format("{} threads", threads),
            bf16 ? ", bf16 autocast" : "",
            group->distributed()
                ? fmt::format(", {} processes ({} rows each, gradients in {} buckets)", world,
                              mine.size(), reducer.buckets())
                : std::string());

  const models::Context context = models::Context::from_config(m);
  eval::EvalOptions valid_options = eval::resolve_eval_options(config);
  if (t.eval_max_tokens > 0) valid_options.max_tokens = t.eval_max_tokens;
  if (valid_options.mode == "sliding") valid_options.mode = "segments";  // periodic eval stays cheap
  valid_options.group = group.get();

  // Every rank takes part (the memory and RNG states are gathered); rank 0 writes.
  auto save = [&](const stdfs::path& path) {
    state.stream_state = stream.state().to_string();
    state.memory = flatten_memory(gather_memory(*group, join_rows(memory)));
    torch::Tensor rng;
    {
      at::Generator generator = default_generator(device);
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng = generator.get_state();  // uint8 [S], on the CPU
    }
    state.rng_state = group->distributed() ? torch::stack(group->all_gather(rng)) : rng;  // [W, S]
    if (main_rank) models::save_checkpoint(path, config, vocab, model, optimizer.get(), &state);
  };

  TrainSummary summary;
  summary.run_dir = dir;
  const auto start = Clock::now();
  const double elapsed_before = state.elapsed_seconds;
  auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(Clock::now() - start).count();
  };
  const std::int64_t start_step = state.step, start_tokens = state.tokens;
  double& interval_loss = state.interval_loss;
  std::int64_t& interval_tokens = state.interval_tokens;
  auto interval_start = Clock::now();
  std::int64_t& last_eval_step = state.last_eval_step;
  std::int64_t last_ckpt_step = state.step;

  // On the synthetic corpus, validation also reports the loss on the recalled values.
  torch::Tensor recall_mask;
  if (config.data.corpus == "synthetic")
    recall_mask = data::synthetic_recall_mask(dataset.valid.ids, *dataset.tokenizer);

  auto run_eval = [&]() -> bool {  // returns true when early stopping triggers
    auto r = eval::evaluate(model, dataset.valid.ids, valid_options, dataset.valid.n_bytes,
                            dataset.valid.n_chars, nullptr, recall_mask);
    if (config.data.document_mode) {
      // Also as training sees the text: documents on their own.
      auto d = eval::evaluate(model, dataset.valid.ids, valid_options, 0, 0, nullptr, {},
                              dataset.valid.doc_starts);
      log::info("eval", "step {} | valid loss {:.4f} with documents on their own", state.step, d.loss);
    }
    r.split = "valid";
    last_eval_step = state.step;
    const bool improved = state.best_valid_loss == 0.0 || r.loss < state.best_valid_loss;
    if (improved) {
      state.best_valid_loss = r.loss;
      state.evals_without_gain = 0;
    } else {
      ++state.evals_without_gain;
    }
    if (t.schedule == "plateau") {
      if (improved) {
        state.plateau_bad_evals = 0;
      } else if (++state.plateau_bad_evals > t.plateau_patience) {
        state.lr_scale *= t.decay_rate;
        state.plateau_bad_evals = 0;
        log::info("train", "validation stalled: learning rate x{}", t.decay_rate);
      }
    }
    record(fmt::format("{{\"kind\":\"eval\",\"step\":{},{}", state.step, eval::to_json(r).substr(1)));
    log::info("eval", "step {} | valid loss {:.4f} | ppl {:.2f} | bpb {:.4f} | {:.0f} tok/s{}{}",
              state.step, r.loss, r.ppl, r.bits_per_byte, r.tokens_per_s,
              r.recall_tokens > 0 ? fmt::format(" | recall loss {:.3f}", r.recall_loss) : "",
              improved ? " | best" : "");
    if (improved) save(best_path);
    return t.patience > 0 && state.evals_without_gain >= t.patience;
  };

  model->train();
  std::string stop_reason;
  while (true) {
    // Stop conditions every rank agrees on: steps and tokens are equal everywhere; rank 0's
    // clock and any rank's signal are shared by one small all-reduce.
    const int local_signal = stop_signal().load();
    auto control = torch::tensor(  // [3] SIGINT seen, other signal seen, rank 0 out of time
        {local_signal == SIGINT ? 1.0 : 0.0, local_signal != 0 && local_signal != SIGINT ? 1.0 : 0.0,
         main_rank && t.max_minutes > 0 && elapsed() >= t.max_minutes * 60 ? 1.0 : 0.0},
        torch::kDouble);
    group->all_reduce(control, dist::Group::Op::kMax);
    const int sig = control[0].item<double>() > 0 ? SIGINT
                    : control[1].item<double>() > 0 ? (local_signal != 0 ? local_signal : SIGTERM)
                                                    : 0;
    if (t.max_steps > 0 && state.step >= t.max_steps) { stop_reason = "max_steps"; break; }
    if (t.max_tokens > 0 && state.tokens >= t.max_tokens) { stop_reason = "max_tokens"; break; }
    if (control[2].item<double>() > 0) { stop_reason = "max_minutes"; break; }
    if (sig != 0 || (options.pause_at_step > 0 && state.step >= options.pause_at_step)) {
      state.elapsed_seconds = elapsed();
      save(last_path);
      summary.status = TrainStatus::kInterrupted;
      summary.signal = sig;
      stop_reason = sig != 0 ? fmt::format("signal {}", sig) : std::string("pause_at_step");
      log::info("train", "stopped ({}) at step {}; checkpoint written to {}", stop_reason,
                state.step, last_path.string());
      break;
    }

    const data::Batch global = stream.next();
    const data::Batch batch = global.narrow_rows(mine.begin, mine.size()).to(device);
    const double lr = learning_rate(t, state.step + 1, state.lr_scale);
    set_learning_rate(*optimizer, lr);
    // Gradients are reset rather than zero-filled (LibTorch 1.13's zero_grad fills): the first
    // backward then writes them without a read-modify-write.
    for (auto& p : model->parameters()) p.mutable_grad().reset();
    double batch_loss = 0.0;
    for (std::int64_t c = 0; c < t.batch_chunk; ++c) {
      auto rows = [&](const torch::Tensor& x) { return x.narrow(0, c * chunk_rows, chunk_rows); };
      auto& mem = memory[static_cast<size_t>(c)];
      torch::Tensor nll_sum;
      {
        AutocastGuard autocast(bf16, device);
        auto out = model->forward(rows(batch.tokens), rows(batch.targets), rows(batch.input_mask),
                                  mem, rows(batch.reset), context);
        nll_sum = out.nll.to(torch::kFloat).masked_fill(rows(batch.target_mask).logical_not(), 0.0).sum();
        mem = std::move(out.memory);
      }
      // The loss is the mean over every scored token of the whole (global) batch, whatever the
      // chunking and sharding: the ranks' gradients then sum to exactly its gradient.
      (nll_sum / static_cast<double>(std::max<std::int64_t>(global.n_scored, 1))).backward();
      batch_loss += nll_sum.item<double>();
    }
    if (group->distributed()) {
      auto total = torch::tensor({batch_loss}, torch::kDouble);  // [1]
      group->all_reduce(total);
      batch_loss = total.item<double>();
      reducer.reduce();
    }
    if (!std::isfinite(batch_loss)) {
      TXL_FAIL("loss is ", batch_loss, " at step ", state.step + 1,
               "; training stopped. The last good checkpoint is ",
               stdfs::exists(last_path) ? last_path.string() : std::string("(none yet)"),
               ". Try a lower train.lr or train.clip.");
    }
    if (t.clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), t.clip);
    optimizer->step();
    ++state.step;
    state.tokens += global.n_scored;
    interval_loss += batch_loss;
    interval_tokens += global.n_scored;

    if (state.step % config.run.log_interval == 0 || state.step == t.max_steps) {
      const double secs = std::chrono::duration<double>(Clock::now() - interval_start).count();
      const double loss = interval_loss / std::max<std::int64_t>(interval_tokens, 1);
      const double tps = secs > 0 ? interval_tokens / secs : 0.0;
      const double run_tps = (state.tokens - start_tokens) / std::max(elapsed() - elapsed_before, 1e-9);
      double eta = -1;
      if (t.max_steps > 0) eta = (t.max_steps - state.step) * (elapsed() - elapsed_before) / std::max<std::int64_t>(state.step - start_step, 1);
      if (t.max_tokens > 0) eta = (t.max_tokens - state.tokens) / std::max(run_tps, 1e-9);
      if (t.max_minutes > 0) eta = std::min(eta < 0 ? 1e18 : eta, t.max_minutes * 60 - elapsed());
      record(fmt::format(
          "{{\"kind\":\"train\",\"step\":{},\"loss\":{:.6f},\"ppl\":{:.4f},\"lr\":{:.6g},"
          "\"tokens\":{},\"tokens_per_s\":{:.1f},\"seconds\":{:.3f}}}",
          state.step, loss, std::exp(loss), lr, state.tokens, tps, elapsed()));
      if (!options.quiet) {
        log::info("train", "step {:>6}{} | {:>7.0f} tok/s | loss {:.4f} | ppl {:>8.2f} | lr {:.3g} | ETA {}",
                  state.step, t.max_steps > 0 ? fmt::format("/{}", t.max_steps) : std::string(),
                  tps, loss, std::exp(loss), lr, format_duration(eta));
      }
      interval_loss = 0.0;
      interval_tokens = 0;
      interval_start = Clock::now();
    }
    if (t.eval_interval > 0 && state.step % t.eval_interval == 0) {
      if (run_eval()) {
        stop_reason = "early stop";
        break;
      }
    }
    if (t.checkpoint_interval > 0 && state.step % t.checkpoint_interval == 0) {
      state.elapsed_seconds = elapsed();
      save(last_path);
      last_ckpt_step = state.step;
    }
  }

  if (summary.status == TrainStatus::kCompleted) {
    if (last_eval_step != state.step && stop_reason != "early stop") run_eval();
    state.elapsed_seconds = elapsed();
    if (last_ckpt_step != state.step || !stdfs::exists(last_path)) save(last_path);
    log::info("train", "done: {} steps, {} tokens, best valid loss {:.4f} (ppl {:.2f}), stop: {}",
              state.step, state.tokens, state.best_valid_loss, std::exp(state.best_valid_loss),
              stop_reason);
  }
  summary.step = state.step;
  summary.tokens = state.tokens;
  summary.best_valid_loss = state.best_valid_loss;
  summary.seconds = elapsed() - elapsed_before;
  summary.tokens_per_s = (state.tokens - start_tokens) / std::max(summary.seconds, 1e-9);
  summary.stop_reason = stop_reason;
  return summary;
}

}  // namespace txl::train
