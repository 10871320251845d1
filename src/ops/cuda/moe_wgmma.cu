// The grouped experts' GEMM on Hopper warpgroup MMAs, for groups of prefill size (moe_kernels.h:
// moe_grouped_wgmma): the wgmma linear's pipeline (wgmma_pipeline.cuh) with the 128-row tiles and x's rows
// gathered in slot order and permuted once per call, then loaded by tensor map. MLX 4-bit experts: the
// producer dequantizes the tile's expert's weight into the stages (produce_q4). bf16 experts: the producer
// loads the expert's raw rows by its tensor map (a device table made once a layer, MoeExperts::maps) and
// permutes them into the stages, as the TmaX linear does (produce_raw, xp = 1). A work item is one grouping
// tile (expert e, slots [first, first + count)) and one 128-row tile of e's output features (a CTA of the
// 4-bit kernel takes one; the bf16 kernel's persistent CTAs take them in turn); rows of the
// neighbouring tile that share its x box compute into masked outputs only. Each element's arithmetic is
// the wgmma linear's (8 fixed K slices of in-order k16 chains, summed in slice order), the bits of
// linear_quantized on the slot's row alone, as moe_grouped_gemm's kernels.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"  // linear_wgmma_supported, make_linear_tensor_map
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/wgmma_pipeline.cuh"

namespace tf::cuda {
namespace {

using namespace wgp;

// TF_MOE_WGMMA (set_moe_wgmma): on (run 506, H100, 30B-A3B MLX 4-bit prefill 4096: 413.5 -> 138.7 ms).
bool g_on = env_switch("TF_MOE_WGMMA", true);
// bf16 experts too (set_moe_wgmma_bf16; TF_MOE_WGMMA_BF16): on (run 511, H100, 30B-A3B bf16 prefill 4096,
// same call: 437.3 -> 144.5 ms).
bool g_bf16 = env_switch("TF_MOE_WGMMA_BF16", true);
// The bf16 kernel's CTAs persistent (one an SM, tiles in turn) or one a tile (TF_MOE_WGMMA_PERSIST=0;
// set_moe_wgmma_persistent; A/B, the same bits). Run 515 (H100, 30B-A3B bf16 prefill 4096, same call): 128.0
// -> 125.9 ms (predicted -12%: the CTAs' prologues and epilogues are not what keeps these GEMMs near 200
// TFLOP/s).
bool g_persist = env_switch("TF_MOE_WGMMA_PERSIST", true);
// The grouping tile for calls the path takes: 0 by the average pairs an active expert (>= 96: 128, else 64),
// or 64 / 128 always (set_moe_wgmma_tile; A/B, the same bits). Run 516 (H100, 30B-A3B prefill 4096, ~256
// pairs an expert, same call): tiles of 64 / 128 bf16 144.2 / 125.7 ms, MLX 4-bit 142.4 / 115.8 -- the rule's
// 128 (the third, mostly empty tile of about half the experts costs less than halving every tile).
int g_tile = [] {
  const int t = env_int("TF_MOE_WGMMA_TILE", 0, 128, 0);
  return t == 64 || t == 128 ? t : 0;
}();
std::atomic<uint64_t> g_launches{0};

// Grid: max_tiles x (n / 128) CTAs, feature tiles fastest: the n / 128 CTAs of one grouping tile run together
// and read its x tile through L2 once (grouping tiles fastest re-read every x tile from DRAM for each feature
// tile: ncu, run 518, 2.2-2.4 TB/s of DRAM traffic, L2 hits 46-63%); neighbouring grouping tiles share an
// expert's weights. CTAs past the call's tile count leave at once.
template <int BN, int WP>
__global__ void __launch_bounds__(Cfg<2, BN>::kThreads, 1)
    moe_wgmma_kernel(const void* const* __restrict__ words, const void* const* __restrict__ scales,
                     int qshift, const int4* __restrict__ tiles, __nv_bfloat16* __restrict__ y, int n, int k,
                     const __grid_constant__ CUtensorMap tmx) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Cfg<2, BN, 1, 1, WP>;
  pdl_wait();  // the tiles (and x) come from the kernels before
  const int n_tiles = (n + C::kBM - 1) / C::kBM;
  const int ti = int(blockIdx.x) / n_tiles, nt = int(blockIdx.x) % n_tiles;
  if (ti >= tiles[0].x) return;   // the whole CTA, before any barrier
  const int4 tl = tiles[1 + ti];  // {expert, first slot, slots, 0}
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[2 * C::kStages];  // full[s], empty[s]
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw + smem_pad1k(smem_raw)));
  const uint32_t full = static_cast<uint32_t>(__cvta_generic_to_shared(bars)), empty = full + 8 * C::kStages;
  if (threadIdx.x == 0)
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(full + 8 * s, 129);     // the 128 producer threads + thread 0's expect_tx for x
      mbar_init(empty + 8 * s, 4 * 2);  // lane 0 of every consumer warp
    }
  __syncthreads();
  pdl_launch_dependents();
  const int m0 = tl.y, m_end = tl.y + tl.z, n0 = nt * C::kBM;
  if (threadIdx.x / 128 == 2) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
    produce_q4<2, BN, WP>(static_cast<const uint8_t*>(words[tl.x]),
                          static_cast<const uint32_t*>(scales[tl.x]), qshift, n, k, m0, n0, sbase, full,
                          empty, &tmx);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    consume<2, BN, 1, 1, true, WP>(nullptr, 0, y, false, m_end, n, k, m0, n0, sbase, nullptr, nullptr, full,
                                   empty, 0);
  }
