#pragma once
// The wgmma linear's pipeline, device code shared by its kernels (linear_wgmma.cu: the dense bf16 and MLX
// 4-bit linears; moe_wgmma.cu: the grouped MLX 4-bit experts): the tile configurations (Cfg), the producers
// that fill the stages (produce: 8-byte cp.async; produce_raw: 16-byte cp.async or tensor maps, then the
// permutation; produce_q4: MLX 4-bit weights dequantized into the stages) and the consumers' MMA chains and
// stores (consume, store_out). linear_wgmma.cu's header comment describes the arithmetic and the layouts.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/quant_common.cuh"  // dequant, kMlxBf16, kMlxBf16Sub

namespace tf::cuda::wgp {

// x permuted into the stage order (linear_wgmma.cu's permute_x_kernel) in the stream's buffer, rows[r] (if
// given) the input row of output row r, or silu: x a gate_up [m, 2k] whose silu_mul is permuted. Null while
// the stream captures a graph or x is not 16-byte aligned.
const void* wgmma_permuted_x(const void* x, const int32_t* rows, int m, int k, bool silu, cudaStream_t s);
// Whether wgmma_permuted_x can copy x on s (not capturing, x 16-byte aligned).
bool wgmma_can_permute(const void* x, cudaStream_t s);

constexpr int kSlices = 8;              // linear.cu's kWarps: part of the arithmetic
constexpr int kSmemLimit = 227 * 1024;  // sm_90 dynamic shared memory per CTA
constexpr int kRowGroupBytes = 256;     // SBO: 8 rows x 2 K halves x 16 bytes
constexpr int kKHalfBytes = 128;        // LBO: the step's second 8 logical k-values

// WP: the TmaXW producer (x and W permuted per call, both by tensor map): no raw slots, their room goes to
// deeper stages. WP = kWpQ4 / kWpQ4Sub: W is an MLX 4-bit weight (plain / subnormal scale codes) that the
// producer dequantizes into the stages (produce_q4), x permuted per call and loaded by tensor map.
constexpr int kWpQ4 = 3, kWpQ4Sub = 4;
template <int WGS, int BN, int CL = 1, int SP = 1, int WP = 0>
struct Cfg {
  static constexpr int kBM = 64 * WGS;              // weight rows a CTA
  static constexpr int kThreads = 128 * (WGS + 1);  // consumers + 1 producer warpgroup
  static constexpr int kAcc = BN / 2;               // accumulator floats a consumer thread (64*BN/128)
  static constexpr bool kTotSmem = BN == 256;
  static constexpr int kWStep = kBM * 32;  // one k16 step of W: kBM rows x 16 bf16
  static constexpr int kXStep = BN * 32;
  // WP = 2: a stage holds two chunks as 128-byte rows (the 128-byte swizzle; runs 129-130: 7-8% faster than
  // 64-byte rows, half the tensor-map rows and barrier round trips a byte).
  static constexpr int kCh = WP == 2 ? 2 : 1;                 // chunks a stage
  static constexpr int kStage = kCh * 2 * (kWStep + kXStep);  // kCh 32-chunks of both operands
  static constexpr int kWBytes = kCh * 2 * kWStep;            // W's rows at the stage's start, then x's
  static constexpr int kTotBytes = kTotSmem ? WGS * 128 * kAcc * 4 : 0;
  static constexpr int kPartBytes = SP == 2 ? 4 * WGS * 128 * kAcc * 4 : 0;  // rank 1's slice partials
  // kRaw: the producer stages raw rows with 16-byte cp.async into a ring of kRawSlots chunks and
  // permutes each chunk into a wgmma stage itself (produce_raw); else 8-byte cp.async straight into
  // the stages (produce: the 128x256 tile, whose `tot` leaves no room for two rings, and the C2 tiles,
  // whose forwarding tracks cp.async completion).
  static constexpr bool kRaw = CL == 1 && !kTotSmem;
  // Raw tiles may lay the stages out in wgmma's 64-byte swizzle (kernel parameter SWZ; their
  // permutation pass writes either layout); the 8-byte path writes the no-swizzle core-matrix layout.
  // 1 KB is kept to align the stages to 1024 bytes.
  static constexpr int kFree = kSmemLimit - 2048 - 1024 - kTotBytes - kPartBytes;  // 2 KB: static
  // WP >= kWpQ4: quad slots (produce_q4) of the packed words of 4 chunks (kBM rows x 64 bytes) and each
  // producer thread's own copy of its rows' scale words (kBM rows x 4 threads x 8 bytes); kQuadSlots quads
  // in flight.
  static constexpr bool kQ4 = WP >= kWpQ4;
  static constexpr int kQuadSlots = kQ4 ? 3 : 0, kQuadBytes = kBM * 64 + kBM * 4 * 8;
  // 8-byte path: as deep as shared memory allows (one CTA an SM). Raw path: 6 wgmma stages (4 for the
  // split tiles, whose partials take the room; the permute is a shared-memory hop), the rest raw slots.
  static constexpr int kStages = kRaw ? (kQ4       ? std::min(12, (kFree - kQuadSlots * kQuadBytes) / kStage)
                                         : WP      ? std::min(16, kFree / kStage)
                                         : SP == 2 ? 4
                                                   : 6)
                                      : std::min(24, kFree / kStage);
  // wgmma groups (one a chunk) a consumer warpgroup leaves pending when it waits (run 18: with one, every
  // tile ran near the same ~700 clocks a chunk whatever its size, producer or layout -- the group
  // latency). A stage is released kPending chunks after its MMAs were issued; kStages - kPending stages
  // stay free for the producer.
  static constexpr int kPending = kRaw ? (WP == 2 ? 2 : WP ? 3 : kStages / 2) : (kStages >= 8 ? 3 : 1);
  static constexpr int kRawSlots = kRaw && !WP ? std::min(16, (kFree - kStages * kStage) / kStage) : 0;
  static constexpr int kRawOff = kStages * kStage,
                       kTotOff = kRawOff + kRawSlots * kStage + kQuadSlots * kQuadBytes;
  static constexpr int kPartOff = kTotOff + kTotBytes;
  static constexpr int kSmem = kPartOff + kPartBytes + 1024;
  static_assert(kStages >= 3 && (!kRaw || WP || kRawSlots >= 3), "pipeline too shallow");
  // produce_q4 fills the 4 stages of a quad before it arrives on any: the consumers must be able to release
  // the oldest of them from the chunks before the quad.
  static_assert(!kQ4 || (kRaw && CL == 1 && SP == 1 && kStages >= 4 + kPending), "quads need 4 free stages");
  static_assert(kPending >= 1 && kPending <= kStages * kCh - 2, "the producer needs free stages");
  static_assert(CL == 1 || (CL == 2 && BN % 32 == 0), "x halves must be whole row-group pairs");
  static_assert(SP == 1 || (SP == 2 && CL == 1 && !kTotSmem), "slice split: x not shared, tot in registers");
};

// mbarriers, cluster helpers and desc_sw64: linear_wgmma.h. cp.async (PTX ISA "cp.async"):
// The barrier's pending count drops when all of this thread's earlier cp.async have landed.
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
}

