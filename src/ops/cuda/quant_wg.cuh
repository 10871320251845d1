#pragma once
// Device code shared by the warpgroup-MMA 4-bit kernels (q4_wg_kernel in quant_wg.cu, q4_ks_kernel in
// quant_ks.cu): x's 16 token rows staged into shared memory as wgmma's operand B, and a chunk's weights as
// operand A's register fragments. Both give q4_decode_kernel's bits (quant_wg.cu says why).
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/launch.h"  // ld_act16
#include "ops/cuda/quant_common.cuh"

namespace tf::cuda {

// x's chunks c0 .. c0 + chunks - 1 (32 values of each of the 16 token rows; rows past m zeros) into shared
// memory at xs in the permuted no-swizzle K-major layout, local chunk c at bytes 1024 c: unit (c, ng) is
// chunk c of token rows 8 ng .. 8 ng + 7; lane (r, u) loads row 8 ng + r's values 32 (c0 + c) + 8u .. + 7 (16
// bytes: a warp's load is 8 rows' 64 contiguous bytes) and stores them as four 4-byte pieces (pair p = 2h +
// kh: step 2c + h, half kh) to byte (2c + h) 512 + 256 ng + 128 kh + 16 r + 4u: a warp's 32 stores of a piece
// hit 32 banks. Step h of chunk c then holds, at logical k 2t + e and 2t + 8 + e, the values k 32c + 8t + 4h
// + e and 32c + 8t + 4h + 2 + e: the k the A fragment's lane t holds (mma_chunk's pairing). kWarps warps
// (thread tid of them) share the 2 chunks units (2 chunks % kWarps == 0 unless kRagged), kXBatch at a time a
// warp, their loads in flight together. (Four 4-byte cp.async a unit, each fetching the unit's sectors again,
// cost ~5 us a call at K = 4096: run 448.) The caller fences (fence_proxy_async) and synchronises.
// NT = 32 (q4_ks_kernel's 17-32 rows): 32 token rows, units (c, ng) for ng 0-3, a k16 step's 32 rows in 1024
// bytes (core matrices still 128 bytes apart along K and 256 along the tokens: the same descriptor).
// One lane's 16-byte unit of x (k values 8u .. 8u + 7 of a row) stored as the layout's four 4-byte pieces:
// at d and d + 128 (step 2c), d + step and d + step + 128 (step 2c + 1).
__device__ __forceinline__ void st_perm_unit(uint32_t d, const uint4& v, int step) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(d), "r"(v.x) : "memory");
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(d + 128), "r"(v.y) : "memory");
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(d + step), "r"(v.z) : "memory");
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(d + step + 128), "r"(v.w) : "memory");
}

template <int kWarps, bool kRagged = false, int NT = 16>
__device__ __forceinline__ void stage_x_perm(uint32_t xs, const __nv_bfloat16* x, int m, int k, int c0,
                                             int chunks, int tid) {
  static_assert(NT == 16 || NT == 32, "16 or 32 token rows");
  constexpr int kXBatch = 8, kNG = NT / 8, kStep = NT * 32;  // row groups; bytes a k16 step
  const int units = kNG * chunks, lane = tid % 32, r = lane / 4, u = lane % 4;
  const int per_warp = kRagged ? (units + kWarps - 1) / kWarps : units / kWarps;
  const int wid = tid / 32;
  for (int b0 = 0; b0 < per_warp; b0 += kXBatch) {
    uint4 v[kXBatch];
#pragma unroll
    for (int i = 0; i < kXBatch; ++i) {
      const int unit = wid + (b0 + i) * kWarps, c = unit / kNG, row = 8 * (unit % kNG) + r;
      v[i] = b0 + i < per_warp && (!kRagged || unit < units) && row < m
                 ? ld_act16(x + int64_t(row) * k + 32 * (c0 + c) + 8 * u)
                 : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kXBatch; ++i) {
      const int unit = wid + (b0 + i) * kWarps, c = unit / kNG, ng = unit % kNG;
      if (b0 + i >= per_warp || (kRagged && unit >= units)) break;
      st_perm_unit(xs + 2 * c * kStep + 256 * ng + 16 * r + 4 * u, v[i], kStep);
    }
  }
}

// The same layout made by one warp for its own chunks, without a pass through registers between the global
// loads and the shared stores: local chunks c = c_first, c_first + c_step, ... < c_end (global chunk c0 + c)
// go in natural order -- row r's 64 bytes at xs + NT 64 c + 64 r -- by 16-byte cp.async (rows past m
// zero-filled), all in flight at once; after the warp's own copies land, each chunk's block is permuted in
// place: its NT x 64 bytes are exactly stage_x_perm's steps 2c and 2c + 1, so a lane loads its rows' 16-byte
// units (row 8 ng + r, unit u), the warp synchronises, and the lane stores them as stage_x_perm's four 4-byte
// pieces. The caller fences (fence_proxy_async) and synchronises the warps that read the chunks.
template <int NT>
__device__ __forceinline__ void stage_x_own(uint32_t xs, const __nv_bfloat16* x, int m, int k, int c0,
                                            int c_first, int c_step, int c_end, int lane) {
  static_assert(NT == 16 || NT == 32, "16 or 32 token rows");
  constexpr int kNG = NT / 8, kBlock = NT * 64, kStep = NT * 32;
  const int r = lane / 4, u = lane % 4;
  for (int c = c_first; c < c_end; c += c_step)
#pragma unroll
    for (int ng = 0; ng < kNG; ++ng) {
      const int row = 8 * ng + r;
      cp_async16(xs + c * kBlock + 64 * row + 16 * u,
                 x + int64_t(row < m ? row : 0) * k + 32 * (c0 + c) + 8 * u, row < m);
    }
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();  // the other lanes' copies, before any lane overwrites them
  for (int c = c_first; c < c_end; c += c_step) {
    const uint32_t b = xs + c * kBlock;
    uint4 v[kNG];
#pragma unroll
    for (int ng = 0; ng < kNG; ++ng) v[ng] = lds128(b + 64 * (8 * ng + r) + 16 * u);
    __syncwarp();
#pragma unroll
    for (int ng = 0; ng < kNG; ++ng) st_perm_unit(b + 256 * ng + 16 * r + 4 * u, v[ng], kStep);
  }
}

// Chunk e of a quad: rows g and g + 8's words (wa, wb: load_quad's) and scale words dequantized into the A
// fragments of its two k16 steps, a[h] (mma_chunk's).
template <int KIND>
__device__ __forceinline__ void wg_fragments(const uint4& wa, const uint4& wb, const uint32_t (&sa)[2],
                                             const uint32_t (&sb)[2], int e, uint32_t (&a)[2][4]) {
  const uint4 da = dequant<KIND, 4>(Raw{quad_word(wa, e), 0, sa[e >> 1], 0});
  const uint4 db = dequant<KIND, 4>(Raw{quad_word(wb, e), 0, sb[e >> 1], 0});
  a[0][0] = da.x, a[0][1] = db.x, a[0][2] = da.y, a[0][3] = db.y;
  a[1][0] = da.z, a[1][1] = db.z, a[1][2] = da.w, a[1][3] = db.w;
}

}  // namespace tf::cuda
