#include "txl/eval/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "txl/util/error.h"

namespace txl::eval {

namespace {

// losses [I, C, T] as doubles on the host, row-major, after the checks.
std::vector<double> checked_table(const torch::Tensor& losses,
                                  const std::vector<std::int64_t>& contexts) {
  TXL_CHECK(losses.defined() && losses.dim() == 3 && losses.is_floating_point(),
            "RECL: losses must be a floating [models, contexts, tokens] table, got ",
            losses.defined() ? losses.sizes() : at::IntArrayRef{});
  TXL_CHECK(losses.size(0) >= 1 && losses.size(2) >= 1,
            "RECL: needs at least one model and one token, got ", losses.sizes());
  TXL_CHECK(losses.size(1) == static_cast<std::int64_t>(contexts.size()), "RECL: ", losses.size(1),
            " context columns but ", contexts.size(), " context lengths");
  for (size_t c = 1; c < contexts.size(); ++c)
    TXL_CHECK(contexts[c] > contexts[c - 1], "RECL: context lengths must increase, got ",
              contexts[c - 1], " then ", contexts[c]);
  const torch::Tensor table =
      losses.detach().to(torch::kCPU, torch::kDouble).contiguous();  // [I, C, T]
  TXL_CHECK(torch::isfinite(table).all().item<bool>(), "RECL: a loss is not finite");
  return std::vector<double>(table.data_ptr<double>(), table.data_ptr<double>() + table.numel());
}

class Group {
 public:
  Group(std::vector<double> table, std::int64_t models, std::int64_t contexts, std::int64_t tokens)
      : table_(std::move(table)), models_(models), contexts_(contexts), tokens_(tokens) {}

  double loss(std::int64_t i, std::int64_t c, std::int64_t t) const {
    return table_[static_cast<size_t>((i * contexts_ + c) * tokens_ + t)];
  }

  // b(c, t) for every t.
  std::vector<double> best(std::int64_t c) const {
    std::vector<double> b(static_cast<size_t>(tokens_));
    for (std::int64_t t = 0; t < tokens_; ++t) {
      double m = loss(0, c, t);
      for (std::int64_t i = 1; i < models_; ++i) m = std::min(m, loss(i, c, t));
      b[static_cast<size_t>(t)] = m;
    }
    return b;
  }

  // T_r(c): the ceil(r T) tokens of largest b, ties earliest first.
  std::vector<std::int64_t> hardest(const std::vector<double>& b, double r) const {
    std::vector<std::int64_t> order(static_cast<size_t>(tokens_));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
      return b[static_cast<size_t>(x)] > b[static_cast<size_t>(y)];
    });
    const auto k = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::ceil(r * static_cast<double>(tokens_) - 1e-9)), 1, tokens_);
    order.resize(static_cast<size_t>(k));
    return order;
  }

  // g_i(c, c + 1) over the tokens `hard` of b = best(c).
  double gain(std::int64_t i, std::int64_t c, const std::vector<double>& b,
              const std::vector<std::int64_t>& hard) const {
    double same = 0.0, next = 0.0;
    for (std::int64_t t : hard) {
      const double bt = b[static_cast<size_t>(t)];
      same += bt;
      next += std::min(bt, loss(i, c + 1, t));
    }
    const double n = static_cast<double>(hard.size());
    return 1.0 - std::exp(next / n - same / n);
  }

 private:
  std::vector<double> table_;
  std::int64_t models_, contexts_, tokens_;
};

}  // namespace

Recl relative_effective_context(const torch::Tensor& losses,
                                const std::vector<std::int64_t>& contexts,
                                const ReclOptions& options) {
  for (double r : options.ratios)
    TXL_CHECK(r > 0.0 && r <= 1.0, "RECL: ratio r = ", r, " must be in (0, 1]");
  TXL_CHECK(options.threshold > 0.0, "RECL: the gain threshold must be > 0, got ",
            options.threshold);
  auto checked = checked_table(losses, contexts);  // before any size is read
  const Group group(std::move(checked), losses.size(0), losses.size(1), losses.size(2));
  const std::int64_t models = losses.size(0), last = losses.size(1) - 1;
  Recl out{options.ratios, contexts, {}};
  out.recl.assign(static_cast<size_t>(models), {});
  for (double r : options.ratios) {
    for (std::int64_t i = 0; i < models; ++i) {
      std::int64_t c = 0;
      while (c < last) {
        const auto b = group.best(c);
        if (group.gain(i, c, b, group.hardest(b, r)) < options.threshold) break;
        ++c;
      }
      out.recl[static_cast<size_t>(i)].push_back(contexts[static_cast<size_t>(c)]);
    }
  }
  return out;
}

