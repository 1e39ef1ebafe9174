#include "txl/dist/group.h"

#include <algorithm>

#include "txl/util/error.h"
#include "txl/util/log.h"

#ifdef TXL_WITH_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // ProcessGroupGloo.hpp is empty without it
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef TXL_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace txl::dist {

bool gloo_available() {
#ifdef TXL_WITH_GLOO
  return true;
#else
  return false;
#endif
}

bool nccl_available() {
#ifdef TXL_WITH_NCCL
  return true;
#else
  return false;
#endif
}

struct Group::Impl {
#ifdef TXL_WITH_GLOO
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;  // CPU tensors (and GPU ones without NCCL)
#endif
#ifdef TXL_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // GPU tensors
#endif
  std::chrono::milliseconds timeout{0};

  bool has_nccl() const {
#ifdef TXL_WITH_NCCL
    return nccl.defined();
#else
    return false;
#endif
  }

  // Runs a collective on `t` with the backend for its device: NCCL for GPU tensors when there
  // is one, else Gloo (GPU tensors staged through the CPU).
  template <typename F>
  void on_backend(torch::Tensor& t, F&& collective) {
#ifdef TXL_WITH_NCCL
    if (t.is_cuda() && has_nccl()) {
      collective(*nccl, t);
      return;
    }
#endif
#ifdef TXL_WITH_GLOO
    if (t.is_cuda()) {
      auto staged = t.to(torch::kCPU);
      collective(*pg, staged);
      t.copy_(staged);
      return;
    }
    collective(*pg, t);
#else
    (void)t;
    (void)collective;
#endif
  }
};

namespace {

// Runs one collective; any failure becomes a txl::Error that says which rank saw it and why a
// rank usually fails (a peer died, was stopped or stalled).
template <typename F>
void guarded(const char* what, int rank, int world, std::chrono::milliseconds timeout, F&& f) {
  try {
    f();
  } catch (const txl::Error&) {
    throw;
  } catch (const std::exception& e) {
    const bool rendezvous = std::string(what) == "rendezvous";
    TXL_FAIL("distributed ", what, " failed on rank ", rank, " of ", world, ": ", error_message(e),
             rendezvous ? " Check MASTER_ADDR and MASTER_PORT (a free port on "
                          "rank 0's host) and that every rank was started"
                        : " Another rank has probably "
                          "died, been stopped, or stalled for longer than run.dist_timeout",
             " (", timeout.count() / 1000, " s); see the other ranks' logs.");
  }
}

}  // namespace

Group::Group() : impl_(std::make_unique<Impl>()) {}
Group::~Group() = default;

std::shared_ptr<Group> Group::create(const LaunchEnv& env, std::chrono::milliseconds timeout,
                                     bool cuda) {
  auto group = std::make_shared<Group>();
  if (env.world_size <= 1) return group;
#ifdef TXL_WITH_GLOO
  group->env_ = env;
  group->rank_ = env.rank;
  group->world_size_ = env.world_size;
  group->impl_->timeout = timeout;
  log::info("dist", "rank {} of {} ({}): rendezvous at {}:{}", env.rank, env.world_size,
            env.launcher, env.master_addr, env.master_port);
  guarded("rendezvous", env.rank, env.world_size, timeout, [&] {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = env.rank == 0 && !env.agent_store;
    options.numWorkers = static_cast<std::size_t>(env.world_size);
    options.waitWorkers = !env.agent_store;
    options.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    if (env.agent_store) store = c10::make_intrusive<c10d::PrefixStore>(env.store_prefix, store);
    group->impl_->store = store;
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    // GLOO_SOCKET_IFNAME picks the network interface, as in PyTorch; a loopback rendezvous
    // stays on loopback; otherwise the address this host's name resolves to.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && ifname[0] != '\0') {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost") {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    group->impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", store), env.rank, env.world_size, gloo);
#ifdef TXL_WITH_NCCL
    if (cuda) {
      auto nccl = c10d::ProcessGroupNCCL::Options::create();
      nccl->timeout = timeout;
      group->impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          c10::make_intrusive<c10d::PrefixStore>("nccl", store), env.rank, env.world_size, nccl);
    }
#endif
  });
  if (cuda && !group->impl_->has_nccl())
    log::info("dist", "no NCCL in this build: GPU tensors are reduced by Gloo through the CPU");
  return group;
#else
  (void)timeout;
  (void)cuda;
  TXL_FAIL("this txl was built without c10d Gloo, so it cannot run ", env.world_size,
           " processes (", env.launcher,
           " set the world size). Install libgloo-dev (Debian) "
           "and rebuild, or run a single process.");
#endif
}

void Group::all_reduce(std::vector<torch::Tensor>& tensors, Op op) {
  if (!distributed()) return;
#ifdef TXL_WITH_GLOO
  guarded("all-reduce", rank_, world_size_, impl_->timeout, [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = op == Op::kSum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    for (auto& t : tensors) {  // one collective per tensor: Gloo wants equal shapes in a call
      impl_->on_backend(t, [&](auto& pg, torch::Tensor& x) {
        std::vector<at::Tensor> one{x};
        pg.allreduce(one, options)->wait();
      });
    }
  });
#else
  (void)tensors;
  (void)op;
#endif
}

