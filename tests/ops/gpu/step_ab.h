#pragma once
// The A/B of the one-kernel decode step's GPU tests (ops/cuda/decode_step.h; test_cuda_decode_step.cpp,
// test_cuda_moe_step.cpp): a checkpoint loaded on the CUDA backend runs the same stream of rounds on two
// zeroed KV pools, the step on for one, off for the other -- prefill, then decode rounds (one row: the step
// where it is on), verify rounds of several rows and rounds that want hidden states (both: the op chain),
// graphed and eagerly -- and every round's logits, sampled tokens and hidden states and, at the end, every
// byte of both pools must be equal. Parameterised by the model's shape as the pools see it.
#include <gtest/gtest.h>
#include <stdio.h>  // fputs

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/log.h"
#include "core/tensor.h"
#include "models/model.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "random_qwen3.h"

namespace tf::test {

// What the A/B needs of the model: its KV layers and heads, the vocabulary, and the pool (context positions
// in blocks of `block`; the model loads with that context).
struct StepAbShape {
  int layers = 0, kv_heads = 0, head_dim = 128, vocab = 0, context = 0, block = 16;
  int blocks() const { return context / block; }
};

// The sequence's block table: every block of the pool in a fixed shuffled order (a paged pool).
inline std::vector<int32_t> shuffled_table(int blocks) {
  std::vector<int32_t> t(static_cast<size_t>(blocks));
  std::iota(t.begin(), t.end(), 0);
  std::mt19937 rng(99);
  std::shuffle(t.begin(), t.end(), rng);
  return t;
}

// One sequence's rows `tokens` at positions start.. in blocks of `block` of `table`.
inline BatchMeta make_meta(int start, const std::vector<int32_t>& tokens, const std::vector<int32_t>& table,
                           int block) {
  BatchMeta m;
  m.block_size = block;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int pos = start + int(i);
    m.tokens.push_back(tokens[i]);
    m.positions.push_back(pos);
    m.row_seq.push_back(0);
    m.slots.push_back(table[size_t(pos / block)] * block + pos % block);
  }
  m.block_tables.push_back(table);
  return m;
}

// How many one-kernel steps loading the checkpoint at `dir` with `context` positions prepared (the model is
// unloaded again). `why`, when given: the model's log lines about the step (DecodeStep::make's reason when
// it prepared none), read at debug level and echoed to stderr.
inline int64_t steps_prepared_loading(Backend& be, const std::string& dir, int context,
                                      std::string* why = nullptr) {
  Checkpoint ckpt = Checkpoint::open(dir);
  const int64_t before = cuda::decode_steps_prepared();
  if (!why) {
    auto model = load_model(ckpt, be, context);
    return cuda::decode_steps_prepared() - before;
  }
  // The model logs why at debug level (dense_decoder.cpp's prepare_step): read stderr while it loads.
  struct Capture {
    std::string err;
    bool read = false;
    const LogLevel was = log_level();
    Capture() {
      set_log_level(LogLevel::Debug);
      ::testing::internal::CaptureStderr();
    }
    ~Capture() {
      if (!read) err = ::testing::internal::GetCapturedStderr();
      set_log_level(was);
      fputs(err.c_str(), stderr);
    }
  };
  std::string err;
  {
    Capture c;
    auto model = load_model(ckpt, be, context);
    err = c.err = ::testing::internal::GetCapturedStderr();
    c.read = true;
  }
  why->clear();
  for (size_t at = 0; at < err.size();) {
    const size_t end = std::min(err.find('\n', at), err.size());
    const std::string line = err.substr(at, end - at);
    if (line.find("decode step") != std::string::npos) *why += (why->empty() ? "" : "; ") + line;
    at = end + 1;
  }
  if (why->empty())
    *why =
        "no log line about the step: the model asked for none (graphs off, e.g. an MoE that routes on "
        "the host, or separate q/k/v projections)";
  return cuda::decode_steps_prepared() - before;
}

