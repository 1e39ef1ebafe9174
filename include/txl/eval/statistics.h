#pragma once
// How much context a model uses, and whether a difference between two models is real: pure
// functions of per-token losses, for the ablation report (issue 14).
//
//   relative_effective_context   RECL (docs/model.md section 8; the paper's section 4.3, appendix
//   C) paired_bootstrap_ppl_ratio   ppl(a) / ppl(b) on the same tokens, with a paired block
//                                bootstrap interval
//
// Legend: I models of one group, C context lengths of a grid, T scored tokens, N tokens.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace txl::eval {

struct ReclOptions {
  std::vector<double> ratios = {0.1, 0.5, 1.0};  // r: the fraction of hardest tokens, in (0, 1]
  double threshold = 0.01;                       // the least relative gain that extends c
};

struct Recl {
  std::vector<double> ratios;                   // as asked
  std::vector<std::int64_t> contexts;           // the grid
  std::vector<std::vector<std::int64_t>> recl;  // [I][ratios]: a context of the grid, in tokens
};

// RECL of every model of a group. losses: [I, C, T] (any floating type): l_i(c, t), model i's
// loss on token t with contexts[c] tokens of context, the same T tokens at every c.
// contexts: strictly increasing (the step D between neighbours is the grid's; the search moves
// from one grid point to the next).
//
// As docs/model.md section 8 defines it, with c' the next grid point after c:
//   b(c, t)    = min_i l_i(c, t)
//   T_r(c)     = the ceil(r T) tokens with the largest b(c, t) (at least one); equal values are
//                taken in token order, earliest first
//   f_i(c, c') = mean over T_r(c) of min(b(c, t), l_i(c', t))
//   g_i(c, c') = 1 - exp(f_i(c, c') - f_i(c, c))    (f_i(c, c) is the mean of b over T_r(c))
// Starting at contexts[0], c moves to c' while g_i(c, c') >= threshold; RECL_i(r) is where it
// stops (the last grid point at most). Gains count only below the group's best loss, so a model
// does not gain RECL by being bad at short contexts. Throws txl::Error for a bad shape, grid,
// ratio or a non-finite loss.
Recl relative_effective_context(const torch::Tensor& losses,
                                const std::vector<std::int64_t>& contexts,
                                const ReclOptions& options = {});

struct RatioInterval {
  double ratio = 1.0;            // ppl(a) / ppl(b) = exp(mean(a) - mean(b))
  double low = 1.0, high = 1.0;  // the bootstrap interval of the ratio
  double confidence = 0.95;
  std::int64_t tokens = 0, block = 0, blocks = 0;
  int samples = 0;

  // The interval excludes 1: the difference is not explained by which tokens were drawn.
  bool significant() const { return low > 1.0 || high < 1.0; }
};

// a, b: [N] per-token losses of two models on the same tokens, in text order. Tokens are not
// independent (a hard passage is hard for both models and for many tokens), so the bootstrap
// resamples blocks: the N tokens are cut into ceil(N / block) contiguous blocks (the last may be
// shorter); each of `samples` resamples draws that many blocks with replacement, the same ones
// for a and b, and takes exp(mean(a) - mean(b)) over the drawn tokens. The interval is the
// (1 - confidence) / 2 and (1 + confidence) / 2 quantiles of the resampled ratios (linear
// interpolation). Deterministic for a seed. Throws txl::Error for different sizes, no token,
// block < 1, samples < 2, confidence outside (0, 1) or a non-finite loss.
RatioInterval paired_bootstrap_ppl_ratio(const torch::Tensor& a, const torch::Tensor& b,
                                         std::int64_t block = 64, int samples = 1000,
                                         std::uint64_t seed = 1, double confidence = 0.95);

// Mean loss by position within the document: how much a model gains as a document goes on. The
// positions are grouped in powers of two, bucket k holding positions [2^k - 1, 2^(k+1) - 1): 0,
// 1-2, 3-6, 7-14, ..., the last bucket open (`buckets` of them). token_losses: [T] (any floating
// type), the loss of target t + 1 at index t (EvalResult::token_losses); doc_starts: int64 [D]
// token offsets where documents start (data::EncodedSplit), sorted; a target at offset p sits at
// position p - (the last start <= p). Returns [buckets] means (NaN where no token fell) and
// `counts` the tokens of each. documents_alone: the losses of a document-mode evaluation, which
// leave out every document's first token (EvalResult::token_losses), so document d's targets
// sit d places earlier. Throws txl::Error for a bad shape or buckets < 1.
std::vector<double> loss_by_document_position(const torch::Tensor& token_losses,
                                              const torch::Tensor& doc_starts, int buckets,
                                              std::vector<std::int64_t>* counts = nullptr,
                                              bool documents_alone = false);

}  // namespace txl::eval
