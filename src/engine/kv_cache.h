#pragma once
// The paged KV block pool: every layer's K and V live in [num_blocks, block_size, kv_heads, head_dim]
// tensors allocated once at startup from one memory budget; sequences hold block tables. No allocation
// per step. (The prefix index for the prompt cache builds on this.)
#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace tf {

class KvBlockPool {
 public:
  KvBlockPool(Backend& be, int layers, int kv_heads, int head_dim, int block_size, int num_blocks);

  int block_size() const { return block_size_; }
  int num_blocks() const { return int(layers_.empty() ? 0 : layers_[0].k.dim(0)); }
  int free_blocks() const { return int(free_.size()); }
  int used_blocks() const { return num_blocks() - free_blocks(); }
  int64_t bytes() const { return bytes_; }
  std::vector<KvLayer>& layers() { return layers_; }

  // Grows `table` so that it covers `tokens` positions; false (table unchanged) when the pool is short.
  bool reserve(std::vector<int32_t>& table, int tokens);
  void release(std::vector<int32_t>& table);
  static int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

 private:
  int block_size_;
  int64_t bytes_ = 0;
  std::vector<KvLayer> layers_;
  std::vector<int32_t> free_;  // a stack: lowest ids handed out first
};

}  // namespace tf
