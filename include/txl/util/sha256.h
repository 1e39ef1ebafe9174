#pragma once
// SHA-256 (FIPS 180-4), for checksums of checkpoint files: no OpenSSL, nothing but the standard
// library (and the x86 SHA instructions where the CPU has them, about 1.5 GB/s against 0.15).
// Feed bytes in any number of pieces; the digest depends only on their concatenation.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace txl {

class Sha256 {
 public:
  Sha256();

  // Appends `bytes` to the message.
  void update(std::string_view bytes);

  // The digest of everything passed to update() so far, as 64 lowercase hex characters. Does not
  // change the state: more update() calls may follow, and then the digest of the longer message.
  std::string hex_digest() const;

  // The same digest as 32 raw bytes.
  std::array<std::uint8_t, 32> digest() const;

  // Uses the portable rounds even where the CPU has SHA instructions (for tests that compare
  // the two).
  void use_portable_rounds() { portable_ = true; }

 private:
  void compress(const std::uint8_t* block);                            // portable rounds
  void compress_blocks(const std::uint8_t* data, std::size_t blocks);  // SHA-NI when present

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> block_{};  // the incomplete block not compressed yet
  std::size_t block_size_ = 0;            // bytes used in block_
  std::uint64_t message_size_ = 0;        // bytes passed to update() in total
  bool portable_ = false;
};

// SHA-256 of `bytes` as 64 lowercase hex characters.
std::string sha256_hex(std::string_view bytes);

}  // namespace txl
