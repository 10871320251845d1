// The MoE of one decode row in one kernel (moe_kernels.h's moe_decode): routing, the gate_up GEMM with
// silu_mul, the down GEMM and the combine, where the op chain (moe_routed_gemm twice, then moe_combine) ran
// three kernels, each waiting for the last one's grid to drain before its first weight request, each item's
// weights requested one item ahead (docs/cuda-notes.md "Session 31": 30B-A3B 4-bit b=1 2.67 -> 2.47 ms).
//
// One block of two 8-warp teams an SM (all resident):
// 0. with the attention's o projection inside (MoeOProj): blocks 0 .. hidden / 16 - 1 compute its 16-feature
//    tile b (team 0; the weight words in registers before the wait, the attention's output in the down tile's
//    region), store it as x, and every block waits for them on a count of its own;
// 1. every block routes the row (route_row, warp 0) and copies the row's x into shared memory;
// 2. it then requests the weight bytes it will read by bulk copies into shared memory, each item on its own
//    mbarrier: its gate_up items (pair, 8 gate features and their 8 up features; item i to block
//    i % grid, as moe_routed_gemm's persistent kernel deals them), a window of 2 in flight (item k + 2
//    requested as item k lands), and, for block d < hidden / 16, its down tile (output features 16d ..
//    16d + 15 of each of the row's top_k experts) once team 1's second item has landed;
// 3. the teams take the block's items in turn (warp s of a team: K slice s), each item stored as silu_mul of
//    the two bf16 sums (store_tile_silu's bits) into act [top_k, inter] in global memory;
// 4. a grid barrier (a 64-bit arrival count that only grows, so graph replays need no host reset): the
//    blocks without a down tile arrive and leave;
// 5. each down block copies act into shared memory; warp w computes pair w / 2's K slices 4 (w % 2) ..
//    4 (w % 2) + 3 (down_unit; the loop over pairs where the slices are not whole quads: team 0 the first
//    half of the pairs, team 1 the rest, warp s the K slice s), the slice sums in slice order are rounded to
//    bf16 (store_tile's bits), and the pairs are combined in rank order with one fma each (moe_combine's
//    bits).
//
// Every value has the chain's bits: the same dequantisation (quant_common.cuh), the same K slices and MMA
// chains (a pair is a one-token tile: lane g = 0 carries the token, the other lanes zeros), the same slice
// sums, silu_mul and combine order. GPU test: DecodeKernelEqualsTheRoutedChain (test_moe_cuda).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/cuda/activation.cuh"  // silu_mul_bf16
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/moe_route.cuh"  // route_row
#include "ops/cuda/norm.cuh"       // add_norm_row
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/stamp_buffer.h"

