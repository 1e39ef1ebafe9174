#include "txl/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <limits>
#include <optional>

#include "txl/config/device.h"
#include "txl/config/load.h"
#include "txl/data/dataset.h"
#include "txl/data/stream.h"
#include "txl/data/synthetic.h"
#include "txl/eval/evaluator.h"
#include "txl/models/checkpoint.h"
#include "txl/models/transformer_lm.h"
#include "txl/train/adam.h"
#include "txl/train/precision.h"
#include "txl/train/schedule.h"
#include "txl/train/state.h"
#include "txl/train/step.h"
#include "txl/util/autocast.h"
#include "txl/util/device.h"
#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/json.h"
#include "txl/util/log.h"

namespace txl::train {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::TrainConfig& t,
                                                        std::vector<torch::Tensor> params) {
  switch (t.optimizer) {
    case config::Optimizer::kAdam:
      return std::make_unique<OnePassAdam>(
          params, torch::optim::AdamOptions(t.lr).weight_decay(t.weight_decay));
    case config::Optimizer::kAdamW:
      return std::make_unique<OnePassAdamW>(
          params, torch::optim::AdamWOptions(t.lr).weight_decay(t.weight_decay));
    case config::Optimizer::kSgd:
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(t.lr).momentum(t.momentum).weight_decay(t.weight_decay));
  }
  // Only a value cast from a number reaches here: the loader takes names from the table alone.
  TXL_FAIL("train.optimizer: '", config::to_string(t.optimizer), "' is not one of ",
           config::enum_choices<config::Optimizer>());
}

namespace {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<std::int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// The whole batch's memory from every rank's rows (rank order = row order), for a checkpoint:
// every tensor of the memory's named form (Memory::to_tensors, what the checkpoint stores, so a
// new kind of memory is gathered with the rest), the key mask always given so that every rank
// sends the same tensors. Sent through the CPU as fp32 and uint8, which every backend carries,
// and returned on the memory's own device and dtypes.
models::Memory gather_memory(dist::Group& group, const models::Memory& mine) {
  if (!group.distributed() || mine.empty()) return mine;
  models::Memory sent = mine;
  if (!sent.layers.empty()) sent.key_mask = sent.mask_or_ones();  // [rows, M]
  std::vector<std::pair<std::string, torch::Tensor>> gathered;
  for (const auto& [name, t] : sent.to_tensors("")) {
    const auto carrier = t.scalar_type() == torch::kBool ? torch::kUInt8 : torch::kFloat;
    gathered.emplace_back(name, group.all_gather_rows(t.to(torch::kCPU, carrier))
                                    .to(t.device(), t.scalar_type()));  // [all rows, ...]
  }
  const auto any = mine.to_tensors("").front().second;  // [rows, n, d]: the first part's
  return models::Memory::from_tensors(gathered, "", static_cast<int64_t>(mine.layers.size()),
                                      any.size(2), any.device(), "the ranks' memory");
}

bool all_finite(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors)
    if (!torch::isfinite(t).all().item<bool>()) return false;
  return true;
}

// Appends one JSON record a line to metrics.jsonl, flushed at once.
class MetricsWriter {
 public:
  explicit MetricsWriter(const stdfs::path& path) : path_(path), out_(path, std::ios::app) {
    TXL_CHECK(out_.good(), "cannot open ", path.string(), " for writing");
  }
  void write(const json::Json& record) {
    out_ << record.dump() << '\n';
    out_.flush();
    TXL_CHECK(out_.good(), "cannot write ", path_.string(), " (disk full?)");
  }

 private:
  stdfs::path path_;
  std::ofstream out_;
};

class Trainer {
 public:
  Trainer(const config::ExperimentConfig& config, const TrainOptions& options);
  TrainSummary run();

