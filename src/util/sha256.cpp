#include "txl/util/sha256.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "txl/util/cpu.h"

namespace txl {
namespace {

// FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of the cube roots of the
// first 64 primes.
constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// Section 5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8
// primes.
constexpr std::array<std::uint32_t, 8> kInitial = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

std::uint32_t load_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// The same compression with the x86 SHA extensions (SHA-NI: Intel since Goldmont and Ice Lake,
// AMD since Zen), about ten times faster than the portable rounds. The state lives in two
// registers as the instructions want it: ABEF and CDGH. Each sha256rnds2 does two rounds; each
// group of four message words is first scheduled with sha256msg1/msg2 (section 6.2.2, step 1).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TXL_SHA_NI 1
__attribute__((target("sha,sse4.1"))) void compress_sha_ni(std::uint32_t* state,
                                                           const std::uint8_t* data,
                                                           std::size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  const __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; blocks > 0; --blocks, data += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];  // the last four groups of message words, w[t % 4] = group t
    for (int t = 0; t < 16; ++t) {
      __m128i& group = w[t % 4];
      if (t < 4) {
        group = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * t)),
                                 byte_swap);
      } else {  // W[i] = s1(W[i-2]) + W[i-7] + s0(W[i-15]) + W[i-16], four at a time
        const __m128i minus7 = _mm_alignr_epi8(w[(t - 1) % 4], w[(t - 2) % 4], 4);
        group = _mm_sha256msg2_epu32(
            _mm_add_epi32(_mm_sha256msg1_epu32(w[t % 4], w[(t - 3) % 4]), minus7), w[(t - 1) % 4]);
      }
      __m128i k = _mm_add_epi32(
          group, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound.data() + 4 * t)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, k);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(k, 0x0E));
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

bool have_sha_ni() { return util::cpu_features().sha; }
#endif

}  // namespace

Sha256::Sha256() : state_(kInitial) {}

void Sha256::compress_blocks(const std::uint8_t* data, std::size_t blocks) {
#ifdef TXL_SHA_NI
  if (have_sha_ni() && !portable_) {
    compress_sha_ni(state_.data(), data, blocks);
    return;
  }
#endif
  for (; blocks > 0; --blocks, data += 64) compress(data);
}

// Section 6.2.2: the message schedule, then 64 rounds, then the new intermediate hash value.
void Sha256::compress(const std::uint8_t* block) {
  std::array<std::uint32_t, 64> w;
  for (int t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, h] = state_;
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t sigma1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const std::uint32_t choose = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + sigma1 + choose + kRound[t] + w[t];
    const std::uint32_t sigma0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = sigma0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  const std::array<std::uint32_t, 8> add = {a, b, c, d, e, f, g, h};
  for (int i = 0; i < 8; ++i) state_[i] += add[i];
}

void Sha256::update(std::string_view bytes) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  std::size_t n = bytes.size();
  message_size_ += n;
  if (block_size_ > 0) {  // top up the pending block first
    const std::size_t take = std::min(n, block_.size() - block_size_);
    std::memcpy(block_.data() + block_size_, p, take);
    block_size_ += take;
    p += take;
    n -= take;
    if (block_size_ < block_.size()) return;
    compress_blocks(block_.data(), 1);
    block_size_ = 0;
  }
  const std::size_t blocks = n / block_.size();
  compress_blocks(p, blocks);
  p += blocks * block_.size();
  n -= blocks * block_.size();
  if (n > 0) std::memcpy(block_.data(), p, n);
  block_size_ = n;
}

// Section 5.1.1: append the bit 1, zeros up to 56 bytes mod 64, then the message length in bits
// as a 64-bit big-endian number. Works on a copy so that the state stays open for more updates.
std::array<std::uint8_t, 32> Sha256::digest() const {
  Sha256 last = *this;
  const std::uint64_t bits = message_size_ * 8;
  std::array<std::uint8_t, 72> pad{};  // at most 63 padding bytes + 8 length bytes
  pad[0] = 0x80;
  const std::size_t zeros = (block_size_ < 56 ? 56 : 120) - block_size_ - 1;
  for (int i = 0; i < 8; ++i) pad[1 + zeros + i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
  last.update(std::string_view(reinterpret_cast<const char*>(pad.data()), 1 + zeros + 8));
  std::array<std::uint8_t, 32> out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j)
      out[4 * i + j] = static_cast<std::uint8_t>(last.state_[i] >> (24 - 8 * j));
  return out;
}

std::string Sha256::hex_digest() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (std::uint8_t byte : digest()) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 0xf]);
  }
  return hex;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 hash;
  hash.update(bytes);
  return hash.hex_digest();
}

}  // namespace txl