namespace tf::cuda {
namespace {

const bool g_pdl = pdl_group_enabled("MOE");                  // launch.h
bool g_decode_on = env_switch("TF_MOE_DECODE", true);         // set_moe_decode
bool g_router_on = env_switch("TF_MOE_DECODE_ROUTER", true);  // set_moe_decode_router
StampBuffer g_stamps;                                         // set_moe_decode_stamps
bool g_stamps_on = false;
int g_stamp_blocks = 0;
// Benches (timing only, wrong values): TF_MOE_DECODE_ABLATE=1 no down phase, 2 no barrier wait, 3 no gate_up
// arithmetic, 4 no routing (experts 0 .. top_k - 1).
// Gate_up items in flight a block: even (a team's next item is its own), 2 .. kMaxItems; benches:
// TF_MOE_DECODE_WINDOW (same values, A/B). 2 since run 392 (30B-A3B 4-bit b=1, alternating x2: window 2
// 2.083-2.084 ms, 4 2.094, 6 2.123-2.129), as runs 348 and 353 had already leaned (-0.5-1%).
const int g_window = [] {
  const char* w = std::getenv("TF_MOE_DECODE_WINDOW");
  const int v = w ? std::atoi(w) : 0;
  return v >= 2 && v % 2 == 0 && v <= 16 ? v : 2;
}();
// The routing's code run once on zeros before the wait (route_row_noinline), warming the instruction cache
// for the real call after it (TF_MOE_ROUTE_WARM=0: not).
const bool g_route_warm = env_switch("TF_MOE_ROUTE_WARM", true);
// The down as 16 units (pair, half of the K slices) a warp each where the slices are whole quads (down_unit;
// TF_MOE_DOWN_UNITS=0: the loop over pairs, warp s the K slice s; A/B, same bits).
const bool g_down_units = env_switch("TF_MOE_DOWN_UNITS", true);
// The prologue's copies (pointer tables, zero row, mbarriers, the router tile's request) by warps 1-15, so
// that warp 0 starts the routing's warm-up at once instead of after the tables' round trip: most blocks enter
// only when the o linear's blocks leave, and then the prologue is on the step's critical path (run 399's
// stamps: the median block past its warm-up 2.6-2.8 us after the first block's wait).
// TF_MOE_PROLOGUE_SPLIT=0: all warps copy, warp 0 then warms (A/B; the same values).
bool g_prologue_split = env_switch("TF_MOE_PROLOGUE_SPLIT", true);  // set_moe_prologue_split
// The attention's o projection inside the kernel where the call allows it (MoeOProj; set_moe_o_fold). Run 406
// (30B-A3B MLX 4-bit b=1, same call, two processes): 2.064 / 2.108 ms -> 1.984 / 2.020 (-3.9 / -4.2%).
bool g_o_fold = env_switch("TF_MOE_O_FOLD", true);
// Who arrives on the o fold's count: the o blocks only (default), so that the blocks resident only after the
// attention (their SMs held by its blocks) do not hold up the hand-over; or every block, each after its wait
// (TF_MOE_O_COUNT_ALL=1, set_moe_o_count_all; A/B, the same values). Run 432 (30B-A3B MLX 4-bit b=1, same
// call): 2.023 / 2.024 -> 2.007 / 2.007 ms (-0.8%).
bool g_o_count_all = env_switch("TF_MOE_O_COUNT_ALL", false);
// o tiles a block (set_moe_o_one_tile): 1 (default: blocks 0 .. hidden / 16 - 1, team 0 each, so that an SM
// dequantizes one tile's words, not two: tf_mma_probe's 4-bit chunk costs 83 cycles at 8 warps an SM, 151 at
// 16), or 2 (TF_MOE_O_TILES=2: blocks 0 .. hidden / 32 - 1, a tile a team). The same values. Run 442 (30B-A3B
// MLX 4-bit b=1, same call x3): 1.984 / 1.987 / 1.999 -> 1.968 / 1.970 / 1.982 ms (-0.8%); the o chains done
// 1.79 -> 1.28 us after the wait.
int g_o_tiles = [] {
  const char* v = std::getenv("TF_MOE_O_TILES");
  return v && std::atoi(v) == 2 ? 2 : 1;
}();
// The router tile's rows padded in shared memory (router_tile_bytes; set_moe_router_pad, TF_MOE_ROUTER_PAD=0:
// unpadded; A/B, the same values).
bool g_router_pad = env_switch("TF_MOE_ROUTER_PAD", true);
// Router rows a block (set_moe_router_rows): 8 (default) dequantizes only rows g of the m16 tile, half the
// instructions of 16 rows a block, over twice the blocks: the router tile's chain 2.05 -> 1.8 us, the step
// -0.4..-0.5% (run 427, same call). The rest of the chain is its MMAs' latency (~370 cycles a chunk of two
// dependent HMMAs with their loads, run 425). TF_MOE_ROUTER_ROWS=16: 16 (A/B; the same values).
int g_router_rows = [] {
  const char* v = std::getenv("TF_MOE_ROUTER_ROWS");
  return v && std::atoi(v) == 16 ? 16 : 8;
}();
const int g_ablate = [] {
  const char* a = std::getenv("TF_MOE_DECODE_ABLATE");
  return a ? std::atoi(a) : 0;
}();

constexpr int kWarps = 8;                       // K slices of a tile: a team's warps
constexpr int kTeams = 2;                       // teams a block
constexpr int kThreads = kTeams * kWarps * 32;  // 512: one block an SM
constexpr int kSlice = 8;      // gate_up: a warp's K slice in chunks at most (hidden <= 2048)
constexpr int kDU = 4;         // down: a warp's K slice in chunks at most (inter <= 1024)
constexpr int kMaxPairs = 8;   // top_k at most (one row)
constexpr int kMaxItems = 16;  // gate_up items a block at most
constexpr int kPairStep = 2;   // down: a warp's pairs computed together (independent chains)
constexpr int kStamps = kMoeDecodeStamps;
constexpr int kMaxSmem = 216 << 10;  // dynamic shared memory a block at most

// Dynamic shared memory (bytes): the activation rows (x then a zero row; after the barrier act's top_k rows
// then a zero row), the experts' pointer tables (gate_up weights, scales, down weights, scales), `slots`
// gate_up items (16 packed rows: 8 gate then 8 up, then their 16 scale rows), the down tile (packed rows
// [pair][16], then scale rows [pair][16]) and the mbarriers (one an item, then the down tile's). Rows are
// unpadded, so that each block of consecutive rows is one bulk copy (a warp's 16-byte loads of rows g and
// g + 8 then meet 2-way bank conflicts).
// The router's tile (16 weight rows, then their 16 scale rows: router_bytes) goes where the items go: it is
// read before any item is requested. The o projection's input (the attention's output, MoeOProj) goes where
// the down tile goes: it is read before the down tile is requested. The mbarriers: one an item slot, the down
// tile's, the router tile's.
struct Layout {
  int tables, items, item_bytes, down_w, down_s, bars, total;
};
__host__ __device__ inline Layout layout_of(int experts, int pairs, int hidden, int inter, int gu_groups,
                                            int dn_groups, int slots, int router_bytes) {
  Layout l;
  const int rows = 2 * hidden > (pairs + 1) * inter ? 2 * hidden : (pairs + 1) * inter;
  l.tables = (rows * 2 + 15) / 16 * 16;
  l.items = l.tables + 4 * experts * 8;
  l.item_bytes = 16 * (hidden / 2) + 16 * gu_groups * 4;
  const int item_region = slots * l.item_bytes > router_bytes ? slots * l.item_bytes : router_bytes;
  l.down_w = l.items + item_region;
  l.down_s = l.down_w + pairs * 16 * (inter / 2);
  l.bars = l.down_s + pairs * 16 * dn_groups * 4;
  l.total = l.bars + (slots + 2) * 8;
  return l;
}

// The router tile in shared memory: `rows` (8 or 16) rows of row_bytes at a stride of row_bytes + pad, then
// their scale words at a stride of groups * 4 (+ 16 where pad). Unpadded, the rows of a warp's loads all
// start on one bank (8-bit at hidden 2048: 2048-byte rows, 128-byte scale rows): 8-way conflicts on every
// load of the chain. pad: 0 or 32 (router_pad_of).
__host__ __device__ inline int router_wstride(const MoeRouter& rt, int pad) {
  return int(rt.row_bytes) + pad;
}
__host__ __device__ inline int router_sstride(const MoeRouter& rt, int pad) {
  return rt.bits == 16 ? 0 : rt.groups * 4 + (pad ? 16 : 0);
}
__host__ __device__ inline int router_tile_bytes(const MoeRouter& rt, int rows, int pad) {
  return rt.weight ? rows * (router_wstride(rt, pad) + router_sstride(rt, pad)) : 0;
}

// Lane t's 8 weights of chunk c of a router row (w: its bytes in shared memory, sc: its scale words) as bf16
// pairs: load_raw's words of that row (the same offsets) through the same dequant, or the bf16 row as is.
template <int KIND, int B>  // B = 16: bf16 (KIND unused)
__device__ __forceinline__ uint4 router_chunk(const char* w, const unsigned* sc, int c, int t, int sh,
                                              int qc) {
  if constexpr (B == 16) {
    return *reinterpret_cast<const uint4*>(w + c * 64 + t * 16);
  } else {
    Raw r{0, 0, sc[c >> sh], 0};
    if constexpr (B == 8) {
      const uint2 u = *reinterpret_cast<const uint2*>(w + c * 32 + t * 8);
      r.v0 = u.x, r.v1 = u.y;
    } else {
      r.v0 = reinterpret_cast<const uint32_t*>(w)[word_of(c, t, qc)];
    }
    return dequant<KIND, B>(r);
  }
}

// A router tile's slice: warp s's chunks of rows g and g + 8 in order, one MMA chain (linear.cu's K slice).
// Unrolled over kSlice (hidden <= 2048: a slice has at most 8 chunks), so that the chunks' loads and
// dequantisation run ahead of the chain.
// (ck, benches: clock64 after chunks 0 and 3 into ck[0], ck[1]; null: none.) `half`: rows g only (rows
// g + 8 zeros, not dequantized: a row's MMA results do not depend on the others).
template <int KIND, int B>
__device__ __forceinline__ void router_slice(float* acc, const char* wa, const char* wb, const unsigned* sa,
                                             const unsigned* sb, int c_begin, int c_end, int t, int sh,
                                             int qc, const uint4* xb, unsigned long long* ck, bool half) {
#pragma unroll
  for (int i = 0; i < kSlice; ++i) {
    const int c = c_begin + i;
    if (c >= c_end) break;
    mma_chunk(acc, router_chunk<KIND, B>(wa, sa, c, t, sh, qc),
              half ? make_uint4(0, 0, 0, 0) : router_chunk<KIND, B>(wb, sb, c, t, sh, qc), xb[4 * c]);
    if (ck && (i == 0 || i == 3)) {  // (the chain's value first: the clock after the chunk's MMAs)
      asm volatile("" ::"f"(acc[0]), "f"(acc[2]));
      ck[i == 3] = clock64();
    }
  }
}

__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Word k of v1 (hi) or v0, by selects (an indexed pick went through local memory).
__device__ __forceinline__ uint32_t word_in(const uint4& v0, const uint4& v1, bool hi, int k) {
  const uint32_t x = hi ? v1.x : v0.x, y = hi ? v1.y : v0.y, z = hi ? v1.z : v0.z, w = hi ? v1.w : v0.w;
  const uint32_t lo = (k & 1) ? y : x, up = (k & 1) ? w : z;
  return (k & 2) ? up : lo;
}

// Word k of v, by selects.
__device__ __forceinline__ uint32_t word_at(const uint4& v, int k) {
  return word_in(v, v, false, k);
}

__device__ __forceinline__ uint4 quad_of(const char* row, int q, int t) {  // lane t's words of chunks 4q..
  return *reinterpret_cast<const uint4*>(row + (q * 4 + t) * 16);
}

// A gate_up K slice of kSlice = 8 chunks starting at a multiple of 8, all in quads: rows a and b's words in
// four 16-byte loads, and their scale|bias words loaded once a group, as vectors (a group spans 1 << SH
// chunks; SH = 3: groups of 256 or more, one word). Loaded a chunk at a time, the scale words cost 16 loads a
// warp with 8-way bank conflicts (the 8 rows of a block are gs words apart): 128 shared-memory wavefronts a
// warp and item, with 16 warps an SM the item's whole time (run 344). Same words, same chunk order: the
// same bits.
template <int KIND, int SH>
__device__ __forceinline__ void slice_quads(float* acc, const char* wa, const char* wb, const unsigned* sa,
                                            const unsigned* sb, int c_begin, int sh, int t, const uint4* xb) {
  const uint4 a0 = quad_of(wa, c_begin / 4, t), a1 = quad_of(wa, c_begin / 4 + 1, t);
  const uint4 b0 = quad_of(wb, c_begin / 4, t), b1 = quad_of(wb, c_begin / 4 + 1, t);
  const uint32_t va[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
  const uint32_t vb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
  constexpr int kGroups = SH >= 3 ? 1 : 8 >> SH;  // groups of the slice
  uint32_t ga[kGroups], gb[kGroups];
  const int g0 = c_begin >> sh;  // 4-aligned for SH <= 1, 2-aligned for SH = 2
  if constexpr (kGroups >= 4) {
#pragma unroll
    for (int j = 0; j < kGroups; j += 4) {
      const uint4 u = *reinterpret_cast<const uint4*>(sa + g0 + j),
                  v = *reinterpret_cast<const uint4*>(sb + g0 + j);
      ga[j] = u.x, ga[j + 1] = u.y, ga[j + 2] = u.z, ga[j + 3] = u.w;
      gb[j] = v.x, gb[j + 1] = v.y, gb[j + 2] = v.z, gb[j + 3] = v.w;
    }
  } else if constexpr (kGroups == 2) {
    const uint2 u = *reinterpret_cast<const uint2*>(sa + g0), v = *reinterpret_cast<const uint2*>(sb + g0);
    ga[0] = u.x, ga[1] = u.y, gb[0] = v.x, gb[1] = v.y;
  } else {
    ga[0] = sa[g0], gb[0] = sb[g0];
  }
#pragma unroll
  for (int i = 0; i < kSlice; ++i) {
    const int j = SH >= 3 ? 0 : i >> SH;
    const Raw ra{va[i], 0, ga[j], 0}, rw{vb[i], 0, gb[j], 0};
    mma_chunk(acc, dequant<KIND, 4>(ra), dequant<KIND, 4>(rw), xb[4 * i]);
  }
}

// One unit of the down: pair p's K slices 4h .. 4h + 3 (each DC chunks: chunks 4h DC .. 4h DC + 4 DC - 1, DC
// whole quads) by one warp, the four slices' MMA chains side by side. Each slice is the chain of the loop
// below (the same chunks in order from zero, the same dequantisation and words), stored at red_d[slice][p]:
// the same bits. The loop gave warp s slice s of four pairs: its DC = 3 chunks straddle quads for half the
// warps (two 16-byte loads a row for 3 chunks' words), one chain at a time, and ~2600 cycles a round of two
// pairs at 16 warps an SM (run 386), its shared-memory wavefronts (rows 384 bytes apart, two rows a phase on
// the same banks) most of it. Here each row's quads are loaded once and every word used.
template <int KIND, int DC>
__device__ __forceinline__ void down_unit(float (*red_d)[kMaxPairs][16], const char* wa, const char* wb,
                                          const unsigned* sa, const unsigned* sb, const uint4* xp, int h,
                                          int sh, int p, int g, int t) {
  const int q0 = h * DC;  // the unit's first quad (chunk 4 q0)
  uint4 qa[DC], qb[DC];
#pragma unroll
  for (int j = 0; j < DC; ++j) qa[j] = quad_of(wa, q0 + j, t), qb[j] = quad_of(wb, q0 + j, t);
  float acc[4][4] = {};
#pragma unroll
  for (int i = 0; i < DC; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int cl = k * DC + i, c = 4 * q0 + cl;  // slice 4h + k's chunk i
      const uint32_t va = word_at(qa[cl >> 2], cl & 3), vb = word_at(qb[cl >> 2], cl & 3);
      const Raw ra{va, 0, sa[c >> sh], 0}, rw{vb, 0, sb[c >> sh], 0};
      mma_chunk(acc[k], dequant<KIND, 4>(ra), dequant<KIND, 4>(rw), xp[4 * c]);
    }
  if (t == 0)
#pragma unroll
    for (int k = 0; k < 4; ++k) red_d[4 * h + k][p][g] = acc[k][0], red_d[4 * h + k][p][g + 8] = acc[k][2];
}

// The o projection's tiles inside the kernel (MoeOProj): q4_decode_kernel<KIND, 1, 4, true>'s chain for one
// row. Warp s of a team holds lane t's words of its K slice's quads (QS <= kOQuads whole quads a slice, all
// below quad_chunks) for rows g and g + 8 of the team's tile and their scale words (groups >= 64), requested
// before the kernel's wait; after it each chunk is dequantized and multiplied in order from zero, x (the
// attention's output) from shared memory (every lane the row itself: only column 0 is kept).
constexpr int kOQuads = 4;  // K <= 4096
struct OSlice {
  uint4 wa[kOQuads], wb[kOQuads];
  uint32_t sa[kOQuads][2], sb[kOQuads][2];
};
__device__ __forceinline__ QArgs o_args(const MoeOProj& op) {
  QArgs q;
  q.w = static_cast<const uint8_t*>(op.weight);
  q.scales = op.scales;
  q.biases = nullptr;
  q.row_bytes = op.row_bytes;
  q.groups = op.groups;
  q.chunk_shift = op.chunk_shift;
  q.quad_chunks = op.quad_chunks;
  return q;
}
__device__ __forceinline__ void o_load(OSlice& o, const MoeOProj& op, int tile, int s, int g, int t) {
  const QArgs q = o_args(op);
  const int qs = op.k / 1024, qb = s * qs;
  const QuadRows p = quad_rows(q, tile * 16 + g, tile * 16 + g + 8, t);
  const bool spair = quad_scale_pairs(q);
#pragma unroll
  for (int i = 0; i < kOQuads; ++i)
    if (i < qs) load_quad(q, p, qb + i, op.chunk_shift, spair, o.wa[i], o.wb[i], o.sa[i], o.sb[i]);
}
template <int KIND>
__device__ __forceinline__ void o_chain(float* acc, const OSlice& o, int qs, int qb, const uint4* xs, int t) {
#pragma unroll
  for (int i = 0; i < kOQuads; ++i) {
    if (i >= qs) break;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint4 a = dequant<KIND, 4>(Raw{quad_word(o.wa[i], e), 0, o.sa[i][e >> 1], 0});
      const uint4 w = dequant<KIND, 4>(Raw{quad_word(o.wb[i], e), 0, o.sb[i][e >> 1], 0});
      mma_chunk(acc, a, w, xs[4 * (4 * (qb + i) + e) + t]);
    }
  }
}

// A team's one-token tile (warp s: K slice s, acc its chain): the slice partials of the 16 features (token 0)
// into rr, the team's barrier, then the slice sums in warp order (linear.cu's), returned to lanes 0-15 of the
// team's warp 0 (elsewhere 0).
__device__ __forceinline__ float team_sum16(const float* acc, float (*rr)[16], int team, int s, int lane) {
  const int g = lane / 4, t = lane % 4;
  if (t == 0) rr[s][g] = acc[0], rr[s][g + 8] = acc[2];
  nbar_sync(1 + team, kWarps * 32);
  float y = 0.f;
  if (s == 0 && lane < 16) {
    y = rr[0][lane];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) y += rr[q][lane];
  }
  return y;
}

template <int KIND>
__global__ void __launch_bounds__(kThreads, 1)
    moe_decode_kernel(const MoeRouting r, const __nv_bfloat16* x, const MoeExperts gu, const MoeExperts dn,
                      __nv_bfloat16* act, void* out, bool out_f32, int hidden, int inter, unsigned* bar,
                      int window, int ablate, unsigned long long* stamps, const MoeRouter rt,
                      const AddNormArgs nrm, bool warm_route, bool down_units, bool split, int rrows,
                      const MoeOProj op, bool o_all, int rpad, int o_tiles) {
  // (benches: globaltimer stamps of thread 0 at the phases' ends, stamps[block * kStamps + i]; slot(i): stamp
  // i's word for thread 0, else null)
  auto slot = [&](int i) { return stamps && threadIdx.x == 0 ? stamps + blockIdx.x * kStamps + i : nullptr; };
  auto stamp = [&](int i) {
    if (unsigned long long* p = slot(i)) *p = gtime();
  };
  auto cycles = [&](int i) {  // (stamps 17-20: the SM's clock, for its rate)
    if (unsigned long long* p = slot(i)) *p = clock64();
  };
  __shared__ float red[kTeams][2][kWarps][16];    // the gate_up's slice partials of token 0, a team's two
  __shared__ float red_d[kWarps][kMaxPairs][16];  // the down's, by pair
  __shared__ float y_s[kMaxPairs][16];            // the down's outputs of the tile (bf16 values)
  __shared__ float prob[kMoeMaxExperts];  // the polled logits; route_row's scratch (more than 256 experts)
  __shared__ int32_t e_s[kMaxPairs];
  __shared__ float w_s[kMaxPairs];
  __shared__ float nred[kThreads / 32];  // add_norm_row's warp sums (nrm.res)
  extern __shared__ uint4 smem[];
  const int P = r.top_k, E = gu.experts, G = int(gridDim.x), b = int(blockIdx.x);
  const int items = P * (inter / 8), slots = (items + G - 1) / G;
  const int mine = items > b ? (items - 1 - b) / G + 1 : 0;  // items b, b + G, ...
  const Layout L =
      layout_of(E, P, hidden, inter, gu.groups, dn.groups, slots, router_tile_bytes(rt, rrows, rpad));
  char* const base = reinterpret_cast<char*>(smem);
  __nv_bfloat16* const rows_s = reinterpret_cast<__nv_bfloat16*>(base);
  const void** const tab = reinterpret_cast<const void**>(base + L.tables);
  const uint32_t bars = saddr(base + L.bars);  // item k's at bars + 8 k, the down tile's at bars + 8 slots
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int team = warp / kWarps, s = warp % kWarps;
  const int dtiles = hidden / 16;
  const bool has_down = b < dtiles;
  auto* const count = reinterpret_cast<unsigned long long*>(bar);  // the grid barrier's arrivals
  auto* const tagged = count + 1;                                  // the router's tagged logits
  const bool router_block = rt.weight && b < E / rrows;            // logits rrows b .. rrows b + rrows - 1
  const uint32_t rbar = bars + 8 * (slots + 1);                    // its tile's mbarrier
  pdl_launch_dependents();
  // The pointer tables are constant (written at the layer's first forward): copied before the wait, by the
  // threads from `first` on (split: warp 0 goes to the routing's warm-up).
  const int first = split && warm_route ? 32 : 0;
  if (int(threadIdx.x) >= first) {
    for (int i = threadIdx.x - first; i < E; i += kThreads - first)
      tab[i] = gu.weights[i], tab[E + i] = gu.scales[i], tab[2 * E + i] = dn.weights[i],
      tab[3 * E + i] = dn.scales[i];
    for (int i = threadIdx.x - first; i < hidden / 8; i += kThreads - first)
      reinterpret_cast<uint4*>(rows_s + hidden)[i] = make_uint4(0, 0, 0, 0);
  }
  if (int(threadIdx.x) == first) {
    for (int i = 0; i <= slots + 1; ++i) mbar_init(bars + 8 * i, 1);
    mbar_init_fence();
    if (router_block) {  // the router's rows rrows b .. (constant): requested before the wait
      const int64_t n0 = int64_t(b) * rrows;
      const int rb = int(rt.row_bytes), sb = rt.bits == 16 ? 0 : rt.groups * 4;
      const int ws = router_wstride(rt, rpad), ss = router_sstride(rt, rpad);
      mbar_arrive_expect_tx(rbar, rrows * (rb + sb));
      if (rpad == 0) {  // the rows as they are (a scale row may be under 16 bytes): one copy for each part
        bulk_copy_g2s(saddr(base + L.items), static_cast<const char*>(rt.weight) + n0 * rb, rrows * rb, rbar);
        if (sb)
          bulk_copy_g2s(saddr(base + L.items + rrows * ws), static_cast<const char*>(rt.scales) + n0 * sb,
                        rrows * sb, rbar);
      } else {
        for (int r = 0; r < rrows; ++r) {  // a copy a row, at the padded strides
          bulk_copy_g2s(saddr(base + L.items + r * ws), static_cast<const char*>(rt.weight) + (n0 + r) * rb,
                        rb, rbar);
          if (sb)
            bulk_copy_g2s(saddr(base + L.items + rrows * ws + r * ss),
                          static_cast<const char*>(rt.scales) + (n0 + r) * sb, sb, rbar);
        }
      }
    }
  }
  if (warm_route && warp == 0) {  // the routing on zeros (picks overwritten by the real call below)
    for (int e = lane; e < E; e += 32) prob[e] = 0.f;
    __syncwarp();
    route_row_noinline(prob, 0, E, P, r.norm, e_s, w_s, prob, lane);
  }
  // The o fold: blocks 0 .. o_blocks - 1 take tile b (team 0; o_tiles 1) or tiles 2b (team 0) and 2b + 1
  // (team 1; o_tiles 2); the weights are constant, so requested before the wait.
  const int o_blocks = hidden / 16 / o_tiles;
  const bool o_block = op.weight && b < o_blocks, o_team = o_block && (o_tiles == 2 || team == 0);
  const int o_tile = o_tiles == 2 ? 2 * b + team : b;
  OSlice os;
  if (o_team) o_load(os, op, o_tile, s, g, t);
  stamp(14);
  pdl_wait();  // the logits (or the router's input) and x
  stamp(0);
  cycles(19);
  // The grid barrier's count, for this launch's number n + 1 (the o fold's target, the router's tag): until
  // this block arrives at the grid barrier, the count is in [n G, n G + G) -- after the wait, every earlier
  // launch has drained (the kernels between them each waited for the one before). Requested now, used later.
  unsigned long long count0 = 0;
  if (threadIdx.x == 0) count0 = ld_relaxed64(count);
  if (op.weight) {
    // The o tiles: the attention's output into the down tile's region (free until the down tile is
    // requested), each team's chain, the slice sums in warp order rounded to bf16 (store_biased's, no bias)
    // into x; then every block waits until all have arrived on the fold's count.
    auto* const ocount = tagged + kMoeMaxExperts;  // grows by G a launch, as the grid barrier's count
    if (o_block) {
      auto* const xo = reinterpret_cast<__nv_bfloat16*>(base + L.down_w);
      for (int i = threadIdx.x; i < op.k / 8; i += kThreads)
        cp_async16(saddr(xo + 8 * i), static_cast<const __nv_bfloat16*>(op.attn) + 8 * i, true);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      if (o_team) {
        const int qs = op.k / 1024;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        o_chain<KIND>(acc, os, qs, s * qs, reinterpret_cast<const uint4*>(xo), t);
        stamp(31);
        const float y = team_sum16(acc, red[team][0], team, s, lane);
        if (s == 0 &&
            lane < 16) {  // (x is this call's output here: the o projection's, store_biased's rounding)
          const_cast<__nv_bfloat16*>(x)[o_tile * 16 + lane] = __float2bfloat16(y);
          __threadfence();
        }
      }
      // The region is rewritten by the down tile's bulk copy (the async proxy) later.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
    }
    // The o blocks arrive after their stores (block 0 also for the G - o_blocks others), so the count
    // grows by G a launch, as the grid barrier's, and every block waits for (n + 1) G. A block that enters
    // only after the o blocks have arrived then waits for nothing. (o_all: every block arrives, its target
    // from its own arrival.) Launches without the fold add G (below), so the two counts stay equal.
    if (threadIdx.x == 0) {
      unsigned long long target = (count0 / unsigned(G) + 1) * unsigned(G);
      if (o_all)
        target = (atomicAdd(ocount, 1ull) / unsigned(G) + 1) * unsigned(G);
      else if (o_block)
        atomicAdd(ocount, b > 0 ? 1ull : 1ull + unsigned(G) - unsigned(o_blocks));
      const unsigned long long t0 = gtime();
      for (unsigned n = 1; ld_acquire64(ocount) < target; ++n)
        if (n % 4096 == 0 && gtime() - t0 > 4000000000ull) __trap();
    }
    __syncthreads();
    stamp(28);
  } else if (threadIdx.x == 0 && b == 0) {  // (the fold's count keeps step with the grid barrier's)
    atomicAdd(tagged + kMoeMaxExperts, static_cast<unsigned long long>(G));
  }
  if (nrm.res) {  // x = add_rms_norm(residual + x), made by every block (block 0 stores the new residual)
    add_norm_row(nrm, x, hidden, rows_s, b == 0, nred);
    stamp(29);
  } else {
    for (int i = threadIdx.x; i < hidden / 8; i += kThreads)
      cp_async16(saddr(rows_s + 8 * i), x + 8 * i, true);
  }
  cp_async_commit();
  if (rt.weight) {
    uint32_t tag = 0;  // this launch's number n + 1 (count0)
    if (warp == 0) tag = uint32_t(__shfl_sync(0xffffffffu, count0, 0) / unsigned(G)) + 1u;
    if (router_block) {  // block-uniform
      cp_async_wait<0>();
      __syncthreads();  // x and the zero row
      if (team == 0) {  // linear.cu's tile: warp s the K slice s, one-token tile (lane g = 0 carries x)
        const int chunks = hidden / 32, c_begin = s * chunks / kWarps, c_end = (s + 1) * chunks / kWarps;
        const int ws = router_wstride(rt, rpad), ss = router_sstride(rt, rpad);
        const char* wa = base + L.items + g * ws;  // rows g and g + 8 (rrows 8: rows g only)
        const char* wb = wa + 8 * ws;
        const unsigned* sa = reinterpret_cast<const unsigned*>(base + L.items + rrows * ws + g * ss);
        const unsigned* sb = reinterpret_cast<const unsigned*>(base + L.items + rrows * ws + (g + 8) * ss);
        const bool half = rrows == 8;
        const uint4* xb = reinterpret_cast<const uint4*>(rows_s + (g == 0 ? 0 : hidden)) + t;
        const int sh = rt.chunk_shift, qc = rt.quad_chunks;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        mbar_wait(rbar, 0);
        stamp(32);
        cycles(33);
        unsigned long long* const ck = slot(34);  // (34, 35: after chunks 0 and 3)
        if (rt.bits == 16)
          router_slice<kMlxBf16, 16>(acc, wa, wb, sa, sb, c_begin, c_end, t, sh, qc, xb, ck, half);
        else if (rt.bits == 8)
          router_slice<kMlxBf16, 8>(acc, wa, wb, sa, sb, c_begin, c_end, t, sh, qc, xb, ck, half);
        else if (rt.subnormal)
          router_slice<kMlxBf16Sub, 4>(acc, wa, wb, sa, sb, c_begin, c_end, t, sh, qc, xb, ck, half);
        else
          router_slice<kMlxBf16, 4>(acc, wa, wb, sa, sb, c_begin, c_end, t, sh, qc, xb, ck, half);
        if (stamps) asm volatile("" ::"f"(acc[0]), "f"(acc[2]));  // (the clock after the chain's value)
        cycles(36);
        stamp(30);
        const float y = team_sum16(acc, red[0][0], 0, s, lane);  // (red: free until the gate_up)
        if (s == 0 && lane < rrows)                              // the f32 logit (store_biased's, no bias)
          st_relaxed64(tagged + rrows * b + lane,
                       (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(y));
        stamp(13);
      }
    }
    if (warp == 0) {  // every block: the E logits once they carry this launch's tag, then the routing
      // 128 words a round, each lane's 4 loads in flight together: one at a time, each waiting for the last,
      // the 128 logits took 4 L2 round trips (run 353: published at 3.0 us, routed at 6.4).
      const unsigned long long t0 = gtime();
      for (int e0 = 0; e0 < E; e0 += 128) {
        unsigned long long v[4];
        for (unsigned n = 1;; ++n) {
          bool ready = true;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int e = e0 + 32 * j + lane;
            v[j] = e < E ? ld_relaxed64(tagged + e) : static_cast<unsigned long long>(tag) << 32;
            ready = ready && uint32_t(v[j] >> 32) == tag;
          }
          if (__all_sync(0xffffffffu, ready)) break;
          if (n % 4096 == 0 && gtime() - t0 > 4000000000ull) __trap();  // (a grid not all resident)
        }
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (e0 + 32 * j + lane < E) prob[e0 + 32 * j + lane] = __uint_as_float(uint32_t(v[j]));
      }
      __syncwarp();
      stamp(15);
      cycles(17);
    }
  }
  // The routing (warp 0). It took ~5200 cycles (2.6-2.8 us, stamps 15 -> 16 and clock64 17 -> 18, run 380),
  // ~2300 of them instruction-cache misses: warmed by route_row_noinline before the wait, ~2900 (run 381).
  // (Session 32's warm-up had inlined a second copy of the routing and so warmed nothing.)
  if (ablate == 4) {  // (timing: no routing, experts 0 .. top_k - 1)
    if (threadIdx.x < P) e_s[threadIdx.x] = threadIdx.x, w_s[threadIdx.x] = 1.f / P;
  } else if (warp == 0) {  // (the polled logits in place: route_row_smem reads l[e] before it writes p[e])
    route_row_noinline(rt.weight ? prob : r.logits, 0, E, P, r.norm, e_s, w_s, prob, lane);
  }
  stamp(16);
  cycles(18);
  // A router tile was read by the generic proxy; the items' bulk copies will overwrite it.
  if (router_block) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();  // e_s, w_s, the tables, the zero row, the mbarriers
  stamp(12);
  if (b == 0 && threadIdx.x < P && r.pair_e)
    r.pair_e[threadIdx.x] = e_s[threadIdx.x], r.pair_w[threadIdx.x] = w_s[threadIdx.x];

  // The block's weight bytes, by bulk copies of whole row blocks (rows copied as they are).
  const int gu_rb = hidden / 2, dn_rb = inter / 2, gu_gs = gu.groups, dn_gs = dn.groups;
  auto issue_item = [&](int k) {  // item k: 4 bulk copies (lanes 0-3 of the calling warp)
    const int item = b + k * G, p = item % P, n0 = item / P * 8;
    const char* w = static_cast<const char*>(tab[e_s[p]]);
    const char* sc = static_cast<const char*>(tab[E + e_s[p]]);
    char* slot = base + L.items + k * L.item_bytes;
    const uint32_t mb = bars + 8 * k;
    if (lane == 0) mbar_arrive_expect_tx(mb, 16 * gu_rb + 16 * gu_gs * 4);
    __syncwarp();
    if (lane < 4) {  // 8 gate rows, their 8 up rows, then the two blocks of scale rows
      const int n = (lane & 1) == 0 ? n0 : inter + n0;
      if (lane < 2)
        bulk_copy_g2s(saddr(slot + lane * 8 * gu_rb), w + int64_t(n) * gu_rb, 8 * gu_rb, mb);
      else
        bulk_copy_g2s(saddr(slot + 16 * gu_rb + (lane - 2) * 8 * gu_gs * 4), sc + int64_t(n) * gu_gs * 4,
                      8 * gu_gs * 4, mb);
    }
  };
  // A window of `window` items in flight: items 0 .. window - 1 now, item k + window as item k lands (by the
  // same team: window is even). With every item requested at once (run 346), all of them landed together
  // at the end of the block's stream, ~7 us in, and the teams' arithmetic (~1 us an item) came after it.
  for (int k = warp; k < mine && k < window; k += kTeams * kWarps) issue_item(k);
  // The down tile: rows n0 .. n0 + 15 of each pair's expert (a warp's lanes: one bulk copy a pair's rows).
  auto issue_down = [&] {
    const int64_t n0 = int64_t(b) * 16;
    const uint32_t mb = bars + 8 * slots;
    if (lane == 0) mbar_arrive_expect_tx(mb, P * 16 * dn_rb + P * 16 * dn_gs * 4);
    __syncwarp();
    if (lane < P)
      bulk_copy_g2s(saddr(base + L.down_w + lane * 16 * dn_rb),
                    static_cast<const char*>(tab[2 * E + e_s[lane]]) + n0 * dn_rb, 16 * dn_rb, mb);
    else if (lane >= 16 && lane < 16 + P)
      bulk_copy_g2s(saddr(base + L.down_s + (lane - 16) * 16 * dn_gs * 4),
                    static_cast<const char*>(tab[3 * E + e_s[lane - 16]]) + n0 * dn_gs * 4, 16 * dn_gs * 4,
                    mb);
  };
  cp_async_wait<0>();
  __syncthreads();  // x, everyone's copies

  // The gate_up: team `team` takes the block's items team, team + 2, ...; warp s computes K slice s.
  {
    const int chunks = hidden / 32, sh = gu.chunk_shift, qc = gu.quad_chunks;
    const int c_begin = s * chunks / kWarps, count = (s + 1) * chunks / kWarps - c_begin;  // <= kSlice
    // Lane g = 0 carries the token (x), the other lanes the zero row: the zeros the chain's one-token tiles
    // stage for tokens past the tile. Chunk c's 16 bytes of lane t: xb[4 (c - c_begin)].
    const uint4* const xb = reinterpret_cast<const uint4*>(rows_s + (g == 0 ? 0 : hidden)) + t + 4 * c_begin;
    const bool quads = c_begin % 8 == 0 && count == kSlice && c_begin + kSlice <= qc && gu_gs % 4 == 0;
    int it = 0;
    for (int k = team; k < mine; k += kTeams, ++it) {
      const int item = b + k * G, p = item % P, n0 = item / P * 8;
      const char* slot = base + L.items + k * L.item_bytes;
      const char* wa = slot + g * gu_rb;  // rows g (gate feature n0 + g) and g + 8 (its up feature)
      const char* wb = wa + 8 * gu_rb;
      const unsigned* sa = reinterpret_cast<const unsigned*>(slot + 16 * gu_rb) + g * gu_gs;
      const unsigned* sb = sa + 8 * gu_gs;
      mbar_wait(bars + 8 * k, 0);
      if (s == kWarps - 1 && k + window < mine) issue_item(k + window);
      // The down tile, not needed before the barrier, once team 1's second item has landed: requested with
      // the items, it took 37% of the block's bytes ahead of them (run 347: 2.584 -> 2.461 ms with the
      // window).
      if (it == 1 && has_down && warp == kTeams * kWarps - 1) issue_down();
      if (k < 6) stamp(6 + k);          // (team 0's items 0, 2, 4 landed: 6, 8, 10)
      if (it < 2) cycles(24 + 2 * it);  // (probe: warp 0's first two items landed / computed: 24 - 27)
      if (ablate == 3) continue;        // (uniform over the team: no barrier skipped by part of it)
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      if (quads) {  // two whole quads; the scale words by group (one vector load a row: see slice_quads)
        if (sh == 0)
          slice_quads<KIND, 0>(acc, wa, wb, sa, sb, c_begin, sh, t, xb);
        else if (sh == 1)
          slice_quads<KIND, 1>(acc, wa, wb, sa, sb, c_begin, sh, t, xb);
        else if (sh == 2)
          slice_quads<KIND, 2>(acc, wa, wb, sa, sb, c_begin, sh, t, xb);
        else
          slice_quads<KIND, 3>(acc, wa, wb, sa, sb, c_begin, sh, t, xb);
      } else {
#pragma unroll
        for (int i = 0; i < kSlice; ++i) {
          if (i >= count) break;
          const int c = c_begin + i;
          const Raw ra{reinterpret_cast<const uint32_t*>(wa)[word_of(c, t, qc)], 0, sa[c >> sh], 0};
          const Raw rw{reinterpret_cast<const uint32_t*>(wb)[word_of(c, t, qc)], 0, sb[c >> sh], 0};
          mma_chunk(acc, dequant<KIND, 4>(ra), dequant<KIND, 4>(rw), xb[4 * i]);
        }
      }
      if (it < 2) cycles(25 + 2 * it);
      float(*const rb)[16] = red[team][it & 1];
      if (t == 0) rb[s][g] = acc[0], rb[s][g + 8] = acc[2];  // token 0 of put_slice's layout
      nbar_sync(1 + team, kWarps * 32);                      // the team (after mbar_wait's per-lane spin)
      if (s == 0 && lane < 8 && n0 + lane < inter) {         // store_tile_silu's sums and silu_mul
        float sg = rb[0][lane], su = rb[0][lane + 8];
#pragma unroll
        for (int q = 1; q < kWarps; ++q) sg += rb[q][lane], su += rb[q][lane + 8];
        act[int64_t(p) * inter + n0 + lane] =
            silu_mul_bf16(__bfloat162float(__float2bfloat16(sg)), __bfloat162float(__float2bfloat16(su)));
      }
      if (k < 6) stamp(7 + k);  // (stored: 7, 9, 11)
    }
  }

  if (mine < 4 && has_down && warp == kTeams * kWarps - 1) issue_down();  // (team 1 had fewer than 2 items)
  stamp(1);
  // The grid barrier: act complete. Every thread's stores fenced, then one arrival a block on a 64-bit count
  // that only grows (the grid is the same every launch): a launch's blocks wait for the next multiple of it.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long old = atomicAdd(count, 1ull), target = (old / G + 1) * G;
    if (has_down && ablate != 2) {
      // A grid that is not all resident (another process's kernels, MPS limits) would never arrive: after
      // ~4 s the launch fails (trap) instead of hanging the stream.
      const unsigned long long t0 = gtime();
      for (unsigned n = 1; ld_acquire64(count) < target; ++n)
        if (n % 4096 == 0 && gtime() - t0 > 4000000000ull) __trap();
    }
  }
  stamp(2);
  if (has_down && ablate == 1) mbar_wait(bars + 8 * slots, 0);  // no copy in flight at the exit
  if (!has_down || ablate == 1) return;
  __syncthreads();