// Loads the checkpoint at `dir` (with s.context positions), prefills `start` tokens (rows of 512) into both
// pools, then runs `rounds` rounds from there on both: the step on for pool A, off for pool B. Round i: a
// verify round of 3 rows when i % 7 == 5, a round that wants hidden states when i % 7 == 3, else a decode
// round; graphs on all but every fourth round; greedy and sampled rows in turn. Returns the rounds in which
// pool A's forward took the step (-1 after failures). Where logits differ: how many and by how much, and
// which layers' new K/V rows differ.
inline int64_t run_step_ab(Backend& be, const StepAbShape& s, const std::string& dir, int start, int rounds) {
  Checkpoint ckpt = Checkpoint::open(dir);
  auto model = load_model(ckpt, be, s.context);
  std::vector<KvLayer> pool_a = zeroed_pool(be, s.layers, s.blocks(), s.block, s.kv_heads, s.head_dim),
                       pool_b = zeroed_pool(be, s.layers, s.blocks(), s.block, s.kv_heads, s.head_dim);
  const std::vector<int32_t> table = shuffled_table(s.blocks());
  std::mt19937 rng(start);
  std::uniform_int_distribution<int32_t> tok(3, s.vocab - 1);
  std::vector<int32_t> history;
  for (int p = 0; p < start; ++p) history.push_back(tok(rng));
  for (int at = 0; at < start - 1;) {  // the last prompt token is the first decode row
    const int n = std::min(512, start - 1 - at);
    const BatchMeta m = make_meta(at, {history.begin() + at, history.begin() + at + n}, table, s.block);
    std::vector<float> logits;
    model->forward(m, pool_a, {}, logits);
    model->forward(m, pool_b, {}, logits);
    at += n;
  }
  int len = start - 1;
  const int64_t steps_before = cuda::decode_step_rounds();
  for (int i = 0; i < rounds; ++i) {
    std::vector<int32_t> rows = {history[size_t(len)]};
    if (i % 7 == 5)
      for (int d = 0; d < 2; ++d) rows.push_back(tok(rng));
    const BatchMeta m = make_meta(len, rows, table, s.block);
    const int R = m.rows();
    std::vector<int32_t> logit_rows(static_cast<size_t>(R));
    std::iota(logit_rows.begin(), logit_rows.end(), 0);
    std::vector<RowSampling> sampling;
    for (int r = 0; r < R; ++r) sampling.push_back({i % 2 ? 0.7f : 0.f, 5, int64_t(m.positions[r]) + 1});
    const bool graph = i % 4 != 3, hidden = i % 7 == 3;
    std::vector<float> logits_a, logits_b;
    std::vector<int32_t> tokens_a, tokens_b;
    Tensor hidden_a, hidden_b;
    cuda::set_decode_step(true);
    model->forward(m, pool_a, logit_rows,
                   Model::Outputs{&logits_a, &sampling, &tokens_a, hidden ? &hidden_a : nullptr, graph});
    cuda::set_decode_step(false);
    model->forward(m, pool_b, logit_rows,
                   Model::Outputs{&logits_b, &sampling, &tokens_b, hidden ? &hidden_b : nullptr, graph});
    cuda::set_decode_step(true);
    const std::string where = "round " + std::to_string(i) + " at position " + std::to_string(len);
    EXPECT_EQ(tokens_a, tokens_b) << where;
    EXPECT_EQ(logits_a.size(), size_t(R) * size_t(s.vocab)) << where;
    EXPECT_EQ(logits_a.size(), logits_b.size()) << where;
    if (logits_a.size() != logits_b.size()) return -1;
    if (std::memcmp(logits_a.data(), logits_b.data(), logits_a.size() * 4) != 0) {
      // Where they part: the logits' differences and each layer's new K/V row.
      int n_diff = 0;
      float max_diff = 0.f;
      for (size_t j = 0; j < logits_a.size(); ++j)
        if (logits_a[j] != logits_b[j])
          ++n_diff, max_diff = std::max(max_diff, std::fabs(logits_a[j] - logits_b[j]));
      std::string rows_kv;
      const size_t bytes = size_t(s.kv_heads) * size_t(s.head_dim) * 2, row = size_t(m.slots[0]) * bytes;
      for (int l = 0; l < s.layers; ++l)
        for (int kvi = 0; kvi < 2; ++kvi) {
          std::vector<uint8_t> ra(bytes), rb(bytes);
          be.read_raw(kvi ? pool_a[size_t(l)].v : pool_a[size_t(l)].k, row, bytes, ra.data());
          be.read_raw(kvi ? pool_b[size_t(l)].v : pool_b[size_t(l)].k, row, bytes, rb.data());
          rows_kv += " layer " + std::to_string(l) + (kvi ? " v " : " k ") + (ra == rb ? "equal" : "DIFFER");
        }
      ADD_FAILURE() << where << ": " << n_diff << " of " << logits_a.size() << " logits differ, by up to "
                    << max_diff << "; new K/V rows:" << rows_kv;
    }
    float mx = 0.f;
    for (float v : logits_a) mx = std::max(mx, std::fabs(v));
    EXPECT_TRUE(std::isfinite(mx) && mx > 0.f) << where;  // real values, not zeros
    if (hidden) {
      EXPECT_EQ(std::memcmp(hidden_a.raw(), hidden_b.raw(), hidden_a.nbytes()), 0) << where;
    }
    // Accept every row: the next round starts after them, with the token sampled on the last row.
    history.resize(size_t(len) + 1);
    history.insert(history.end(), rows.begin() + 1, rows.end());
    len += R;
    history.push_back(tokens_a.back());
    if (::testing::Test::HasFailure() && i >= 4) return -1;  // a few rounds, graphed and eager
  }
  for (int l = 0; l < s.layers; ++l) {
    EXPECT_TRUE(device_bytes(be, pool_a[size_t(l)].k) == device_bytes(be, pool_b[size_t(l)].k))
        << "layer " << l;
    EXPECT_TRUE(device_bytes(be, pool_a[size_t(l)].v) == device_bytes(be, pool_b[size_t(l)].v))
        << "layer " << l;
  }
  return cuda::decode_step_rounds() - steps_before;
}

}  // namespace tf::test