// 2-CTA clusters (PTX ISA: mbarrier remote arrive, cp.async.bulk):
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}
// Shared memory of this CTA -> the peer's (same layout), completing `bytes` on the peer's barrier.
__device__ __forceinline__ void bulk_to_peer(uint32_t dst_cluster, uint32_t src, uint32_t bytes,
                                             uint32_t bar_cluster) {
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          dst_cluster),
      "r"(src), "r"(bytes), "r"(bar_cluster)
      : "memory");
}

template <int BN>
__device__ __forceinline__ void wgmma_tile(float* d, uint64_t da, uint64_t db) {
  if constexpr (BN == 64) wgmma_m64n64(d, da, db, 1);
  if constexpr (BN == 128) wgmma_m64n128(d, da, db, 1);
  if constexpr (BN == 192) wgmma_m64n192(d, da, db, 1);
  if constexpr (BN == 256) wgmma_m64n256(d, da, db, 1);
}

// The producer warpgroup: chunk c goes to stage c % kStages once the consumers released it. Warp pw's
// instruction j covers row group rg (8 rows, W's then x's) and K half kh; lane (r8 = lane/4, q = lane%4)
// copies bytes kh*32 + 8q .. +8 of its row's chunk: step h = q%2, position (q/2)*8 of the core row.
//
// CL = 2 (a cluster of two CTAs with the same token tile and neighbouring weight tiles): CTA `rank` loads
// x row groups [rank*BN/16, (rank+1)*BN/16) and, once they landed (`half` barrier), lane 0 of warp 3
// copies them into the peer's stage with cp.async.bulk (the layout is final, so two contiguous blocks a
// chunk), completing bytes on the peer's `full` barrier; it forwards chunk c - kLag while at chunk c so
// that it rarely waits. A CTA's `full` expects its 128 producer arrivals plus one arrive.expect_tx for
// the peer's bytes; its `empty` is released by the consumer warps of both CTAs, so neither producer
// writes a stage that either CTA still reads.
//
// SP = 2 (slice split): the CTA walks chunks [c_lo, c_lo + count) only; ring position i = c - c_lo.
template <int WGS, int BN, int CL, int SP>
__device__ __forceinline__ void produce(const __nv_bfloat16* __restrict__ x,
                                        const __nv_bfloat16* __restrict__ w, int m, int n, int k, int m0,
                                        int n0, uint32_t sbase, uint32_t full, uint32_t empty, uint32_t half,
                                        uint32_t rank, int c_lo, int count) {
  using C = Cfg<WGS, BN, CL, SP>;
  constexpr int kLag = 2;
  constexpr uint32_t kXHalf = BN / 2 * 32;  // bytes of one step's x half (CL = 2 forwards two a chunk)
  static_assert(kLag < C::kStages, "a forwarded chunk must be older than the stage ring");
  const int x_rg0 = CL == 2 ? int(rank) * (BN / 16) : 0;
  const bool forwarder = CL == 2 && threadIdx.x % 128 == 96;  // lane 0 of producer warp 3
  auto forward = [&](int cf) {
    const int s = cf % C::kStages;
    mbar_wait(half + 8 * s, (cf / C::kStages) & 1);
    fence_proxy_async();  // cp.async bytes (generic proxy) -> the bulk copy's async-proxy reads
    const uint32_t peer = rank ^ 1, src = sbase + s * C::kStage + 2 * C::kWStep + x_rg0 * kRowGroupBytes;
    const uint32_t bar = peer_addr(full + 8 * s, peer);
    for (int h = 0; h < 2; ++h)
      bulk_to_peer(peer_addr(src + h * C::kXStep, peer), src + h * C::kXStep, kXHalf, bar);
  };
  const int pw = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, r8 = lane / 4, q = lane % 4;
  const int kh = pw % 2, chunks = count;
  const uint32_t lane_off = kh * kKHalfBytes + r8 * 16 + (q / 2) * 8;
  const int col = kh * 16 + q * 4;  // element offset in the chunk
  auto copy_w = [&](int c, uint32_t st) {
#pragma unroll
    for (int j = 0; j < C::kBM / 16; ++j) {  // row group rg of W (instruction pw + 4j: rg (pw + 4j) / 2)
      const int rg = pw / 2 + 2 * j, row = min(n0 + rg * 8 + r8, n - 1);  // clamped: masked outputs only
      cp_async8(st + (q % 2) * C::kWStep + rg * kRowGroupBytes + lane_off,
                w + int64_t(row) * k + (c_lo + c) * 32 + col);
    }
  };
  auto copy_x = [&](int c, uint32_t st) {
#pragma unroll
    for (int j = 0; j < (BN / CL) / 16; ++j) {  // row group xg of x (with CL = 2 this CTA's half)
      const int xg = x_rg0 + pw / 2 + 2 * j, row = min(m0 + xg * 8 + r8, m - 1);
      cp_async8(st + 2 * C::kWStep + (q % 2) * C::kXStep + xg * kRowGroupBytes + lane_off,
                x + int64_t(row) * k + (c_lo + c) * 32 + col);
    }
  };
  // The first stages' weights (constant) load before griddepcontrol.wait: under PDL they stream while
  // the previous kernel drains. The first `full` arrive then also covers them (it tracks all earlier
  // cp.async of the thread).
  const int pre = min(chunks, C::kStages);
  for (int c = 0; c < pre; ++c) copy_w(c, sbase + c * C::kStage);
  pdl_wait();
  for (int c = 0; c < chunks; ++c) {
    const int s = c % C::kStages;
    if (c >= C::kStages) mbar_wait(empty + 8 * s, ((c / C::kStages) & 1) ^ 1);
    if (forwarder) mbar_arrive_expect_tx(full + 8 * s, 2 * kXHalf);  // the peer's half of x
    const uint32_t st = sbase + s * C::kStage;
    if (c >= pre) copy_w(c, st);
    copy_x(c, st);
    cp_async_arrive(full + 8 * s);
    if constexpr (CL == 2) {
      cp_async_arrive(half + 8 * s);
      if (forwarder && c >= kLag) forward(c - kLag);
    }
  }
  if (forwarder)
    for (int cf = max(0, chunks - kLag); cf < chunks; ++cf) forward(cf);
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Moves a producer thread's N raw 16-byte units into the wgmma stage: bytes 0-7 of unit j to dst(j, 0),
// bytes 8-15 to dst(j, 1). The shared loads of a batch are all issued before its stores (each asm
// statement is volatile, so the written order is the issued order): one load latency a batch, where a
// load-store pair per unit paid one a unit (ncu, run 28: the producer's serial ld/st chain was the
// ~700 clocks a chunk, consumers waiting on `full` a third of their time). Batches of 4 units
// keep the 128-row tiles' producer inside its 56 registers (setmaxnreg).
template <int N, class Src, class Dst>
__device__ __forceinline__ void permute_units(Src src, Dst dst) {
  constexpr int kBatch = N < 4 ? N : 4;
#pragma unroll
  for (int j0 = 0; j0 < N; j0 += kBatch) {
    uint32_t v[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (j0 + b < N)
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[b][0]), "=r"(v[b][1]), "=r"(v[b][2]), "=r"(v[b][3])
                     : "r"(src(j0 + b))
                     : "memory");
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (j0 + b < N) {
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(dst(j0 + b, 0)), "r"(v[b][0]), "r"(v[b][1])
                     : "memory");
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(dst(j0 + b, 1)), "r"(v[b][2]), "r"(v[b][3])
                     : "memory");
      }
  }
}

