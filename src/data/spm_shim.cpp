// libtxl_spm: sentencepiece behind a C interface (see spm_shim.h for why). Never throws across
// the boundary.

#include "spm_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

void report(txl_spm_bytes_sink sink, void* ctx, const std::string& message) {
  if (sink) sink(ctx, message.data(), message.size());
}

class CallbackIterator : public sentencepiece::SentenceIterator {
 public:
  CallbackIterator(txl_spm_line_source source, void* ctx, std::size_t n)
      : source_(source), ctx_(ctx), n_(n) {
    load();
  }
  bool done() const override { return i_ >= n_; }
  void Next() override {
    ++i_;
    load();
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (i_ >= n_) return;
    std::size_t size = 0;
    const char* data = source_(ctx_, i_, &size);
    value_.assign(data, size);
  }
  txl_spm_line_source source_;
  void* ctx_;
  std::size_t n_, i_ = 0;
  std::string value_;
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void txl_spm_init() {
  std::thread([] {}).join();
}

__attribute__((visibility("default"))) int txl_spm_train(
    const char* const* keys, const char* const* values, std::size_t n_args,
    txl_spm_line_source lines, void* lines_ctx, std::size_t n_lines, txl_spm_bytes_sink model,
    void* model_ctx, txl_spm_bytes_sink error, void* error_ctx) {
  try {
    std::unordered_map<std::string, std::string> args;
    for (std::size_t i = 0; i < n_args; ++i) args[keys[i]] = values[i];
    CallbackIterator it(lines, lines_ctx, n_lines);
    std::string serialized;
    auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &serialized);
    if (!status.ok()) {
      report(error, error_ctx, status.ToString());
      return 1;
    }
    model(model_ctx, serialized.data(), serialized.size());
    return 0;
  } catch (const std::exception& e) {
    report(error, error_ctx, e.what());
    return 1;
  }
}

__attribute__((visibility("default"))) int txl_spm_load(const char* model, std::size_t size,
                                                        void** handle, txl_spm_bytes_sink error,
                                                        void* error_ctx) {
  try {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    auto status = sp->LoadFromSerializedProto(std::string(model, size));
    if (!status.ok()) {
      report(error, error_ctx, status.ToString());
      return 1;
    }
    *handle = sp.release();
    return 0;
  } catch (const std::exception& e) {
    report(error, error_ctx, e.what());
    return 1;
  }
}

__attribute__((visibility("default"))) void txl_spm_free(void* handle) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

__attribute__((visibility("default"))) int txl_spm_encode(const void* handle, const char* text,
                                                          std::size_t size, txl_spm_ids_sink ids,
                                                          void* ids_ctx, txl_spm_bytes_sink error,
                                                          void* error_ctx) {
  try {
    std::vector<int> out;
    auto status = static_cast<const sentencepiece::SentencePieceProcessor*>(handle)->Encode(
        std::string(text, size), &out);
    if (!status.ok()) {
      report(error, error_ctx, status.ToString());
      return 1;
    }
    ids(ids_ctx, out.data(), out.size());
    return 0;
  } catch (const std::exception& e) {
    report(error, error_ctx, e.what());
    return 1;
  }
}

__attribute__((visibility("default"))) int txl_spm_decode(const void* handle, const int* ids,
                                                          std::size_t n, txl_spm_bytes_sink text,
                                                          void* text_ctx, txl_spm_bytes_sink error,
                                                          void* error_ctx) {
  try {
    std::string out;
    auto status = static_cast<const sentencepiece::SentencePieceProcessor*>(handle)->Decode(
        std::vector<int>(ids, ids + n), &out);
    if (!status.ok()) {
      report(error, error_ctx, status.ToString());
      return 1;
    }
    text(text_ctx, out.data(), out.size());
    return 0;
  } catch (const std::exception& e) {
    report(error, error_ctx, e.what());
    return 1;
  }
}

__attribute__((visibility("default"))) int txl_spm_piece_size(const void* handle) {
  return static_cast<const sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

__attribute__((visibility("default"))) int txl_spm_special_id(const void* handle, int which) {
  auto* sp = static_cast<const sentencepiece::SentencePieceProcessor*>(handle);
  switch (which) {
    case 0:
      return sp->pad_id();
    case 1:
      return sp->unk_id();
    case 2:
      return sp->eos_id();
    case 3:
      return sp->bos_id();
    default:
      return -1;
  }
}

__attribute__((visibility("default"))) void txl_spm_id_to_piece(const void* handle, int id,
                                                                txl_spm_bytes_sink piece,
                                                                void* piece_ctx) {
  const std::string& p =
      static_cast<const sentencepiece::SentencePieceProcessor*>(handle)->IdToPiece(id);
  piece(piece_ctx, p.data(), p.size());
}

}  // extern "C"
