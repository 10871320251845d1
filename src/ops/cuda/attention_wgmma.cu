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
//     from zero, the two 64-dim halves of the output as two m64n64 chains (an element's chain does not
//     depend on N);
//   the merge (merge_chunk's factors once a chunk, then merge_out per element) and the store as the wide
//   kernel's merge_pairs / store_pairs.
// Shared memory: Q [2 dim halves][128 pairs][128 bytes] and K, V chunks [2 halves][128 positions][128 bytes]
// in the 128-byte swizzle (16-byte unit u of row r at u ^ (r % 8) in 1024-byte atoms), double-buffered.
// A producer warp loads K/V by 3D tensor-map loads from the paged pools, one (16 positions, 64 dims) box a
// page and half, or one position a box for a page the tile's union range [ulo, uhi] cuts; positions outside
// it are never loaded (a pool slot there may hold anything, NaN included: P is 0 there, and 0 x NaN is not
// 0), so a V row there holds the zeros written at the start or an earlier chunk's row, and its products are
// zeros as with the wide kernel's zero rows. K rows there only reach S elements that the mask replaces. A
// buffer goes back to the producer when all 8 consumer warps have waited for their P V MMAs (`empty`).
#include <cuda.h>
#include <cuda_bf16.h>

#include <atomic>
#include <unordered_map>

#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"  // wgmma helpers, tensor-map loads, make_kv_tensor_map
#include "ops/cuda/mbarrier.cuh"

