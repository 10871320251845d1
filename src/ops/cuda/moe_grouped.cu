// Fused mixture-of-experts kernels (moe_kernels.h): routing, grouping, a grouped GEMM (bf16 or MLX 4/8-bit
// experts) that reads each active expert's (packed) weight tile once per tile of up to 8 * NT of its tokens,
// and the combine.
//
// The grouped GEMM is linear.cu's decode kernel with the token tile taken from the grouping: weights are
// the MMA's A operand (16 output features), tokens its B operand (8 per MMA); the block's 8 warps split K
// into 8 slices that depend on K alone, each slice is an in-order chain of m16n8k16 MMAs over 32-wide K
// chunks (same in-chunk permutation), and the 8 partials are summed in warp order. NT and the loop variant
// change how many MMAs a warp issues and when loads are issued, never one element's arithmetic. MLX
// affine experts (4/8-bit, kept packed) change only where a lane's 8 bf16 weights come from: the packed
// bytes and the group's scale|bias, dequantized by quant_common.cuh's code (linear_quantized's), so a
// slot's bits are those of linear_quantized on its row alone.
#include <cuda_bf16.h>

#include <algorithm>

#include "ops/cuda/activation.cuh"  // silu_mul_bf16
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/moe_route.cuh"  // route_row, group_pairs
#include "ops/cuda/quant_common.cuh"

