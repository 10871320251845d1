// Prefill attention on Hopper warpgroup MMAs (attention_mma.h: attention_wgmma_loop): the wide loop
// kernel's tiles (up to 128 (row, head) pairs of one sequence and one KV head, the chunks walked in
// increasing order and merged in registers) with each chunk's two products on wgmma instead of per-warp
// mma.sync -- the same bits, pair for pair:
//   S = Q K^T: per warpgroup m64n128k16 over the head dims, 8 k-steps of 16 in order chained from a zeroed
//     accumulator (attention_chunk.cuh's chunk_scores chains the same 16-dim steps; a wgmma k16 step rounds
//     like an mma.sync m16n8k16 step: bench/cuda/wgmma_probe.cu), and warp w of the warpgroup holds exactly
//     the S elements warp 4 wg + w of the wide kernel holds, in the same registers (the m16n8 layout per
//     16 rows), so chunk_softmax runs on them unchanged;
//   O_c = P V: P from registers (pv_a's packs: the m16n8k16 A fragment, which is wgmma's register-A
//     layout), V from shared memory as the MN-major B operand, 8 k-steps of 16 positions in order chained
//     from zero, one 64-dim half of the output at a time (an element's chain does not depend on N);
//   the merge (merge_chunk's factors once a chunk, then merge_out per element) and the store as the wide
//   kernel's merge_pairs / store_pairs.
// Shared memory: Q [2 dim halves][128 pairs][128 bytes] and K, V chunks [2 halves][128 positions][128 bytes]
// in the 128-byte swizzle (16-byte unit u of row r at u ^ (r % 8) in 1024-byte atoms), double-buffered.
// K/V come by 3D tensor-map loads from the paged pools, one (16 positions, 64 dims) box a page and half;
// the V rows of a chunk outside the tile's union range [ulo, uhi] are zeroed after they land (a page's
// rows past the sequence, or pages not loaded, may hold anything; their P is 0, and 0 x NaN is not 0),
// as the wide kernel stages zeros there. K rows there only reach S elements that the mask replaces.
#include <cuda.h>
#include <cuda_bf16.h>

#include <atomic>

#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"  // wgmma helpers, tensor-map loads, make_kv_tensor_map
#include "ops/cuda/mbarrier.cuh"

