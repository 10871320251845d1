#pragma once
// Host side of the L2 prefetches (l2_prefetch.cuh): ranges of device memory a kernel streams into L2 for a
// later one (timing only: the same values with or without).
#include <cstdint>

namespace tf::cuda {

constexpr int64_t kL2Chunk = 32 << 10;  // bytes a bulk prefetch instruction (its range's chunk)

// [p, p + bytes): p 16-byte aligned; bytes rounded down to 16 per chunk.
struct L2Range {
  const void* p = nullptr;
  int64_t bytes = 0;
  bool evict_last = false;  // the lines brought in with an evict_last policy
  bool lines = false;       // per-thread prefetch.global.L2 of 128-byte lines (l2_prefetch_lines), not bulk
};

// The next qkv_norm_rope_kv / qk_norm_rope_kv launch on this thread issues these ranges (the weights of the
// linear after the attention) once its wait has passed, i.e. as the qkv projection completes, so that they
// stream during the attention; consumed by that launch. Benches (and a model's decode step) set it.
void set_l2_after_norm_rope(const L2Range& a, const L2Range& b = {});

}  // namespace tf::cuda