  // act's top_k rows (written by every block: read through L2) and a zero row, over x's.
  for (int i = threadIdx.x; i < P * inter / 8; i += kThreads)
    cp_async16(saddr(rows_s + 8 * i), act + 8 * i, true);
  cp_async_commit();
  for (int i = threadIdx.x; i < inter / 8; i += kThreads)
    reinterpret_cast<uint4*>(rows_s + P * inter)[i] = make_uint4(0, 0, 0, 0);
  mbar_wait(bars + 8 * slots, 0);  // the down tile
  cp_async_wait<0>();
  __syncthreads();
  stamp(3);
  // Pair p: the one-token tile at slot p of moe_routed_gemm's down (the same chunks, dequantisation and MMA
  // chain), its 16 rows from shared memory. Team 0 the first half of the pairs, team 1 the rest.
  const int dchunks = inter / 32;
  const int d_begin = s * dchunks / kWarps, dcount = (s + 1) * dchunks / kWarps - d_begin;  // <= kDU
  const int sh = dn.chunk_shift, qc = dn.quad_chunks, q0 = d_begin >> 2, half = (P + 1) / 2;
  const int p_end = team == 0 ? half : P;
  cycles(21);
  const int dc = dchunks / kWarps;
  if (down_units && dchunks % kWarps == 0 && dchunks <= qc && dc >= 2) {  // (dc <= kDU: plan_of)
    const int p = warp / 2, h = warp % 2;
    if (p < P) {
      const char* wa = base + L.down_w + (p * 16 + g) * dn_rb;  // rows g and g + 8
      const unsigned* sa = reinterpret_cast<const unsigned*>(base + L.down_s) + (p * 16 + g) * dn_gs;
      const uint4* xp = reinterpret_cast<const uint4*>(rows_s + (g == 0 ? p * inter : P * inter)) + t;
      if (dc == 2)
        down_unit<KIND, 2>(red_d, wa, wa + 8 * dn_rb, sa, sa + 8 * dn_gs, xp, h, sh, p, g, t);
      else if (dc == 3)
        down_unit<KIND, 3>(red_d, wa, wa + 8 * dn_rb, sa, sa + 8 * dn_gs, xp, h, sh, p, g, t);
      else
        down_unit<KIND, kDU>(red_d, wa, wa + 8 * dn_rb, sa, sa + 8 * dn_gs, xp, h, sh, p, g, t);
    }
  } else
    for (int p0 = team * half; p0 < p_end; p0 += kPairStep) {
      if (p0 != team * half) cycles(22);  // (probe: warp 0's second round of pairs begins)
#pragma unroll
      for (int pp = 0; pp < kPairStep; ++pp) {
        const int p = p0 + pp;
        if (p >= p_end) break;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        const char* wa = base + L.down_w + (p * 16 + g) * dn_rb;  // rows g and g + 8
        const char* wb = wa + 8 * dn_rb;
        const unsigned* sa = reinterpret_cast<const unsigned*>(base + L.down_s) + (p * 16 + g) * dn_gs;
        const unsigned* sb = sa + 8 * dn_gs;
        const uint4* xp = reinterpret_cast<const uint4*>(rows_s + (g == 0 ? p * inter : P * inter)) + t;
        // The quads holding the slice's chunks (at most 2): lane t's words of chunks 4q .. 4q + 3, one
        // 16-byte load a row (word_of); chunks past quad_chunks are single words.
        uint4 qa0{}, qa1{}, qb0{}, qb1{};
        if (4 * q0 < qc) qa0 = quad_of(wa, q0, t), qb0 = quad_of(wb, q0, t);
        if (4 * (q0 + 1) < d_begin + dcount && 4 * (q0 + 1) < qc)
          qa1 = quad_of(wa, q0 + 1, t), qb1 = quad_of(wb, q0 + 1, t);
#pragma unroll
        for (int i = 0; i < kDU; ++i) {
          if (i >= dcount) break;
          const int c = d_begin + i;
          uint32_t va, vb;
          if (c < qc) {
            const bool hi = (c >> 2) != q0;
            va = word_in(qa0, qa1, hi, c & 3), vb = word_in(qb0, qb1, hi, c & 3);
          } else {
            va = reinterpret_cast<const uint32_t*>(wa)[word_of(c, t, qc)];
            vb = reinterpret_cast<const uint32_t*>(wb)[word_of(c, t, qc)];
          }
          const Raw ra{va, 0, sa[c >> sh], 0}, rw{vb, 0, sb[c >> sh], 0};
          mma_chunk(acc, dequant<KIND, 4>(ra), dequant<KIND, 4>(rw), xp[4 * c]);
        }
        if (t == 0) red_d[s][p][g] = acc[0], red_d[s][p][g + 8] = acc[2];  // token 0 of put_slice's layout
      }
    }
  cycles(23);
  stamp(4);
  __syncthreads();
  if (threadIdx.x < P * 16) {  // each (pair, feature): the slice sums in warp order, rounded (store_tile)
    const int j = threadIdx.x / 16, f = threadIdx.x % 16;
    float y = red_d[0][j][f];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) y += red_d[q][j][f];
    y_s[j][f] = __bfloat162float(__float2bfloat16(y));
  }
  __syncthreads();
  if (threadIdx.x < 16) {  // the combine: ranks in order, one fma each (moe_combine)
    const int f = threadIdx.x, col = b * 16 + f;
    float acc = 0.f;
    for (int j = 0; j < P; ++j) acc = __fmaf_rn(w_s[j], y_s[j][f], acc);
    if (out_f32)
      static_cast<float*>(out)[col] = acc;
    else
      static_cast<__nv_bfloat16*>(out)[col] = __float2bfloat16(acc);
  }
  stamp(5);
  cycles(20);
}

