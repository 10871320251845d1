#pragma once
// The PTX every row-invariant linear kernel shares (linear.cu, linear_mid.cu, linear_tiled.cu and the
// quantized kernels through quant_common.cuh): the one MMA shape of the arithmetic contract (linear.cu's
// header), the streaming weight load and the cp.async / shared-memory loads of the tiled kernels. One
// definition, so the kernels cannot drift apart in the instruction that fixes the bits.
#include <cuda_bf16.h>

#include <cstdint>

namespace tf::cuda {

// D = A·B + D, m16n8k16, bf16 inputs, fp32 accumulation: A = 16 weight rows, B = 8 tokens.
__device__ __forceinline__ void mma_bf16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 32-wide K chunk of the decode kernels' layout (linear.cu's header): lane (g, t) holds weight rows
// n0+g (a) and n0+g+8 (b) and x (x) at k-values 8t..8t+7; the chunk is two m16n8k16 steps into c.
__device__ __forceinline__ void mma_chunk(float* c, const uint4& a, const uint4& b, const uint4& x) {
  mma_bf16(c, a.x, b.x, a.y, b.y, x.x, x.y);
  mma_bf16(c, a.z, b.z, a.w, b.w, x.z, x.w);
}

// 16 bytes of weights: read once, so they do not evict x (or scales) from L1.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// This thread's cp.async groups but the newest N have landed; the memory clobber keeps the compiler's
// shared-memory reads of them after it.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Every linear kernel's epilogue: the finished sum plus the bias (none, f32 or bf16), stored as f32 (logits,
// kept exact for sampling) or rounded to bf16.
__device__ __forceinline__ void store_biased(float s, const void* bias, int bias_kind, void* y, bool y_f32,
                                             int row, int col, int n) {
  if (bias_kind == 1) s += static_cast<const float*>(bias)[col];
  if (bias_kind == 2) s += __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[col]);
  if (y_f32)
    static_cast<float*>(y)[int64_t(row) * n + col] = s;
  else
    static_cast<__nv_bfloat16*>(y)[int64_t(row) * n + col] = __float2bfloat16(s);
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(addr));
  return r;
}

}  // namespace tf::cuda
