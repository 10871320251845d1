#pragma once
// Test helper: every position's logits of one token sequence, fed to a checkpoint on a backend (the CPU one
// unless given) in forwards of `chunk` rows (the comparisons against mlx-lm and transformers' goldens and
// the GPU-vs-CPU model tests use it).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "engine/kv_cache.h"
#include "models/model.h"

namespace tf::test {

inline std::vector<float> run_logits(Backend& be, const std::string& dir, const std::vector<int32_t>& tokens,
                                     int chunk) {
  Checkpoint ckpt = Checkpoint::open(dir);
  auto model = load_model(ckpt, be, 64);
  const auto& s = model->spec();
  KvBlockPool pool(be, s.layers, s.kv_heads, s.head_dim, 16, 8);
  std::vector<int32_t> table;
  EXPECT_TRUE(pool.reserve(table, int(tokens.size())));
  std::vector<float> all;
  for (int start = 0; start < int(tokens.size()); start += chunk) {
    const int end = std::min<int>(int(tokens.size()), start + chunk);
    BatchMeta m;
    m.block_size = 16;
    m.block_tables = {table};
    std::vector<int32_t> rows;
    for (int p = start; p < end; ++p) {
      m.tokens.push_back(tokens[size_t(p)]);
      m.positions.push_back(p);
      m.row_seq.push_back(0);
      m.slots.push_back(table[size_t(p / 16)] * 16 + p % 16);
      rows.push_back(p - start);
    }
    std::vector<float> logits;
    model->forward(m, pool.layers(), rows, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  pool.release(table);
  return all;
}

inline std::vector<float> run_logits(const std::string& dir, const std::vector<int32_t>& tokens, int chunk) {
  auto be = make_cpu_backend();
  return run_logits(*be, dir, tokens, chunk);
}

}  // namespace tf::test