namespace tf::cuda {
namespace {

const bool g_pdl_group = pdl_group_enabled("MOE");            // launch.h
bool g_route_group = env_switch("TF_MOE_ROUTE_GROUP", true);  // set_moe_route_group

constexpr int kWarps = 8;
constexpr int kRouteWarps = 4;

__global__ void route_kernel(const float* logits, int rows, int experts, int top_k, bool norm, int32_t* out_e,
                             float* out_w) {
  pdl_enter();  // dependent launch (launch.h)
  __shared__ float prob[kRouteWarps][kMoeMaxExperts];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRouteWarps + warp;
  if (row >= rows) return;
  route_row(logits, row, experts, top_k, norm, out_e, out_w, prob[warp], lane);
}

__global__ void group_kernel(const int32_t* pair_expert, int pairs, int top_k, int experts, int tile,
                             int4* tiles, int32_t* slot_of_pair, int32_t* slot_row) {
  pdl_enter();
  __shared__ int count[kMoeMaxExperts], first[kMoeMaxExperts], fill[kMoeMaxExperts];
  __shared__ int2 scan[32];
  group_pairs(pair_expert, pairs, top_k, experts, tile, tiles, slot_of_pair, slot_row, count, first, fill,
              scan);
}

// Routing and grouping in one block for calls of up to kRouteGroupMaxRows rows (decode, verify): warp w
// routes rows w, w + R, ... with route_row (R = 32 routing warps where their probability rows fit the
// 32 KB below: up to 256 experts; 8 at 1024), then the block groups the pairs (their experts read back from
// global memory after the barrier) with group_pairs. One dependent step instead of two; the same values.
// (Ranking every (row, expert) with the whole block instead of route_row's arg-max rounds was tried in
// run 149: same picks, b=8 slower, 3.81 -> 3.98 ms, 4-bit 30B-A3B; removed. With 8 routing warps 32 rows took
// 4 rounds: run 348, 4-bit b=32 7.088 ms, 6.840 with 32 warps in run 351; the two launches 6.622 / 6.571.)
constexpr int kRouteGroupProbs = 8 * kMoeMaxExperts;  // floats: 32 KB
__global__ void __launch_bounds__(1024)
    route_group_kernel(const float* logits, int rows, int experts, int top_k, bool norm, int32_t* out_e,
                       float* out_w, int tile, int4* tiles, int32_t* slot_of_pair, int32_t* slot_row) {
  pdl_enter();
  __shared__ float prob[kRouteGroupProbs];
  __shared__ int count[kMoeMaxExperts], first[kMoeMaxExperts], fill[kMoeMaxExperts];
  __shared__ int2 scan[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int routers = min(32, kRouteGroupProbs / experts);
  if (warp < routers)
    for (int row = warp; row < rows; row += routers)
      route_row(logits, row, experts, top_k, norm, out_e, out_w, prob + warp * experts, lane);
  __syncthreads();  // the block's global writes of out_e, visible to the block after the barrier
  group_pairs(out_e, rows * top_k, top_k, experts, tile, tiles, slot_of_pair, slot_row, count, first, fill,
              scan);
}

// A block's two weight rows (features na and nb of its tile's expert), lane t's part of each 32-wide K
// chunk: Frag is what one chunk's load gives, bf16() turns it into the 8 bf16 weights the MMAs take.
struct Bf16Rows {
  using Frag = uint4;
  static constexpr int kBits = 16;
  const __nv_bfloat16 *a, *b;
  __device__ __forceinline__ Bf16Rows(const MoeExperts& w, int e, int na, int nb, int k, int t) {
    const auto* base = static_cast<const __nv_bfloat16*>(w.weights[e]);
    a = base + int64_t(na) * k + 8 * t, b = base + int64_t(nb) * k + 8 * t;
  }
  // Chunks at .. at + count - 1 (count <= U) of both rows, all loads issued before any is used.
  template <int U>
  __device__ __forceinline__ void load(int at, int count, Frag (&fa)[U], Frag (&fb)[U]) const {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < count) fa[u] = load_stream(a + (at + u) * 32), fb[u] = load_stream(b + (at + u) * 32);
  }
  static __device__ __forceinline__ uint4 bf16(const Frag& f) {
    return f;
  }
};

// MLX affine B-bit rows with bf16 scales in quant_linear's device layout: quant_common.cuh's load_raw and
// dequant, the very code linear_quantized runs, so a weight value becomes the same bf16. KIND kMlxBf16Sub:
// 4-bit experts whose scales prescale_mlx4 stored times 2^133.
template <int B, int KIND = kMlxBf16>
struct MlxRows {
  using Frag = Raw;
  static constexpr int kBits = B;
  RowPtr a, b;
  int sh;
  __device__ __forceinline__ MlxRows(const MoeExperts& w, int e, int na, int nb, int, int t) {
    const QArgs q{static_cast<const uint8_t*>(w.weights[e]),
                  w.scales[e],
                  nullptr,
                  w.row_bytes,
                  w.groups,
                  w.chunk_shift,
                  w.quad_chunks};
    a = row_ptr<KIND, B>(q, na, t), b = row_ptr<KIND, B>(q, nb, t), sh = w.chunk_shift;
  }
  // As Bf16Rows::load. 4-bit: a lane's words of a whole quad of chunks (4c .. 4c + 3, below quad_chunks)
  // are 16 contiguous bytes (quant_linear.h's layout): one 16-byte load instead of four; the same words
  // and scales as load_raw's.
  template <int U>
  __device__ __forceinline__ void load(int at, int count, Frag (&fa)[U], Frag (&fb)[U]) const {
#pragma unroll
    for (int u = 0; u < U; u += 4) {
      const int c = at + u;
      if (B == 4 && U % 4 == 0 && u + 4 <= count && (c & 3) == 0 && c + 4 <= a.quad_chunks) {
        quad(a, c, fa + u), quad(b, c, fb + u);
        continue;
      }
#pragma unroll
      for (int i = 0; i < 4 && u + i < U; ++i)
        if (u + i < count)
          fa[u + i] = load_raw<KIND, B>(a, c + i, sh), fb[u + i] = load_raw<KIND, B>(b, c + i, sh);
    }
  }
  __device__ __forceinline__ void quad(const RowPtr& r, int c, Frag* f) const {
    const uint4 v = load_stream(reinterpret_cast<const uint32_t*>(r.w) + word_of(c, r.t, r.quad_chunks));
    // c % 4 == 0: with groups of 64 or more (sh >= 1) chunks c, c + 1 share a group and so do c + 2, c + 3:
    // two scale loads, not four (the same words, so dequant's scale/bias split is shared too).
    const unsigned s0 = __ldg(r.s + (c >> sh)), s2 = __ldg(r.s + ((c + 2) >> sh));
    const unsigned s1 = sh ? s0 : __ldg(r.s + c + 1), s3 = sh ? s2 : __ldg(r.s + c + 3);
    f[0] = Raw{v.x, 0, s0, 0}, f[1] = Raw{v.y, 0, s1, 0}, f[2] = Raw{v.z, 0, s2, 0},
    f[3] = Raw{v.w, 0, s3, 0};
  }
  static __device__ __forceinline__ uint4 bf16(const Frag& f) {
    return dequant<KIND, B>(f);
  }
};

// A warp's K-slice partials of token tile j (acc: features g and g + 8 of tokens 2t and 2t + 1, the MMA
// accumulator layout) into the block's slice-sum buffer.
template <int NT>
__device__ __forceinline__ void put_slice(float (*red)[NT * 8][16], int warp, int j, int g, int t,
                                          const float* acc) {
  red[warp][8 * j + 2 * t][g] = acc[0];
  red[warp][8 * j + 2 * t + 1][g] = acc[1];
  red[warp][8 * j + 2 * t][g + 8] = acc[2];
  red[warp][8 * j + 2 * t + 1][g + 8] = acc[3];
}

// After the barrier: each output of the tile (its tl.z tokens, features n0..n0+15) is the 8 slice partials
// summed in warp order, stored as bf16 at the token's slot.
template <int NT>
__device__ __forceinline__ void store_tile(const float (*red)[NT * 8][16], int4 tl, int n0, int n,
                                           __nv_bfloat16* y) {
  for (int i = threadIdx.x; i < NT * 8 * 16; i += kWarps * 32) {
    const int tok = i / 16, f = i % 16;
    const int col = n0 + f;
    if (tok >= tl.z || col >= n) continue;
    float s = red[0][tok][f];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) s += red[q][tok][f];
    y[int64_t(tl.y + tok) * n + col] = __float2bfloat16(s);
  }
}

// SILU (the routed gate_up, and the grouped one where moe_grouped_fuses_silu): a tile's 16 MMA rows are gate
// features n0 .. n0 + 7 and their up features inter + n0 .. (rows g and g + 8 of lane g), so each output is
// silu_mul of the two bf16 sums the unfused path stores and the silu_mul kernel reads back: silu_mul_bf16
// (activation.cuh) of those values. A feature's arithmetic does not depend on its MMA row (GPU tests
// RoutedDecodeEqualsTheGroupedPath, GroupedGateUpSiluEqualsTheSiluKernel).
__device__ __forceinline__ void store_tile_silu(const float (*red)[8][16], int4 tl, int n0, int inter,
                                                __nv_bfloat16* act) {
  for (int i = threadIdx.x; i < 8 * 8; i += kWarps * 32) {
    const int tok = i / 8, f = i % 8;
    const int col = n0 + f;
    if (tok >= tl.z || col >= inter) continue;
    float sg = red[0][tok][f], su = red[0][tok][f + 8];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) sg += red[q][tok][f], su += red[q][tok][f + 8];
    act[int64_t(tl.y + tok) * inter + col] =
        silu_mul_bf16(__bfloat162float(__float2bfloat16(sg)), __bfloat162float(__float2bfloat16(su)));
  }
}

