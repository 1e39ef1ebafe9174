#include "txl/models/flops.h"

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace txl::models {
namespace {

using config::AttnType;

config::ModelConfig tiny(AttnType attn_type) {
  config::ModelConfig c;
  c.attn_type = attn_type;
  c.n_layer = 2;
  c.d_model = 8;
  c.n_head = 2;
  c.d_head = 4;
  c.d_inner = 16;
  return c;
}

TEST(Flops, XlByHand) {
  // Per layer: Q 2*8*8 = 128, KV 2*8*16*10/5 = 512, scores 160, position scores 160, values
  // 160, W_o 128, FF 512 -> 1760; two layers 3520; softmax 2*8*11 = 176.
  auto f = count_flops_per_token(tiny(AttnType::kXl), 11, 5, 5);
  EXPECT_DOUBLE_EQ(f.forward, 3696.0);
  EXPECT_DOUBLE_EQ(f.training, 3 * 3696.0);
}

TEST(Flops, CachedMemoryKeysAndValuesAreProjectedForTheSegmentOnly) {
  // KV over the segment's 5 rows: 2*8*16 = 256 instead of 512 per layer.
  EXPECT_DOUBLE_EQ(count_flops_per_token(tiny(AttnType::kXl), 11, 5, 5, true).forward,
                   3696.0 - 2 * 256.0);
  // No memory, nothing saved.
  EXPECT_DOUBLE_EQ(count_flops_per_token(tiny(AttnType::kXl), 11, 5, 0, true).forward,
                   count_flops_per_token(tiny(AttnType::kXl), 11, 5, 0).forward);
  // vanilla_learned never caches.
  EXPECT_DOUBLE_EQ(count_flops_per_token(tiny(AttnType::kVanillaLearned), 11, 5, 5, true).forward,
                   count_flops_per_token(tiny(AttnType::kVanillaLearned), 11, 5, 5).forward);
}

TEST(Flops, CompressiveMemoryByHand) {
  auto c = tiny(AttnType::kXl);
  c.cmem_len = 5;
  // K = 5 + 5 + 5: KV 2*8*16*15/5 = 768, scores, position scores and values 240 each, and the
  // convolution 2*8*8 = 128 -> 128 + 768 + 720 + 128 + 512 + 128 = 2384 per layer.
  EXPECT_DOUBLE_EQ(count_flops_per_token(c, 11, 5, 5).forward, 2 * 2384.0 + 176.0);
  c.cmem_compress = config::Compression::kMean;  // pooling: no products
  EXPECT_DOUBLE_EQ(count_flops_per_token(c, 11, 5, 5).forward, 2 * 2256.0 + 176.0);
  // Without a memory there is no compressed memory.
  EXPECT_DOUBLE_EQ(count_flops_per_token(c, 11, 5, 0).forward,
                   count_flops_per_token(tiny(AttnType::kXl), 11, 5, 0).forward);
}

TEST(Flops, VanillaByHand) {
  // Per layer: QKV 384, scores 80, values 80, W_o 128, FF 512 -> 1184.
  EXPECT_DOUBLE_EQ(count_flops_per_token(tiny(AttnType::kVanilla), 11, 5, 0).forward,
                   2 * 1184.0 + 176.0);
}

TEST(Flops, AdaptiveSoftmaxByHand) {
  auto c = tiny(AttnType::kVanilla);
  c.cutoffs = {4, 8};
  c.div_val = 2;
  // Clusters of width 8, 4, 2: head 128 + 2*8*(4+2); tails 64 + 32 and 32 + 12; input proj 128.
  EXPECT_DOUBLE_EQ(count_flops_per_token(c, 11, 5, 0).forward, 2 * 1184.0 + 492.0);
}

TEST(Flops, BenchModelIsAboutFifteenMegaflopsPerToken) {
  config::ModelConfig c;  // the defaults are the bench model: 4 x 256, 4 x 64 heads, FF 1024
  auto f = count_flops_per_token(c, 12871, 128, 128);
  // Q 2*256*256, KV 2*256*512*256/128, three 2*256*256 attention products, W_o, FF;
  // softmax 2*256*12871.
  EXPECT_DOUBLE_EQ(f.forward, 4 * (131072.0 + 524288 + 3 * 131072 + 131072 + 1048576) + 6589952.0);
  TXL_EXPECT_THROW_WITH(count_flops_per_token(c, 0, 128, 128), "vocab > 0");
}

}  // namespace
}  // namespace txl::models
