#include "txl/train/state.h"

#include <nlohmann/json.hpp>

#include <set>

#include "txl/config/load.h"
#include "txl/util/compat.h"
#include "txl/util/error.h"
#include "txl/util/json.h"
#include "txl/util/record.h"

namespace txl::train {

namespace {

using Json = nlohmann::json;
using NamedTensors = models::NamedTensors;

constexpr const char* kOptimizerPrefix = "optimizer/";
constexpr const char* kMemoryPrefix = "memory/";
constexpr const char* kRngName = "rng/state";

// The tensors an optimizer keeps per parameter, by name, for the optimizer kinds txl makes.
NamedTensors parameter_state(const torch::optim::OptimizerParamState& s) {
  if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&s)) {
    return {{"step", torch::tensor(static_cast<std::int64_t>(adam->step()))},
            {"exp_avg", adam->exp_avg()},
            {"exp_avg_sq", adam->exp_avg_sq()}};
  }
  if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&s)) {
    return {{"step", torch::tensor(static_cast<std::int64_t>(adamw->step()))},
            {"exp_avg", adamw->exp_avg()},
            {"exp_avg_sq", adamw->exp_avg_sq()}};
  }
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&s)) {
    if (!sgd->momentum_buffer().defined()) return {};
    return {{"momentum_buffer", sgd->momentum_buffer()}};
  }
  TXL_FAIL("cannot save the state of this optimizer (adam, adamw and sgd are supported)");
}

// The optimizer's state entry for one parameter, rebuilt from its named tensors (on the
// parameter's device). `fields` holds the tensors of "optimizer/<name>/<field>".
std::unique_ptr<torch::optim::OptimizerParamState> make_parameter_state(
    config::Optimizer kind, const std::map<std::string, torch::Tensor>& fields,
    const torch::Tensor& param, const std::string& where) {
  auto tensor = [&](const char* field, bool like_param) {
    auto it = fields.find(field);
    TXL_CHECK(it != fields.end(), where, ": no ", field);
    const torch::Tensor& t = it->second;
    if (like_param) {
      TXL_CHECK(t.sizes() == param.sizes() && t.scalar_type() == param.scalar_type(), where, ": ",
                field, " is ", t.scalar_type(), " ", t.sizes(), ", the parameter ",
                param.scalar_type(), " ", param.sizes());
    } else {
      TXL_CHECK(t.dim() == 0 && t.scalar_type() == torch::kLong && t.item<std::int64_t>() >= 0,
                where, ": ", field, " must be a non-negative int64 scalar");
    }
    return t.to(param.device());
  };
  if (kind == config::Optimizer::kAdam || kind == config::Optimizer::kAdamW) {
    TXL_CHECK(fields.size() == 3, where, ": expected step, exp_avg and exp_avg_sq");
    auto fill = [&](auto state) {
      state->step(tensor("step", false).template item<std::int64_t>());
      state->exp_avg(tensor("exp_avg", true));
      state->exp_avg_sq(tensor("exp_avg_sq", true));
      return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
    };
    if (kind == config::Optimizer::kAdam) {
      return fill(std::make_unique<torch::optim::AdamParamState>());
    }
    return fill(std::make_unique<torch::optim::AdamWParamState>());
  }
  TXL_CHECK(kind == config::Optimizer::kSgd && fields.size() == 1, where,
            ": unexpected state for optimizer ", kind);
  auto state = std::make_unique<torch::optim::SGDParamState>();
  state->momentum_buffer(tensor("momentum_buffer", true));
  return state;
}

// Splits "optimizer/<parameter>/<field>" names by parameter.
std::map<std::string, std::map<std::string, torch::Tensor>> optimizer_fields(
    const models::Checkpoint& c, const std::string& origin) {
  std::map<std::string, std::map<std::string, torch::Tensor>> out;
  for (const auto& [name, t] : c.with_prefix(kOptimizerPrefix)) {
    const auto slash = name.rfind('/');
    TXL_CHECK(slash > std::string(kOptimizerPrefix).size(), origin, ": bad optimizer tensor name '",
              name.substr(0, 80), "'");
    out[name.substr(10, slash - 10)][name.substr(slash + 1)] = t;
  }
  return out;
}

