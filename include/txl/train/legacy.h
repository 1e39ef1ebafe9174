#pragma once
// txl's first checkpoint format (format version 1, a TorchScript archive written by LibTorch's
// OutputArchive), read once to convert it to the data-only format. LibTorch's loader of such an
// archive can run TorchScript code stored in the file, so this is only ever called on the
// user's explicit word (txl-convert --trust-old-format), never by training or evaluation.

#include <filesystem>

#include "txl/config/command_line.h"
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

// The cached tokenizer folder a version 1 checkpoint at `path` was trained with (those files did
// not hold their tokenizer): the one folder under its stored experiment's data.cache_dir that
// holds tokenizer.meta and has the checkpoint's vocabulary size. `line`'s overrides apply to the
// stored experiment and may change only data.cache_dir (where to look). Reads the file with the
// same loader as convert_legacy_checkpoint (call it only on the user's word). Throws txl::Error
// when no folder or several fit, asking for the one the model was trained with.
std::filesystem::path find_legacy_tokenizer(const std::filesystem::path& path,
                                            const config::CommandLine& line);

}  // namespace txl::train
