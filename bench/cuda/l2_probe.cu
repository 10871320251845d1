// Does an L2 prefetch (cp.async.bulk.prefetch.L2, or prefetch.global.L2 a line a thread) leave its bytes in
// L2 for a later kernel, do they survive a stream of other bytes in between, and how long is the kernel that
// issues them held? (docs/cuda-notes.md "Session 59", runs 540-541: L2 prefetches had lost in runs 69, 138,
// 193, 266, 395 and 429 without this being measured alone; they lost again in the MoE chain, and the code is
// in bench/cuda/results/run540-541-lost-l2-prefetch.patch.) Each case: L2 flushed by a 256 MB read, then what
// the case does, then what it times between two events (median, min, max of 15).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/cuda/cuda_check.h"

namespace {

constexpr int64_t kChunk = 32 << 10;  // bytes a bulk prefetch instruction

// [p, p + bytes): p 16-byte aligned.
struct L2Range {
  const void* p = nullptr;
  int64_t bytes = 0;
  bool evict_last = false;  // the lines brought in with an evict_last policy
  bool lines = false;       // per-thread prefetch.global.L2 of 128-byte lines, not bulk
};

// Chunks c = first, first + stride, ... of r, one cp.async.bulk.prefetch.L2 each.
__device__ void prefetch_chunks(const L2Range& r, int64_t first, int64_t stride) {
  uint64_t pol = 0;
  if (r.evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  for (int64_t c = first; c * kChunk < r.bytes; c += stride) {
    const int64_t off = c * kChunk;
    const uint32_t n = uint32_t((r.bytes - off < kChunk ? r.bytes - off : kChunk) & ~int64_t(15));
    const char* a = static_cast<const char*>(r.p) + off;
    if (r.evict_last)
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(a), "r"(n), "l"(pol)
                   : "memory");
    else
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(n) : "memory");
  }
}

// Lines l = first, first + stride, ... (128 bytes each) of r, one prefetch.global.L2 each.
__device__ void prefetch_lines(const L2Range& r, int64_t first, int64_t stride) {
  const char* base = static_cast<const char*>(r.p);
  for (int64_t l = first; l * 128 < r.bytes; l += stride) {
    if (r.evict_last)
      asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(base + l * 128) : "memory");
    else
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base + l * 128) : "memory");
  }
}

// Reads n 16-byte words; policy 1: ld with an L2 evict_first hint.
__global__ void read_kernel(const uint4* p, int64_t n, int policy, unsigned* sink) {
  uint32_t acc = 0;
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
#pragma unroll 8
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    uint4 v;
    if (policy == 1)
      asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p + i), "l"(pol));
    else
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void prefetch_kernel(L2Range r) {
  prefetch_chunks(r, blockIdx.x + int64_t(gridDim.x) * threadIdx.x, int64_t(gridDim.x) * 32);
}

__global__ void line_prefetch_kernel(L2Range r) {
  prefetch_lines(r, blockIdx.x * int64_t(blockDim.x) + threadIdx.x, int64_t(gridDim.x) * blockDim.x);
}

__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < ns);
}

}  // namespace

int main() {
  const int64_t kA = 16 << 20, kB = 64 << 20, kFlush = 256 << 20;
  char *a, *b, *f;
  unsigned* sink;
  TF_CUDA_CHECK(cudaMalloc(&a, kA));
  TF_CUDA_CHECK(cudaMalloc(&b, kB));
  TF_CUDA_CHECK(cudaMalloc(&f, kFlush));
  TF_CUDA_CHECK(cudaMalloc(&sink, 4));
  TF_CUDA_CHECK(cudaMemset(a, 1, kA));
  TF_CUDA_CHECK(cudaMemset(b, 2, kB));
  TF_CUDA_CHECK(cudaMemset(f, 3, kFlush));
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, L2 %d MiB, persisting max %d MiB\n", prop.name, prop.l2CacheSize >> 20,
              prop.persistingL2CacheMaxSize >> 20);
  const int grid = prop.multiProcessorCount * 4;
  auto read = [&](const char* p, int64_t bytes, int policy = 0) {
    read_kernel<<<grid, 256>>>(reinterpret_cast<const uint4*>(p), bytes / 16, policy, sink);
  };
  cudaEvent_t e0, e1;
  TF_CUDA_CHECK(cudaEventCreate(&e0));
  TF_CUDA_CHECK(cudaEventCreate(&e1));
  // One case: flush, `before` (untimed), then `timed` between the events; median us of 15.
  auto run = [&](const char* name, auto before, auto timed) {
    std::vector<float> us;
    for (int i = 0; i < 15; ++i) {
      read(f, kFlush);
      before();
      TF_CUDA_CHECK(cudaEventRecord(e0));
      timed();
      TF_CUDA_CHECK(cudaEventRecord(e1));
      TF_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      TF_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      us.push_back(ms * 1e3f);
    }
    std::sort(us.begin(), us.end());
    std::printf("| %s | %.1f | %.1f | %.1f |\n", name, us[7], us[0], us[14]);
  };
  auto none = [] {};
  auto read_a = [&] { read(a, kA); };
  auto spin = [&] { spin_kernel<<<1, 32>>>(100000); };
  // blocks > 0: bulk prefetches by `blocks` one-warp blocks; 0: line prefetches by 4 blocks of 256 an SM.
  auto pf = [&](int blocks, bool last) {
    return [&, blocks, last] {
      if (blocks > 0)
        prefetch_kernel<<<blocks, 32>>>(L2Range{a, kA, last, false});
      else
        line_prefetch_kernel<<<grid, 256>>>(L2Range{a, kA, last, true});
    };
  };
  for (int persist : {0, 1}) {
    if (persist) {
      TF_CUDA_CHECK(
          cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, size_t(prop.persistingL2CacheMaxSize)));
      std::printf("\npersisting L2 set aside: %d MiB\n", prop.persistingL2CacheMaxSize >> 20);
    }
    std::printf(
        "| case (read of A, 16 MB, after an L2 flush) | median us | min | max |\n|---|---|---|---|\n");
    run("cold", none, read_a);
    run("A read once before (loads)", read_a, read_a);
    for (int blocks : {8, 132, 0}) {
      for (bool last : {false, true}) {
        char what[64], n0[160], n1[160], n2[160], n3[160], n4[160];
        if (blocks > 0)
          std::snprintf(what, sizeof what, "bulk, %d blocks%s", blocks, last ? ", evict_last" : "");
        else
          std::snprintf(what, sizeof what, "lines, %d x 256 threads%s", grid, last ? ", evict_last" : "");
        std::snprintf(n0, sizeof n0, "the prefetch kernel alone (%s)", what);
        std::snprintf(n1, sizeof n1, "prefetched (%s), 100 us idle", what);
        std::snprintf(n2, sizeof n2, "prefetch (%s) + read, timed together", what);
        std::snprintf(n3, sizeof n3, "prefetched (%s), idle, then 64 MB of other loads", what);
        std::snprintf(n4, sizeof n4, "prefetched (%s), idle, then 64 MB of evict_first loads", what);
        auto p = pf(blocks, last);
        run(n0, none, p);
        run(
            n1, [&] { p(), spin(); }, read_a);
        run(n2, none, [&] { p(), read_a(); });
        run(
            n3, [&] { p(), spin(), read(b, kB); }, read_a);
        run(
            n4, [&] { p(), spin(), read(b, kB, 1); }, read_a);
      }
    }
    run(
        "A by loads, then 64 MB of other loads", [&] { read_a(), read(b, kB); }, read_a);
    run("64 MB of other loads (timed)", none, [&] { read(b, kB); });
  }
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
