#pragma once
// SplitMix64 (Steele, Lea, Flood 2014): tiny and fully specified, so whatever txl draws from it
// (epoch plans, the synthetic corpus, dropout masks) is the same on every platform and standard
// library.

#include <cstdint>

namespace txl {

inline constexpr std::uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// The mix of one value: a bijection whose outputs for x, x + gamma, x + 2 gamma, ... are
// independent-looking, so element j of anything can be drawn as splitmix64(seed + j gamma).
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The sequential generator: next() = splitmix64 of the state, which then advances by gamma.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    const std::uint64_t out = splitmix64(state_);
    state_ += kGoldenGamma;
    return out;
  }

 private:
  std::uint64_t state_;
};

}  // namespace txl