#else
  __trap();  // built for another architecture: moe_grouped_wgmma_tile keeps callers away
#endif
}

// The bf16 experts: the TmaX linear's roles (produce_raw's TMA branch, xp = 1: x by its own tensor-map load,
// W's raw rows by the expert's map from the device table, permuted into the stages by producer warps 2-3;
// consume with the swizzled stages), in persistent CTAs: CTA b takes items b, b + grid, ... (item i: grouping
// tile i / n_tiles, 128 output features i % n_tiles: feature tiles fastest, as the 4-bit kernel's grid),
// every role walking the same items with one running chunk count g (ring slots, stages and phases go on from
// tile to tile), so that a tile's loads start under the previous tile's last MMAs and stores instead of after
// a CTA's exit and the next one's prologue.
template <int BN>
__global__ void __launch_bounds__(Cfg<2, BN>::kThreads, 1)
    moe_wgmma_bf16_kernel(const CUtensorMap* __restrict__ maps, const int4* __restrict__ tiles, int n_tiles,
                          __nv_bfloat16* __restrict__ y, int n, int k,
                          const __grid_constant__ CUtensorMap tmx) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Cfg<2, BN>;
  constexpr int kSlots = C::kRawSlots;
  static_assert(C::kRaw && kSlots >= 2 && C::kCh == 1, "the TMA producer's raw slots, a chunk a stage");
  pdl_wait();  // the tiles (and x) come from the kernels before
  const int ntiles = tiles[0].x, items = ntiles * n_tiles, chunks = k / 32;
  if (int(blockIdx.x) >= items) return;  // the whole CTA, before any barrier
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // full[s], empty[s], raw[slot], raw_free[slot]
  __shared__ __align__(8) uint64_t bars[2 * C::kStages + 2 * kSlots];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw + smem_pad1k(smem_raw)));
  const uint32_t full = static_cast<uint32_t>(__cvta_generic_to_shared(bars)), empty = full + 8 * C::kStages;
  const uint32_t raw = empty + 8 * C::kStages, rawfree = raw + 8 * kSlots;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(full + 8 * s, 64 + 1);  // the 64 permuters + x's expect_tx arrive
      mbar_init(empty + 8 * s, 4 * 2);  // lane 0 of every consumer warp
    }
    for (int r = 0; r < kSlots; ++r) {
      mbar_init(raw + 8 * r, 1);       // the W loader's arrive.expect_tx
      mbar_init(rawfree + 8 * r, 64);  // the permuters' release
    }
  }
  __syncthreads();
  pdl_launch_dependents();
  struct Item {
    int e, m0, m_end, n0;
  };
  auto item_of = [&](int it) {
    const int4 tl = tiles[1 + it / n_tiles];  // {expert, first slot, slots, 0}
    return Item{tl.x, tl.y, tl.y + tl.z, it % n_tiles * C::kBM};
  };
  if (threadIdx.x / 128 == 2) {  // produce_raw's TMA roles, an item after another on one running chunk count
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
    int g = 0;
    for (int it = blockIdx.x; it < items; it += gridDim.x, g += chunks) {
      const Item im = item_of(it);
      const CUtensorMap* tmw = maps + im.e;
      // (the map was written by a host copy: the W loader orders its tensor-map reads after it; PTX ISA,
      // fence.proxy.tensormap)
      if (threadIdx.x == 256)
        asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" ::"l"(tmw) : "memory");
      produce_raw<2, BN, 1, true, true>(nullptr, nullptr, im.m_end, n, k, im.m0, im.n0, sbase, full, empty, 0,
                                        chunks, raw, tmw, &tmx, 1, g);
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    int g = 0;
    for (int it = blockIdx.x; it < items; it += gridDim.x, g += chunks) {
      const Item im = item_of(it);
      consume<2, BN, 1, 1, true, 0, true>(nullptr, 0, y, false, im.m_end, n, k, im.m0, im.n0, sbase, nullptr,
                                          nullptr, full, empty, 0, g);
    }
  }
#else
  __trap();  // built for another architecture: moe_grouped_wgmma_tile keeps callers away
#endif
}

