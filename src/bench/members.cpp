#include "txl/bench/members.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "txl/models/memory_mechanism.h"
#include "txl/modules/position_scheme.h"
#include "txl/util/error.h"

namespace txl::bench {

namespace {

// A member: its name, the change in words and what it sets (a mechanism's examples have it).
using Member = models::MemoryMechanism::Example;

const std::vector<Member>& members() {
  using config::AttnType;
  static const std::vector<Member> kMembers = [] {
    std::vector<Member> out = {
        {"xl", "attn_type xl", [](auto& c) { c.model.attn_type = AttnType::kXl; }},
        {"rel_no_memory", "attn_type xl, mem_len 0",
         [](auto& c) {
           c.model.attn_type = AttnType::kXl;
           c.model.mem_len = 0;
         }},
        {"xl_bptt1", "attn_type xl, bptt_segments 1",
         [](auto& c) {
           c.model.attn_type = AttnType::kXl;
           c.train.bptt_segments = 1;
         }},
    };
    // Every other position scheme that carries memory, in the registry's order.
    for (const auto* scheme : modules::memory_schemes()) {
      const std::string name(scheme->name());
      const auto type = config::parse_enum<AttnType>(name);
      if (!type || *type == AttnType::kXl) continue;
      out.push_back({name, "attn_type " + name, [t = *type](auto& c) { c.model.attn_type = t; }});
    }
    // The members the memory mechanisms make, in the registry's order.
    for (const auto* mechanism : models::memory_mechanisms()) {
      for (auto& example : mechanism->examples()) out.push_back(std::move(example));
    }
    return out;
  }();
  return kMembers;
}

}  // namespace

std::vector<MemberCost> time_members(const config::ExperimentConfig& config, std::int64_t vocab,
                                     const PhaseOptions& options,
                                     const GenerationOptions& decoding) {
  config::ExperimentConfig base = config;
  base.model.clamp_len = -1;  // rope has no distances to clamp: every member without a clamp
  base.train.bptt_segments = 0;
  if (base.model.mem_len == 0) base.model.mem_len = 128;
  // One untimed phase first: the process's first phase pays for warming the allocator and the
  // caches, which would be charged to the first member.
  (void)measure_training(base, vocab, options);
  std::vector<MemberCost> out;
  for (const Member& m : members()) {
    config::ExperimentConfig c = base;
    m.apply(c);
    const PhaseResult r = measure_training(c, vocab, options);
    MemberCost cost;
    cost.name = m.name;
    cost.change = m.change;
    cost.tokens_per_s = r.tokens_per_s;
    cost.us_per_token = 1e6 / r.tokens_per_s;
    cost.memory_mb = r.peak_rss_mb - r.rss_start_mb;
    cost.state_bytes = models::memory_state_rows(c.model, c.model.mem_len) * c.model.d_model *
                       static_cast<std::int64_t>(sizeof(float));
    cost.tokens_per_step = r.tokens_per_step;
    GenerationOptions g = decoding;
    g.context = c.model.tgt_len;
    g.mem_len = c.model.mem_len;
    g.seed = options.seed;
    g.batch_size = 1;
    cost.decode_b1 = measure_generation(c, vocab, g).tokens_per_s;
    g.batch_size = 16;
    cost.decode_b16 = measure_generation(c, vocab, g).tokens_per_s;
    out.push_back(cost);
  }
  return out;
}

std::string members_table(const std::vector<MemberCost>& members) {
  TXL_CHECK(!members.empty() && members.front().name == "xl", "members_table: xl must come first");
  const MemberCost& xl = members.front();
  std::string out =
      "| member | change | tokens/s | us per token | / xl | training memory MB | / xl | state "
      "bytes per stream | decoding tokens/s, batch 1 | / xl | batch 16 | / xl |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& m : members) {
    out += fmt::format(
        "| {} | {} | {:.0f} | {:.1f} | {:.2f} | {:.0f} | {:.2f} | {} | {:.0f} | {:.2f} | {:.0f} | "
        "{:.2f} |\n",
        m.name, m.change, m.tokens_per_s, m.us_per_token, m.us_per_token / xl.us_per_token,
        m.memory_mb, m.memory_mb / std::max(xl.memory_mb, 1e-9), m.state_bytes, m.decode_b1,
        m.decode_b1 / xl.decode_b1, m.decode_b16, m.decode_b16 / xl.decode_b16);
  }
  return out;
}

std::string members_json(const std::vector<MemberCost>& members) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& m : members) {
    rows.push_back({{"member", m.name},
                    {"change", m.change},
                    {"tokens_per_s", m.tokens_per_s},
                    {"us_per_token", m.us_per_token},
                    {"memory_mb", m.memory_mb},
                    {"state_bytes", m.state_bytes},
                    {"tokens_per_step", m.tokens_per_step},
                    {"decode_tokens_per_s_b1", m.decode_b1},
                    {"decode_tokens_per_s_b16", m.decode_b16}});
  }
  return nlohmann::json{{"members", rows}}.dump();
}

}  // namespace txl::bench