// A call's grid (every block that fits the device at once: one an SM) and dynamic shared memory; smem 0 where
// the call does not fit the kernel.
struct Plan {
  decltype(&moe_decode_kernel<kMlxBf16>) kernel = nullptr;  // the instance of the call's scale codes
  int grid = 0, smem = 0;
  int down_bytes = 0;  // the down tile's region (the o fold's input goes there first)
};
// The router tile's row padding (router_tile_bytes): 32 where every padded row stays 16-byte aligned for its
// bulk copy, unless set_moe_router_pad(false).
int router_pad_of(const MoeRouter& rt) {
  const bool aligned = rt.row_bytes % 16 == 0 && (rt.bits == 16 || rt.groups * 4 % 16 == 0);
  return g_router_pad && rt.weight && aligned ? 32 : 0;
}

// The router fits the kernel: every logit tile a block, a format router_chunk reads (linear_quantized's
// formats with load_raw's layout), no more than one group width a chunk.
bool router_fits(const MoeRouter& rt, int experts, int hidden, int grid) {
  if (!rt.weight) return true;
  if (!g_router_on || experts % g_router_rows || experts / g_router_rows > grid) return false;
  if (rt.bits == 16) return rt.row_bytes == int64_t(hidden) * 2;
  return (rt.bits == 8 || rt.bits == 4) && rt.scales && rt.row_bytes == int64_t(hidden) * rt.bits / 8 &&
         rt.chunk_shift >= 0 && rt.groups > 0 && (rt.bits == 4 || !rt.subnormal) &&
         (rt.chunk_shift >= 30 ? rt.groups == 1 : rt.groups == (hidden / 32) >> rt.chunk_shift) &&
         rt.quad_chunks == hidden / 128 * 4;
}

