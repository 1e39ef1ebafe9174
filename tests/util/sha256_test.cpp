#include "txl/util/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace {

// FIPS 180-4 examples (NIST "Cryptographic Standards and Guidelines: SHA-256" and FIPS 180-2
// appendix B): one block, two blocks, and one million 'a'; plus the empty message.
TEST(Sha256, FipsTestVectors) {
  EXPECT_EQ(txl::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(txl::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(txl::sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(txl::sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

// The padding branches: lengths 55 and 56 straddle the point where the length field no longer
// fits in the last block; 64 is exactly one block. Values from Python's hashlib.
TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(txl::sha256_hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(txl::sha256_hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(txl::sha256_hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

// The digest does not depend on how the message is cut into update() calls: a 200-byte message
// (every byte value from 0 up, so a misplaced byte changes it) split at every offset, and in
// pieces of every size from 1 to 200. The one-shot digest is Python hashlib's.
TEST(Sha256, IncrementalUpdatesMatchOneShot) {
  std::string message(200, '\0');
  for (std::size_t i = 0; i < message.size(); ++i) message[i] = static_cast<char>(i * 7 + 3);
  const std::string expected = "2c7e18c942ef065b526a2d4e5546283749cd3ddfb51d8fc71f42717363685f46";
  EXPECT_EQ(txl::sha256_hex(message), expected);
  for (std::size_t cut = 0; cut <= message.size(); ++cut) {
    txl::Sha256 hash;
    hash.update(std::string_view(message).substr(0, cut));
    hash.update(std::string_view(message).substr(cut));
    EXPECT_EQ(hash.hex_digest(), expected) << "split at " << cut;
  }
  for (std::size_t piece = 1; piece <= message.size(); ++piece) {
    txl::Sha256 hash;
    for (std::size_t at = 0; at < message.size(); at += piece)
      hash.update(std::string_view(message).substr(at, piece));
    EXPECT_EQ(hash.hex_digest(), expected) << "pieces of " << piece;
  }
}

// hex_digest() leaves the state open: the digest of a prefix, then of the whole message.
TEST(Sha256, DigestOfPrefixThenContinue) {
  txl::Sha256 hash;
  hash.update("ab");
  EXPECT_EQ(hash.hex_digest(), txl::sha256_hex("ab"));
  hash.update("c");
  EXPECT_EQ(hash.hex_digest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_NE(txl::sha256_hex("abd"), txl::sha256_hex("abc"));
}

}  // namespace

// Where the CPU has SHA instructions the vectors above test them; here the portable rounds must
// give the same digests (and where it has none, both are the portable rounds).
TEST(Sha256, PortableRoundsAgreeWithTheShaInstructions) {
  std::string message;
  std::uint32_t x = 12345;
  for (int i = 0; i < (1 << 20) + 77; ++i) {
    x = x * 1664525u + 1013904223u;
    message.push_back(static_cast<char>(x >> 24));
  }
  for (std::size_t n : {std::size_t{0}, std::size_t{55}, std::size_t{64}, std::size_t{65},
                        std::size_t{200}, std::size_t{4096}, message.size()}) {
    txl::Sha256 fast, portable;
    portable.use_portable_rounds();
    fast.update(std::string_view(message).substr(0, n));
    portable.update(std::string_view(message).substr(0, n));
    EXPECT_EQ(fast.hex_digest(), portable.hex_digest()) << n;
  }
}
