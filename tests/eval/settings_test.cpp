// The one set of evaluation settings (src/eval/settings.cpp): resolved once from the experiment.
#include "txl/eval/settings.h"

#include <sstream>

#include "support/test_support.h"
#include "support/tiny_experiment.h"
#include "txl/config/load.h"

namespace {

using txl::eval::Mode;

// eval::Mode is the config's enum: one name table, read where the experiment is loaded.
static_assert(std::is_same_v<Mode, txl::config::EvalMode>);

TEST(Settings, ModesParseAndPrintByName) {
  for (Mode mode : {Mode::kMemory, Mode::kSegments, Mode::kSliding}) {
    EXPECT_EQ(txl::config::parse_enum<Mode>(txl::config::to_string(mode)), mode);
    std::ostringstream out;
    out << mode;
    EXPECT_EQ(out.str(), txl::config::to_string(mode));
  }
  TXL_EXPECT_THROW_WITH(txl::config::parse_experiment_string("eval: {mode: beam}\n", "x.yaml"),
                        "eval.mode: 'beam' is not one of memory | segments | sliding");
}

// What evaluate() did not read before: ext_len, document mode, device and precision.
TEST(Settings, ResolveReadsExtLenDocumentsDeviceAndPrecision) {
  txl::test::TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path());
  auto s = txl::eval::resolve_settings(c);
  EXPECT_EQ(s.mode, Mode::kMemory);
  EXPECT_EQ(s.ext_len, 0);
  EXPECT_FALSE(s.documents);
  EXPECT_FALSE(s.bf16);
  EXPECT_EQ(s.device, torch::Device(torch::kCPU));
  EXPECT_EQ(s.group, nullptr);
  c.model.ext_len = 6;
  c.data.document_mode = true;
  c.run.precision = txl::config::Precision::kBf16;
  c.eval.mode = txl::config::EvalMode::kSegments;
  c.eval.max_tokens = 500;
  c.eval.batch_size = 3;
  s = txl::eval::resolve_settings(c);
  EXPECT_EQ(s.mode, Mode::kSegments);
  EXPECT_EQ(s.ext_len, 6);
  EXPECT_TRUE(s.documents);
  EXPECT_TRUE(s.bf16);
  EXPECT_EQ(s.max_tokens, 500);
  EXPECT_EQ(s.batch_size, 3);
}

TEST(Settings, WarmUpWithExtLenInMemoryModeIsAnError) {
  txl::test::TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path());
  c.model.ext_len = 4;
  c.eval.warmup = 32;
  TXL_EXPECT_THROW_WITH(txl::eval::resolve_settings(c),
                        "eval.warmup = 32 is not supported with model.ext_len = 4");
  c.eval.mode = txl::config::EvalMode::kSegments;  // no memory to warm up
  EXPECT_EQ(txl::eval::resolve_settings(c).warmup, 32);
}

// The trainer's periodic validation: segments for sliding, train.eval_max_tokens, plain text.
TEST(Settings, ValidationIsTheExperimentsEvaluationMadeCheap) {
  txl::test::TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path());
  c.eval.mode = txl::config::EvalMode::kSliding;
  c.eval.max_tokens = 700;
  c.data.document_mode = true;
  auto s = txl::eval::validation_settings(c, nullptr);
  EXPECT_EQ(s.mode, Mode::kSegments);
  EXPECT_EQ(s.max_tokens, 700);
  EXPECT_FALSE(s.documents);
  c.train.eval_max_tokens = 90;
  c.eval.mode = txl::config::EvalMode::kMemory;
  s = txl::eval::validation_settings(c, nullptr);
  EXPECT_EQ(s.mode, Mode::kMemory);
  EXPECT_EQ(s.mem_len, 16);
  EXPECT_EQ(s.max_tokens, 90);
}

// Memory, same_length, ext_len and the carried keys and values only with a memory.
TEST(Settings, SegmentContextHasMemoryOnlyInMemoryMode) {
  txl::test::TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path());
  c.model.ext_len = 3;
  c.model.clamp_len = 20;
  c.model.same_length = true;
  txl::models::TransformerLM model(c.model, 50);
  auto lookback = txl::eval::segment_lookback(txl::eval::resolve_settings(c), model);
  EXPECT_EQ(lookback.mem_len, 16);
  EXPECT_EQ(lookback.ext_len, 3);
  EXPECT_TRUE(lookback.same_length);
  EXPECT_TRUE(lookback.cache_kv);
  EXPECT_EQ(lookback.clamp_len, 20);
  for (const Mode mode : {Mode::kSegments, Mode::kSliding}) {
    c.eval.mode = mode;
    lookback = txl::eval::segment_lookback(txl::eval::resolve_settings(c), model);
    EXPECT_EQ(lookback.mem_len, 0) << mode;
    EXPECT_EQ(lookback.ext_len, 0) << mode;
    EXPECT_FALSE(lookback.same_length || lookback.cache_kv) << mode;
    EXPECT_EQ(lookback.clamp_len, 20) << mode;
  }
}

