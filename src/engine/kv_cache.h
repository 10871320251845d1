#pragma once
// The paged KV block pool: every layer's K and V live in [num_blocks, block_size, kv_heads, head_dim]
// tensors allocated once at startup from one memory budget; sequences hold block tables. Blocks are
// reference counted so that the prompt cache can share a prefix's blocks between streams. No allocation
// per step.
#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace tf {

class KvBlockPool {
 public:
  KvBlockPool(Backend& be, int layers, int kv_heads, int head_dim, int block_size, int num_blocks);

  int block_size() const { return block_size_; }
  int num_blocks() const { return int(refs_.size()); }
  int free_blocks() const { return int(free_.size()); }
  int used_blocks() const { return num_blocks() - free_blocks(); }
  int64_t bytes() const { return bytes_; }
  std::vector<KvLayer>& layers() { return layers_; }
  Backend& backend() { return be_; }

  // Grows `table` with fresh blocks so that it covers `tokens` positions; false (table unchanged) when
  // the pool is short.
  bool reserve(std::vector<int32_t>& table, int tokens);
  // Drops the table's references; blocks nobody references return to the free list.
  void release(std::vector<int32_t>& table);
  void ref(int32_t block) { ++refs_[block]; }
  void unref(int32_t block);
  int refs(int32_t block) const { return refs_[block]; }

  // One block's K and V for every layer, as bytes (for spill and snapshots).
  size_t block_bytes() const { return block_bytes_; }
  void read_block(int32_t block, std::vector<uint8_t>& out);
  void write_block(int32_t block, const std::vector<uint8_t>& in);

  static int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

 private:
  Backend& be_;
  int block_size_;
  int64_t bytes_ = 0;
  size_t layer_block_bytes_ = 0, block_bytes_ = 0;
  std::vector<KvLayer> layers_;
  std::vector<int32_t> free_;  // a stack: lowest ids handed out first
  std::vector<int32_t> refs_;
};

}  // namespace tf