// XS (x staged): each lane copies its own x fragments of the warp's whole K slice (every chunk, every token
// tile) into its own shared-memory slots with cp.async at the start, and the MMAs read them from there.
// Loaded next to its MMA (ld_act16 in step()), each chunk's x was one dependent L2 round trip: SASS showed
// load, HMMA, load, HMMA, ..., the same serialization quant_linear.cu's XS removed from the dense 4-bit
// kernel. Same 16 bytes (zeros for rows past the tile, as before), same MMAs: the same bits.
// Slots: lane L of warp w, token tile j, slice chunk i at xs[((w * smax + i) * NT + j) * 32 + L].
template <int NT>
__host__ __device__ constexpr int xs_bytes(int k) {
  return kWarps * ((k / 32 + kWarps - 1) / kWarps) * NT * 32 * 16;
}

template <class Rows, int NT, int U, bool PREFETCH, bool XS = false>
__global__ void __launch_bounds__(kWarps * 32)
    grouped_kernel(const __nv_bfloat16* x, const int32_t* x_rows, const MoeExperts w, const int4* tiles,
                   int max_tiles, __nv_bfloat16* y, int n, int k) {
  __shared__ float red[kWarps][NT * 8][16];
  extern __shared__ uint4 xs[];
  pdl_enter();  // the tiles and the expert of each come from group_kernel
  const int tile_id = blockIdx.x % max_tiles, n_tile = blockIdx.x / max_tiles;
  const int ntiles = tiles[0].x;
  const int4 tl = tiles[1 + tile_id];  // in the table's bounds (max_tiles + 1 entries): loaded with the count
  if (tile_id >= ntiles) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = n_tile * 16;
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, c_end = (warp + 1) * chunks / kWarps;

  const int na = min(n0 + g, n - 1), nb = min(n0 + g + 8, n - 1);  // clamped; masked at the store
  const Rows wr(w, tl.x, na, nb, k, t);
  const __nv_bfloat16* xr[NT];
  bool xok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int r = 8 * j + g;
    xok[j] = r < tl.z;
    const int slot = tl.y + (xok[j] ? r : 0);
    xr[j] = x + int64_t(x_rows ? x_rows[slot] : slot) * k + 8 * t;
  }
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  const uint4* xmine = xs + (warp * ((chunks + kWarps - 1) / kWarps) * NT) * 32 + lane;
  auto step = [&](const typename Rows::Frag& fa, const typename Rows::Frag& fb, int c) {
    const uint4 a = Rows::bf16(fa), b = Rows::bf16(fb);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      uint4 xv;
      if constexpr (XS)
        xv = xmine[((c - c_begin) * NT + j) * 32];
      else
        xv = xok[j] ? ld_act16(xr[j] + c * 32) : make_uint4(0, 0, 0, 0);
      mma_chunk(acc[j], a, b, xv);
    }
  };
  int c = c_begin;
  auto stage_x = [&] {
    if constexpr (XS) {
      for (int i = 0; i < c_end - c_begin; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          cp_async16(uint32_t(__cvta_generic_to_shared(xmine + (i * NT + j) * 32)),
                     xr[j] + (c_begin + i) * 32, xok[j]);
      cp_async_commit();
      cp_async_wait<0>();  // this lane's own slots: no barrier
    }
  };
  if constexpr (PREFETCH) {
    typename Rows::Frag a[U], b[U];
    auto load = [&](int at) { wr.load(at, U, a, b); };
    if (c + U <= c_end) load(c);
    stage_x();
    for (; c + U <= c_end; c += U) {
      typename Rows::Frag ca[U], cb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) ca[u] = a[u], cb[u] = b[u];
      if (c + 2 * U <= c_end) load(c + U);
#pragma unroll
      for (int u = 0; u < U; ++u) step(ca[u], cb[u], c + u);
    }
  } else {
    stage_x();
    for (; c + U <= c_end; c += U) {
      typename Rows::Frag a[U], b[U];
      wr.load(c, U, a, b);
#pragma unroll
      for (int u = 0; u < U; ++u) step(a[u], b[u], c + u);
    }
  }
  if (c < c_end) {  // the last < U chunks: all loads first (one round trip), then the steps in order
    typename Rows::Frag a[U], b[U];
    wr.load(c, c_end - c, a, b);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c + u < c_end) step(a[u], b[u], c + u);
  }

#pragma unroll
  for (int j = 0; j < NT; ++j) put_slice<NT>(red, warp, j, g, t, acc[j]);
  __syncthreads();
  store_tile<NT>(red, tl, n0, n, y);
}