// The memory a stream starts from: model.mem_init, unless eval.mem_init names one; only in
// memory mode (segments and sliding windows have no memory).
TEST(Settings, MemInitIsTheModelsUnlessTheEvaluationSaysOtherwise) {
  txl::test::TempDir dir;
  auto c = txl::test::tiny_experiment(dir.path());
  txl::models::TransformerLM model(c.model, 50);
  auto zero = [&]() {
    return txl::eval::segment_lookback(txl::eval::resolve_settings(c), model).zero_memory;
  };
  EXPECT_FALSE(zero());
  c.model.mem_init = txl::config::MemInit::kZeros;
  EXPECT_TRUE(zero());
  c.eval.mem_init = txl::config::EvalMemInit::kEmpty;
  EXPECT_FALSE(zero());
  c.model.mem_init = txl::config::MemInit::kEmpty;
  c.eval.mem_init = txl::config::EvalMemInit::kZeros;
  EXPECT_TRUE(zero());
  c.eval.mode = Mode::kSegments;
  EXPECT_FALSE(zero());
}

// The streams' options come from the settings: eval.tgt_len 0 means model.tgt_len, eval.window 0
// the evaluation tgt_len; ext_len is the model's; warm-up only primes a memory.
TEST(Settings, StreamOptionsFromTheExperimentConfig) {
  txl::config::ExperimentConfig experiment;
  experiment.model.tgt_len = 64;
  experiment.model.ext_len = 3;
  experiment.eval.batch_size = 5;
  experiment.eval.warmup = 32;
  experiment.eval.stride = 4;
  // warm-up and ext_len together only without memory
  experiment.eval.mode = txl::config::EvalMode::kSegments;
  auto eval = txl::eval::eval_stream_options(txl::eval::resolve_settings(experiment));
  EXPECT_EQ(eval.batch_size, 5);
  EXPECT_EQ(eval.tgt_len, 64);  // eval.tgt_len = 0 means model.tgt_len
  EXPECT_EQ(eval.ext_len, 3);
  EXPECT_EQ(eval.warmup, 0);  // nothing to warm up without memory
  auto sliding = txl::eval::sliding_stream_options(txl::eval::resolve_settings(experiment));
  EXPECT_EQ(sliding.window, 64);  // eval.window = 0 means the evaluation tgt_len
  EXPECT_EQ(sliding.stride, 4);
  experiment.eval.tgt_len = 16;
  experiment.eval.window = 100;
  experiment.eval.mode = txl::config::EvalMode::kMemory;
  experiment.model.ext_len = 0;
  EXPECT_EQ(txl::eval::eval_stream_options(txl::eval::resolve_settings(experiment)).tgt_len, 16);
  EXPECT_EQ(txl::eval::eval_stream_options(txl::eval::resolve_settings(experiment)).warmup, 32);
  EXPECT_EQ(txl::eval::sliding_stream_options(txl::eval::resolve_settings(experiment)).window, 100);
}

TEST(Settings, ShapeNamesOnlyTheLengthsTheModeUses) {
  txl::eval::Settings s;
  s.tgt_len = 32;
  s.mem_len = 64;
  s.window = 48;
  s.stride = 2;
  auto shape = txl::eval::shape_of(s);
  EXPECT_EQ(std::vector<int>({shape.tgt_len, shape.mem_len, shape.window, shape.stride}),
            std::vector<int>({32, 64, 0, 0}));
  s.mode = Mode::kSliding;
  shape = txl::eval::shape_of(s);
  EXPECT_EQ(std::vector<int>({shape.tgt_len, shape.mem_len, shape.window, shape.stride}),
            std::vector<int>({32, 0, 48, 2}));
  s.mode = Mode::kSegments;
  shape = txl::eval::shape_of(s);
  EXPECT_EQ(std::vector<int>({shape.tgt_len, shape.mem_len, shape.window, shape.stride}),
            std::vector<int>({32, 0, 0, 0}));
}

}  // namespace
