#pragma once
// The part of LibTorch every kernel uses: ATen's tensor, the factories the kernels allocate with
// and the no-grad guard (a kernel that uses ATen's threads or its profiler's labels includes
// those too). Not <torch/torch.h>: the kernels' sources are built without the precompiled header
// (their vector flags differ from it), and twice with the sanitized test; parsing torch/torch.h
// was 13 s of a kernel file's 19 s compile.

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
