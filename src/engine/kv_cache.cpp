#include "engine/kv_cache.h"

#include "core/error.h"

namespace tf {

KvBlockPool::KvBlockPool(Backend& be, int layers, int kv_heads, int head_dim, int block_size, int num_blocks)
    : block_size_(block_size) {
  TF_CHECK(block_size > 0 && num_blocks > 0, "KV pool needs at least one block");
  for (int l = 0; l < layers; ++l) {
    KvLayer kv;
    kv.k = be.alloc({num_blocks, block_size, kv_heads, head_dim}, be.act_dtype());
    kv.v = be.alloc({num_blocks, block_size, kv_heads, head_dim}, be.act_dtype());
    bytes_ += int64_t(kv.k.nbytes() + kv.v.nbytes());
    layers_.push_back(std::move(kv));
  }
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool KvBlockPool::reserve(std::vector<int32_t>& table, int tokens) {
  const int need = blocks_for(tokens, block_size_) - int(table.size());
  if (need <= 0) return true;
  if (need > int(free_.size())) return false;
  for (int i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvBlockPool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  table.clear();
}

}  // namespace tf
