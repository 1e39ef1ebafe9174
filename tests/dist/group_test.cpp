// Collectives, gradient buckets and sharded evaluation with real process groups: each rank is a
// thread of this process with its own TCPStore client and Gloo context.
#include "txl/dist/group.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/eval/evaluator.h"
#include "txl/util/error.h"

namespace {

using txl::dist::Group;
using txl::test::run_ranks;
using txl::test::tensor_near;

TEST(Group, AllReduceSumsAndMaxes) {
  if (!txl::dist::gloo_available()) GTEST_SKIP() << "built without c10d Gloo";
  for (int world : {2, 3}) {
    run_ranks(world, [&](Group& g) {
      EXPECT_TRUE(g.distributed());
      EXPECT_EQ(g.world_size(), world);
      auto a = torch::full({3}, static_cast<double>(g.rank() + 1), torch::kDouble);
      auto b = torch::tensor({static_cast<std::int64_t>(10 * g.rank())});
      std::vector<torch::Tensor> both{a, b};
      g.all_reduce(both);
      const double sum = world * (world + 1) / 2.0;
      EXPECT_TRUE(txl::test::tensor_equal(a, torch::full({3}, sum, torch::kDouble)));
      EXPECT_EQ(b.item<std::int64_t>(), 10 * world * (world - 1) / 2);
      auto m = torch::tensor({static_cast<float>(g.rank()), -static_cast<float>(g.rank())});
      g.all_reduce(m, Group::Op::kMax);
      EXPECT_TRUE(txl::test::tensor_equal(m, torch::tensor({world - 1.f, 0.f})));
    });
  }
}

TEST(Group, BroadcastAndGatherRowsOfDifferentCounts) {
  if (!txl::dist::gloo_available()) GTEST_SKIP() << "built without c10d Gloo";
  run_ranks(3, [](Group& g) {
    auto t = torch::full({2, 2}, static_cast<float>(g.rank()));
    std::vector<torch::Tensor> one{t};
    g.broadcast(one, /*root=*/2);
    EXPECT_TRUE(txl::test::tensor_equal(t, torch::full({2, 2}, 2.f)));
    // rank r contributes r rows [r, 100 + r]: 0 + 1 + 2 rows in rank order
    auto rows = torch::stack({torch::full({g.rank()}, static_cast<float>(g.rank())),
                              torch::full({g.rank()}, 100.f + g.rank())},
                             1);  // [r, 2]
    auto all = g.all_gather_rows(rows);
    EXPECT_TRUE(
        txl::test::tensor_equal(all, torch::tensor({{1.f, 101.f}, {2.f, 102.f}, {2.f, 102.f}})));
    g.barrier();
  });
}

TEST(GradientReducer, ShardedLossesSumToTheWholeBatchGradient) {
  if (!txl::dist::gloo_available()) GTEST_SKIP() << "built without c10d Gloo";
  // loss = sum over the batch's rows of ||x W^T + b||^2 / N (N the whole batch's rows); a third
  // parameter is used by rank 0 only, a fourth by nobody.
  torch::manual_seed(7);
  const auto w0 = torch::randn({5, 4}), b0 = torch::randn({5}), u0 = torch::randn({4});
  const auto x = torch::randn({6, 4});
  auto loss_of = [&](const torch::Tensor& xs, const std::vector<torch::Tensor>& p, bool use_u) {
    auto y = torch::addmm(p[1], xs, p[0].t());  // [rows, 5]
    auto loss = y.pow(2).sum() / 6.0;
    if (use_u) loss = loss + (xs.matmul(p[2])).sum() / 6.0;
    return loss;
  };
  auto params = [&] {
    return std::vector<torch::Tensor>{w0.clone().requires_grad_(), b0.clone().requires_grad_(),
                                      u0.clone().requires_grad_(),
                                      torch::zeros({3}).requires_grad_()};
  };
  auto reference = params();
  loss_of(x, reference, false).backward();
  auto with_u = params();
  loss_of(x.narrow(0, 0, 3), with_u, true).backward();  // rank 0's rows use u

  std::mutex lock;
  run_ranks(2, [&](Group& g) {
    auto p = params();
    auto range = txl::dist::shard_rows(6, g.rank(), 2);
    loss_of(x.narrow(0, range.begin, range.size()), p, g.rank() == 0).backward();
    // The reducer holds a shared_ptr; wrap this thread's group without owning it.
    txl::dist::GradientReducer reducer(std::shared_ptr<Group>(&g, [](Group*) {}), p,
                                       /*bucket_bytes=*/64);  // several buckets
    EXPECT_GT(reducer.buckets(), 1u);
    reducer.reduce();
    std::lock_guard<std::mutex> guard(lock);
    EXPECT_TRUE(tensor_near(p[0].grad(), reference[0].grad(), 1e-6, 1e-6)) << "rank " << g.rank();
    EXPECT_TRUE(tensor_near(p[1].grad(), reference[1].grad(), 1e-6, 1e-6)) << "rank " << g.rank();
    ASSERT_TRUE(p[2].grad().defined()) << "rank " << g.rank();  // taken as zero on rank 1
    EXPECT_TRUE(tensor_near(p[2].grad(), with_u[2].grad(), 1e-6, 1e-6)) << "rank " << g.rank();
    EXPECT_FALSE(p[3].grad().defined()) << "no rank produced it: the optimizer must skip it";
  });
}

// Rank 0 runs first, the others after it; when rank 0 fails, the others stop at once with an
// error pointing to rank 0's (not left at the barrier, not building the data themselves), and
// rank 0 rethrows its own error.
TEST(MainRankFirst, RankZeroRunsFirstAndAFailureReleasesTheOthers) {
  if (!txl::dist::gloo_available()) GTEST_SKIP() << "built without c10d Gloo";
  std::atomic<int> order{0};
  std::vector<int> seen(3, -1);
  run_ranks(3, [&](Group& g) {
    const int got = txl::dist::main_rank_first(g, [&] { return order.fetch_add(1); });
    seen[static_cast<size_t>(g.rank())] = got;
  });
  EXPECT_EQ(seen[0], 0) << "rank 0 went first";
  EXPECT_GE(seen[1], 1);
  EXPECT_GE(seen[2], 1);

  std::atomic<int> others_ran{0};
  std::vector<std::string> errors(2);
  run_ranks(2, [&](Group& g) {
    try {
      txl::dist::main_rank_first(g, [&] {
        if (g.is_main()) throw txl::Error("no corpus at /nowhere");
        others_ran += 1;
      });
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(g.rank())] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("no corpus at /nowhere"), std::string::npos) << errors[0];
  EXPECT_EQ(others_ran.load(), 0) << "the other ranks do not build the data themselves";
  EXPECT_NE(errors[1].find("rank 0 failed"), std::string::npos) << errors[1];
}

TEST(ShardedEvaluation, EveryModeGivesTheSingleProcessResult) {
  if (!txl::dist::gloo_available()) GTEST_SKIP() << "built without c10d Gloo";
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(3);
  txl::models::TransformerLM reference(config.model, 50);
  auto ids = torch::randint(50, {333}, torch::kInt64);
  auto recall = torch::rand({333}) < 0.2;
  std::vector<txl::models::TransformerLM> copies;  // one model per rank, the same weights
  for (int r = 0; r < 3; ++r) {
    torch::manual_seed(3);
    copies.emplace_back(config.model, 50);
  }
  using Mode = txl::eval::Mode;
  for (const Mode mode : {Mode::kMemory, Mode::kSegments, Mode::kSliding}) {
    txl::eval::Settings o;
    o.mode = mode;
    o.tgt_len = 16;
    o.mem_len = mode == Mode::kMemory ? 16 : 0;
    o.window = 16;
    o.stride = 4;
    o.batch_size = 5;  // 5 rows over 3 ranks: 2, 2, 1; sliding: 16 batches, 6, 5, 5
    txl::data::EncodedSplit text;
    text.ids = ids;
    text.n_bytes = 1000;
    txl::eval::Extras extras;
    extras.token_losses = true;
    extras.recall_mask = recall;
    auto want = txl::eval::evaluate(reference, text, o, extras);
    const torch::Tensor want_losses = want.token_losses;
    std::mutex lock;
    run_ranks(3, [&](Group& g) {
      auto options = o;
      options.group = &g;
      auto got = txl::eval::evaluate(copies[static_cast<size_t>(g.rank())], text, options, extras);
      const torch::Tensor losses = got.token_losses;
      std::lock_guard<std::mutex> guard(lock);
      EXPECT_EQ(got.tokens, want.tokens) << mode << " rank " << g.rank();
      EXPECT_NEAR(got.loss, want.loss, 1e-6) << mode << " rank " << g.rank();
      EXPECT_NEAR(got.bits_per_byte, want.bits_per_byte, 1e-6) << mode;
      EXPECT_TRUE(tensor_near(losses, want_losses, 1e-5, 1e-5)) << mode << " rank " << g.rank();
      EXPECT_GT(got.recall_tokens, 0);
      EXPECT_EQ(got.recall_tokens, want.recall_tokens);
      EXPECT_NEAR(got.recall_loss, want.recall_loss, 1e-6) << mode;
    });
  }
}

TEST(ShardedEvaluation, EveryRankScoresItsOwnRowsAndEveryRankGetsTheSum) {
  if (!txl::dist::gloo_available()) GTEST_SKIP() << "built without c10d Gloo";
  // Rank 1's model differs from rank 0's. The 256 targets lie in 4 streams of 64, rows 0-1 on
  // rank 0 and rows 2-3 on rank 1, so the reduced loss is the mean of model 0's losses on the
  // first half of the text and model 1's on the second. If ranks scored everything themselves,
  // rank 0 would get model 0's loss alone; if they did not reduce, they would disagree.
  txl::test::TempDir dir;
  auto config = txl::test::tiny_experiment(dir.path());
  torch::manual_seed(11);
  auto ids = torch::randint(50, {257}, torch::kInt64);
  std::vector<txl::models::TransformerLM> models;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(3);
    models.emplace_back(config.model, 50);
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& p : models[1]->parameters()) p.add_(0.3 * torch::randn_like(p));
  }
  txl::eval::Settings o;
  o.tgt_len = 16;
  o.mem_len = 16;
  o.batch_size = 4;
  txl::data::EncodedSplit text;
  text.ids = ids;
  txl::eval::Extras extras;
  extras.token_losses = true;
  const auto alone0 = txl::eval::evaluate(models[0], text, o, extras);
  const auto alone1 = txl::eval::evaluate(models[1], text, o, extras);
  ASSERT_EQ(alone0.token_losses.size(0), 256);
  const double want =
      (alone0.token_losses.slice(0, 0, 128).to(torch::kDouble).sum().item<double>() +
       alone1.token_losses.slice(0, 128).to(torch::kDouble).sum().item<double>()) /
      256.0;
  std::vector<double> got(2);
  run_ranks(2, [&](Group& g) {
    auto options = o;
    options.group = &g;
    got[static_cast<size_t>(g.rank())] =
        txl::eval::evaluate(models[static_cast<size_t>(g.rank())], text, options).loss;
  });
  EXPECT_EQ(got[0], got[1]);
  EXPECT_NEAR(got[0], want, 1e-5);
  // The control: the halves' mean is far from either model's own loss.
  EXPECT_GT(std::abs(want - alone0.loss), 1e-2);
  EXPECT_GT(std::abs(want - alone1.loss), 1e-2);
}

}  // namespace
