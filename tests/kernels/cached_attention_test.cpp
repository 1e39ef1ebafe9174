// kernels::attend_cached against the definition written with tensor ops: scores of the content and
// the relative position, the visible keys only, softmax, weighted values. fp64 with a tolerance
// of 1e-12, fp32 with 2e-5, through both kernels (kBest: AVX-512 for float heads of 16 N where the
// CPU has it; kPortable); the new key and value land in their slot; bad inputs are errors.
#include "txl/kernels/cached_attention.h"
#include "txl/kernels/blas_threads.h"
#include "txl/kernels/vector_loops.h"

#include <gtest/gtest.h>

#include "kernels/attention_definition.h"
#include "support/test_support.h"

namespace txl::kernels {
namespace {

using txl::test::tensor_near;

struct Inputs {
  torch::Tensor qkv;  // [B, 3, H, D]
  CachedKeys keys;    // buffer [2, H, B, C, D]
  int64_t k_len = 0;
  std::vector<int64_t> first;
};

Inputs random_inputs(int64_t batch, int64_t heads, int64_t d, int64_t capacity, int64_t k_len,
                     bool rel, bool biases, torch::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  auto opts = torch::dtype(dtype);
  Inputs in;
  in.qkv = torch::randn({batch, 3, heads, d}, opts);                        // [B, 3, H, D]
  in.keys.buffer = torch::randn({2, heads, batch, capacity, d}, opts);      // [2, H, B, C, D]
  if (rel) in.keys.by_distance = torch::randn({heads, capacity, d}, opts);  // [H, C, D]
  if (biases) {
    in.keys.u = torch::randn({heads, d}, opts);  // [H, D]
    in.keys.v = torch::randn({heads, d}, opts);  // [H, D]
  }
  in.k_len = k_len;
  for (int64_t b = 0; b < batch; ++b) in.first.push_back((b * 3) % k_len);
  return in;
}

// The definition, with tensor ops, on copies (the buffer as it is after the write).
torch::Tensor reference(const Inputs& in) {
  return txl::test::attention_definition(in.qkv, in.keys, in.k_len, in.first);  // [B, H D]
}

TEST(AttendCached, EqualsTheDefinition) {
  struct Case {
    int64_t batch, heads, d, capacity, k_len;
    bool rel, biases;
  };
  const std::vector<Case> cases = {
      {1, 1, 4, 8, 1, true, true},       // the new key alone
      {3, 2, 8, 12, 7, true, true},      // xl: u, v and encodings
      {2, 4, 64, 300, 260, true, true},  // bench-like head size, long context
      {4, 2, 5, 9, 9, true, false},      // shaw: encodings, no biases; a full buffer
      {2, 3, 7, 10, 6, false, false},    // no positions
      // Float heads of 16 N (N <= 8) take the AVX-512 kernel where the CPU has it.
      {3, 2, 16, 40, 33, true, true},    // N = 1, an odd number of keys
      {2, 2, 48, 50, 47, false, false},  // N = 3, no positions
      {2, 1, 128, 70, 64, true, false},  // N = 8, shaw-like
      {1, 2, 144, 20, 17, true, true},   // N = 9: the portable loops
      {1, 1, 16, 8, 1, true, true},      // N = 1, the new key alone (no pair of keys)
      {2, 2, 32, 20, 9, false, true},    // N = 2, biases without encodings
  };
  // Which kernel kBest ran, in the test's XML report.
  ::testing::Test::RecordProperty("avx512_kernel", cached_kernel_vectorised() ? "yes" : "no");
  for (auto kernel : {CachedKernel::kBest, CachedKernel::kPortable}) {
    for (auto dtype : {torch::kDouble, torch::kFloat}) {
      const double tol = dtype == torch::kDouble ? 1e-12 : 2e-5;
      for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message()
                     << "B " << c.batch << " H " << c.heads << " D " << c.d << " K " << c.k_len
                     << " " << dtype << " kernel " << static_cast<int>(kernel));
        auto in =
            random_inputs(c.batch, c.heads, c.d, c.capacity, c.k_len, c.rel, c.biases, dtype, 17);
        auto expected = reference(in);
        auto before = in.keys.buffer.clone();
        auto got = attend_cached(in.qkv, in.keys, in.k_len, in.first, kernel);  // [B, H D]
        EXPECT_TRUE(tensor_near(got, expected, tol, tol));
        // The new key and value are in slot K-1; nothing else changed.
        auto slot = in.keys.buffer.select(3, c.k_len - 1);  // [2, H, B, D]
        EXPECT_TRUE(torch::equal(slot, in.qkv.narrow(1, 1, 2).permute({1, 2, 0, 3})));
        before.select(3, c.k_len - 1).copy_(slot);
        EXPECT_TRUE(torch::equal(before, in.keys.buffer));
      }
    }
  }
}