 private:
  void build();              // data, model, optimizer, stream
  void resolve_precision();  // run.precision: auto -> fp32 or bf16, before the model is built
  void start();              // run-folder rules, resume, config.yaml and metrics
  void restore_rng(const torch::Tensor& states);
  std::string stop_reason();  // "" = keep going; agreed by every rank
  // What a checkpoint of the current step holds besides weights, optimizer and TrainState.
  struct Snapshot {
    std::string stream_state;
    std::vector<models::Memory> memory;  // this rank's rows, per chunk
    torch::Tensor rng;                   // this rank's generator state, uint8 [S]
  };
  Snapshot snapshot() const;
  void step();                                  // one optimizer step over the global batch
  void check_finite(const StepResult& result);  // throws when the loss or norm is not finite
  double divergence_bound() const;              // train.divergence_factor x ln(vocabulary), or inf
  bool above_bound(double mean_loss) const;     // above divergence_bound()
  void count_divergence(bool above, double mean_loss);  // throws after divergence_patience
  [[noreturn]] void fail_diverged(const std::string& what);
  void log_progress(double lr);
  bool validate();  // true when early stopping triggers
  void save(const stdfs::path& path, const Snapshot& snapshot);
  void save(const stdfs::path& path) { save(path, snapshot()); }
  double elapsed() const;
  void log_start() const;
  void finish(const std::string& reason);  // the last validation and checkpoint, the summary

  config::ExperimentConfig config_;  // the caller's, with run.precision resolved
  const config::TrainConfig& t_;
  TrainOptions options_;
  stdfs::path dir_;
  // The run folder's, held by rank 0 from the start of the run until every file of the trainer
  // is closed (the members after it are destroyed first).
  fs::RunLock lock_;
  std::shared_ptr<dist::Group> group_;
  bool main_rank_ = true;
  dist::RowRange mine_{};
  std::uint64_t rank_seed_ = 0;
  torch::Device device_{torch::kCPU};
  int threads_ = 0;

  data::Dataset dataset_;
  std::int64_t vocab_ = 0;
  models::TransformerLM model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<Step> step_;
  Schedule schedule_;
  std::unique_ptr<data::TrainStream> stream_;
  eval::Settings valid_settings_;
  torch::Tensor recall_mask_;  // synthetic corpus: the recalled values of valid

  TrainState state_;
  std::optional<MetricsWriter> metrics_;
  std::int64_t last_ckpt_step_ = -1;  // step of checkpoint_last (-1 = none)
  bool checkpoint_due_ = false;       // checkpoint_last is written during the next step
  Clock::time_point start_time_ = Clock::now(), interval_start_ = Clock::now();
  double elapsed_before_ = 0.0;
  std::int64_t start_step_ = 0, start_tokens_ = 0;
  TrainSummary summary_;
};

Trainer::Trainer(const config::ExperimentConfig& config, const TrainOptions& options)
    : config_(config),
      t_(config_.train),
      options_(options),
      dir_(run_dir(config)),
      schedule_(config.train, config.run.log_interval) {
  group_ = options.group ? options.group : std::make_shared<dist::Group>();
  main_rank_ = group_->is_main();
  const int rank = group_->rank(), world = group_->world_size();
  TXL_CHECK(t_.batch_size % world == 0, "train.batch_size = ", t_.batch_size,
            " must be divisible by the number of processes (", world, ")");
  mine_ = dist::shard_rows(t_.batch_size, rank, world);
  // Dropout draws differ between ranks, as their rows do; rank 0 keeps the single-process stream.
  rank_seed_ = config.run.seed + 7919 * static_cast<std::uint64_t>(rank);
  threads_ = torch::get_num_threads();  // set by the program (ProcessSetup), for the log line
  device_ = config::resolve_device(config.run.device, group_->env().local_rank);
}