template <int BN>
void launch_bf16(const MoeExperts& w, const int4* tiles, int max_tiles, void* y, int n, int k,
                 const CUtensorMap& tmx, cudaStream_t s) {
  using C = Cfg<2, BN>;
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(moe_wgmma_bf16_kernel<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       C::kSmem));
    return true;
  }();
  (void)configured;
  // Persistent: at most one CTA an SM (the tile count's bound), or one a tile (the bound itself).
  const int n_tiles = (n + C::kBM - 1) / C::kBM;
  const int64_t bound = int64_t(max_tiles) * n_tiles;
  const int grid = int(g_persist ? std::min<int64_t>(bound, sm_count()) : bound);
  launch_pdl(moe_wgmma_bf16_kernel<BN>, dim3(unsigned(grid)), dim3(C::kThreads), C::kSmem, s,
             static_cast<const CUtensorMap*>(w.maps), tiles, n_tiles, static_cast<__nv_bfloat16*>(y), n, k,
             tmx);
  TF_CUDA_LAUNCH_CHECK();
}

template <int BN, int WP>
void launch(const MoeExperts& w, const int4* tiles, int max_tiles, void* y, int n, int k,
            const CUtensorMap& tmx, cudaStream_t s) {
  using C = Cfg<2, BN, 1, 1, WP>;
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(moe_wgmma_kernel<BN, WP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       C::kSmem));
    return true;
  }();
  (void)configured;
  const int n_tiles = (n + C::kBM - 1) / C::kBM;
  launch_pdl(moe_wgmma_kernel<BN, WP>, dim3(unsigned(max_tiles * n_tiles)), dim3(C::kThreads), C::kSmem, s,
             w.weights, w.scales, w.chunk_shift, tiles, static_cast<__nv_bfloat16*>(y), n, k, tmx);
  TF_CUDA_LAUNCH_CHECK();
}