// Persistent variant of grouped_kernel for tiles of up to 8 tokens (NT = 1), when every warp's K slice fits
// U chunks: a block walks the work items (tile, 16-feature n-tile) blockIdx.x, + gridDim.x, ... and, as it
// dequantizes each group of 4 chunks of the current item, reloads those fragment slots with the next item's
// chunks, so the next item's weights are in flight through this item's MMAs, slice sum and store (the
// non-persistent grid ran ~3-4 waves of one latency chain each at decode: run 103). The slice sums go to
// alternating buffers (one barrier an item). Same chunks, same MMAs in the same order, same slice sum.
//
// The tables an item needs (the tiles, the experts' weight and scale pointers, x_rows) are copied into
// shared memory once at the start (one round trip, all in parallel): read from global memory, each item
// waited on two or three dependent round trips (tile -> expert pointer -> ...; x_rows -> x) before its
// MMAs could go on. Shared memory: the x buffers, then persistent_tables_bytes().
template <int U>
constexpr int persistent_x_bytes() {
  return 2 * kWarps * U * 32 * 16;
}
inline int persistent_tables_bytes(int max_tiles, int experts, int slots) {
  return (max_tiles + 1) * 16 + 2 * experts * 8 + (slots * 4 + 15) / 16 * 16;
}
template <int U>
int persistent_smem_bytes(int max_tiles, int experts, int slots) {
  return persistent_x_bytes<U>() + persistent_tables_bytes(max_tiles, experts, slots);
}

// Where the persistent kernel's items come from. kByTiles: group_kernel's tiles (any call it serves).
// kRoute / kByPairs (moe_routed_gemm: decode calls of up to kMoeRoutedMaxRows rows): every pair p is its own
// one-token tile {p, slot p}, its expert found by the block itself -- kRoute runs route_row on the router's
// logits (the gate_up GEMM, silu_mul fused: store_tile_silu; block 0 also writes the pairs' experts and
// weights for the later kernels), kByPairs reads the experts kRoute wrote (the down GEMM); the combine reads
// slot p for pair p. No routing or grouping kernel between the router and the weights: the gate_up's loads
// start one dependent step and ~2 table round trips earlier. A slot's arithmetic does not depend on the tile
// it is in, so the bits are those of the grouped path.
enum PersistentMode { kByTiles = 0, kRoute = 1, kByPairs = 2 };
// Shared memory after the x buffers: the tables of persistent_tables_bytes (kByTiles), or for the routed
// modes the experts' pointers, per pair a tile, an x row, an expert and a weight, plus route_row's scratch
// (rows * experts floats).
inline int routed_tables_bytes(int pairs, int rows, int experts) {
  return (pairs + 1) * 16 + 2 * experts * 8 + 3 * pairs * 4 + rows * experts * 4;
}