void restore_optimizer(const models::Checkpoint& c, config::Optimizer kind,
                       models::TransformerLM& model, torch::optim::Optimizer& optimizer,
                       const std::string& origin) {
  auto fields = optimizer_fields(c, origin);
  auto& state = optimizer.state();
  state.clear();
  for (const auto& item : model->named_parameters()) {
    auto it = fields.find(item.key());
    if (it == fields.end()) continue;  // no state yet (no step taken, or no momentum)
    state[compat::optimizer_state_key(item.value())] = make_parameter_state(
        kind, it->second, item.value(), origin + ": optimizer state of " + item.key());
    fields.erase(it);
  }
  TXL_CHECK(fields.empty(), origin, ": optimizer state for '", fields.begin()->first.substr(0, 80),
            "', which the model does not have");
}

}  // namespace

namespace {

// The training state's fields. The last two are absent from the checkpoints of the first
// training runs of this format (no progress record yet).
template <typename R, typename Visit>
void fields(R& s, Visit&& visit) {
  visit("step", s.step);
  visit("tokens", s.tokens);
  visit("lr_scale", s.lr_scale);
  visit("best_valid_loss", s.best_valid_loss);
  visit("best_step", s.best_step);
  visit("evals_without_gain", s.evals_without_gain);
  visit("plateau_bad_evals", s.plateau_bad_evals);
  visit("diverging_steps", s.diverging_steps);
  visit("stream_state", s.stream_state);
  visit("elapsed_seconds", s.elapsed_seconds);
  visit("last_eval_step", s.last_eval_step);
  visit("interval_loss", s.interval_loss);
  visit("interval_tokens", s.interval_tokens);
  visit("last_train_loss", s.last_train_loss, record::kOptional);
  visit("last_train_step", s.last_train_step, record::kOptional);
}

}  // namespace

std::string TrainState::to_json() const {
  Json j = Json::object();
  fields(*this, record::JsonWriter<Json>(j));
  return j.dump();
}

TrainState TrainState::from_json(const std::string& json, const std::string& origin) {
  TXL_CHECK(!json::nested_deeper_than(json), origin, ": the training state nests deeper than ",
            json::kMaxDepth, " levels");
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  TXL_CHECK(j.is_object(), origin, ": the training state is not a JSON object");
  TrainState s;
  fields(s, record::JsonReader<Json>(j, origin, "training state", "it cannot be resumed"));
  TXL_CHECK(s.step >= 0 && s.tokens >= 0, origin, ": negative step or token count");
  return s;
}

void add_training_state(models::Checkpoint& base, const TrainState& state,
                        const models::Memory& memory, const torch::Tensor& rng,
                        const torch::optim::Optimizer& optimizer,
                        const models::TransformerLM& model) {
  base.train_state = state.to_json();
  for (const auto& [name, t] : memory.to_tensors(kMemoryPrefix))
    base.tensors.emplace_back(name, t.cpu());
  if (rng.defined()) base.tensors.emplace_back(kRngName, rng.cpu());
  const auto& states = optimizer.state();
  for (const auto& item : model->named_parameters()) {
    auto it = states.find(compat::optimizer_state_key(item.value()));
    if (it == states.end()) continue;
    for (const auto& [field, t] : parameter_state(*it->second))
      base.tensors.emplace_back(kOptimizerPrefix + item.key() + "/" + field, t.detach().cpu());
  }
}

ResumePoint restore_training(const models::Checkpoint& checkpoint,
                             const config::ExperimentConfig& requested,
                             models::TransformerLM& model, torch::optim::Optimizer& optimizer,
                             const torch::Device& device, const std::string& origin) {
  TXL_CHECK(!checkpoint.train_state.empty(), origin,
            " holds no training state (a model-only checkpoint); it cannot be resumed");
  const auto conflicts = config::resume_conflicts(checkpoint.config, requested);
  if (!conflicts.empty()) {
    std::string list;
    for (const auto& line : conflicts) list += "\n  " + line;
    TXL_FAIL("cannot resume ", origin, ": these settings differ from the ones it was trained with",
             " (stored -> requested), and a resumed run must keep them:", list,
             "\nRestore them, or start a new run (another run.name, or --overwrite).");
  }
  ResumePoint point;
  point.state = TrainState::from_json(checkpoint.train_state, origin);
  const auto& m = requested.model;
  point.memory = models::Memory::from_tensors(checkpoint.tensors, kMemoryPrefix, m.n_layer,
                                              m.d_model, device, origin);
  if (const torch::Tensor* rng = checkpoint.find(kRngName)) {
    TXL_CHECK(rng->scalar_type() == torch::kUInt8 && rng->dim() == 2, origin,
              ": rng/state must be uint8 [ranks, S]");
    point.rng = *rng;
  }
  models::load_model_tensors(model, checkpoint, origin);  // checks every tensor first
  restore_optimizer(checkpoint, requested.train.optimizer, model, optimizer, origin);
  model->to(device);
  return point;
}

}  // namespace txl::train
