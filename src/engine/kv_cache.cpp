#include "engine/kv_cache.h"

#include "core/error.h"

namespace tf {

KvBlockPool::KvBlockPool(Backend& be, int layers, int kv_heads, int head_dim, int block_size, int num_blocks)
    : be_(be), block_size_(block_size) {
  TF_CHECK(block_size > 0 && num_blocks > 0, "KV pool needs at least one block");
  for (int l = 0; l < layers; ++l) {
    KvLayer kv;
    kv.k = be.alloc({num_blocks, block_size, kv_heads, head_dim}, be.act_dtype());
    kv.v = be.alloc({num_blocks, block_size, kv_heads, head_dim}, be.act_dtype());
    bytes_ += int64_t(kv.k.nbytes() + kv.v.nbytes());
    layers_.push_back(std::move(kv));
  }
  layer_block_bytes_ = size_t(block_size) * kv_heads * head_dim * dtype_size(be.act_dtype());
  block_bytes_ = layer_block_bytes_ * 2 * size_t(layers);
  refs_.assign(size_t(num_blocks), 0);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool KvBlockPool::reserve(std::vector<int32_t>& table, int tokens) {
  const int need = blocks_for(tokens, block_size_) - int(table.size());
  if (need <= 0) return true;
  if (need > int(free_.size())) return false;
  for (int i = 0; i < need; ++i) {
    table.push_back(free_.back());
    refs_[free_.back()] = 1;
    free_.pop_back();
  }
  return true;
}

void KvBlockPool::unref(int32_t block) {
  TF_CHECK(refs_[block] > 0, "KV block " + std::to_string(block) + " released twice");
  if (--refs_[block] == 0) free_.push_back(block);
}

void KvBlockPool::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) unref(*it);
  table.clear();
}

void KvBlockPool::read_block(int32_t block, std::vector<uint8_t>& out) {
  out.resize(block_bytes_);
  size_t at = 0;
  for (auto& l : layers_) {
    be_.read_raw(l.k, size_t(block) * layer_block_bytes_, layer_block_bytes_, out.data() + at);
    at += layer_block_bytes_;
    be_.read_raw(l.v, size_t(block) * layer_block_bytes_, layer_block_bytes_, out.data() + at);
    at += layer_block_bytes_;
  }
}

void KvBlockPool::write_block(int32_t block, const std::vector<uint8_t>& in) {
  TF_CHECK(in.size() == block_bytes_, "KV block data has the wrong size");
  size_t at = 0;
  for (auto& l : layers_) {
    be_.write_raw(l.k, size_t(block) * layer_block_bytes_, in.data() + at, layer_block_bytes_);
    at += layer_block_bytes_;
    be_.write_raw(l.v, size_t(block) * layer_block_bytes_, in.data() + at, layer_block_bytes_);
    at += layer_block_bytes_;
  }
}

}  // namespace tf
