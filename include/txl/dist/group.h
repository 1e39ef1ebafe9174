#pragma once
// Data-parallel training on PyTorch's own distributed engine (c10d): a process group joined
// through a TCPStore rendezvous, Gloo for CPU tensors. A Group of one process needs no
// rendezvous and every collective is the identity, so callers never branch on the world size.
//
// Every failure of a collective (a rank that died, was stopped, or stalled past the timeout)
// becomes a txl::Error naming this rank and the operation, instead of a hang.

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "txl/dist/launch.h"
#include "txl/util/error.h"

namespace txl::dist {

// Whether this build has c10d with Gloo (TXL_WITH_GLOO): without it only a world of 1 runs.
bool gloo_available();
// Whether this build has c10d's NCCL process group (CUDA LibTorch, TXL_WITH_NCCL).
bool nccl_available();

class Group {
 public:
  // A single process.
  Group();
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Joins the job described by `env`: rank 0 serves a TCPStore at master_addr:master_port (or
  // torchrun's agent does), the others connect, then every rank builds a Gloo process group
  // over it, and with `cuda` an NCCL one for GPU tensors when the build has NCCL (else GPU
  // tensors go through Gloo via the CPU). `timeout` bounds the rendezvous and every later
  // collective. A world of 1 returns a single-process Group.
  static std::shared_ptr<Group> create(const LaunchEnv& env, std::chrono::milliseconds timeout,
                                       bool cuda = false);

  const LaunchEnv& env() const { return env_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_main() const { return rank_ == 0; }
  bool distributed() const { return world_size_ > 1; }

  enum class Op { kSum, kMax };

  // In place: every tensor becomes the reduction over the ranks (contiguous, same shapes and
  // dtypes on every rank; CPU or GPU).
  void all_reduce(std::vector<torch::Tensor>& tensors, Op op = Op::kSum);
  void all_reduce(torch::Tensor& tensor, Op op = Op::kSum);

  // In place: every rank receives root's values.
  void broadcast(std::vector<torch::Tensor>& tensors, int root = 0);

  // Every rank's `tensor` (same shape and dtype everywhere), in rank order.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);

  // Every rank's `tensor` concatenated along dim 0 in rank order; dim 0 may differ between ranks,
  // the other dimensions and the dtype may not.
  torch::Tensor all_gather_rows(const torch::Tensor& tensor);

  void barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  LaunchEnv env_;
  int rank_ = 0;
  int world_size_ = 1;
};

// Runs `fn` on rank 0 first and on the other ranks after it: rank 0 builds what the others then
// read (a tokenizer, an encoded cache). The ranks wait on one all-reduced flag instead of a plain
// barrier, so that when rank 0's `fn` throws the others learn it at once and stop with an error
// that points to rank 0's (instead of waiting out the timeout, or building the same files
// themselves); rank 0 rethrows its own error.
template <class Fn>
auto main_rank_first(Group& group, Fn&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  if constexpr (std::is_void_v<Result>) {
    main_rank_first(group, [&fn] {
      fn();
      return true;
    });
  } else {
    auto rank0_failed = [&group](bool failed) {
      torch::Tensor flag = torch::full({1}, failed ? 1.0f : 0.0f);  // [1]
      group.all_reduce(flag, Group::Op::kMax);
      return flag.item<float>() > 0.0f;
    };
    if (!group.is_main()) {
      if (rank0_failed(false)) {
        throw Error("rank 0 failed while preparing the data for every rank (its error says why)");
      }
      return fn();
    }
    std::optional<Result> result;
    std::exception_ptr failed;
    try {
      result.emplace(fn());
    } catch (...) {
      failed = std::current_exception();
    }
    rank0_failed(failed != nullptr);
    if (failed) std::rethrow_exception(failed);
    return std::move(*result);
  }
}

// Rows [begin, end) of a global batch of `rows` that `rank` of `world` owns: contiguous, in rank
// order, sizes differing by at most one (the first rows % world ranks take one more).
struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
};
RowRange shard_rows(std::int64_t rows, int rank, int world);

// Sums the gradients of `params` over the ranks before an optimizer step, in buckets of about
// `bucket_bytes` (one flat buffer and one collective each). Each rank's loss must already be
// divided by the *global* number of scored tokens, so that the sum is exactly the gradient of
// the global batch's mean loss, however the padding falls between ranks. A gradient that no
// rank produced stays undefined (the optimizer skips it, as in one process); one that only some
// ranks produced counts as zero on the others.
class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<Group> group, std::vector<torch::Tensor> params,
                  std::int64_t bucket_bytes = 25 << 20);
  void reduce();
  std::size_t buckets() const { return buckets_.size(); }

 private:
  std::shared_ptr<Group> group_;
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<std::size_t>> buckets_;  // indices into params_, per dtype
};

}  // namespace txl::dist
