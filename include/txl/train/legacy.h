#pragma once
// txl's first checkpoint format (format version 1, a TorchScript archive written by LibTorch's
// OutputArchive), read once to convert it to the data-only format. LibTorch's loader of such an
// archive can run TorchScript code stored in the file, so this is only ever called on the
// user's explicit word (txl-convert --trust-old-format), never by training or evaluation.

#include <filesystem>

#include "txl/data/tokenizer.h"
#include "txl/models/checkpoint.h"

namespace txl::train {

// The old checkpoint at `path` as a checkpoint of the current format: model weights, and when
// the file holds them the optimizer state, memory, generator states and training state (so an
// old run can be resumed). Version 1 files did not hold their tokenizer: `tokenizer` is the one
// the model was trained with (its vocabulary size must be the model's). Throws txl::Error naming
// the file when it is not a version 1 txl checkpoint.
models::Checkpoint convert_legacy_checkpoint(const std::filesystem::path& path,
                                             const data::Tokenizer& tokenizer);

}  // namespace txl::train