void Trainer::build() {
  torch::manual_seed(config_.run.seed);
  // config -> tokenizer -> cached token ids (rank 0 trains the tokenizer and writes the cache
  // first; the other ranks then read it)
  dataset_ = dist::main_rank_first(*group_, [&] { return data::load_dataset(config_.data); });
  vocab_ = dataset_.tokenizer->vocab_size();
  if (config_.run.precision == config::Precision::kAuto) resolve_precision();
  // -> model and optimizer (every rank starts from rank 0's parameters)
  model_ = models::TransformerLM(config_.model, vocab_);
  model_->to(device_);
  optimizer_ = make_optimizer(t_, model_->parameters());
  for (const auto& p : model_->parameters()) summary_.params += p.numel();
  StepSettings step;
  step.device = device_;
  step.bf16 = config_.run.precision == config::Precision::kBf16;
  step.batch_chunk = t_.batch_chunk;
  step.clip = t_.clip;
  step_ = std::make_unique<Step>(model_, *optimizer_, step, mine_, group_);
  if (group_->rank() > 0) torch::manual_seed(rank_seed_);
  // -> ordered segment stream: every rank follows the same global stream and reads only its own
  // rows out of the mapped corpus.
  auto stream_options = data::train_stream_options(config_, dataset_.tokenizer->pad_id());
  stream_options.read_begin = mine_.begin;
  stream_options.read_end = mine_.end;
  stream_ = std::make_unique<data::TrainStream>(
      dataset_.train.ids, stream_options,
      config_.data.document_mode ? dataset_.train.doc_starts : torch::Tensor());
  valid_settings_ = eval::validation_settings(config_, group_.get());
  if (config_.data.corpus == config::Corpus::kSynthetic)
    recall_mask_ = data::synthetic_recall_mask(dataset_.valid.ids, *dataset_.tokenizer);
}

// run.precision: auto. A resumed run keeps the precision of its config.yaml; a new one measures
// (choose_precision, on rank 0: every rank takes its answer). The probe leaves the generators as
// they were, so a run resolved to fp32 is the run that asked for fp32.
void Trainer::resolve_precision() {
  if (options_.start == StartMode::kResume) {
    const stdfs::path path = dir_ / kConfigFile;
    const auto stored = config::parse_experiment_string(fs::read_file(path), path.string());
    TXL_CHECK(stored.run.precision != config::Precision::kAuto, path.string(),
              " says run.precision: auto; a run stores the precision it chose (fp32 or bf16)");
    config_.run.precision = stored.run.precision;
    log::info("train", "run.precision auto: {}, as {} was trained",
              config::to_string(config_.run.precision), dir_.string());
    return;
  }
  PrecisionChoice choice;
  if (main_rank_) choice = choose_precision(config_, vocab_, device_, mine_.size());
  if (group_->distributed()) {
    std::vector<torch::Tensor> bf16{torch::full(
        {1}, choice.precision == config::Precision::kBf16 ? 1.0 : 0.0, torch::device(device_))};
    group_->broadcast(bf16);
    choice.precision =
        bf16[0].item<double>() > 0.5 ? config::Precision::kBf16 : config::Precision::kFp32;
    if (!main_rank_) choice.reason = config::to_string(choice.precision) + ", as rank 0 measured";
  }
  config_.run.precision = choice.precision;
  log::info("train", "run.precision auto: {}", choice.reason);
}