// A key before a row's first visible slot changes nothing; one at or after it does.
TEST(AttendCached, HiddenKeysDoNotCount) {
  auto in = random_inputs(2, 2, 4, 10, 8, true, true, torch::kDouble, 5);
  in.first = {3, 0};
  auto base = attend_cached(in.qkv, in.keys, in.k_len, in.first);
  in.keys.buffer.select(2, 0).narrow(2, 0, 3).fill_(1e3);  // row 0, slots 0..2: hidden
  auto same = attend_cached(in.qkv, in.keys, in.k_len, in.first);
  EXPECT_TRUE(torch::equal(base, same));
  in.keys.buffer.select(2, 0).narrow(2, 3, 1).fill_(1e3);  // row 0, slot 3: visible
  auto changed = attend_cached(in.qkv, in.keys, in.k_len, in.first);
  EXPECT_FALSE(torch::allclose(base[0], changed[0]));
  EXPECT_TRUE(torch::equal(base[1], changed[1]));  // row 1's keys were not touched
}

// The (row, head) pairs give the same bits whichever thread computes them: with OpenBLAS on
// two threads (half of them on run_beside's side thread) and on one (all on the caller).
TEST(AttendCached, SideThreadChangesNoBit) {
  test::OpenBlasThreads blas;  // restores OpenBLAS's count
  if (!blas.available()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    auto in = random_inputs(16, 4, 64, 200, 190, true, true, dtype, 29);  // 16 x 4 x 190 x 64
    auto alone = in;
    alone.keys.buffer = in.keys.buffer.clone();
    blas.set(2);
    ASSERT_TRUE(blas_has_own_threads());
    auto split = attend_cached(in.qkv, in.keys, in.k_len, in.first);  // [B, H D]
    blas.set(1);
    auto serial = attend_cached(alone.qkv, alone.keys, alone.k_len, alone.first);  // [B, H D]
    EXPECT_TRUE(torch::equal(split, serial));
    EXPECT_TRUE(torch::equal(in.keys.buffer, alone.keys.buffer));
    const double tol = dtype == torch::kDouble ? 1e-12 : 2e-5;
    EXPECT_TRUE(tensor_near(split, reference(alone), tol, tol));
  }
}

TEST(AttendCached, BadInputsAreClearErrors) {
  auto in = random_inputs(2, 2, 4, 6, 4, true, true, torch::kFloat, 3);
  auto fails = [&](const Inputs& bad, const std::string& part) {
    try {
      attend_cached(bad.qkv, bad.keys, bad.k_len, bad.first);
      ADD_FAILURE() << "no error for " << part;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto bad = in;
  bad.k_len = 7;
  fails(bad, "k_len = 7");
  bad = in;
  bad.first = {0, 4};
  fails(bad, "first slot 4");
  bad = in;
  bad.first = {0};
  fails(bad, "1 first slots for 2 rows");
  bad = in;
  bad.qkv = in.qkv.to(torch::kDouble);
  fails(bad, "buffer must be");
  bad = in;
  bad.qkv = in.qkv.to(torch::kHalf);
  fails(bad, "qkv must be");
  bad = in;
  bad.keys.v = torch::Tensor();
  fails(bad, "both u and v");
  bad = in;
  bad.keys.by_distance = in.keys.by_distance.narrow(1, 0, 3);
  fails(bad, "by_distance");
  EXPECT_FALSE(vector_loops_take(torch::zeros({1}, torch::kHalf)));
  EXPECT_TRUE(vector_loops_take(torch::zeros({1}, torch::kDouble)));
}

}  // namespace
}  // namespace txl::kernels