Plan plan_of(const MoeExperts& gu, const MoeExperts& dn, int rows, int top_k, int hidden, int inter,
             const MoeRouter& rt) {
  Plan pl;
  if (!g_decode_on || rows != 1 || gu.bits != 4 || dn.bits != 4 || gu.subnormal != dn.subnormal ||
      top_k < 1 || top_k > kMaxPairs || top_k > gu.experts || gu.experts > kMoeMaxExperts ||
      dn.experts != gu.experts || hidden % 32 || inter % 32 || hidden <= 0 || inter <= 0)
    return pl;
  if ((hidden / 32 + kWarps - 1) / kWarps > kSlice || (inter / 32 + kWarps - 1) / kWarps > kDU) return pl;
  pl.kernel = gu.subnormal ? moe_decode_kernel<kMlxBf16Sub> : moe_decode_kernel<kMlxBf16>;
  pl.grid = resident_blocks(reinterpret_cast<const void*>(pl.kernel), kThreads, kMaxSmem);
  const int items = top_k * (inter / 8), slots = (items + pl.grid - 1) / pl.grid;
  if (slots > kMaxItems || hidden / 16 > pl.grid || !router_fits(rt, gu.experts, hidden, pl.grid)) return pl;
  const Layout L = layout_of(gu.experts, top_k, hidden, inter, gu.groups, dn.groups, slots,
                             router_tile_bytes(rt, g_router_rows, router_pad_of(rt)));
  pl.smem = L.total <= kMaxSmem ? L.total : 0;
  pl.down_bytes = L.bars - L.down_w;
  return pl;
}