// Resumable with another number of processes: the stream position and the memory are those of
// the whole batch, re-sharded here; only the dropout streams start afresh.
void Trainer::start() {
  const auto last_path = dir_ / kLastCheckpoint;
  if (options_.start == StartMode::kResume) {
    const ResumePoint point = restore_training(models::read_checkpoint(last_path), config_, model_,
                                               *optimizer_, device_, last_path.string());
    state_ = point.state;
    stream_->restore(data::StreamState::from_string(state_.stream_state));
    if (!point.memory.empty()) {
      TXL_CHECK(point.memory.rows() == t_.batch_size, last_path.string(), " holds memory for ",
                point.memory.rows(), " rows, but train.batch_size is ", t_.batch_size);
      step_->set_memory(point.memory);
    }
    if (point.rng.defined()) restore_rng(point.rng);
    last_ckpt_step_ = state_.step;
  }
  // The start is valid: only now is the run folder changed.
  if (main_rank_) {
    fs::ensure_dir(dir_);
    if (options_.start == StartMode::kOverwrite) clear_run(dir_);
    remove_stale_temporaries(dir_);
    truncate_metrics(dir_ / kMetricsFile, options_.start == StartMode::kResume ? state_.step : -1);
    fs::write_atomic(dir_ / kConfigFile, config::dump_experiment(config_));
    metrics_.emplace(dir_ / kMetricsFile);
  }
  if (options_.start == StartMode::kResume)
    log::info("train", "resumed {} at step {} ({} tokens)", dir_.string(), state_.step,
              state_.tokens);
  if (group_->distributed()) {
    torch::NoGradGuard no_grad;
    auto params = model_->parameters();
    group_->broadcast(params);
  }
  // A new run's first checkpoint holds its initial weights, written once step 1 has shown they
  // give a finite loss: even a run that diverges at once has a good checkpoint to name.
  checkpoint_due_ = options_.start != StartMode::kResume && t_.checkpoint_interval > 0;
  elapsed_before_ = state_.elapsed_seconds;
  start_step_ = state_.step;
  start_tokens_ = state_.tokens;
}

void Trainer::restore_rng(const torch::Tensor& states) {
  const int rank = group_->rank(), world = group_->world_size();
  at::Generator generator = default_generator(device_);
  bool restored = false;
  if (states.size(0) == world) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    try {  // a CPU generator's state does not fit a GPU's and the other way round
      // A tensor of its own, not a row of `states`: LibTorch 2.x's set_state misreads a view
      // that starts inside its storage (rank 1 resumed with other draws; a small program
      // calling it so crashes).
      generator.set_state(states[rank].clone());
      restored = true;
    } catch (const c10::Error&) {
    }
  }
  if (restored) return;
  torch::manual_seed(rank_seed_ + 104729 * static_cast<std::uint64_t>(state_.step));
  if (main_rank_)
    log::warn("train",
              "the checkpoint was written by {} processes on another device kind or "
              "count than this job's {}: memory and data position are restored exactly, dropout "
              "draws start afresh",
              states.size(0), world);
}

double Trainer::elapsed() const {
  return elapsed_before_ + std::chrono::duration<double>(Clock::now() - start_time_).count();
}

// Stop conditions every rank agrees on: steps and tokens are equal everywhere; rank 0's clock
// and any rank's signal are shared by one small all-reduce.
std::string Trainer::stop_reason() {
  const int local = util::stop_signal().load();
  auto control = torch::tensor(  // [3] SIGINT seen, other signal seen, rank 0 out of time
      {local == SIGINT ? 1.0 : 0.0, local != 0 && local != SIGINT ? 1.0 : 0.0,
       main_rank_ && t_.max_minutes > 0 && elapsed() >= t_.max_minutes * 60 ? 1.0 : 0.0},
      torch::kDouble);
  group_->all_reduce(control, dist::Group::Op::kMax);
  const int sig = control[0].item<double>() > 0   ? SIGINT
                  : control[1].item<double>() > 0 ? (local != 0 ? local : SIGTERM)
                                                  : 0;
  const std::string reason =
      schedule_.stop_reason(state_, control[2].item<double>() > 0, sig, options_.pause_at_step);
  if (reason.rfind("signal", 0) == 0) summary_.signal = sig;
  return reason;
}

Trainer::Snapshot Trainer::snapshot() const {
  Snapshot s{stream_->state().to_string(), step_->memory(), {}};
  at::Generator generator = default_generator(device_);
  std::lock_guard<std::mutex> lock(generator.mutex());
  s.rng = generator.get_state();  // uint8 [S], on the CPU
  return s;
}