// The experts these kernels read: bf16 with their tensor maps (whole chunks), or MLX 4-bit in the device
// layout with bf16 scale words, groups of 64 or 128, every chunk in quads.
// n: the projection's output features (an expert's packed bytes below 2^32: produce_q4's 32-bit offsets).
bool takes(const MoeExperts& w, int n, int k) {
  if (w.bits == 16) return g_bf16 && w.maps && k % 32 == 0 && n > 0;
  return w.bits == 4 && (w.chunk_shift == 1 || w.chunk_shift == 2) && k % 128 == 0 &&
         w.quad_chunks == k / 32 && w.row_bytes == k / 2 && int64_t(n) * (k / 2) < (int64_t(1) << 32);
}

}  // namespace

int moe_grouped_wgmma_tile(const MoeExperts& gate_up, const MoeExperts& down, int pairs, int hidden,
                           int inter, const void* x, cudaStream_t s) {
  if (!g_on || pairs <= 0 || gate_up.experts <= 0) return 0;
  const int active = std::min(pairs, gate_up.experts), avg = (pairs + active - 1) / active;
  const int tile = avg < 48 ? 0 : g_tile ? g_tile : avg >= 96 ? 128 : 64;
  // (the stream query last: decode-sized calls leave at the tile)
  if (!tile || !takes(gate_up, 2 * inter, hidden) || !takes(down, hidden, inter) ||
      !linear_wgmma_supported() || !wgp::wgmma_can_permute(x, s))
    return 0;
  return tile;
}

void moe_grouped_wgmma(const void* x, const int32_t* x_rows, bool silu, const MoeExperts& w,
                       const int4* tiles, int max_tiles, int tile, int slots, void* y, int n, int k,
                       cudaStream_t s) {
  TF_CHECK(takes(w, n, k) && (tile == 64 || tile == 128) && !(silu && x_rows),
           "moe_grouped_wgmma: not a call moe_grouped_wgmma_tile admits");
  if (max_tiles == 0) return;
  const void* xp = wgp::wgmma_permuted_x(x, x_rows, slots, k, silu, s);
  CUtensorMap tmx{};
  TF_CHECK(xp && make_linear_tensor_map(&tmx, xp, slots, k, tile, true),
           "moe_grouped_wgmma: x's permuted copy or its tensor map could not be made");
  if (w.bits == 16)
    tile == 128 ? launch_bf16<128>(w, tiles, max_tiles, y, n, k, tmx, s)
                : launch_bf16<64>(w, tiles, max_tiles, y, n, k, tmx, s);
  else if (tile == 128)
    w.subnormal ? launch<128, kWpQ4Sub>(w, tiles, max_tiles, y, n, k, tmx, s)
                : launch<128, kWpQ4>(w, tiles, max_tiles, y, n, k, tmx, s);
  else
    w.subnormal ? launch<64, kWpQ4Sub>(w, tiles, max_tiles, y, n, k, tmx, s)
                : launch<64, kWpQ4>(w, tiles, max_tiles, y, n, k, tmx, s);
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

void* moe_wgmma_maps(const std::vector<const void*>& weights, int n, int k, cudaStream_t s) {
  std::vector<CUtensorMap> maps(weights.size());
  for (size_t e = 0; e < weights.size(); ++e)
    if (!make_linear_tensor_map(&maps[e], weights[e], n, k, Cfg<2, 64>::kBM, false)) return nullptr;
  void* d = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&d, maps.size() * sizeof(CUtensorMap)));
  TF_CUDA_CHECK(
      cudaMemcpyAsync(d, maps.data(), maps.size() * sizeof(CUtensorMap), cudaMemcpyHostToDevice, s));
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  return d;
}

void set_moe_wgmma(bool on) {
  g_on = on;
}

void set_moe_wgmma_bf16(bool on) {
  g_bf16 = on;
}

bool moe_wgmma_bf16() {
  return g_bf16;
}

void set_moe_wgmma_persistent(bool on) {
  g_persist = on;
}

void set_moe_wgmma_tile(int tile) {
  g_tile = tile == 64 || tile == 128 ? tile : 0;
}

bool moe_wgmma() {
  return g_on;
}

uint64_t moe_grouped_wgmma_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tf::cuda