namespace tf::cuda {
namespace {

using namespace attn;

constexpr int kD = 128;          // head dim
constexpr int kPairs = 128;      // (row, head) pairs a CTA: two warpgroups of 64
constexpr int kThreads = 384;    // two consumer warpgroups, then the producer's (warp 8 loads)
constexpr int kHalf = kC * 128;  // bytes of one 64-dim half of a K or V chunk (or of Q)
constexpr int kBuf = 4 * kHalf;  // K halves, then V halves
constexpr int kSmem = 2 * kHalf + 2 * kBuf + 1024;  // Q, two buffers, alignment

// set_attention_wgmma: on (run 514, H100, Qwen3-8B heads, one prefill call against the wide loop kernel: 4096
// positions 0.858 -> 0.491 ms, 16384 12.47 -> 6.59 ms; the 8B bf16 prefill 4096 164.1 (run 513) -> 150.8 ms;
// the 30B-A3B MLX 4-bit prefill 4096 136.5 -> 119.6 ms, same call; the same bits).
bool g_on = env_switch("TF_ATTN_WGMMA", true);
// The warpgroups' MMAs in turns (the kernel's PP; TF_ATTN_WGMMA_PP, A/B: the same bits): on (run 514: 4096
// 0.508 -> 0.491 ms, 16384 6.847 -> 6.594 ms, same process).
bool g_pp = env_switch("TF_ATTN_WGMMA_PP", true);
const bool g_pdl_group = pdl_group_enabled("ATTENTION");  // launch.h
std::atomic<uint64_t> g_launches{0};

// PP: the two warpgroups take turns issuing their MMAs (named barriers 1 and 2: S of warpgroup 0, S of 1, P V
// of 0, P V of 1, ...), so that one's softmax runs under the other's MMAs; else each issues when ready.
template <bool PP>
__global__ void __launch_bounds__(kThreads, 1)
    attention_wgmma_kernel(const __nv_bfloat16* __restrict__ q, DeviceMeta meta, int hq, int hk, float scale,
                           int window, float softcap, const int2* __restrict__ tiles,
                           __nv_bfloat16* __restrict__ out, const __grid_constant__ CUtensorMap tmk,
                           const __grid_constant__ CUtensorMap tmv, const __grid_constant__ CUtensorMap tmk1,
                           const __grid_constant__ CUtensorMap tmv1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8)
      uint64_t bars[4];  // full[b]: buffer b's chunk landed; empty[b]: read by all 8 warps
  unsigned char* const sm = smem_raw + smem_pad1k(smem_raw);
  const uint32_t sq = static_cast<uint32_t>(__cvta_generic_to_shared(sm));  // Q, then the two buffers
  const uint32_t full = static_cast<uint32_t>(__cvta_generic_to_shared(&bars[0])), empty = full + 16;
  const int group = hq / hk;
  const int2 tile = tiles[int(gridDim.x) / hk - 1 - int(blockIdx.x) / hk];  // longest first
  const int kvh = int(blockIdx.x) % hk, r_first = tile.x, nrows = tile.y;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, qd = lane % 4, g = lane / 4;
  const int wg = warp / 4;
  const int ulo = row_range(meta, r_first, window).lo, uhi = row_range(meta, r_first + nrows - 1, window).pos;
  const int cb = ulo / kC, ce = uhi / kC;
  pdl_launch_dependents();
  if (tid == 0) {
    for (int b = 0; b < 2; ++b) mbar_init(full + 8 * b, 1), mbar_init(empty + 8 * b, 8);
    mbar_init_fence();
  }
  // The V halves of both buffers to zeros: a position outside [ulo, uhi] is never loaded, so its row holds
  // zeros or an earlier chunk's row of this tile (finite), and its P is 0: its products are zeros, as the
  // wide kernel's zero rows give (a chain from +0 stays +0 through zero terms of either sign).
  for (int i = tid; i < 2 * 2 * kHalf / 16; i += kThreads) {
    const uint32_t a =
        sq + 2 * kHalf + (i / (2 * kHalf / 16)) * kBuf + 2 * kHalf + (i % (2 * kHalf / 16)) * 16;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(a), "r"(0) : "memory");
  }
  fence_proxy_async();  // the zeros (generic proxy) before the tensor-map writes and wgmma's reads
  __syncthreads();
  pdl_wait();     // q and this forward's K/V rows
  if (wg == 2) {  // the producer: chunk c into buffer (c - cb) & 1 once the consumers released it
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (warp != 8) return;
    const int32_t* table = meta.tables + meta.table_offsets[meta.row_seq[r_first]];
    for (int c = cb; c <= ce; ++c) {
      const int b = (c - cb) & 1, use = (c - cb) >> 1;
      if (use > 0) mbar_wait(empty + 8 * b, (use - 1) & 1);
      // Lane i < 8: page i of the chunk -- whole pages by two boxes a tensor (16 positions x 64 dims), a page
      // that [ulo, uhi] cuts by rows (tmk1 / tmv1: one position); lane 0 arms the bytes of all of them first.
      const int p0 = c * kC + 16 * lane, lo = max(p0, ulo), hi = min(p0 + 15, uhi);
      const int rows = lane < 8 && lo <= hi ? hi - lo + 1 : 0;
      const int total = __reduce_add_sync(0xffffffffu, rows);
      if (lane == 0) mbar_arrive_expect_tx(full + 8 * b, uint32_t(total) * 4 * 128);
      __syncwarp();
      if (rows > 0) {
        const int slot0 = table[p0 >> 4] * 16;
        const uint32_t dst = sq + 2 * kHalf + b * kBuf + lane * 2048, bar = full + 8 * b;
        if (rows == 16) {
          for (int h = 0; h < 2; ++h) {
            tma_load_3d(dst + h * kHalf, &tmk, 64 * h, kvh, slot0, bar);
            tma_load_3d(dst + 2 * kHalf + h * kHalf, &tmv, 64 * h, kvh, slot0, bar);
          }
        } else {
          for (int p = lo; p <= hi; ++p)
            for (int h = 0; h < 2; ++h) {
              const uint32_t rd = dst + (p - p0) * 128 + h * kHalf;        // (one row: its units swizzled by
              tma_load_3d(rd, &tmk1, 64 * h, kvh, slot0 + (p - p0), bar);  // the row's address bits 7-9)
              tma_load_3d(rd + 2 * kHalf, &tmv1, 64 * h, kvh, slot0 + (p - p0), bar);
            }
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  // Q of the 128 pairs (zeros: padding), 16-byte units into the swizzled halves.
  for (int i = tid; i < kPairs * (kD / 8); i += 256) {
    const int p = i / (kD / 8), u = i % (kD / 8), rr = p / group;
    const int64_t off = rr < nrows ? (int64_t(r_first + rr) * hq + kvh * group + p % group) * kD + u * 8 : 0;
    const uint32_t dst = sq + (u / 8) * kHalf + p * 128 + (((u % 8) ^ (p % 8)) * 16);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(q + off),
                 "r"(rr < nrows ? 16 : 0)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  fence_proxy_async();  // the Q copies (generic proxy) before wgmma reads them
  nbar_sync(3, 256);    // both consumer warpgroups' Q copies
  const Pairs pr = pairs_of(meta, warp, g, group, r_first, nrows, kvh, window);
  if (PP && wg == 1) nbar_arrive(1, 256);  // warpgroup 0 issues first
  auto my_turn = [&] {
    if constexpr (PP) nbar_sync(1 + wg, 256);
  };
  auto your_turn = [&] {
    if constexpr (PP) nbar_arrive(2 - wg, 256);
  };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[kD / 8][4];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  for (int c = cb; c <= ce; ++c) {
    const int b = (c - cb) & 1;
    const uint32_t kb = sq + 2 * kHalf + b * kBuf, vb = kb + 2 * kHalf;
    mbar_wait(full + 8 * b, ((c - cb) >> 1) & 1);
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    my_turn();
    wgmma_fence_operands<64>(acc);
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < kD / 16; ++t) {
      const uint32_t koff = (t / 4) * kHalf + (t % 4) * 32;
      wgmma_m64n128(acc, desc_sw128(sq + wg * 64 * 128 + koff), desc_sw128(kb + koff), 1);
    }
    wgmma_commit();
    your_turn();
    wgmma_wait<0>();
    wgmma_fence_operands<64>(acc);
    float(*s)[4] = reinterpret_cast<float(*)[4]>(acc);
    float mc[2], lc[2];
    chunk_softmax(s, qd, c * kC, pr.rg, scale, softcap, mc, lc);
    // merge_pairs, with the factors made once before the output
    bool in[2];
    MergeFactors f[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      in[h] = sees_chunk(pr.rg[h], c);
      f[h] = in[h] ? merge_chunk(m[h], l[h], mc[h], lc[h]) : MergeFactors{1.f, 0.f};
    }
    uint32_t pa[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) pv_a(s, t, pa[t]);
    float oc[2][32];
#pragma unroll
    for (int i = 0; i < 32; ++i) oc[0][i] = oc[1][i] = 0.f;
    my_turn();
    wgmma_fence_operands<32>(oc[0]);
    wgmma_fence_operands<32>(oc[1]);
    wgmma_fence();
#pragma unroll
    for (int hv = 0; hv < 2; ++hv)
#pragma unroll
      for (int t = 0; t < 8; ++t) wgmma_rs_m64n64<1>(oc[hv], pa[t], desc_sw128(vb + hv * kHalf + t * 2048));
    wgmma_commit();
    // (warpgroup 1's last turn would be warpgroup 0's S of chunk ce + 1: none; so every barrier's arrivals
    // and waits match: warpgroup 0 waits 2N times on barrier 1, warpgroup 1 arrives 1 + N + N - 1 times)
    if (!PP || c < ce || wg == 0) your_turn();
    wgmma_wait<0>();
    wgmma_fence_operands<32>(oc[0]);
    wgmma_fence_operands<32>(oc[1]);
    if (lane == 0) mbar_arrive(empty + 8 * b);  // this warp's reads of buffer b are done
#pragma unroll
    for (int hv = 0; hv < 2; ++hv)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!in[h]) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          o[8 * hv + j][2 * h] = merge_out(o[8 * hv + j][2 * h], oc[hv][4 * j + 2 * h], f[h]);
          o[8 * hv + j][2 * h + 1] = merge_out(o[8 * hv + j][2 * h + 1], oc[hv][4 * j + 2 * h + 1], f[h]);
        }
      }
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
  // K and V: boxes of a page (16 positions) and of one position, 64 dims, in the 128-byte swizzle. Encoded
  // once a pool (a layer's: a prefill calls this once a layer and chunk) and kept by this thread, keyed by
  // everything a map encodes (the pools' addresses, slots, KV heads): a pool freed and another made at the
  // same address with the same shape has the same maps.
  struct Maps {
    const void* v;
    int64_t slots;
    int hk;
    CUtensorMap tm[4];
  };
  thread_local std::unordered_map<const void*, Maps> cache;
  auto it = cache.find(a.k_pool);
  if (it == cache.end() || it->second.v != a.v_pool || it->second.slots != a.pool_slots ||
      it->second.hk != a.hk) {
    Maps m{a.v_pool, a.pool_slots, a.hk, {}};
    for (int i = 0; i < 4; ++i)
      if (!make_kv_tensor_map(&m.tm[i], i % 2 ? a.v_pool : a.k_pool, a.pool_slots, a.hk, kD, 64,
                              i < 2 ? 16 : 1, true))
        return false;
    if (cache.size() >= 4096) cache.clear();  // (bounded: pools come and go with models)
    it = cache.insert_or_assign(a.k_pool, m).first;
  }
  const CUtensorMap* tm = it->second.tm;
  static const bool configured = [] {  // once a process, both instances (thread-safe static)
    for (auto* k : {attention_wgmma_kernel<true>, attention_wgmma_kernel<false>})
      TF_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  auto* kernel = g_pp ? attention_wgmma_kernel<true> : attention_wgmma_kernel<false>;
  launch_pdl_if(g_pdl_group, kernel, dim3(a.num_loop_tiles * a.hk), kThreads, kSmem, s,
                static_cast<const __nv_bfloat16*>(a.q), a.meta, a.hq, a.hk, a.scale, a.window, a.softcap,
                a.loop_tiles, static_cast<__nv_bfloat16*>(a.out), tm[0], tm[1], tm[2], tm[3]);
  TF_CUDA_LAUNCH_CHECK();
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void set_attention_wgmma(bool on) {
  g_on = on;
}
void set_attention_wgmma_pp(bool on) {
  g_pp = on;
}
bool attention_wgmma_pp() {
  return g_pp;
}
bool attention_wgmma() {
  return g_on;
}
uint64_t attention_wgmma_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tf::cuda