// SILU (always with kRoute; with kByTiles for the gate_up of moe_grouped_gemm's `silu` calls): the output is
// silu_mul of the gate_up (store_tile_silu), act [slots, n / 2].
// warm (kRoute): warp 0 runs the routing once on zeros before the wait (its picks overwritten after it), so
// that the real routing finds its code in the instruction cache (route_row_noinline; moe_decode's: 5200 ->
// 2900 cycles in run 381).
template <class Rows, int U, int MODE = kByTiles, bool SILU = MODE == kRoute>
__global__ void __launch_bounds__(kWarps * 32, 2)
    grouped_persistent_kernel(const __nv_bfloat16* x, const int32_t* x_rows, const MoeExperts w,
                              const int4* tiles, int max_tiles, int slots, __nv_bfloat16* y, int n, int k,
                              MoeRouting r, bool warm) {
  static_assert(U % 4 == 0, "fragments are reloaded in groups of 4 chunks");
  static_assert(SILU || MODE != kRoute, "the routed gate_up applies silu_mul");
  using Frag = typename Rows::Frag;
  __shared__ float red[2][kWarps][8][16];
  extern __shared__ uint4 xs[];  // [2 items][kWarps][U chunks][32 lanes]: each lane's own x fragments
  constexpr int kBuf = kWarps * U * 32;
  int4* const tiles_s = reinterpret_cast<int4*>(xs + 2 * kBuf);
  const void** const wp_s = reinterpret_cast<const void**>(tiles_s + max_tiles + 1);
  const void** const sp_s = wp_s + w.experts;
  int32_t* const rows_s = reinterpret_cast<int32_t*>(sp_s + w.experts);
  pdl_launch_dependents();
  // The experts' pointer tables are constant (written once, at the layer's first forward): copied before the
  // wait, off the chain that starts with the routing.
  for (int i = threadIdx.x; i < w.experts; i += blockDim.x)
    wp_s[i] = w.weights[i], sp_s[i] = w.scales ? w.scales[i] : nullptr;
  if constexpr (MODE == kRoute) {
    if (warm && threadIdx.x < 32) {
      int32_t* const e0 = rows_s + slots;
      float* const w0 = reinterpret_cast<float*>(e0 + slots);
      float* const p0 = w0 + slots;
      for (int e = threadIdx.x; e < w.experts; e += 32) p0[e] = 0.f;
      __syncwarp();
      route_row_noinline(p0, 0, w.experts, r.top_k, r.norm, e0, w0, p0, threadIdx.x);
    }
  }
  pdl_wait();  // the tiles (kByTiles), the logits (kRoute) or the pairs' experts (kByPairs)
  if constexpr (MODE == kByTiles) {
    for (int i = threadIdx.x; i <= max_tiles; i += blockDim.x) tiles_s[i] = tiles[i];
    if (x_rows)
      for (int i = threadIdx.x; i < slots; i += blockDim.x) rows_s[i] = x_rows[i];
  } else {
    int32_t* const e_s = rows_s + slots;
    float* const w_s = reinterpret_cast<float*>(e_s + slots);
    float* const prob = w_s + slots;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if constexpr (MODE == kRoute) {
      for (int row = warp; row < r.rows; row += kWarps)
        route_row_noinline(r.logits, row, w.experts, r.top_k, r.norm, e_s, w_s, prob + row * w.experts, lane);
    } else {
      for (int i = threadIdx.x; i < slots; i += blockDim.x) e_s[i] = r.pair_e[i];
    }
    __syncthreads();
    for (int p = threadIdx.x; p < slots; p += blockDim.x) {
      const int e = e_s[p];
      tiles_s[1 + p] = make_int4(e, p, 1, 0);
      rows_s[p] = MODE == kRoute ? p / r.top_k : p;  // gate_up reads token rows, down its own slot
      if (MODE == kRoute && blockIdx.x == 0) r.pair_e[p] = e, r.pair_w[p] = w_s[p];
    }
    if (threadIdx.x == 0) tiles_s[0] = make_int4(slots, 0, 0, 0);
    x_rows = rows_s;  // non-null: stage_x reads rows_s
  }
  __syncthreads();
  MoeExperts ws = w;
  ws.weights = wp_s, ws.scales = sp_s;
  // SILU: n = 2 * inter gate_up features; tiles of 8 gate features and their 8 up features
  // (store_tile_silu).
  const int inter = n / 2, width = SILU ? 8 : 16;
  const int ntiles = tiles_s[0].x, n_tiles = ((SILU ? inter : n) + width - 1) / width,
            items = ntiles * n_tiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, count = (warp + 1) * chunks / kWarps - c_begin;  // <= U
  // Item i: tile i % ntiles (the tiles of one n-tile run together), features width * (i / ntiles) ...
  auto rows_of = [&](int item, int4& tl, int& n0) {
    tl = tiles_s[1 + item % ntiles];
    n0 = item / ntiles * width;
    if constexpr (SILU) {
      const int f = min(n0 + g, inter - 1);  // clamped; masked at the store
      return Rows(ws, tl.x, f, inter + f, k, t);
    }
    return Rows(ws, tl.x, min(n0 + g, n - 1), min(n0 + g + 8, n - 1), k, t);  // clamped; masked at the store
  };
  int item = blockIdx.x;
  if (item >= items) return;
  int4 tl;
  int n0;
  Rows wr = rows_of(item, tl, n0);
  Frag a[U], b[U];
  wr.load(c_begin, count, a, b);
  // x of an item's tile: lane g's token row (zeros past the tile; those columns are never stored), this
  // lane's 16 bytes of each chunk of the warp's slice, copied into its own slots of buffer `buf` (cp.async);
  // the next item's copies go out with its weight loads, so no MMA waits on an L2 round trip for x (they
  // were load, HMMA, load, HMMA in SASS: 8 round trips an item at K = 2048). Same bytes, same bits.
  uint4* const xmine = xs + warp * U * 32 + lane;
  auto stage_x = [&](int buf, const int4& tile) {
    const bool ok = g < tile.z;
    const int slot = tile.y + (ok ? g : 0);
    const __nv_bfloat16* xr = x + int64_t(x_rows ? rows_s[slot] : slot) * k + 8 * t + c_begin * 32;
    for (int i = 0; i < count; ++i)
      cp_async16(uint32_t(__cvta_generic_to_shared(xmine + buf * kBuf + i * 32)), xr + i * 32, ok);
    cp_async_commit();
  };
  stage_x(0, tl);
  for (int it = 0;; ++it) {
    const int next = item + int(gridDim.x);
    int4 tln = tl;
    int n0n = n0;
    const Rows wn = next < items ? rows_of(next, tln, n0n) : wr;
    if (next < items) {
      stage_x((it + 1) & 1, tln);  // buffer (it + 1) & 1 was last read by item it - 1's MMAs, all issued
      cp_async_wait<1>();          // this item's copies (this lane's own slots: no barrier)
    } else {
      cp_async_wait<0>();
    }
    const uint4* xb = xmine + (it & 1) * kBuf;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    constexpr bool kPipe = Rows::kBits < 16;  // bf16 fragments need no conversion (and spilled this way)
    if (kPipe && count == U) {
      // The whole slice in fragments (the gate_up at K = 2048): chunk i + 1 is made bf16 before chunk i's
      // MMAs, so that ALU work fills the MMA chain's latency, and no branch splits the slice; a group of 4
      // chunks is reloaded with the next item's once all 4 are converted. Same values into the same MMAs in
      // order.
      uint4 av = Rows::bf16(a[0]), bv = Rows::bf16(b[0]);
#pragma unroll
      for (int i = 0; i < U; ++i) {
        uint4 an = av, bn = bv;
        if (i + 1 < U) an = Rows::bf16(a[i + 1]), bn = Rows::bf16(b[i + 1]);
        if (i % 4 == 3 && next < items)
          wn.load(c_begin + i - 3, 4, reinterpret_cast<Frag(&)[4]>(a[i - 3]),
                  reinterpret_cast<Frag(&)[4]>(b[i - 3]));
        mma_chunk(acc, av, bv, xb[i * 32]);
        av = an, bv = bn;
      }
    } else {
#pragma unroll
      for (int q = 0; q < U; q += 4) {
        if (q >= count) break;
        uint4 av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (q + i < count) av[i] = Rows::bf16(a[q + i]), bv[i] = Rows::bf16(b[q + i]);
        if (next < items)
          wn.load(c_begin + q, min(4, count - q), reinterpret_cast<Frag(&)[4]>(a[q]),
                  reinterpret_cast<Frag(&)[4]>(b[q]));
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (q + i < count) mma_chunk(acc, av[i], bv[i], xb[(q + i) * 32]);
      }
    }
    put_slice<1>(red[it & 1], warp, 0, g, t, acc);
    __syncthreads();  // the other buffer is rewritten only after the next item's barrier: all stores done
    if constexpr (SILU)
      store_tile_silu(red[it & 1], tl, n0, inter, y);
    else
      store_tile<1>(red[it & 1], tl, n0, n, y);
    if (next >= items) break;
    item = next, tl = tln, n0 = n0n, wr = wn;
  }
}