void Group::all_reduce(torch::Tensor& tensor, Op op) {
  std::vector<torch::Tensor> one{tensor};
  all_reduce(one, op);
}

void Group::broadcast(std::vector<torch::Tensor>& tensors, int root) {
  if (!distributed()) return;
#ifdef TXL_WITH_GLOO
  guarded("broadcast", rank_, world_size_, impl_->timeout, [&] {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    for (auto& t : tensors) {
      impl_->on_backend(t, [&](auto& pg, torch::Tensor& x) {
        std::vector<at::Tensor> one{x};
        pg.broadcast(one, options)->wait();
      });
    }
  });
#else
  (void)tensors;
  (void)root;
#endif
}

std::vector<torch::Tensor> Group::all_gather(const torch::Tensor& tensor) {
  if (!distributed()) return {tensor};
  std::vector<torch::Tensor> out;
#ifdef TXL_WITH_GLOO
  guarded("all-gather", rank_, world_size_, impl_->timeout, [&] {
    std::vector<at::Tensor> input{
        tensor.to(torch::kCPU).contiguous()};  // gathers go through the CPU
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < world_size_; ++r) output[0].push_back(torch::empty_like(input[0]));
    impl_->pg->allgather(output, input)->wait();
    out = output[0];
  });
  for (auto& t : out) t = t.to(tensor.device());
#endif
  return out;
}

torch::Tensor Group::all_gather_rows(const torch::Tensor& tensor) {
  if (!distributed()) return tensor;
  TXL_CHECK(tensor.dim() >= 1, "all_gather_rows needs a tensor of at least one dimension");
  auto sizes = all_gather(torch::tensor({tensor.size(0)}, torch::kInt64));  // [1] per rank
  std::int64_t most = 0;
  for (const auto& s : sizes) most = std::max(most, s.item<std::int64_t>());
  auto shape = tensor.sizes().vec();
  shape[0] = most;
  auto padded = torch::zeros(shape, tensor.options());
  padded.narrow(0, 0, tensor.size(0)).copy_(tensor);
  auto pieces = all_gather(padded);
  for (size_t r = 0; r < pieces.size(); ++r)
    pieces[r] = pieces[r].narrow(0, 0, sizes[r].item<std::int64_t>());
  return torch::cat(pieces, 0);
}

void Group::barrier() {
  if (!distributed()) return;
  // A one-element all-reduce: a barrier that fails like every other collective.
  auto token = torch::zeros({1});
  all_reduce(token);
}

RowRange shard_rows(std::int64_t rows, int rank, int world) {
  TXL_CHECK(world >= 1 && rank >= 0 && rank < world, "shard_rows: rank ", rank, " of ", world);
  const std::int64_t base = rows / world, extra = rows % world;
  RowRange r;
  r.begin = rank * base + std::min<std::int64_t>(rank, extra);
  r.end = r.begin + base + (rank < extra ? 1 : 0);
  return r;
}

GradientReducer::GradientReducer(std::shared_ptr<Group> group, std::vector<torch::Tensor> params,
                                 std::int64_t bucket_bytes)
    : group_(std::move(group)), params_(std::move(params)) {
  // Buckets in reverse parameter order (the order backward produces gradients), one dtype each.
  std::int64_t filled = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    const std::int64_t bytes = p.numel() * static_cast<std::int64_t>(p.element_size());
    const bool fits = !buckets_.empty() && filled + bytes <= bucket_bytes &&
                      params_[buckets_.back().front()].scalar_type() == p.scalar_type();
    if (!fits) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().push_back(k);
    filled += bytes;
  }
}

void GradientReducer::reduce() {
  if (!group_->distributed()) return;
  torch::NoGradGuard no_grad;
  const auto n = static_cast<std::int64_t>(params_.size());
  auto produced = torch::zeros({n}, torch::kFloat);  // [P] 1 where this rank has a gradient
  auto flags = produced.accessor<float, 1>();
  for (std::int64_t k = 0; k < n; ++k) flags[k] = params_[k].grad().defined() ? 1.f : 0.f;
  group_->all_reduce(produced, Group::Op::kMax);
  for (std::int64_t k = 0; k < n; ++k) {
    auto& p = params_[k];
    if (flags[k] > 0 && !p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  for (const auto& bucket : buckets_) {
    std::vector<torch::Tensor> grads;
    for (auto k : bucket)
      if (params_[k].grad().defined()) grads.push_back(params_[k].grad());
    if (grads.empty()) continue;
    std::vector<torch::Tensor> flat_parts;
    for (const auto& g : grads) flat_parts.push_back(g.reshape({-1}));
    auto flat = torch::cat(flat_parts);  // [sum of numel]
    group_->all_reduce(flat);
    std::int64_t offset = 0;
    for (auto& g : grads) {
      g.copy_(flat.narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  }
}

}  // namespace txl::dist
