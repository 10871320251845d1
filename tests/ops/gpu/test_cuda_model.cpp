// A whole model on the CUDA backend: the tiny Qwen3 checkpoint (tests/data/tiny) run by the dense
// decoder family. Its logits stay close to the CPU reference, and every token's logits and K/V are the
// same bits whether the prompt is prefilled in one forward, token by token (decode), in chunks of 5
// (a verify round's k+1 rows), 7 or 64, or batched with other sequences of different lengths. The MoE
// checkpoint is compared on prompts without routing near-ties, and both models give the same bits when
// every fresh device allocation is poisoned with NaN (TF_CUDA_POISON=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "checkpoint/checkpoint.h"
#include "models/model.h"
#include "ops/backend.h"
#include "ops/moe.h"

namespace tf {
namespace {

constexpr int kBlock = 16, kBlocksPerSeq = 16, kContext = 512;

struct Result {
  std::vector<std::vector<float>> logits;  // per position
  std::vector<std::vector<uint8_t>> kv;    // per position: every layer's K and V row bytes
};

// The checkpoint in the source tree, or relative to the working directory when the binary was carried
// to another machine (tools/device_cuda.sh runs from the repository root).
std::string tiny_dir(const std::string& name = "qwen3") {
  const std::string built_in = std::string(TF_SOURCE_DIR) + "/tests/data/tiny/" + name;
  return std::filesystem::exists(built_in) ? built_in : "tests/data/tiny/" + name;
}

class TinyModel {
 public:
  TinyModel(Backend& be, int max_seqs, const std::string& name = "qwen3")
      : be_(be), ckpt_(Checkpoint::open(tiny_dir(name))), model_(load_model(ckpt_, be, kContext)) {
    const auto& s = model_->spec();
    for (int l = 0; l < s.layers; ++l) {
      KvLayer kv;
      kv.k = be.alloc({int64_t(max_seqs) * kBlocksPerSeq, kBlock, s.kv_heads, s.head_dim}, be.act_dtype());
      kv.v = be.alloc({int64_t(max_seqs) * kBlocksPerSeq, kBlock, s.kv_heads, s.head_dim}, be.act_dtype());
      kv_.push_back(std::move(kv));
    }
  }
  const ModelSpec& spec() const { return model_->spec(); }

  // One row of sequence 0 at `pos` (positions before it already written); returns its logits.
  std::vector<float> step(int32_t token, int pos) {
    BatchMeta m;
    m.block_size = kBlock;
    m.block_tables = {std::vector<int32_t>(kBlocksPerSeq)};
    for (int b = 0; b < kBlocksPerSeq; ++b) m.block_tables[0][b] = b;
    m.tokens = {token}, m.positions = {pos}, m.row_seq = {0}, m.slots = {pos};
    std::vector<float> logits;
    model_->forward(m, kv_, {0}, logits);
    return logits;
  }

  // Prefills the sequences together, `chunk` positions of each per forward; sequence s owns blocks
  // [s * kBlocksPerSeq, (s + 1) * kBlocksPerSeq).
  std::vector<Result> run(const std::vector<std::vector<int32_t>>& seqs, int chunk) {
    std::vector<Result> out(seqs.size());
    std::vector<std::vector<int32_t>> tables(seqs.size());
    size_t longest = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int b = 0; b < kBlocksPerSeq; ++b) tables[s].push_back(int32_t(s * kBlocksPerSeq + b));
      longest = std::max(longest, seqs[s].size());
    }
    for (size_t start = 0; start < longest; start += chunk) {
      BatchMeta m;
      m.block_size = kBlock;
      m.block_tables = tables;
      std::vector<std::pair<int, int>> who;  // (sequence, position) of each row
      for (size_t s = 0; s < seqs.size(); ++s)
        for (size_t p = start; p < std::min(seqs[s].size(), start + chunk); ++p) {
          m.tokens.push_back(seqs[s][p]), m.positions.push_back(int(p)), m.row_seq.push_back(int(s));
          m.slots.push_back(tables[s][p / kBlock] * kBlock + int(p % kBlock));
          who.push_back({int(s), int(p)});
        }
      std::vector<int32_t> rows(who.size());
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
      std::vector<float> logits;
      model_->forward(m, kv_, rows, logits);
      const size_t V = size_t(spec().vocab);
      for (size_t i = 0; i < who.size(); ++i)
        out[who[i].first].logits.emplace_back(logits.begin() + i * V, logits.begin() + (i + 1) * V);
    }
    const size_t row = size_t(spec().kv_heads) * spec().head_dim * dtype_size(be_.act_dtype());
    for (size_t s = 0; s < seqs.size(); ++s)
      for (size_t p = 0; p < seqs[s].size(); ++p) {
        std::vector<uint8_t> bytes(2 * row * kv_.size());
        const size_t slot = size_t(tables[s][p / kBlock]) * kBlock + p % kBlock;
        for (size_t l = 0; l < kv_.size(); ++l) {
          be_.read_raw(kv_[l].k, slot * row, row, bytes.data() + 2 * l * row);
          be_.read_raw(kv_[l].v, slot * row, row, bytes.data() + (2 * l + 1) * row);
        }
        out[s].kv.push_back(std::move(bytes));
      }
    return out;
  }