// A producer thread's row (of each 8-row group a warp owns) for the raw permutation: lanes 0-7 take rows
// 0-1, 8-15 rows 4-5, 16-23 rows 2-3, 24-31 rows 6-7 (4 lanes a row, unit t = lane % 4). A quarter warp's
// 16-byte raw loads then read two whole 64-byte rows (128 distinct bytes), and a half warp's 8-byte stores
// into the swizzled stage cover rows r, r+1, r+4, r+5, whose swizzles (r >> 1 & 3) differ by 2: 128 distinct
// bytes, no bank conflict (the former lane / 4 order put rows r and r+2 in a half warp: 2-way conflicts,
// 4.8 wavefronts a store in run 30's ncu).
__device__ __forceinline__ int permute_row(int lane) {
  constexpr int kRowOf[4] = {0, 4, 2, 6};
  return kRowOf[lane / 8] + (lane % 8) / 4;
}

// Where bytes 8h..8h+7 of a row's 16-byte raw unit t (k 8t..8t+3 of step h) go in the 64-byte-swizzled stage:
// row r's 64 bytes at r * 64, step h's piece t at logical unit 2h + t / 2 (+ 8 for an odd t), the unit XORed
// with the row's swizzle (r >> 1) & 3. Rows r + 16j (and + 32j) share r's swizzle, so a thread's offsets
// for its row r serve all its rows. (produce_raw, produce_q4, moe_wgmma.cu's bf16 producer.)
__device__ __forceinline__ uint32_t swz64_piece(int r, int t, int h) {
  return r * 64 + ((2 * h + t / 2) ^ ((r >> 1) & 3)) * 16 + (t % 2) * 8;
}

