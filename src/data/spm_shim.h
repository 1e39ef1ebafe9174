#pragma once
// C interface of libtxl_spm, the shim around sentencepiece (private to src/data).
//
// Why a shim: Debian's libsentencepiece embeds its own copy of protobuf-lite (3.14) and exports
// those symbols, while libtorch loads the system libprotobuf (3.21). Linked into one process
// the two copies interpose each other and the program crashes at start-up (or fails protobuf's
// version check). So sentencepiece is never linked into txl: spm_library.cpp loads this shim with
// dlmopen(LM_ID_NEWLM), into a link-map namespace of its own where it gets its own libstdc++
// and never sees libtorch's protobuf. (RTLD_DEEPBIND is not enough: it binds the shim to
// libstdc++'s own std::cerr instead of the executable's copy-relocated, initialised one, and
// crashes on the first log line.) Only plain C types cross the boundary; memory is freed in the
// namespace that allocated it; results come back through sinks that copy.

#include <cstddef>

extern "C" {

// Receives bytes (a string, a serialized model, an error message).
typedef void (*txl_spm_bytes_sink)(void* ctx, const char* data, std::size_t size);
// Receives token ids.
typedef void (*txl_spm_ids_sink)(void* ctx, const int* ids, std::size_t n);
// Returns line `i` of the training text (pointer and length stay valid during training).
typedef const char* (*txl_spm_line_source)(void* ctx, std::size_t i, std::size_t* size);

// Called once right after loading. Starts and joins one thread inside the namespace: glibc and
// libstdc++ skip locking (malloc arenas, shared_ptr counts) while a libc copy has never created a
// thread itself, and this namespace's copy would otherwise not know that txl calls it from
// several threads (encode_split).
void txl_spm_init();

// Each function returns 0 on success; on failure, non-zero after passing the message to `error`.
int txl_spm_train(const char* const* keys, const char* const* values, std::size_t n_args,
                  txl_spm_line_source lines, void* lines_ctx, std::size_t n_lines,
                  txl_spm_bytes_sink model, void* model_ctx, txl_spm_bytes_sink error,
                  void* error_ctx);

int txl_spm_load(const char* model, std::size_t size, void** handle, txl_spm_bytes_sink error,
                 void* error_ctx);
void txl_spm_free(void* handle);

int txl_spm_encode(const void* handle, const char* text, std::size_t size, txl_spm_ids_sink ids,
                   void* ids_ctx, txl_spm_bytes_sink error, void* error_ctx);
int txl_spm_decode(const void* handle, const int* ids, std::size_t n, txl_spm_bytes_sink text,
                   void* text_ctx, txl_spm_bytes_sink error, void* error_ctx);

int txl_spm_piece_size(const void* handle);
// Special ids: 0 pad, 1 unk, 2 eos, 3 bos (-1 when absent).
int txl_spm_special_id(const void* handle, int which);
void txl_spm_id_to_piece(const void* handle, int id, txl_spm_bytes_sink piece, void* piece_ctx);

}  // extern "C"