// A periodic checkpoint of step s is written during step s + 1, once the weights it holds have
// given a finite loss and gradient under the divergence bound: every checkpoint_last written
// while training is good, and a diverging run never names one that is not.
void Trainer::step() {
  std::optional<Snapshot> before;
  if (checkpoint_due_) before = snapshot();
  // An unroll of 1 + train.bptt_segments consecutive batches (one without back-propagation
  // through segments).
  std::vector<data::Batch> unroll;
  for (int s = 0; s <= t_.bptt_segments; ++s) unroll.push_back(stream_->next());
  const StepResult result = step_->backward(unroll);
  check_finite(result);
  const bool above = above_bound(result.mean_loss());
  if (before) {
    checkpoint_due_ = false;
    if (!above) {
      save(dir_ / kLastCheckpoint, *before);
    } else if (main_rank_) {
      log::warn("train",
                "checkpoint of step {} not written: the loss with its weights is above "
                "the divergence bound",
                state_.step);
    }
  }
  count_divergence(above, result.mean_loss());
  const double lr = schedule_.learning_rate(state_);
  step_->update(lr);
  ++state_.step;
  state_.tokens += result.scored;
  state_.interval_loss += result.loss_sum;
  state_.interval_tokens += result.scored;
  if (schedule_.log_due(state_.step)) log_progress(lr);
}

void Trainer::check_finite(const StepResult& result) {
  const std::int64_t at = state_.step + 1;
  const double loss = result.mean_loss();
  if (!std::isfinite(loss)) fail_diverged(fmt::format("the loss is {} at step {}", loss, at));
  if (!std::isfinite(result.grad_norm))
    fail_diverged(fmt::format("the gradient norm is {} at step {} (loss {:.4f})", result.grad_norm,
                              at, loss));
}

double Trainer::divergence_bound() const {
  return t_.divergence_factor > 0 ? t_.divergence_factor * std::log(static_cast<double>(vocab_))
                                  : std::numeric_limits<double>::infinity();
}

bool Trainer::above_bound(double mean_loss) const { return mean_loss > divergence_bound(); }

void Trainer::count_divergence(bool above, double mean_loss) {
  state_.diverging_steps = above ? state_.diverging_steps + 1 : 0;
  if (state_.diverging_steps < t_.divergence_patience) return;
  fail_diverged(fmt::format(
      "the loss has exceeded {:.2f} = {} x ln({}) for the last {} step(s) (at "
      "step {}: {:.4f})",
      t_.divergence_factor * std::log(static_cast<double>(vocab_)), t_.divergence_factor, vocab_,
      state_.diverging_steps, state_.step + 1, mean_loss));
}

// A checkpoint is good when the weights it holds gave a finite loss afterwards: checkpoint_last
// of step s unless the failing step is s + 1 (its loss came from those very weights), and
// checkpoint_best, whose validation loss was finite.
void Trainer::fail_diverged(const std::string& what) {
  const std::int64_t failing = state_.step + 1;
  std::string good = "none: no checkpoint was written before the divergence";
  if (last_ckpt_step_ >= 0 && last_ckpt_step_ + 1 < failing) {
    good = fmt::format("{} (step {})", (dir_ / kLastCheckpoint).string(), last_ckpt_step_);
  } else if (state_.best_step >= 0) {
    good = fmt::format("{} (step {}, valid loss {:.4f})", (dir_ / kBestCheckpoint).string(),
                       state_.best_step, state_.best_valid_loss);
    if (last_ckpt_step_ >= 0)
      good += fmt::format("; {} (step {}) holds the weights that gave this loss", kLastCheckpoint,
                          last_ckpt_step_);
  }
  TXL_FAIL("training diverged: ", what, ". The last good checkpoint is ", good,
           ". Try a lower train.lr, a warm-up (train.warmup_steps) or train.clip, and start "
           "again with --overwrite.");
}