namespace tf::cuda {
namespace {

using namespace attn;

constexpr int kD = 128;                             // head dim
constexpr int kPairs = 128;                         // (row, head) pairs a CTA: two warpgroups of 64
constexpr int kThreads = 256;                       // the two consumer warpgroups (warp 0 also loads K/V)
constexpr int kHalf = kC * 128;                     // bytes of one 64-dim half of a K or V chunk (or of Q)
constexpr int kBuf = 4 * kHalf;                     // K halves, then V halves
constexpr int kSmem = 2 * kHalf + 2 * kBuf + 1024;  // Q, two buffers, alignment

bool g_on = env_switch("TF_ATTN_WGMMA", false);           // set_attention_wgmma: off until measured on a GPU
const bool g_pdl_group = pdl_group_enabled("ATTENTION");  // launch.h
std::atomic<uint64_t> g_launches{0};

// D[64 x 64] += A (registers) x B, B MN-major in shared memory (imm-trans-b = 1): the P V step.
__device__ __forceinline__ void wgmma_rs_m64n64_tb(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : TF_WGMMA_D32(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}

__global__ void __launch_bounds__(kThreads, 1)
    attention_wgmma_kernel(const __nv_bfloat16* __restrict__ q, DeviceMeta meta, int hq, int hk, float scale,
                           int window, float softcap, const int2* __restrict__ tiles,
                           __nv_bfloat16* __restrict__ out, const __grid_constant__ CUtensorMap tmk,
                           const __grid_constant__ CUtensorMap tmv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[2];  // buffer b's K and V of its chunk (one phase a use)
  const uint32_t pad = (1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023;
  unsigned char* const sm = smem_raw + pad;
  const uint32_t sq = static_cast<uint32_t>(__cvta_generic_to_shared(sm));  // Q, then the two buffers
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(&bars[0]));
  const int group = hq / hk;
  const int2 tile = tiles[int(gridDim.x) / hk - 1 - int(blockIdx.x) / hk];  // longest first
  const int kvh = int(blockIdx.x) % hk, r_first = tile.x, nrows = tile.y;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, qd = lane % 4, g = lane / 4;
  const int wg = warp / 4;
  const int seq = meta.row_seq[r_first];
  const int32_t* table = meta.tables + meta.table_offsets[seq];
  const int ulo = row_range(meta, r_first, window).lo, uhi = row_range(meta, r_first + nrows - 1, window).pos;
  const int cb = ulo / kC, ce = uhi / kC;
  pdl_launch_dependents();
  const Pairs pr = pairs_of(meta, warp, g, group, r_first, nrows, kvh, window);
  if (tid == 0) {
    mbar_init(bar0, 1), mbar_init(bar0 + 8, 1);
    mbar_init_fence();
  }
  __syncthreads();
  pdl_wait();  // q and this forward's K/V rows
  // Chunk c into buffer b: warp 0, lane i < 8 loads page i of the chunk (4 boxes: K and V, two halves each)
  // where it meets [ulo, uhi]; lane 0 arms the barrier for all of them first.
  auto stage_chunk = [&](int c, int b) {
    const int p0 = c * kC + 16 * lane;
    const bool in = lane < 8 && p0 + 15 >= ulo && p0 <= uhi;
    const unsigned pages = __popc(__ballot_sync(0xffffffffu, in));
    if (lane == 0) mbar_arrive_expect_tx(bar0 + 8 * b, pages * 4 * 2048);
    __syncwarp();
    if (in) {
      const int slot0 = table[p0 >> 4] * 16;
      const uint32_t dst = sq + 2 * kHalf + b * kBuf + lane * 2048;
      for (int h = 0; h < 2; ++h) {
        tma_load_3d(dst + h * kHalf, &tmk, 64 * h, kvh, slot0, bar0 + 8 * b);
        tma_load_3d(dst + 2 * kHalf + h * kHalf, &tmv, 64 * h, kvh, slot0, bar0 + 8 * b);
      }
    }
  };
  if (warp == 0) {
    stage_chunk(cb, 0);
    if (cb < ce) stage_chunk(cb + 1, 1);
  }
  // Q of the 128 pairs (zeros: padding), 16-byte units into the swizzled halves.
  for (int i = tid; i < kPairs * (kD / 8); i += kThreads) {
    const int p = i / (kD / 8), u = i % (kD / 8), rr = p / group;
    const int64_t off = rr < nrows ? (int64_t(r_first + rr) * hq + kvh * group + p % group) * kD + u * 8 : 0;
    const uint32_t dst = sq + (u / 8) * kHalf + p * 128 + (((u % 8) ^ (p % 8)) * 16);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(q + off),
                 "r"(rr < nrows ? 16 : 0)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  fence_proxy_async();  // the Q copies (generic proxy) before wgmma reads them
  __syncthreads();

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[kD / 8][4];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  for (int c = cb; c <= ce; ++c) {
    const int b = (c - cb) & 1;
    const uint32_t kb = sq + 2 * kHalf + b * kBuf, vb = kb + 2 * kHalf;
    mbar_wait(bar0 + 8 * b, ((c - cb) >> 1) & 1);
    if (c * kC < ulo || c * kC + kC - 1 > uhi) {  // (uniform) V rows outside [ulo, uhi] to zeros
      for (int i = tid; i < kC * 2 * 8; i += kThreads) {
        const int row = i / 16, p = c * kC + row;
        if (p < ulo || p > uhi) {
          const uint32_t a = vb + (i / 8 % 2) * kHalf + row * 128 + (i % 8) * 16;
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(a), "r"(0) : "memory");
        }
      }
      fence_proxy_async();
      __syncthreads();
    }
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    wgmma_fence_operands<64>(acc);
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < kD / 16; ++t) {
      const uint32_t koff = (t / 4) * kHalf + (t % 4) * 32;
      wgmma_m64n128(acc, desc_sw128(sq + wg * 64 * 128 + koff), desc_sw128(kb + koff), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands<64>(acc);
    float(*s)[4] = reinterpret_cast<float(*)[4]>(acc);
    float mc[2], lc[2];
    chunk_softmax(s, qd, c * kC, pr.rg, scale, softcap, mc, lc);
    // merge_pairs, with the factors made once before the output halves
    bool in[2];
    MergeFactors f[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      in[h] = pr.rg[h].lo <= pr.rg[h].pos && c >= pr.rg[h].lo / kC && c <= pr.rg[h].pos / kC;
      f[h] = in[h] ? merge_chunk(m[h], l[h], mc[h], lc[h]) : MergeFactors{1.f, 0.f};
    }
    uint32_t pa[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) pv_a(s, t, pa[t]);
#pragma unroll
    for (int hv = 0; hv < 2; ++hv) {
      float oc[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) oc[i] = 0.f;
      wgmma_fence_operands<32>(oc);
      wgmma_fence();
#pragma unroll
      for (int t = 0; t < 8; ++t) wgmma_rs_m64n64_tb(oc, pa[t], desc_sw128(vb + hv * kHalf + t * 2048));
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands<32>(oc);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!in[h]) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          o[8 * hv + j][2 * h] = merge_out(o[8 * hv + j][2 * h], oc[4 * j + 2 * h], f[h]);
          o[8 * hv + j][2 * h + 1] = merge_out(o[8 * hv + j][2 * h + 1], oc[4 * j + 2 * h + 1], f[h]);
        }
      }
    }
    fence_proxy_async();  // (the zeroing's and) every thread's reads of the buffer before TMA rewrites it
    __syncthreads();      // both warpgroups are done with buffer b
    if (warp == 0 && c + 2 <= ce) stage_chunk(c + 2, b);
  }
  store_pairs<kD>(pr, hq, qd, o, l, out);
#else
  __trap();  // built for another architecture: attention_wgmma_loop keeps callers away
#endif
}

}  // namespace

bool attention_wgmma_loop(const AttentionMmaArgs& a, cudaStream_t s) {
  if (!g_on || a.head_dim != kD || a.num_loop_tiles <= 0 || !a.wide_loop || a.meta.block_size != 16 ||
      a.pool_slots <= 0 || a.pool_slots >= (int64_t(1) << 31) || !linear_wgmma_supported())
    return false;
  CUtensorMap tmk{}, tmv{};
  if (!make_kv_tensor_map(&tmk, a.k_pool, a.pool_slots, a.hk, kD, 64, 16, true) ||
      !make_kv_tensor_map(&tmv, a.v_pool, a.pool_slots, a.hk, kD, 64, 16, true))
    return false;
  static const bool configured = [] {
    TF_CUDA_CHECK(
        cudaFuncSetAttribute(attention_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  launch_pdl_if(g_pdl_group, attention_wgmma_kernel, dim3(a.num_loop_tiles * a.hk), kThreads, kSmem, s,
                static_cast<const __nv_bfloat16*>(a.q), a.meta, a.hq, a.hk, a.scale, a.window, a.softcap,
                a.loop_tiles, static_cast<__nv_bfloat16*>(a.out), tmk, tmv);
  TF_CUDA_LAUNCH_CHECK();
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void set_attention_wgmma(bool on) {
  g_on = on;
}
bool attention_wgmma() {
  return g_on;
}
uint64_t attention_wgmma_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tf::cuda
