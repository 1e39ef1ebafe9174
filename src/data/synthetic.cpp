#include "txl/data/synthetic.h"

#include <numeric>
#include <string_view>

#include "txl/util/error.h"
#include "txl/util/fs.h"
#include "txl/util/random.h"

namespace txl::data {

namespace {

// SplitMix64 (Steele, Lea, Flood 2014) with rejection sampling for bounded draws: unlike
// std::uniform_int_distribution, its output is the same on every standard library.
class Rng : public SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  // Uniform in [0, n).
  int below(int n) {
    const std::uint64_t bound = static_cast<std::uint64_t>(n);
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    std::uint64_t x;
    do x = next();
    while (x >= limit);
    return static_cast<int>(x % bound);
  }
  // Fisher-Yates.
  void shuffle(std::vector<int>* v) {
    for (int i = static_cast<int>(v->size()) - 1; i > 0; --i)
      std::swap((*v)[i], (*v)[below(i + 1)]);
  }
};

}  // namespace

std::vector<SyntheticDocument> generate_synthetic_documents(const config::SyntheticConfig& cfg,
                                                            const std::string& split) {
  TXL_CHECK(cfg.keys >= 1, "data.synthetic.keys must be >= 1, got ", cfg.keys);
  TXL_CHECK(cfg.gap >= 0, "data.synthetic.gap must be >= 0, got ", cfg.gap);
  TXL_CHECK(cfg.alphabet >= 1, "data.synthetic.alphabet must be >= 1, got ", cfg.alphabet);
  TXL_CHECK(cfg.documents >= 1, "data.synthetic.documents must be >= 1, got ", cfg.documents);
  const std::int64_t n_docs =
      split_index(split) == 0 ? cfg.documents : std::max<std::int64_t>(1, cfg.documents / 10);
  // Each split has its own stream: valid is not a prefix of train, whatever the sizes.
  Rng rng(fs::fnv1a(split, fs::fnv1a(std::string_view(reinterpret_cast<const char*>(&cfg.seed),
                                                      sizeof cfg.seed))));
  std::vector<SyntheticDocument> docs(static_cast<size_t>(n_docs));
  std::vector<int> order(static_cast<size_t>(cfg.keys));
  for (auto& doc : docs) {
    doc.values.resize(static_cast<size_t>(cfg.keys));
    for (int& v : doc.values) v = rng.below(kSyntheticValues);

    std::iota(order.begin(), order.end(), 0);
    rng.shuffle(&order);
    std::string line;
    for (int k : order) {
      line += "k" + std::to_string(k) + " = v" + std::to_string(doc.values[k]) + " ;";
      line += ' ';
    }
    line.pop_back();
    doc.lines.push_back(std::move(line));

    for (int done = 0; done < cfg.gap;) {
      int n = std::min(kNoiseWordsPerLine, cfg.gap - done);
      std::string noise;
      for (int w = 0; w < n; ++w) {
        if (w) noise += ' ';
        noise += "n" + std::to_string(rng.below(cfg.alphabet));
      }
      doc.lines.push_back(std::move(noise));
      done += n;
    }

    std::iota(order.begin(), order.end(), 0);
    rng.shuffle(&order);
    doc.query_order = order;
    std::string queries;
    for (int k : order) {
      if (!queries.empty()) queries += ' ';
      queries += "? k" + std::to_string(k) + " v" + std::to_string(doc.values[k]);
    }
    doc.lines.push_back(std::move(queries));
  }
  return docs;
}

CorpusSplit generate_synthetic_split(const config::SyntheticConfig& cfg, const std::string& split) {
  CorpusSplit out;
  for (auto& doc : generate_synthetic_documents(cfg, split)) {
    out.doc_starts.push_back(static_cast<std::int64_t>(out.lines.size()));
    for (auto& line : doc.lines) {
      out.n_bytes += static_cast<std::int64_t>(line.size()) + 1;  // ASCII: bytes = chars
      out.lines.push_back(std::move(line));
    }
  }
  out.n_chars = out.n_bytes;
  return out;
}

CorpusText generate_synthetic_corpus(const config::SyntheticConfig& cfg) {
  CorpusText corpus;
  corpus.name = "synthetic";
  for (const char* name : {"train", "valid", "test"})
    corpus.split(name) = generate_synthetic_split(cfg, name);
  return corpus;
}

torch::Tensor synthetic_recall_mask(const torch::Tensor& ids, const Tokenizer& tokenizer) {
  TXL_CHECK(tokenizer.kind() == "word", "the synthetic recall mask needs data.tokenizer.type ",
            "word (one token per word), got ", tokenizer.kind());
  TORCH_CHECK(ids.dim() == 1 && at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
              "ids must be integers [N]");
  auto question = tokenizer.encode("?");
  TXL_CHECK(question.size() == 1 && question[0] != tokenizer.unk_id(),
            "the tokenizer does not know \"?\": was it built on the synthetic corpus?");
  auto mask = torch::zeros({ids.numel()}, torch::kBool);  // [N]
  if (ids.numel() > 2) {
    // Value at p <=> "?" at p - 2 (the key sits between them).
    mask.narrow(0, 2, ids.numel() - 2).copy_(ids.narrow(0, 0, ids.numel() - 2) == question[0]);
  }
  return mask;
}

}  // namespace txl::data