// The o projection fits the kernel (MoeOProj): MLX 4-bit with the experts' scale codes, groups >= 64, K a
// multiple of 1024 up to 4096 (8 slices of whole quads), its 16-feature tiles on the first hidden / 16 /
// g_o_tiles blocks, and the attention's output within the down tile's region.
bool o_fits(const MoeOProj& o, const MoeExperts& gu, int hidden, const MoeRouter& rt, const Plan& pl) {
  return g_o_fold && o.weight && o.scales && o.attn && rt.weight && pl.smem > 0 && o.bits == 4 &&
         o.subnormal == gu.subnormal && o.chunk_shift >= 1 && o.k > 0 && o.k % 1024 == 0 &&
         o.k / 1024 <= kOQuads && o.quad_chunks == o.k / 128 * 4 && o.row_bytes == o.k / 2 && o.groups > 0 &&
         hidden / 16 / g_o_tiles <= pl.grid && int64_t(o.k) * 2 <= pl.down_bytes;
}

}  // namespace

bool moe_decode_o_ok(const MoeExperts& gu, const MoeExperts& dn, int top_k, int hidden, int inter,
                     const MoeRouter& router, const MoeOProj& o) {
  return o_fits(o, gu, hidden, router, plan_of(gu, dn, 1, top_k, hidden, inter, router));
}