 private:
  Backend& be_;
  Checkpoint ckpt_;
  std::unique_ptr<Model> model_;
  std::vector<KvLayer> kv_;
};

std::vector<int32_t> random_tokens(int n, int vocab, std::mt19937& rng) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % vocab);
  return t;
}

class CudaTinyModel : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = make_cuda_backend(0, &why);
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << why;
  }
  std::unique_ptr<Backend> gpu_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(CudaTinyModel, LogitsCloseToCpuReference) {
  TinyModel g(*gpu_, 1);
  auto cpu = make_cpu_backend();
  TinyModel c(*cpu, 1);
  const auto ids = random_tokens(100, g.spec().vocab, rng_);
  const Result rg = g.run({ids}, 100)[0], rc = c.run({ids}, 100)[0];
  for (size_t p = 0; p < ids.size(); ++p) {
    double num = 0, den = 0;
    for (size_t j = 0; j < rc.logits[p].size(); ++j) {
      ASSERT_TRUE(std::isfinite(rg.logits[p][j])) << "position " << p;
      num += std::pow(double(rg.logits[p][j]) - rc.logits[p][j], 2);
      den += std::pow(double(rc.logits[p][j]), 2);
    }
    EXPECT_LT(std::sqrt(num / den), 5e-2) << "position " << p << " (bf16 activations vs the fp32 reference)";
  }
}

TEST_F(CudaTinyModel, LogitsAndKvBitwiseInvariantToChunkingAndBatching) {
  TinyModel g(*gpu_, 3);
  const int vocab = g.spec().vocab;
  const auto a = random_tokens(208, vocab, rng_);
  const Result whole = g.run({a}, 208)[0];
  for (int chunk : {1, 5, 7, 64}) {
    const Result r = g.run({a}, chunk)[0];
    for (size_t p = 0; p < a.size(); ++p) {
      ASSERT_EQ(0, std::memcmp(r.logits[p].data(), whole.logits[p].data(), r.logits[p].size() * 4))
          << "logits of position " << p << ", chunks of " << chunk;
      ASSERT_EQ(r.kv[p], whole.kv[p]) << "K/V of position " << p << ", chunks of " << chunk;
    }
  }
  // Batched with two other sequences of different lengths (and the sequence not first in the batch).
  for (int chunk : {1, 7, 208}) {
    const auto rs = g.run({random_tokens(150, vocab, rng_), a, random_tokens(37, vocab, rng_)}, chunk);
    for (size_t p = 0; p < a.size(); ++p) {
      ASSERT_EQ(0, std::memcmp(rs[1].logits[p].data(), whole.logits[p].data(), whole.logits[p].size() * 4))
          << "batched logits of position " << p << ", chunks of " << chunk;
      ASSERT_EQ(rs[1].kv[p], whole.kv[p]) << "batched K/V of position " << p << ", chunks of " << chunk;
    }
  }
}

// Router probability gap (top_k-th expert minus the next) below which a prompt position counts as a
// near-tie. A NumPy emulation of the GPU's bf16 rounding (weights and every activation) on this tiny
// model, 25-40 random prompts of 40 tokens: rows it routed to another expert set had f32 gaps up to
// 8.4e-3, unflipped rows' gaps moved by up to 1.5e-2 (the last MoE layer, whose input carries the most
// rounding), and a flip in the first MoE layer changed every later position through attention: the H200
// runs that saw 1, 1 and 23 of 40 random-prompt positions off. 3e-2 leaves twice the largest move.
constexpr float kTieMargin = 3e-2f;

// A prompt of n tokens whose every position routes, on the CPU reference, with a gap of at least
// kTieMargin in every MoE layer: built token by token, a position's token drawn until its routing is
// clear (about half the draws are). Comparing the GPU with the CPU on it is then exact about routing.
std::vector<int32_t> untied_prompt(int n, std::mt19937& rng) {
  auto cpu = make_cpu_backend();
  TinyModel c(*cpu, 1, "qwen3-moe");
  std::vector<int32_t> ids;
  std::vector<float> margins;
  for (int p = 0; p < n; ++p) {
    bool clear = false;
    for (int attempt = 0; attempt < 200 && !clear; ++attempt) {
      const int32_t t = int32_t(rng() % uint32_t(c.spec().vocab));
      margins.clear();
      set_route_margin_sink(&margins);
      c.step(t, p);  // rewrites slot p: the accepted draw is the last one written
      set_route_margin_sink(nullptr);
      EXPECT_FALSE(margins.empty()) << "the CPU reference recorded no routing";
      clear = !margins.empty() && *std::min_element(margins.begin(), margins.end()) >= kTieMargin;
      if (clear) ids.push_back(t);
    }
    if (!clear) ADD_FAILURE() << "no token without a routing near-tie at position " << p;
  }
  return ids;
}