// The raw-staging producer (Cfg::kRaw). Thread pt owns the 16-byte units (row r0 + 32j, r0 from permute_row,
// unit t = pt%4) of every chunk: a warp's cp.async.cg covers 8 whole rows x 64 bytes (coalesced, 16 bytes a
// lane), each thread waits for its own copies (cp.async.wait_group, kRawSlots - 1 chunks ahead) and moves its
// units into the wgmma stage: bytes 0-7 of unit t (k 8t..8t+3) are step 0's piece t, bytes 8-15 step 1's, at
// logical k 4t of the step (core matrix t/2, offset (t%2)*8) -- the layout produce() writes, two
// conflict-free 8-byte stores a unit. Then fence.proxy.async (own generic stores -> wgmma's reads) and a
// plain arrive on `full` (128 a stage).
//
// TMA: the raw rows come from two 2D tensor-map loads a chunk (W's kBM rows, x's BN rows, 64 bytes each,
// rows past N/M zero-filled) issued by producer thread 0 into the same raw slot layout, completing on the
// slot's `raw` mbarrier; every producer thread waits on it, permutes as above, and the producer threads
// meet at a named barrier before thread 0 refills the slot.
// g0 (the TMA path with x pre-permuted, xp = 1; consume's g0): the chunks of the CTA's earlier tiles, so that
// a persistent CTA's ring slots, stages and phases go on from tile to tile (moe_wgmma.cu's bf16 kernel).
template <int WGS, int BN, int SP, bool TMA, bool SWZ, int WP = 0>
__device__ __forceinline__ void produce_raw(const __nv_bfloat16* __restrict__ x,
                                            const __nv_bfloat16* __restrict__ w, int m, int n, int k, int m0,
                                            int n0, uint32_t sbase, uint32_t full, uint32_t empty, int c_lo,
                                            int count, uint32_t rawbar, const CUtensorMap* tmw,
                                            const CUtensorMap* tmx, int xp, int g0 = 0) {
  using C = Cfg<WGS, BN, 1, SP, WP>;
  constexpr int kUnits = (C::kBM + BN) / 32, kWUnits = C::kBM / 32, kAhead = C::kRawSlots - 1;
  constexpr int kSlots = C::kRawSlots > 0 ? C::kRawSlots : 1;  // WP has none (its path returns first)
  const int pt = threadIdx.x % 128, t = pt % 4;
  static_assert(SWZ || !TMA, "the TMA producer writes the swizzled layout");
  if constexpr (TMA) {
    // Roles, so that no thread that fences has copies in flight (a fence.proxy.async waits for the
    // thread's outstanding memory operations): thread 0 only issues the TMA loads (a slot is refilled once
    // the permuters released it on its `raw_free` barrier); warps 2-3 (64 threads) only permute (units
    // of rows p/4 + 16j) and fence; the rest of the warpgroup has nothing to do.
    const uint32_t slots = sbase + C::kRawOff, rawfree = rawbar + 8 * C::kRawSlots;
    if (xp == 2) {
      // x and W both pre-permuted (permute_rows_kernel): one thread loads each stage by two tensor-map loads
      // with the 64-byte swizzle, W's kBM rows at the stage's start and x's BN rows after them -- the bytes
      // the permuters below would write. No raw slots, no permutation pass in the CTA.
      // WP = 2: stage q holds chunks 2q, 2q + 1 of the range (128-byte rows, boxes of 64 columns).
      if (pt == 0) {
        pdl_wait();
        for (int q = 0; q < (count + C::kCh - 1) / C::kCh; ++q) {
          const int s = q % C::kStages;
          if (q >= C::kStages) mbar_wait(empty + 8 * s, ((q / C::kStages) & 1) ^ 1);
          mbar_arrive_expect_tx(full + 8 * s, C::kStage);
          const CUtensorMap* maps[2] = {tmw, tmx};
          const int rows[2] = {n0, m0};
          const uint32_t offs[2] = {0, C::kWBytes};
          for (int o = 0; o < 2; ++o)
            tma_load_2d(sbase + s * C::kStage + offs[o], maps[o], (c_lo + C::kCh * q) * 32, rows[o],
                        full + 8 * s);
        }
      }
      return;
    }
    if (pt == 0) {
      pdl_wait();
      for (int c = 0; c < count; ++c) {
        const int g = g0 + c;
        const uint32_t slot = g % kSlots;
        if (g >= kSlots) mbar_wait(rawfree + 8 * slot, ((g / kSlots) & 1) ^ 1);
        mbar_arrive_expect_tx(rawbar + 8 * slot, xp ? C::kBM * 64 : C::kStage);
        const CUtensorMap* maps[2] = {tmw, tmx};
        const int rows[2] = {n0, m0};
        const uint32_t offs[2] = {0, C::kBM * 64};
        for (int o = 0; o < (xp ? 1 : 2); ++o)
          tma_load_2d(slots + slot * C::kStage + offs[o], maps[o], (c_lo + c) * 32, rows[o],
                      rawbar + 8 * slot);
      }
      return;
    }
    if (xp && pt == 32) {
      // x pre-permuted (permute_x): its 64-byte chunk rows are the stage rows, so one tensor-map load with
      // the 64-byte swizzle writes them into the stage as the permuters would. The stage must be free first.
      pdl_wait();
      for (int c = 0; c < count; ++c) {
        const int g = g0 + c, s = g % C::kStages;
        if (g >= C::kStages) mbar_wait(empty + 8 * s, ((g / C::kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(full + 8 * s, BN * 64);
        tma_load_2d(sbase + s * C::kStage + 2 * C::kWStep, tmx, (c_lo + c) * 32, m0, full + 8 * s);
      }
      return;
    }
    if (pt < 64) return;
    const int p = pt - 64, q0 = 8 * (p / 32) + permute_row(p % 32);  // rows q0 + 16j, unit t
    constexpr int kRows = C::kBM + BN, kPUnits = kRows / 16, kPW = C::kBM / 16;
    const uint32_t off0 = swz64_piece(q0, t, 0), off1 = swz64_piece(q0, t, 1);
    for (int c = 0; c < count; ++c) {
      const int g = g0 + c;
      const uint32_t slot = g % kSlots;
      mbar_wait(rawbar + 8 * slot, (g / kSlots) & 1);
      const int s = g % C::kStages;
      if (g >= C::kStages) mbar_wait(empty + 8 * s, ((g / C::kStages) & 1) ^ 1);
      const uint32_t st = sbase + s * C::kStage;
      const uint32_t rs = slots + slot * C::kStage + q0 * 64 + t * 16;
      const auto src = [&](int j) { return rs + j * 16 * 64; };
      const auto dst = [&](int j, int h) {
        return (j < kPW ? st + j * 16 * 64 : st + 2 * C::kWStep + (j - kPW) * 16 * 64) + (h ? off1 : off0);
      };
      if (xp)  // only W's rows: x came into the stage by its own tensor-map load
        permute_units<kPW>(src, dst);
      else
        permute_units<kPUnits>(src, dst);
      fence_proxy_async();
      mbar_arrive(full + 8 * s);
      mbar_arrive(rawfree + 8 * slot);
    }
    return;
  }
  const int r0 = 8 * (pt / 32) + permute_row(pt % 32);  // rows r0 + 32j, unit t
  const uint32_t raw = sbase + C::kRawOff + r0 * 64 + t * 16;
  const uint32_t off0 = swz64_piece(r0, t, 0), off1 = swz64_piece(r0, t, 1);
  // No swizzle: produce()'s core-matrix layout (row group rg at rg * 256, K half t/2 at + 128, step h's
  // block at + h * step bytes).
  const uint32_t perm = (r0 / 8) * kRowGroupBytes + (t / 2) * kKHalfBytes + (r0 % 8) * 16 + (t % 2) * 8;
  auto dest = [&](uint32_t st, int j, int h) -> uint32_t {
    if constexpr (SWZ)
      return (j < kWUnits ? st + j * 32 * 64 : st + 2 * C::kWStep + (j - kWUnits) * 32 * 64) +
             (h ? off1 : off0);
    else
      return (j < kWUnits ? st + j * 4 * kRowGroupBytes + h * C::kWStep
                          : st + 2 * C::kWStep + (j - kWUnits) * 4 * kRowGroupBytes + h * C::kXStep) +
             perm;
  };
  auto src = [&](int j) {  // this thread's unit j of chunk 0 (rows clamped: they feed masked outputs only)
    return j < kWUnits ? w + int64_t(min(n0 + r0 + 32 * j, n - 1)) * k + c_lo * 32 + 8 * t
                       : x + int64_t(min(m0 + r0 + 32 * (j - kWUnits), m - 1)) * k + c_lo * 32 + 8 * t;
  };
  auto copy = [&](int c, int j_lo, int j_hi) {
#pragma unroll
    for (int j = 0; j < kUnits; ++j)
      if (j >= j_lo && j < j_hi) {
        const uint32_t dst = raw + (c % kSlots) * C::kStage + j * 32 * 64;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src(j) + c * 32) : "memory");
      }
  };
  auto commit = [] { asm volatile("cp.async.commit_group;" ::: "memory"); };
  // Weights (constant) of the first chunks before griddepcontrol.wait (PDL overlap), x after; exactly
  // kAhead groups either way so that group c is chunk c below.
  for (int c = 0; c < min(kAhead, count); ++c) copy(c, 0, kWUnits);
  pdl_wait();
  for (int c = 0; c < kAhead; ++c) {
    if (c < count) copy(c, kWUnits, kUnits);
    commit();
  }
  for (int c = 0; c < count; ++c) {
    if (c + kAhead < count) copy(c + kAhead, 0, kUnits);
    commit();
    asm volatile("cp.async.wait_group %0;" ::"n"(kAhead) : "memory");  // chunk c's units have landed
    const int s = c % C::kStages;
    if (c >= C::kStages) mbar_wait(empty + 8 * s, ((c / C::kStages) & 1) ^ 1);
    const uint32_t st = sbase + s * C::kStage, rs = raw + (c % kSlots) * C::kStage;
    // Row r0 + 32j of W (j < kWUnits) or of x, step 0's piece then step 1's.
    permute_units<kUnits>([&](int j) { return rs + j * 32 * 64; },
                          [&](int j, int h) { return dest(st, j, h); });
    fence_proxy_async();
    mbar_arrive(full + 8 * s);
  }
}

// The MLX 4-bit producer (WP = kWpQ4 / kWpQ4Sub): W's stage rows are made from the packed weight in the
// CTA -- each 16-byte unit of a row's chunk (k 8t..8t+7) is dequant<>() of the word quant_common.cuh's
// device layout keeps for it (the values dequantize_bf16 writes), stored where produce_raw's permuters put
// that unit -- so W's bytes come from memory once, at 4 bits, with no bf16 copy of the weight. x is permuted
// per call and each chunk loaded by one tensor-map load (thread 0, as the TmaX path's loader).
// Thread pt owns unit t = pt % 4 of rows r0 + 32j (r0 from permute_row: conflict-free stage stores). Every
// chunk is in quads (k % 128 == 0): a quad's 4 words of a row unit are 16 contiguous bytes, copied with
// cp.async kQuadSlots quads ahead into a quad slot with the row's scale words (the thread's own copy: it
// reads only what it copied, so cp.async.wait_group is all the ordering needed). The producer works a quad
// at a time: it waits for the quad's 4 stages, dequantizes each row's 4 units into them, then arrives on
// their `full` barriers (128 arrivals + thread 0's expect_tx for x).
template <int WGS, int BN, int WP>
__device__ __forceinline__ void produce_q4(const uint8_t* __restrict__ qw, const uint32_t* __restrict__ qs,
                                           int qshift, int n, int k, int m0, int n0, uint32_t sbase,
                                           uint32_t full, uint32_t empty, const CUtensorMap* tmx) {
  using C = Cfg<WGS, BN, 1, 1, WP>;
  constexpr int KIND = WP == kWpQ4Sub ? kMlxBf16Sub : kMlxBf16, kRowsJ = C::kBM / 32, kQA = C::kQuadSlots;
  const int pt = threadIdx.x % 128, t = pt % 4, r0 = 8 * (pt / 32) + permute_row(pt % 32);
  const uint32_t off0 = swz64_piece(r0, t, 0), off1 = swz64_piece(r0, t, 1);
  const uint32_t row_bytes = k / 2;  // (byte and scale-word offsets below 2^32: checked at launch)
  const int groups = k >> (5 + qshift), quads = k / 128, gq = 4 >> qshift;  // scale words a quad: 2 or 1
  const uint32_t qbase = sbase + C::kRawOff;
  auto words_at = [&](uint32_t slot, int j) { return slot + (r0 + 32 * j) * 64 + t * 16; };
  auto scales_at = [&](uint32_t slot, int j) { return slot + C::kBM * 64 + ((r0 + 32 * j) * 4 + t) * 8; };
  auto issue = [&](int q) {  // quad q's words and scale words of this thread's rows (clamped: masked outputs)
    const uint32_t slot = qbase + (q % kQA) * C::kQuadBytes;
#pragma unroll
    for (int j = 0; j < kRowsJ; ++j) {
      const int row = min(n0 + r0 + 32 * j, n - 1);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(words_at(slot, j)),
                   "l"(qw + (uint32_t(row) * row_bytes + q * 64 + t * 16))
                   : "memory");
      const uint32_t* sp = qs + (uint32_t(row) * groups + q * gq);
      if (gq == 2)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(scales_at(slot, j)), "l"(sp)
                     : "memory");
      else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(scales_at(slot, j)), "l"(sp)
                     : "memory");
    }
  };
  auto commit = [] { asm volatile("cp.async.commit_group;" ::: "memory"); };
  // The first quads (constant weights) before griddepcontrol.wait; kQA groups either way, so that group q is
  // quad q below.
  for (int q = 0; q < kQA; ++q) {
    if (q < quads) issue(q);
    commit();
  }
  pdl_wait();
  for (int q = 0; q < quads; ++q) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kQA - 1) : "memory");  // quad q's bytes have landed
    uint32_t st[4];
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) {
      const int c = 4 * q + cc, s = c % C::kStages;
      if (c >= C::kStages) mbar_wait(empty + 8 * s, ((c / C::kStages) & 1) ^ 1);
      st[cc] = sbase + s * C::kStage;
      if (pt == 0) {
        mbar_arrive_expect_tx(full + 8 * s, BN * 64);
        tma_load_2d(st[cc] + 2 * C::kWStep, tmx, c * 32, m0, full + 8 * s);
      }
    }
    const uint32_t slot = qbase + (q % kQA) * C::kQuadBytes;