template <class T>
__global__ void combine_kernel(const __nv_bfloat16* y, const int32_t* slot_of_pair, const float* weights,
                               T* out, int top_k, int width) {
  pdl_enter();
  const int row = blockIdx.y;
  // slot_of_pair null: pair p's slot is p (moe_routed_gemm), one dependent load fewer. Eight ranks' loads go
  // out before their fmas; the fmas stay in rank order.
  auto slot = [&](int p) { return int64_t(slot_of_pair ? slot_of_pair[p] : p); };
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < width; c += gridDim.x * blockDim.x) {
    float s = 0.f;
    int j = 0;
    for (; j + 8 <= top_k; j += 8) {
      float wv[8], yv[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int p = row * top_k + j + u;
        wv[u] = weights[p], yv[u] = __bfloat162float(y[slot(p) * width + c]);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) s = __fmaf_rn(wv[u], yv[u], s);
    }
    for (; j < top_k; ++j) {
      const int p = row * top_k + j;
      s = __fmaf_rn(weights[p], __bfloat162float(y[slot(p) * width + c]), s);
    }
    if constexpr (sizeof(T) == 4)
      out[int64_t(row) * width + c] = s;
    else
      out[int64_t(row) * width + c] = __float2bfloat16(s);
  }
}

// TF_MOE_PERSISTENT=0: the non-persistent grid at tiles of 8 tokens too (A/B).
const bool g_moe_persistent = env_switch("TF_MOE_PERSISTENT", true);  // launch.h
// The routed gate_up's routing code warmed before its wait (grouped_persistent_kernel's `warm`;
// set_moe_routed_warm, TF_MOE_ROUTED_WARM=0: not; A/B, the same values).
bool g_routed_warm = env_switch("TF_MOE_ROUTED_WARM", true);
// TF_MOE_GROUPED_SILU=0 (set_moe_grouped_silu): the persistent grouped gate_up stores gate_up, and the
// silu_mul kernel runs (A/B; the same bits).
bool g_grouped_silu = env_switch("TF_MOE_GROUPED_SILU", true);
constexpr int kPersistentU = 8;  // chunks of a warp's K slice the persistent kernel holds (K <= 2048)

// The persistent kernel's shared memory at most (two blocks an SM): two items' x (64 KB) and the tables.
constexpr int kPersistentMaxSmem = 96 << 10;

// `smem`: the call's persistent_smem_bytes (at most kPersistentMaxSmem).
template <class Rows, int MODE = kByTiles, bool SILU = MODE == kRoute>
void launch_persistent(const void* x, const int32_t* x_rows, const MoeExperts& w, const int4* tiles,
                       int max_tiles, int slots, int smem, void* y, int n, int k, cudaStream_t s,
                       const MoeRouting& r = {}) {
  auto kernel = grouped_persistent_kernel<Rows, kPersistentU, MODE, SILU>;
  const int n_tiles = SILU ? (n / 2 + 7) / 8 : (n + 15) / 16;
  const int grid = std::min(n_tiles * max_tiles, resident_blocks(reinterpret_cast<const void*>(kernel),
                                                                 kWarps * 32, kPersistentMaxSmem));
  launch_pdl_if(g_pdl_group, kernel, grid, kWarps * 32, size_t(smem), s, static_cast<const __nv_bfloat16*>(x),
                x_rows, w, tiles, max_tiles, slots, static_cast<__nv_bfloat16*>(y), n, k, r,
                MODE == kRoute && g_routed_warm);
  TF_CUDA_LAUNCH_CHECK();
}

// x staged in shared memory (XS) for tiles of 8 and 16 tokens (decode, verify) while a block's copy is at
// most this many bytes (K <= 3072 at 16 tokens, 6144 at 8); larger tiles (prefill) load it next to the
// MMAs, as before: there the MMAs of a chunk's 4 or 8 token tiles share its weights.
constexpr int kXsMaxBytes = 96 << 10;

template <class Rows, int NT, int U, bool P>
void launch_grouped(const void* x, const int32_t* x_rows, const MoeExperts& w, const int4* tiles,
                    int max_tiles, void* y, int n, int k, cudaStream_t s) {
  const int n_tiles = (n + 15) / 16;
  // Token tiles vary fastest: the blocks of one expert's weight tile run together (L2 reuse).
  auto kernel = grouped_kernel<Rows, NT, U, P, false>;
  size_t smem = 0;
  if constexpr (NT <= 2) {
    if (xs_bytes<NT>(k) <= kXsMaxBytes) {
      kernel = grouped_kernel<Rows, NT, U, P, true>;
      smem = size_t(xs_bytes<NT>(k));
      static const bool attr = [kernel] {  // once per instantiation: allow the largest copy
        TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kXsMaxBytes));
        return true;
      }();
      (void)attr;
    }
  }
  launch_pdl_if(g_pdl_group, kernel, n_tiles * max_tiles, kWarps * 32, smem, s,
                static_cast<const __nv_bfloat16*>(x), x_rows, w, tiles, max_tiles,
                static_cast<__nv_bfloat16*>(y), n, k);
  TF_CUDA_LAUNCH_CHECK();
}

