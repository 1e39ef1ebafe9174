#pragma once
// The training step of each member of Transformer-XL's family at one experiment's sizes, side by
// side in one process (txl-bench --members): the experiment's model with only the member's change
// (experiments/memory_family.yaml names the same members), on random token ids, fp32 or bf16 as
// run.precision says. Per member: tokens per second, time per token and training memory (the
// phase's peak resident memory above its start: weights, optimizer state, activations and the
// memory state) relative to Transformer-XL, and the bytes of the recurrent state a stream
// carries between steps; and its decoding (generation::generate, greedy, after a prompt of
// tgt_len tokens) at batch 1 and 16.
//
// Legend: L layers, M memory length, d model width, B streams.

#include <cstdint>
#include <string>
#include <vector>

#include "txl/bench/generation.h"
#include "txl/bench/measure.h"
#include "txl/config/config.h"

namespace txl::bench {

struct MemberCost {
  std::string name;                  // e.g. xl, xl_bptt1, rope
  std::string change;                // what differs from the experiment, e.g. "attn_type rope"
  double tokens_per_s = 0.0;         // training tokens per second (median step)
  double us_per_token = 0.0;         // microseconds per training token
  double memory_mb = 0.0;            // peak resident memory above the phase's start
  std::int64_t state_bytes = 0;      // the recurrent state of one stream: (L (M + N) + m) d numbers
  std::int64_t tokens_per_step = 0;  // B Q times the segments a step reads
  double decode_b1 = 0.0;            // tokens generated per second, batch 1
  double decode_b16 = 0.0;           // the same at batch 16
};

// Every member at the sizes of `config` (its model with mem_len, or 128 where it has none, and
// train.batch_size): xl, rel_no_memory, xl_bptt1, the other schemes that carry memory,
// compressive, rmt, rmt_xl, after one untimed phase of the experiment's own model. Decoding as
// `decoding` says (its batch_size, context and mem_len aside: 1 and 16 rows after tgt_len prompt
// tokens, with the member's memory). Throws txl::Error for a configuration the model rejects.
std::vector<MemberCost> time_members(const config::ExperimentConfig& config, std::int64_t vocab,
                                     const PhaseOptions& options,
                                     const GenerationOptions& decoding);

// A markdown table with each member's ratios to xl, and one JSON object.
std::string members_table(const std::vector<MemberCost>& members);
std::string members_json(const std::vector<MemberCost>& members);

}  // namespace txl::bench