#pragma unroll
    for (int j = 0; j < kRowsJ; ++j) {
      const uint4 wv = lds128(words_at(slot, j));
      uint32_t s_lo, s_hi;  // the scale words of chunks 0-1 and 2-3 (one group of 128: the same word)
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(s_lo), "=r"(s_hi) : "r"(scales_at(slot, j)));
      if (gq == 1) s_hi = s_lo;
      const uint32_t wd[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        const uint4 v = dequant<KIND, 4>(Raw{wd[cc], 0, cc < 2 ? s_lo : s_hi, 0});
        const uint32_t d = st[cc] + j * 32 * 64;
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(d + off0), "r"(v.x), "r"(v.y) : "memory");
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(d + off1), "r"(v.z), "r"(v.w) : "memory");
      }
    }
    fence_proxy_async();
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) mbar_arrive(full + 8 * ((4 * q + cc) % C::kStages));
    if (q + kQA < quads) issue(q + kQA);  // into the slot just read (this thread's own bytes)
    commit();
  }
}

// part_peer (SP = 2, rank 0): the shared::cluster address of rank 1's slice partials 4..7, added in
// slice order after this CTA's fold of slices 0..3 (linear.cu's `s += red[q]` sequence).
template <int WGS, int BN, int SP>
__device__ __forceinline__ void store_out(const float* tot, const float* tot_smem,
                                          const void* __restrict__ bias, int bias_kind, void* __restrict__ y,
                                          bool y_f32, int m, int n, int m0, int n0, uint32_t part_peer) {
  using C = Cfg<WGS, BN, 1, SP>;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Element i = 4j + e: weight row 16*warp + g + 8*(e/2) of this warpgroup's 64, token 8j + 2t + e%2.
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) {
    const int j = i / 4, e = i % 4;
    const int col = n0 + wg * 64 + 16 * warp + g + 8 * (e / 2), row = m0 + 8 * j + 2 * t + e % 2;
    if (row >= m || col >= n) continue;
    float s = C::kTotSmem ? tot_smem[i * WGS * 128 + threadIdx.x] : tot[C::kTotSmem ? 0 : i];
    if constexpr (SP == 2) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float p;
        const uint32_t a = part_peer + ((q * C::kAcc + i) * WGS * 128 + threadIdx.x) * 4;
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(p) : "r"(a) : "memory");
        s += p;
      }
    }
    store_biased(s, bias, bias_kind, y, y_f32, row, col, n);
  }
}