// The decode kernel's choice for bf16: prefetch of the next K step's weights for small token tiles.
// Packed weights always prefetch (their loads are small): 8 chunks ahead for 4-bit at tiles of 8 tokens
// (decode), else 4 (8 at 16 tokens spills).
// The persistent kernel serves tiles of 8 tokens of 4-bit experts whose warp slices fit kPersistentU chunks.
// 4-bit only: run 105 (30B-A3B, same run) 4-bit b=8 4.83 -> 4.39 ms, b=1 3.66 -> 3.62 ms; bf16 lost (b=1 3.81
// -> 4.19, b=8 9.70 -> 14.76 ms) and 8-bit spills 56 bytes (not measured).
bool persistent_takes(const MoeExperts& w, int max_tiles, int tile, int slots, int k) {
  return w.bits == 4 && tile == 8 && g_moe_persistent && (k / 32 + kWarps - 1) / kWarps <= kPersistentU &&
         persistent_smem_bytes<kPersistentU>(max_tiles, w.experts, slots) <= kPersistentMaxSmem;
}

template <class Rows, bool PACKED>
void dispatch_tile(const void* x, const int32_t* x_rows, const MoeExperts& w, const int4* tiles,
                   int max_tiles, int tile, int slots, void* y, int n, int k, cudaStream_t s, bool silu) {
  constexpr int kAhead8 = PACKED && Rows::kBits <= 4 ? 8 : 4;  // chunks a step at tiles of 8 tokens
  if constexpr (Rows::kBits == 4) {
    if (persistent_takes(w, max_tiles, tile, slots, k)) {
      const int smem = persistent_smem_bytes<kPersistentU>(max_tiles, w.experts, slots);
      if (silu)
        return launch_persistent<Rows, kByTiles, true>(x, x_rows, w, tiles, max_tiles, slots, smem, y, n, k,
                                                       s);
      return launch_persistent<Rows>(x, x_rows, w, tiles, max_tiles, slots, smem, y, n, k, s);
    }
  }
  TF_CHECK(!silu, "moe_grouped_gemm: silu_mul is fused only where moe_grouped_fuses_silu says so");
  switch (tile) {
    case 8:
      return launch_grouped<Rows, 1, kAhead8, true>(x, x_rows, w, tiles, max_tiles, y, n, k, s);
    case 16:
      return launch_grouped<Rows, 2, 4, true>(x, x_rows, w, tiles, max_tiles, y, n, k, s);
    case 32:
      return launch_grouped<Rows, 4, 4, PACKED>(x, x_rows, w, tiles, max_tiles, y, n, k, s);
    case 64:
      return launch_grouped<Rows, 8, 4, PACKED>(x, x_rows, w, tiles, max_tiles, y, n, k, s);
    default:
      TF_CHECK(false, "moe_grouped_gemm: tile must be 8, 16, 32 or 64");
  }
}

}  // namespace

void moe_route(const float* logits, int rows, int experts, int top_k, bool norm, int32_t* experts_out,
               float* weights_out, cudaStream_t s) {
  TF_CHECK(experts <= kMoeMaxExperts && top_k <= kMoeMaxTopK && top_k <= experts,
           "moe_route: too many experts");
  if (rows == 0) return;
  launch_pdl_if(g_pdl_group, route_kernel, (rows + kRouteWarps - 1) / kRouteWarps, kRouteWarps * 32, 0, s,
                logits, rows, experts, top_k, norm, experts_out, weights_out);
  TF_CUDA_LAUNCH_CHECK();
}

void moe_route_group(const float* logits, int rows, int experts, int top_k, bool norm, int32_t* experts_out,
                     float* weights_out, int tile, int4* tiles, int32_t* slot_of_pair, int32_t* slot_row,
                     cudaStream_t s) {
  if (rows > kRouteGroupMaxRows || !g_route_group) {  // the two launches (each checks its arguments)
    moe_route(logits, rows, experts, top_k, norm, experts_out, weights_out, s);
    return moe_group(experts_out, rows * top_k, top_k, experts, tile, tiles, slot_of_pair, slot_row, s);
  }
  TF_CHECK(experts <= kMoeMaxExperts && top_k <= kMoeMaxTopK && top_k <= experts,
           "moe_route_group: too many experts");
  launch_pdl_if(g_pdl_group, route_group_kernel, 1, 1024, 0, s, logits, rows, experts, top_k, norm,
                experts_out, weights_out, tile, tiles, slot_of_pair, slot_row);
  TF_CUDA_LAUNCH_CHECK();
}

void set_moe_route_group(bool on) {
  g_route_group = on;
}

void moe_group(const int32_t* pair_expert, int pairs, int top_k, int experts, int tile, int4* tiles,
               int32_t* slot_of_pair, int32_t* slot_row, cudaStream_t s) {
  TF_CHECK(experts <= kMoeMaxExperts, "moe_group: too many experts");
  launch_pdl_if(g_pdl_group, group_kernel, 1, 1024, 0, s, pair_expert, pairs, top_k, experts, tile, tiles,
                slot_of_pair, slot_row);
  TF_CUDA_LAUNCH_CHECK();
}

bool moe_grouped_fuses_silu(const MoeExperts& w, int max_tiles, int tile, int slots, int k) {
  return g_grouped_silu && persistent_takes(w, max_tiles, tile, slots, k);
}

void set_moe_grouped_silu(bool on) {
  g_grouped_silu = on;
}