void Trainer::log_progress(double lr) {
  const double secs = std::chrono::duration<double>(Clock::now() - interval_start_).count();
  const double loss = state_.interval_loss / std::max<std::int64_t>(state_.interval_tokens, 1);
  const double tps = secs > 0 ? state_.interval_tokens / secs : 0.0;
  const double eta = schedule_.eta_seconds(state_, start_step_, start_tokens_,
                                           elapsed() - elapsed_before_, elapsed());
  if (metrics_) {
    json::Json r = {{"kind", "train"}, {"step", state_.step}, {"tokens", state_.tokens}};
    json::put_number(r, "loss", loss);
    json::put_number(r, "ppl", std::exp(loss));
    json::put_number(r, "lr", lr);
    json::put_number(r, "tokens_per_s", tps);
    json::put_number(r, "seconds", elapsed());
    metrics_->write(r);
  }
  if (!options_.quiet) {
    log::info("train",
              "step {:>6}{} | {:>7.0f} tok/s | loss {:.4f} | ppl {:>8.2f} | lr {:.3g} | ETA {}",
              state_.step, t_.max_steps > 0 ? fmt::format("/{}", t_.max_steps) : std::string(), tps,
              loss, std::exp(loss), lr, format_duration(eta));
  }
  state_.last_train_loss = loss;
  state_.last_train_step = state_.step;
  state_.interval_loss = 0.0;
  state_.interval_tokens = 0;
  interval_start_ = Clock::now();
}

bool Trainer::validate() {
  eval::Extras extras;
  extras.recall_mask = recall_mask_;
  auto r = eval::evaluate(model_, dataset_.valid, valid_settings_, extras);
  if (config_.data.document_mode) {  // also as training sees the text: documents on their own
    eval::Settings documents = valid_settings_;
    documents.documents = true;
    auto d = eval::evaluate(model_, dataset_.valid, documents);
    log::info("eval", "step {} | valid loss {:.4f} with documents on their own", state_.step,
              d.loss);
  }
  r.split = "valid";
  const Schedule::Validation v = schedule_.record_validation(state_, r.loss, divergence_bound());
  if (v.decayed) log::info("train", "validation stalled: learning rate x{}", t_.decay_rate);
  if (metrics_) {
    json::Json record = {{"kind", "eval"}, {"step", state_.step}};
    record.update(json::Json::parse(eval::to_json(r)));
    metrics_->write(record);
  }
  log::info("eval", "step {} | valid loss {:.4f} | ppl {:.2f} | bpb {:.4f} | {:.0f} tok/s{}{}",
            state_.step, r.loss, r.ppl, r.bits_per_byte, r.tokens_per_s,
            r.recall_tokens > 0 ? fmt::format(" | recall loss {:.3f}", r.recall_loss) : "",
            v.improved ? " | best" : "");
  if (r.loss > divergence_bound()) {
    log::warn("train",
              "step {}: the valid loss {:.4g} is above the divergence bound {:.2f}; these "
              "weights are not kept as {}",
              state_.step, r.loss, divergence_bound(), kBestCheckpoint);
  }
  if (v.improved) save(dir_ / kBestCheckpoint);
  return v.early_stop;
}

// Every rank takes part (the memory and RNG states are gathered); rank 0 writes.
void Trainer::save(const stdfs::path& path, const Snapshot& snapshot) {
  TXL_CHECK(all_finite(model_->parameters()), "training diverged: the weights after step ",
            state_.step, " are not finite; they were not written. The last good checkpoint is ",
            last_ckpt_step_ >= 0 ? (dir_ / kLastCheckpoint).string() : std::string("(none)"),
            ". Try a lower train.lr or train.clip.");
  TrainState state = state_;
  state.elapsed_seconds = elapsed();
  state.stream_state = snapshot.stream_state;
  const models::Memory memory =
      gather_memory(*group_, models::Memory::join_rows(snapshot.memory));  // every row
  const torch::Tensor rng = group_->distributed() ? torch::stack(group_->all_gather(snapshot.rng))
                                                  : snapshot.rng.unsqueeze(0);  // [W, S]
  if (main_rank_) {
    auto checkpoint =
        models::model_checkpoint(config_, model_, *dataset_.tokenizer, dataset_.corpus_fingerprint);
    add_training_state(checkpoint, state, memory, rng, *optimizer_, model_);
    models::write_checkpoint(path, checkpoint);
  }
  if (path.filename() == kLastCheckpoint) last_ckpt_step_ = state_.step;
}