// SP = 2: rank r runs slices [4r, 4r + 4); rank 0 folds its four in `tot`, rank 1 stores each partial in
// its shared memory (part, [slice][i][thread]) for rank 0 to add after the cluster barrier.
// Persistent CTAs (moe_wgmma.cu) run one tile after another through the same stages: g0 counts the chunks
// of the CTA's earlier tiles (the ring position and phase go on from there), and kTail releases the stages
// of the tile's last kPending chunks once its MMAs are done (a single tile leaves them).
template <int WGS, int BN, int CL, int SP, bool SWZ, int WP = 0, bool kTail = false>
__device__ __forceinline__ void consume(const void* __restrict__ bias, int bias_kind, void* __restrict__ y,
                                        bool y_f32, int m, int n, int k, int m0, int n0, uint32_t sbase,
                                        float* tot_smem, float* part, uint32_t full, uint32_t empty,
                                        uint32_t rank, int g0 = 0) {
  using C = Cfg<WGS, BN, CL, SP, WP>;
  static_assert(!kTail || (CL == 1 && C::kCh == 1), "tails: one chunk a stage, no cluster");
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, chunks = k / 32;
  const int si_lo = SP == 2 ? 4 * int(rank) : 0, si_hi = SP == 2 ? si_lo + 4 : kSlices;
  const int c_lo = si_lo * chunks / kSlices;
  float acc[C::kAcc], tot[C::kTotSmem ? 1 : C::kAcc];
  int c = c_lo;
  // Slices are the outer loop so that the accumulators are only zeroed before a chain and read after
  // it: nothing touches them while wgmmas are in flight (no compiler-inserted waits).
  for (int si = si_lo; si < si_hi; ++si) {
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.f;
    for (const int c_end = (si + 1) * chunks / kSlices; c < c_end; ++c) {
      const int q = g0 + (c - c_lo) / C::kCh, s = q % C::kStages;  // the chunk's stage (kCh chunks each)
      if ((c - c_lo) % C::kCh == 0) mbar_wait(full + 8 * s, (q / C::kStages) & 1);
      // The 8-byte path's cp.async bytes (generic proxy) -> wgmma's async-proxy reads. The raw path's
      // writers fence before they arrive.
      if constexpr (!C::kRaw) fence_proxy_async();
      const uint32_t st = sbase + s * C::kStage;
      const uint32_t b = st + C::kWBytes;
      wgmma_fence_operands<C::kAcc>(acc);
      wgmma_fence();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (WP == 2) {  // 128-byte rows: this chunk's two steps at byte 64 * (chunk % 2) + 32 h
          const uint32_t off = ((c - c_lo) % 2) * 64 + h * 32;
          wgmma_tile<BN>(acc, desc_sw128(st + wg * 64 * 128 + off), desc_sw128(b + off));
        } else if constexpr (SWZ) {  // this warpgroup's 64 rows of W: 64 x 64 bytes further per warpgroup
          wgmma_tile<BN>(acc, desc_sw64(st + wg * 64 * 64 + h * 32), desc_sw64(b + h * 32));
        } else {
          const uint32_t a = st + wg * (64 / 8) * kRowGroupBytes;
          wgmma_tile<BN>(acc, wgmma_desc(a + h * C::kWStep, kKHalfBytes, kRowGroupBytes),
                         wgmma_desc(b + h * C::kXStep, kKHalfBytes, kRowGroupBytes));
        }
      }
      wgmma_commit();
      wgmma_fence_operands<C::kAcc>(acc);
      wgmma_wait<C::kPending>();  // chunk c - kPending's MMAs are done: its stage goes back
      wgmma_fence_operands<C::kAcc>(acc);
      // Chunk d = c - kPending is done; its stage goes back with the stage's last chunk (WP = 2: the odd one;
      // a stage left half-used at the range's end is never refilled).
      const int d = c - C::kPending - c_lo;
      if (d >= 0 && d % C::kCh == C::kCh - 1 && lane == 0) {
        const uint32_t bar = empty + 8 * ((g0 + d / C::kCh) % C::kStages);
        mbar_arrive(bar);
        if constexpr (CL == 2) mbar_arrive_remote(peer_addr(bar, rank ^ 1));
      }
    }
    wgmma_wait<0>();
    wgmma_fence_operands<C::kAcc>(acc);
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) {
      if constexpr (SP == 2) {
        if (rank == 1)
          part[((si - 4) * C::kAcc + i) * WGS * 128 + threadIdx.x] = acc[i];
        else
          tot[i] = si == 0 ? acc[i] : tot[i] + acc[i];
      } else if constexpr (C::kTotSmem) {
        float& tv = tot_smem[i * WGS * 128 + threadIdx.x];
        tv = si == 0 ? acc[i] : tv + acc[i];
      } else {
        tot[i] = si == 0 ? acc[i] : tot[i] + acc[i];
      }
    }
  }
  if constexpr (kTail) {  // the chunks whose stages the loop above did not give back (all MMAs are done)
    const int count = chunks - c_lo;
    if (lane == 0)
      for (int d = max(0, count - C::kPending); d < count; ++d)
        mbar_arrive(empty + 8 * ((g0 + d) % C::kStages));
  }
  if constexpr (SP == 2) {
    cluster_sync();  // rank 1's partials are in its shared memory
    if (rank == 0)
      store_out<WGS, BN, SP>(tot, tot_smem, bias, bias_kind, y, y_f32, m, n, m0, n0,
                             peer_addr(static_cast<uint32_t>(__cvta_generic_to_shared(part)), 1));
  } else {
    store_out<WGS, BN, SP>(tot, tot_smem, bias, bias_kind, y, y_f32, m, n, m0, n0, 0);
  }
}

}  // namespace tf::cuda::wgp