// The MoE family on the GPU: close to the CPU reference, and a token's logits and K/V identical whatever
// other sequences (and so expert row counts) share the forward and however the prompt is chunked.
TEST_F(CudaTinyModel, MoeCloseToCpuAndBitwiseInvariant) {
  TinyModel g(*gpu_, 3, "qwen3-moe");
  auto cpu = make_cpu_backend();
  TinyModel c(*cpu, 1, "qwen3-moe");
  const int vocab = g.spec().vocab;
  const auto a = untied_prompt(40, rng_);
  ASSERT_EQ(a.size(), 40u);
  const auto b = random_tokens(23, vocab, rng_), d = random_tokens(57, vocab, rng_);
  std::vector<float> margins;
  set_route_margin_sink(&margins);
  const Result rc = c.run({a}, 40)[0];
  set_route_margin_sink(nullptr);
  ASSERT_FALSE(margins.empty());
  // The prompt was checked one position at a time; prefilled at once the margins are the same up to
  // f32 noise.
  EXPECT_GE(*std::min_element(margins.begin(), margins.end()), kTieMargin / 2);
  const Result rg = g.run({a}, 40)[0];
  for (size_t p = 0; p < a.size(); ++p) {
    double num = 0, den = 0;
    for (size_t j = 0; j < rc.logits[p].size(); ++j) {
      ASSERT_TRUE(std::isfinite(rg.logits[p][j])) << "position " << p;
      num += std::pow(double(rg.logits[p][j]) - rc.logits[p][j], 2);
      den += std::pow(double(rc.logits[p][j]), 2);
    }
    // No near-tie anywhere in the prompt: every position routes as on the CPU, so every one is close.
    EXPECT_LT(std::sqrt(num / den), 5e-2) << "position " << p << " (bf16 activations vs the fp32 reference)";
  }
  for (int chunk : {1, 7}) {
    const Result mixed = g.run({b, a, d}, chunk)[1];
    for (size_t p = 0; p < a.size(); ++p) {
      ASSERT_EQ(0, std::memcmp(mixed.logits[p].data(), rg.logits[p].data(), rg.logits[p].size() * 4))
          << "chunk " << chunk << " position " << p;
      ASSERT_EQ(mixed.kv[p], rg.kv[p]) << "chunk " << chunk << " position " << p;
    }
  }
}

// Every tensor the backend hands out filled with 0xFF bytes (NaN) must change no bit of the logits or of
// the written K/V: a kernel that reads memory nothing wrote (a fresh or recycled cache block, the unzeroed
// KV pool) would otherwise depend on what the block last held.
TEST_F(CudaTinyModel, BitsUnchangedByPoisonedAllocations) {
  for (const std::string name : {"qwen3", "qwen3-moe"}) {
    std::vector<std::vector<int32_t>> seqs;  // drawn once the model's vocabulary is known
    std::vector<Result> plain[2];
    for (int poisoned = 0; poisoned < 2; ++poisoned) {
      gpu_.reset();  // one backend at a time: it owns the process's device allocator
      if (poisoned) setenv("TF_CUDA_POISON", "1", 1);
      std::string why;
      gpu_ = make_cuda_backend(0, &why);
      unsetenv("TF_CUDA_POISON");
      ASSERT_TRUE(gpu_) << why;
      TinyModel g(*gpu_, 3, name);
      const int vocab = g.spec().vocab;
      if (seqs.empty())
        seqs = {random_tokens(23, vocab, rng_), random_tokens(40, vocab, rng_),
                random_tokens(57, vocab, rng_)};
      for (int chunk : {7, 64}) {
        std::vector<Result> r = g.run(seqs, chunk);
        plain[poisoned].insert(plain[poisoned].end(), r.begin(), r.end());
      }
    }
    ASSERT_EQ(plain[0].size(), plain[1].size());
    for (size_t i = 0; i < plain[0].size(); ++i)
      for (size_t p = 0; p < plain[0][i].logits.size(); ++p) {
        const auto& want = plain[0][i].logits[p];
        for (float v : plain[1][i].logits[p])
          ASSERT_TRUE(std::isfinite(v)) << name << " run " << i << " position " << p;
        ASSERT_EQ(0, std::memcmp(plain[1][i].logits[p].data(), want.data(), want.size() * 4))
            << name << " run " << i << " position " << p << ": logits depend on unwritten device memory";
        ASSERT_EQ(plain[1][i].kv[p], plain[0][i].kv[p])
            << name << " run " << i << " position " << p << ": K/V depend on unwritten device memory";
      }
  }
}

}  // namespace
}  // namespace tf
