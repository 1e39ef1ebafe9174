#include "txl/config/effective_eval.h"

namespace txl::config {

namespace {

MemInit eval_mem_init(EvalMemInit eval, MemInit model) {
  switch (eval) {
    case EvalMemInit::kModel:
      return model;
    case EvalMemInit::kZeros:
      return MemInit::kZeros;
    case EvalMemInit::kEmpty:
      break;
  }
  return MemInit::kEmpty;  // also a value cast from a number, which the validator refuses
}

}  // namespace

EffectiveEval effective_eval(const ExperimentConfig& config) {
  const ModelConfig& m = config.model;
  const EvalConfig& e = config.eval;
  EffectiveEval ev;
  ev.mode = e.mode;
  ev.tgt_len = e.tgt_len > 0 ? e.tgt_len : m.tgt_len;
  ev.requested_mem_len = e.mem_len >= 0 ? e.mem_len : m.mem_len;
  ev.mem_len = e.mode == EvalMode::kMemory ? ev.requested_mem_len : 0;
  ev.clamp_len = e.clamp_len >= -1 ? e.clamp_len : m.clamp_len;
  ev.same_length = e.same_length >= 0 ? e.same_length == 1 : m.same_length;
  ev.mem_init = eval_mem_init(e.mem_init, m.mem_init);
  ev.window = e.window > 0 ? e.window : ev.tgt_len;
  return ev;
}

}  // namespace txl::config
