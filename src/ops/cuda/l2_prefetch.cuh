#pragma once
// Bulk L2 prefetches (cp.async.bulk.prefetch.L2, sm_90): weights a later kernel reads, streamed into L2 while
// the current kernel's chain is latency-bound (the attention, the routing) and the memory would sit idle.
// A prefetch only moves bytes into the cache: no value changes (docs/cuda-notes.md "Session 59").
#include <cstdint>

#include "ops/cuda/l2_prefetch.h"

namespace tf::cuda {

// One bulk prefetch of [p, p + n) (p and n multiples of 16; n < 2^32). `policy`: an L2 cache policy
// (createpolicy) or 0 for none.
__device__ __forceinline__ void l2_prefetch_bulk(const void* p, uint32_t n, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (policy)
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p), "r"(n), "l"(policy)
                 : "memory");
  else
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#else
  (void)p, (void)n, (void)policy;
#endif
}

// An evict_last policy for every line a prefetch brings (L2Range::evict_last).
__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}

// Chunks c = first, first + stride, ... (kL2Chunk bytes each, the last one shorter) of range r.
__device__ __forceinline__ void l2_prefetch_chunks(const L2Range& r, int64_t first, int64_t stride) {
  if (!r.p || r.bytes <= 0) return;
  const uint64_t pol = r.evict_last ? l2_evict_last_policy() : 0;
  for (int64_t c = first; c * kL2Chunk < r.bytes; c += stride) {
    const int64_t off = c * kL2Chunk;
    const int64_t n = (r.bytes - off < kL2Chunk ? r.bytes - off : kL2Chunk) & ~int64_t(15);
    if (n > 0) l2_prefetch_bulk(static_cast<const char*>(r.p) + off, uint32_t(n), pol);
  }
}

// Lines l = first, first + stride, ... (128 bytes each) of range r by prefetch.global.L2 (one per thread
// and line: no completion the thread or its CTA waits for, unlike a bulk prefetch).
__device__ __forceinline__ void l2_prefetch_lines(const L2Range& r, int64_t first, int64_t stride) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (!r.p || r.bytes <= 0) return;
  const char* base = static_cast<const char*>(r.p);
  for (int64_t l = first; l * 128 < r.bytes; l += stride) {
    if (r.evict_last)
      asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(base + l * 128) : "memory");
    else
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base + l * 128) : "memory");
  }
#else
  (void)r, (void)first, (void)stride;
#endif
}

}  // namespace tf::cuda