void Trainer::log_start() const {
  log::info("train",
            "{}: {} layers, d_model {}, {} heads of {}, attn {}, {:.2f}M parameters, "
            "vocab {}, {} train tokens, batch {} x {} (mem {}), {}{}{}",
            config_.run.name, config_.model.n_layer, config_.model.d_model, config_.model.n_head,
            config_.model.d_head, config::to_string(config_.model.attn_type), summary_.params / 1e6,
            vocab_, dataset_.train.ids.numel(), t_.batch_size, config_.model.tgt_len,
            config_.model.mem_len,
            device_.is_cuda() ? device_.str() : fmt::format("{} threads", threads_),
            config_.run.precision == config::Precision::kBf16 ? ", bf16 autocast" : "",
            group_->distributed()
                ? fmt::format(", {} processes ({} rows each, gradients in {} buckets)",
                              group_->world_size(), mine_.size(), step_->gradient_buckets())
                : std::string());
}

// A signal or a pause checkpoints where training stands; any other stop validates the final
// weights (unless that was just done) and writes checkpoint_last.
void Trainer::finish(const std::string& reason) {
  if (summary_.signal != 0 || reason == "pause_at_step") {
    save(dir_ / kLastCheckpoint);
    summary_.status = TrainStatus::kInterrupted;
    log::info("train", "stopped ({}) at step {}; checkpoint written to {}", reason, state_.step,
              (dir_ / kLastCheckpoint).string());
  } else {
    if (state_.last_eval_step != state_.step && reason != "early stop") validate();
    if (last_ckpt_step_ != state_.step) save(dir_ / kLastCheckpoint);
    checkpoint_due_ = false;
    log::info("train", "done: {} steps, {} tokens, best valid loss {:.4f} (ppl {:.2f}), stop: {}",
              state_.step, state_.tokens, state_.best_valid_loss, std::exp(state_.best_valid_loss),
              reason);
  }
  summary_.step = state_.step;
  summary_.tokens = state_.tokens;
  summary_.best_valid_loss = state_.best_valid_loss;
  summary_.best_step = state_.best_step;
  summary_.final_train_loss = state_.last_train_step >= 0 ? state_.last_train_loss : std::nan("");
  summary_.final_train_step = state_.last_train_step;
  summary_.seconds = elapsed() - elapsed_before_;
  summary_.total_seconds = elapsed();
  summary_.tokens_per_s = (state_.tokens - start_tokens_) / std::max(summary_.seconds, 1e-9);
  summary_.stop_reason = reason;
  summary_.run_dir = dir_;
}

// The run folder -> data -> model, optimizer, step -> (resume) -> while no stop condition:
// step, validate and checkpoint when due -> the final validation and checkpoint.
TrainSummary Trainer::run() {
  // Rank 0 alone judges the run folder (it writes it), before any work; a refusal stops every rank.
  // Its lock first: --overwrite must not delete the files of a run that another process writes.
  dist::main_rank_first(*group_, [&] {
    if (main_rank_) lock_ = start_run(dir_, options_.start, options_.lock);
  });
  build();
  start();
  log_start();
  model_->train();
  std::string reason;
  while ((reason = stop_reason()).empty()) {
    step();
    if (schedule_.eval_due(state_.step) && validate()) {
      reason = "early stop";
      break;
    }
    if (schedule_.checkpoint_due(state_.step)) checkpoint_due_ = true;
  }
  finish(reason);
  return summary_;
}

}  // namespace

TrainSummary train(const config::ExperimentConfig& config, const TrainOptions& options) {
  Trainer trainer(config, options);
  return trainer.run();
}

}  // namespace txl::train