void moe_grouped_gemm(const void* x, const int32_t* x_rows, const MoeExperts& w, const int4* tiles,
                      int max_tiles, int tile, int slots, void* y, int n, int k, cudaStream_t s, bool silu) {
  TF_CHECK(k % 32 == 0, "moe_grouped_gemm: in_features must be divisible by 32, got " + std::to_string(k));
  TF_CHECK(w.experts > 0 && w.experts <= kMoeMaxExperts, "moe_grouped_gemm: the expert count must be set");
  TF_CHECK(!silu || n % 2 == 0, "moe_grouped_gemm: silu_mul needs gate and up halves");
  if (max_tiles == 0) return;
  switch (w.bits) {
    case 16:
      return dispatch_tile<Bf16Rows, false>(x, x_rows, w, tiles, max_tiles, tile, slots, y, n, k, s, silu);
    case 4:
      if (w.subnormal)
        return dispatch_tile<MlxRows<4, kMlxBf16Sub>, true>(x, x_rows, w, tiles, max_tiles, tile, slots, y, n,
                                                            k, s, silu);
      return dispatch_tile<MlxRows<4>, true>(x, x_rows, w, tiles, max_tiles, tile, slots, y, n, k, s, silu);
    case 8:
      return dispatch_tile<MlxRows<8>, true>(x, x_rows, w, tiles, max_tiles, tile, slots, y, n, k, s, silu);
    default:
      TF_CHECK(false,
               "moe_grouped_gemm: experts must be bf16 (16) or MLX 4/8-bit, got " + std::to_string(w.bits));
  }
}

// TF_MOE_ROUTED=0 (read once; set_moe_routed): decode calls take the routing + grouping kernel too (A/B).
static bool g_moe_routed = env_switch("TF_MOE_ROUTED", true);

bool moe_routed_ok(const MoeExperts& gate_up, const MoeExperts& down, int rows, int top_k, int hidden,
                   int inter) {
  const int pairs = rows * top_k;
  auto fits = [&](const MoeExperts& w, int k) {
    return (w.bits == 4 || w.bits == 16) && k % 32 == 0 && (k / 32 + kWarps - 1) / kWarps <= kPersistentU &&
           persistent_x_bytes<kPersistentU>() + routed_tables_bytes(pairs, rows, w.experts) <=
               kPersistentMaxSmem;
  };
  return g_moe_routed && g_moe_persistent && rows >= 1 && rows <= kMoeRoutedMaxRows && top_k >= 1 &&
         top_k <= kMoeMaxTopK && top_k <= gate_up.experts && gate_up.experts <= kMoeMaxExperts &&
         fits(gate_up, hidden) && fits(down, inter);
}

// A Rows type as a value (the CUDA code is C++17: no std::type_identity).
template <class T>
struct RowsTag {
  using type = T;
};

void moe_routed_gemm(const MoeRouting& r, bool route, const void* x, const MoeExperts& w, void* y, int n,
                     int k, cudaStream_t s) {
  const int pairs = r.rows * r.top_k;
  const int smem = persistent_x_bytes<kPersistentU>() + routed_tables_bytes(pairs, r.rows, w.experts);
  TF_CHECK((w.bits == 4 || w.bits == 16) && smem <= kPersistentMaxSmem &&
               (k / 32 + kWarps - 1) / kWarps <= kPersistentU,
           "moe_routed_gemm: the call does not fit (moe_routed_ok)");
  if (w.bits == 16) {
    if (route)
      return launch_persistent<Bf16Rows, kRoute>(x, nullptr, w, nullptr, pairs, pairs, smem, y, n, k, s, r);
    return launch_persistent<Bf16Rows, kByPairs>(x, nullptr, w, nullptr, pairs, pairs, smem, y, n, k, s, r);
  }
  auto go = [&](auto rows) {
    using Rows = typename decltype(rows)::type;
    if (route)
      return launch_persistent<Rows, kRoute>(x, nullptr, w, nullptr, pairs, pairs, smem, y, n, k, s, r);
    launch_persistent<Rows, kByPairs>(x, nullptr, w, nullptr, pairs, pairs, smem, y, n, k, s, r);
  };
  if (w.subnormal) return go(RowsTag<MlxRows<4, kMlxBf16Sub>>{});
  go(RowsTag<MlxRows<4>>{});
}

void set_moe_routed(bool on) {
  g_moe_routed = on;
}

void set_moe_routed_warm(bool on) {
  g_routed_warm = on;
}

void set_moe_route_smem_only(bool on) {
  TF_CUDA_CHECK(cudaMemcpyToSymbol(g_route_smem_only, &on, sizeof(bool)));
}

void moe_combine(const void* y, const int32_t* slot_of_pair, const float* weights, void* out, DType out_dtype,
                 int rows, int top_k, int width, cudaStream_t s) {
  if (rows == 0) return;
  TF_CHECK(rows <= 65535, "moe_combine: at most 65535 rows a call (grid y), got " + std::to_string(rows));
  const dim3 grid(unsigned((width + 255) / 256), unsigned(rows));
  if (out_dtype == DType::F32)
    launch_pdl_if(g_pdl_group, combine_kernel<float>, grid, 256, 0, s, static_cast<const __nv_bfloat16*>(y),
                  slot_of_pair, weights, static_cast<float*>(out), top_k, width);
  else
    launch_pdl_if(g_pdl_group, combine_kernel<__nv_bfloat16>, grid, 256, 0, s,
                  static_cast<const __nv_bfloat16*>(y), slot_of_pair, weights,
                  static_cast<__nv_bfloat16*>(out), top_k, width);
  TF_CUDA_LAUNCH_CHECK();
}

}  // namespace tf::cuda