bool moe_decode_ok(const MoeExperts& gu, const MoeExperts& dn, int rows, int top_k, int hidden, int inter,
                   const MoeRouter& router) {
  return plan_of(gu, dn, rows, top_k, hidden, inter, router).smem > 0;
}

void moe_decode(const MoeRouting& r, const void* x, const MoeExperts& gate_up, const MoeExperts& down,
                void* act, void* out, DType out_dtype, int hidden, int inter, unsigned* barrier,
                cudaStream_t s, const MoeRouter& router, const AddNormArgs& norm, const MoeOProj& o) {
  const Plan pl = plan_of(gate_up, down, r.rows, r.top_k, hidden, inter, router);
  TF_CHECK(pl.smem > 0 && barrier, "moe_decode: the call does not fit (moe_decode_ok)");
  TF_CHECK(!o.weight || (norm.res && o_fits(o, gate_up, hidden, router, pl)),
           "moe_decode: the o projection does not fit (moe_decode_o_ok), or no add + norm inside");
  // (plan_of's hidden, a multiple of 32 up to 2048, fits add_norm_row: 8 values a thread)
  TF_CHECK(!norm.res || (router.weight && norm.res_out && norm.w),
           "moe_decode: the add + norm needs the router inside");
  TF_CHECK(out_dtype == DType::BF16 || out_dtype == DType::F32, "moe_decode: out must be bf16 or f32");
  if (g_stamps_on && !g_stamps.get()) {
    g_stamps.set(true, size_t(pl.grid) * kStamps);
    g_stamp_blocks = pl.grid;
  }
  launch_pdl_if(g_pdl, pl.kernel, pl.grid, kThreads, size_t(pl.smem), s, r,
                static_cast<const __nv_bfloat16*>(x), gate_up, down, static_cast<__nv_bfloat16*>(act), out,
                out_dtype == DType::F32, hidden, inter, barrier, g_window, g_ablate, g_stamps.get(), router,
                norm, g_route_warm, g_down_units, g_prologue_split, g_router_rows, o, g_o_count_all,
                router_pad_of(router), g_o_tiles);
  TF_CUDA_LAUNCH_CHECK();
}

void set_moe_decode(bool on) {
  g_decode_on = on;
}

void set_moe_decode_router(bool on) {
  g_router_on = on;
}

void set_moe_o_fold(bool on) {
  g_o_fold = on;
}

bool moe_o_fold() {
  return g_o_fold;
}

void set_moe_router_pad(bool on) {
  g_router_pad = on;
}

void set_moe_o_one_tile(bool on) {
  g_o_tiles = on ? 1 : 2;
}

void set_moe_o_count_all(bool on) {
  g_o_count_all = on;
}

void set_moe_router_rows(bool eight) {
  g_router_rows = eight ? 8 : 16;
}

void set_moe_prologue_split(bool on) {
  g_prologue_split = on;
}

void set_moe_decode_stamps(bool on) {
  g_stamps_on = on;
  if (!on) g_stamps.set(false, 0);
}

std::vector<unsigned long long> moe_decode_stamps(int* blocks) {
  *blocks = g_stamp_blocks;
  return g_stamps.read(0, size_t(g_stamp_blocks) * kStamps);
}

}  // namespace tf::cuda