namespace {

// The q-quantile of sorted values, linearly interpolated.
double quantile(const std::vector<double>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(at));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (at - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

RatioInterval paired_bootstrap_ppl_ratio(const torch::Tensor& a, const torch::Tensor& b,
                                         std::int64_t block, int samples, std::uint64_t seed,
                                         double confidence) {
  TXL_CHECK(a.defined() && b.defined() && a.dim() == 1 && b.dim() == 1 && a.numel() == b.numel() &&
                a.numel() > 0,
            "paired bootstrap: needs two [N] loss vectors of one size N > 0, got ",
            a.defined() ? a.sizes() : at::IntArrayRef{}, " and ",
            b.defined() ? b.sizes() : at::IntArrayRef{});
  TXL_CHECK(block >= 1 && samples >= 2 && confidence > 0.0 && confidence < 1.0,
            "paired bootstrap: needs block >= 1, samples >= 2 and confidence in (0, 1), got ",
            block, ", ", samples, ", ", confidence);
  const torch::Tensor d =
      (a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble)).contiguous();  // [N]
  TXL_CHECK(torch::isfinite(d).all().item<bool>(), "paired bootstrap: a loss is not finite");
  const std::int64_t n = d.numel(), blocks = (n + block - 1) / block;
  const double* diff = d.data_ptr<double>();
  std::vector<double> sums(static_cast<size_t>(blocks), 0.0),
      sizes(static_cast<size_t>(blocks), 0.0);
  for (std::int64_t t = 0; t < n; ++t) {
    sums[static_cast<size_t>(t / block)] += diff[t];
    sizes[static_cast<size_t>(t / block)] += 1.0;
  }
  RatioInterval r;
  r.ratio = std::exp(std::accumulate(sums.begin(), sums.end(), 0.0) / static_cast<double>(n));
  r.confidence = confidence;
  r.tokens = n;
  r.block = block;
  r.blocks = blocks;
  r.samples = samples;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> pick(0, blocks - 1);
  std::vector<double> ratios(static_cast<size_t>(samples));
  for (auto& ratio : ratios) {
    double sum = 0.0, count = 0.0;
    for (std::int64_t k = 0; k < blocks; ++k) {
      const auto j = static_cast<size_t>(pick(rng));
      sum += sums[j];
      count += sizes[j];
    }
    ratio = std::exp(sum / count);
  }
  std::sort(ratios.begin(), ratios.end());
  r.low = quantile(ratios, (1.0 - confidence) / 2.0);
  r.high = quantile(ratios, (1.0 + confidence) / 2.0);
  return r;
}

std::vector<double> loss_by_document_position(const torch::Tensor& token_losses,
                                              const torch::Tensor& doc_starts, int buckets,
                                              std::vector<std::int64_t>* counts,
                                              bool documents_alone) {
  TXL_CHECK(buckets >= 1, "loss_by_document_position: buckets must be >= 1, got ", buckets);
  TXL_CHECK(token_losses.defined() && token_losses.dim() == 1,
            "loss_by_document_position: token_losses must be [T]");
  TXL_CHECK(doc_starts.defined() && doc_starts.dim() == 1,
            "loss_by_document_position: doc_starts must be [D]");
  const auto losses = token_losses.to(torch::kDouble).contiguous();  // double [T]
  auto starts = doc_starts.to(torch::kLong).contiguous();            // int64 [D]
  // Document mode: document d's first scored target (its offset s_d + 1, position 1) sits at
  // index s_d - d, so with offset' = index + 1 its start moves to s_d - d + 1 and positions
  // count from 1 there.
  if (documents_alone) starts = starts - torch::arange(starts.numel(), torch::kLong) + 1;
  const std::int64_t first_position = documents_alone ? 1 : 0;
  const double* l = losses.data_ptr<double>();
  const std::int64_t* d = starts.data_ptr<std::int64_t>();
  const std::int64_t n_docs = starts.numel();
  std::vector<double> sum(static_cast<size_t>(buckets), 0.0);
  std::vector<std::int64_t> n(static_cast<size_t>(buckets), 0);
  std::int64_t doc = -1;  // index of the last start <= the target's offset
  for (std::int64_t t = 0; t < losses.numel(); ++t) {
    const std::int64_t offset = t + 1;
    while (doc + 1 < n_docs && d[doc + 1] <= offset) ++doc;
    const std::int64_t position = doc >= 0 ? offset - d[doc] + first_position : offset;
    int k = 0;  // bucket: position + 1 in [2^k, 2^(k+1))
    while (k + 1 < buckets && (position + 1) >> (k + 1) != 0) ++k;
    sum[static_cast<size_t>(k)] += l[t];
    ++n[static_cast<size_t>(k)];
  }
  std::vector<double> mean(sum.size());
  for (size_t k = 0; k < sum.size(); ++k) mean[k] = n[k] > 0 ? sum[k] / n[k] : std::nan("");
  if (counts != nullptr) *counts = n;
  return mean;
}

}  // namespace txl::eval
