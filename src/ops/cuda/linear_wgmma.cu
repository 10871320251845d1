// Prefill linear on Hopper warpgroup MMAs (wgmma, sm_90a) for issue #6: the per-element arithmetic of
// linear.cu (read its header) on m64nNk16 instead of m16n8k16. bench/cuda/wgmma_probe.cu showed that one
// wgmma k16 step rounds bit for bit like one mma.sync m16n8k16 step on the same 16 k-values, and that the
// order of the 16 values inside a step does not matter, only which 16 a step gets.
//
// What a step gets (linear.cu's in-chunk permutation): step h (0/1) of 32-chunk c takes, per row, the
// k-values c*32 + 8u + 4h + j (u, j = 0..3), i.e. the 8-byte pieces at byte 0, 16, 32, 48 (h = 0) or
// 8, 24, 40, 56 (h = 1) of the row's 64-byte chunk. The producer copies them with 8-byte cp.async straight
// into the no-swizzle core-matrix layout wgmma reads (a core matrix: 8 rows x 16 bytes): logical k of
// step h = the four pieces u = 0..3 in order, so core-matrix K half kh holds pieces u = 2kh, 2kh + 1. One
// warp instruction moves 8 rows x 32 bytes (one K half of the chunk, both steps): 8 fully used global
// sectors, and in shared memory two whole 128-byte core matrices (one per step), no bank conflict.
// TMA cannot do this (its global strides are multiples of 16 bytes), and a 128B-swizzled layout would
// only change where the same pieces land; the core matrices here are 128 contiguous bytes each, which
// wgmma reads conflict-free without a swizzle.
//
// CTA: WGS consumer warpgroups (64 weight rows each: the M = 64 operand A) x BN tokens (operand B, shared
// by the consumers), plus one producer warpgroup. The stages are 32-chunks (2 k16 steps); the producer
// fills a ring of kStages of them with cp.async, each completion tracked by its `full` mbarrier
// (cp.async.mbarrier.arrive.noinc); a consumer warp releases a stage (`empty` mbarrier) once
// wgmma.wait_group shows its MMAs done. The consumers keep one wgmma group in flight while they wait for
// the next stage, so loads, MMAs and the next issue overlap; no __syncthreads in the main loop.
//
// Per element, as in linear.cu: slice si of 8 covers chunks [si*C/8, (si+1)*C/8) (C = K/32), its chain
// starts from +0 (zeroed accumulator, scale-d = 1, like mma.sync from a zeroed accumulator), and the
// slice partials are folded in slice order into `tot` (assigned for slice 0, added after; an empty slice
// adds +0), then the bias, then the rounding. Slices are a function of K only, so slice ends are stage
// ends. With BN = 256 the 128 accumulators leave no room for 128 more `tot` registers: tot lives in
// shared memory then (each thread its own 128 words, touched 8 times a tile).
//
// Tiles (WgmmaTile): 64/128 weight rows x 64/128/192/256 tokens; 2-CTA cluster variants that share the
// x tile between two weight tiles (CL = 2, produce()) or split one tile's slices 4 + 4 (SP = 2,
// consume()). Every tile gives every element the same arithmetic; Auto picks by the grid size.
#include <cuda.h>  // CUtensorMap (the encoder comes through cudaGetDriverEntryPointByVersion)
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/error.h"
#include "ops/cuda/activation.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/quant_common.cuh"  // dequant, kMlxBf16, kMlxBf16Sub

namespace tf::cuda {
namespace {

constexpr int kSlices = 8;              // linear.cu's kWarps: part of the arithmetic
constexpr int kSmemLimit = 227 * 1024;  // sm_90 dynamic shared memory per CTA
constexpr int kRowGroupBytes = 256;     // SBO: 8 rows x 2 K halves x 16 bytes
constexpr int kKHalfBytes = 128;        // LBO: the step's second 8 logical k-values
WgmmaTile g_tile = WgmmaTile::Auto;
WgmmaProducer g_producer = WgmmaProducer::Auto;
// Raw tiles: 64-byte swizzled stages (set_linear_wgmma_swizzle), on since run 31: with permute_row's lane
// order their permutation stores are conflict-free (the no-swizzle layout's are 2-way).
bool g_swizzle = true;
// Auto's producer for the raw tiles: TmaX (x permuted once, tensor-map loads; run 32: 1.2-1.4x Raw on every
// 8B shape from M = 512, e.g. 4096x24576x4096 2.38 -> 1.69 ms) or Raw (16-byte cp.async).
constexpr bool kAutoTmaX = true;
// Auto takes TmaXW (W permuted per call too) from this M on (0: never; TF_WGMMA_WPERM_MIN_M=<m>), for weights
// up to kWPermMaxBytes (the permuted copy lives in a per-stream buffer that only grows). Run 61 (8B shapes,
// permute included): at M = 4096 q/o 347 -> 319 us, gate_up 1,703 -> 1,619, down 945 -> 909; at M = 1024 it
// lost (485 -> 569 us for gate_up): the per-call permute of W is paid back by 4 tiles of 1,024 rows.
int g_wperm_min_m = [] {
  const char* v = std::getenv("TF_WGMMA_WPERM_MIN_M");
  return v ? std::atoi(v) : 4096;
}();
constexpr size_t kWPermMaxBytes = size_t(256) << 20;
bool g_clusters = false;  // Auto considers the cluster tiles (off until the device run confirms them)
// The TmaXW 128x128 / 128x192 tiles stage 128-byte rows (Cfg WP = 2); TF_WGMMA_ROWS128=0: 64-byte rows.
bool g_rows128 = [] {
  const char* v = std::getenv("TF_WGMMA_ROWS128");
  return !v || std::atoi(v) != 0;
}();

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
template <int WGS, int BN, int SP, bool TMA, bool SWZ, int WP = 0>
__device__ __forceinline__ void produce_raw(const __nv_bfloat16* __restrict__ x,
                                            const __nv_bfloat16* __restrict__ w, int m, int n, int k, int m0,
                                            int n0, uint32_t sbase, uint32_t full, uint32_t empty, int c_lo,
                                            int count, uint32_t rawbar, const CUtensorMap* tmw,
                                            const CUtensorMap* tmx, int xp) {
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
        const uint32_t slot = c % kSlots;
        if (c >= kSlots) mbar_wait(rawfree + 8 * slot, ((c / kSlots) & 1) ^ 1);
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
        const int s = c % C::kStages;
        if (c >= C::kStages) mbar_wait(empty + 8 * s, ((c / C::kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(full + 8 * s, BN * 64);
        tma_load_2d(sbase + s * C::kStage + 2 * C::kWStep, tmx, (c_lo + c) * 32, m0, full + 8 * s);
      }
      return;
    }
    if (pt < 64) return;
    const int p = pt - 64, q0 = 8 * (p / 32) + permute_row(p % 32);  // rows q0 + 16j, unit t
    constexpr int kRows = C::kBM + BN, kPUnits = kRows / 16, kPW = C::kBM / 16;
    const int sw = (q0 >> 1) & 3;  // (q0 + 16j) >> 1 & 3 = q0 >> 1 & 3
    const uint32_t off0 = q0 * 64 + (((t / 2)) ^ sw) * 16 + (t % 2) * 8;
    const uint32_t off1 = q0 * 64 + ((2 + t / 2) ^ sw) * 16 + (t % 2) * 8;
    for (int c = 0; c < count; ++c) {
      const uint32_t slot = c % kSlots;
      mbar_wait(rawbar + 8 * slot, (c / kSlots) & 1);
      const int s = c % C::kStages;
      if (c >= C::kStages) mbar_wait(empty + 8 * s, ((c / C::kStages) & 1) ^ 1);
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
  const int sw = (r0 >> 1) & 3;  // as in the TMA branch
  const uint32_t off0 = r0 * 64 + (((t / 2)) ^ sw) * 16 + (t % 2) * 8;
  const uint32_t off1 = r0 * 64 + ((2 + t / 2) ^ sw) * 16 + (t % 2) * 8;
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
  const int sw = (r0 >> 1) & 3;  // as in produce_raw
  const uint32_t off0 = r0 * 64 + ((t / 2) ^ sw) * 16 + (t % 2) * 8;
  const uint32_t off1 = r0 * 64 + ((2 + t / 2) ^ sw) * 16 + (t % 2) * 8;
  const int64_t row_bytes = k / 2;
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
                   "l"(qw + int64_t(row) * row_bytes + q * 64 + t * 16)
                   : "memory");
      const uint32_t* sp = qs + int64_t(row) * groups + q * gq;
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
template <int WGS, int BN, int CL, int SP, bool SWZ, int WP = 0>
__device__ __forceinline__ void consume(const void* __restrict__ bias, int bias_kind, void* __restrict__ y,
                                        bool y_f32, int m, int n, int k, int m0, int n0, uint32_t sbase,
                                        float* tot_smem, float* part, uint32_t full, uint32_t empty,
                                        uint32_t rank) {
  using C = Cfg<WGS, BN, CL, SP, WP>;
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
      const int q = (c - c_lo) / C::kCh, s = q % C::kStages;  // the chunk's stage (kCh chunks each)
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
        const uint32_t bar = empty + 8 * ((d / C::kCh) % C::kStages);
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
  if constexpr (SP == 2) {
    cluster_sync();  // rank 1's partials are in its shared memory
    if (rank == 0)
      store_out<WGS, BN, SP>(tot, tot_smem, bias, bias_kind, y, y_f32, m, n, m0, n0,
                             peer_addr(static_cast<uint32_t>(__cvta_generic_to_shared(part)), 1));
  } else {
    store_out<WGS, BN, SP>(tot, tot_smem, bias, bias_kind, y, y_f32, m, n, m0, n0, 0);
  }
}

template <int WGS, int BN, int CL, int SP, bool TMA, bool SWZ, int WP = 0>
__global__ void __launch_bounds__(Cfg<WGS, BN, CL, SP>::kThreads, 1)
    linear_wgmma_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                        const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m,
                        int n, int k, int m_tiles, const __grid_constant__ CUtensorMap tmw,
                        const __grid_constant__ CUtensorMap tmx, int xp, const uint32_t* __restrict__ qs,
                        int qshift) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Cfg<WGS, BN, CL, SP, WP>;
  static_assert(!TMA || C::kRaw, "TMA feeds the raw-staging producer");
  static_assert(!SWZ || C::kRaw, "only the raw-staging producer writes the swizzled layout");
  constexpr bool kCluster = CL == 2 || SP == 2;
  // CL = 2: half[s]; TMA: raw[slot] then raw_free[slot].
  constexpr int kAux = C::kStages > 2 * C::kRawSlots ? C::kStages : 2 * C::kRawSlots;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // full[s], empty[s], then half[s] (CL = 2) or raw[slot] (TMA)
  __shared__ __align__(8) uint64_t bars[2 * C::kStages + kAux];
  // Stages 1024-byte aligned (swizzle atoms, TMA boxes) whatever the static shared memory before them.
  const uint32_t pad = (1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023;
  unsigned char* smem = smem_raw + pad;
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
  const uint32_t empty = full + 8 * C::kStages, half = empty + 8 * C::kStages;
  const uint32_t rank = kCluster ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      // producer threads' arrives (+ the expect_tx for the peer's bytes; TMA: the 64 permuters)
      // xp 1: + x's expect_tx arrive; xp 2: only the loading thread's expect_tx arrive
      // WP >= kWpQ4: the 128 producer threads' arrives + thread 0's expect_tx arrive for x
      mbar_init(full + 8 * s, C::kQ4 ? 129 : TMA ? (xp == 2 ? 1 : 64 + (xp ? 1 : 0)) : 128 + (CL == 2));
      mbar_init(empty + 8 * s, 4 * WGS * CL);  // lane 0 of every consumer warp (of both CTAs)
      if constexpr (CL == 2) mbar_init(half + 8 * s, 128);
    }
    if constexpr (TMA)
      for (int r = 0; r < C::kRawSlots; ++r) {
        mbar_init(half + 8 * r, 1);                    // thread 0's arrive.expect_tx
        mbar_init(half + 8 * (C::kRawSlots + r), 64);  // the permuters' release
      }
    if constexpr (kCluster) mbar_init_fence();
  }
  if constexpr (kCluster)
    cluster_sync();  // the peer's barriers exist before anyone arrives on them
  else
    __syncthreads();
  pdl_launch_dependents();
  // Token tiles vary fastest: the CTAs that share a weight tile run together (L2 reuse of W). A cluster
  // is two neighbouring weight tiles of one token tile.
  // With SP = 2 both CTAs of a cluster take the same tile (and half of K's slices each).
  const int tile = kCluster ? int(blockIdx.x) / 2 : int(blockIdx.x);
  const int m0 = (tile % m_tiles) * BN, n0 = ((tile / m_tiles) * CL + (CL == 2 ? int(rank) : 0)) * C::kBM;
  const int chunks = k / 32, c_lo = SP == 2 ? 4 * int(rank) * chunks / kSlices : 0;
  const int c_hi = SP == 2 ? (4 * int(rank) + 4) * chunks / kSlices : chunks;
  if (threadIdx.x / 128 == WGS) {
    if constexpr (WGS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
    if constexpr (C::kQ4)
      produce_q4<WGS, BN, WP>(reinterpret_cast<const uint8_t*>(w), qs, qshift, n, k, m0, n0, sbase, full,
                              empty, &tmx);
    else if constexpr (C::kRaw)
      produce_raw<WGS, BN, SP, TMA, SWZ, WP>(x, w, m, n, k, m0, n0, sbase, full, empty, c_lo, c_hi - c_lo,
                                             half, &tmw, &tmx, xp);
    else
      produce<WGS, BN, CL, SP>(x, w, m, n, k, m0, n0, sbase, full, empty, half, rank, c_lo, c_hi - c_lo);
    if constexpr (SP == 2) cluster_sync();  // pairs with the consumers' barrier before the fold
  } else {
    if constexpr (WGS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    float* tot_smem = reinterpret_cast<float*>(smem + C::kTotOff);
    float* part = reinterpret_cast<float*>(smem + C::kPartOff);
    consume<WGS, BN, CL, SP, SWZ, WP>(bias, bias_kind, y, y_f32, m, n, k, m0, n0, sbase, tot_smem, part, full,
                                      empty, rank);
  }
  if constexpr (kCluster) cluster_sync();  // no CTA leaves while its peer may still signal, copy or read
#else
  __trap();  // built for another architecture: linear_wgmma_supported() keeps callers away
#endif
}

// cuTensorMapEncodeTiled through the runtime (no libcuda link); null when the driver lacks it.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return EncodeTiled(nullptr);
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A [rows, k] bf16 row-major matrix as 2D tensor map with boxes of box_cols elements (32: one chunk, 64: the
// 128-byte rows of two) x box_rows.
bool make_map(CUtensorMap* map, const void* base, int rows, int k, int box_rows,
              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE, int box_cols = 32) {
  const EncodeTiled fn = encode_tiled();
  if (!fn || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)}, strides[1] = {cuuint64_t(k) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)}, elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// x with each 32-chunk's 8-byte pieces in stage order: P0 P2 P4 P6 | P1 P3 P5 P7 (piece i = k 4i..4i+3), i.e.
// step 0's k-values (unit t's first 8 bytes, t = 0..3) then step 1's: the raw producer's permutation done
// once for the whole x instead of in every CTA that reads the tile (WgmmaProducer::TmaX).
// One thread a 16-byte unit (unit u = idx % 4 of chunk idx / 4), so that a warp loads and stores 512
// contiguous bytes an instruction (run 125: the thread-a-chunk version moved 2.4 TB/s, 16.5 ms of a 4k
// prefill); the four units of a chunk are in one quad, and thread u makes output unit u from the 8-byte
// halves of two of them by shuffles: out0 = in0.lo in1.lo, out1 = in2.lo in3.lo, out2 = in0.hi in1.hi,
// out3 = in2.hi in3.hi. SILU: x is the MLP's gate_up [m, 2k] and the permuted rows are bf16(silu(g) * u)
// (activation.cuh: silu_mul's values), so the down projection's x never goes through memory unpermuted.
template <bool SILU>
__global__ void permute_x_kernel(const uint4* x, uint4* xp, int64_t units, int k_units) {
  pdl_enter();
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const bool live = idx < units;
  uint4 in = make_uint4(0, 0, 0, 0);
  if (live) {
    if constexpr (SILU) {
      const int64_t row = idx / k_units, j = idx % k_units;  // unit j of the row's k / 8
      in = silu_mul_unit(ld_act16(x + row * 2 * k_units + j), ld_act16(x + row * 2 * k_units + k_units + j));
    } else {
      in = ld_act16(x + idx);
    }
  }
  // Units a and a + 1 of the quad (a = 0 for u = 0, 2; 2 for u = 1, 3); their low halves for u < 2.
  const int lane = threadIdx.x % 32, u = lane % 4, a = lane - u + 2 * (u % 2);
  constexpr unsigned kAll = 0xffffffffu;
  const uint32_t ax = __shfl_sync(kAll, in.x, a), ay = __shfl_sync(kAll, in.y, a),
                 az = __shfl_sync(kAll, in.z, a), aw = __shfl_sync(kAll, in.w, a),
                 bx = __shfl_sync(kAll, in.x, a + 1), by = __shfl_sync(kAll, in.y, a + 1),
                 bz = __shfl_sync(kAll, in.z, a + 1), bw = __shfl_sync(kAll, in.w, a + 1);
  if (live) xp[idx] = u < 2 ? make_uint4(ax, ay, bx, by) : make_uint4(az, aw, bz, bw);
}

// Whether permuted_rows can copy p on s: not while s captures a graph (no allocation there), and p 16-byte
// aligned.
bool can_permute(const void* p, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone &&
         reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The permuted copy of x (or of W: which = 1), in a buffer per (device, stream, which) that only grows: calls
// on one stream reuse it in stream order; two streams (two backends, a draft model's and the target's) never
// share one. Null while the stream is capturing a graph (no allocation there) or when x is not 16-byte
// aligned. which: 0 = x's buffer, 1 = W's (WgmmaProducer::TmaXW: the weight permuted the same way, per call).
// silu: x is a gate_up [m, 2k] and the rows permuted are silu_mul's (permute_x_kernel<true>).
const void* permuted_rows(const void* x, int m, int k, cudaStream_t s, int which = 0, bool silu = false) {
  if (!can_permute(x, s)) return nullptr;
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
  };
  static std::mutex mu;
  static std::map<std::tuple<int, cudaStream_t, int>, Buf> bufs;
  int dev = 0;
  TF_CUDA_CHECK(cudaGetDevice(&dev));
  const size_t bytes = size_t(m) * k * 2;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    Buf& b = bufs[{dev, s, which}];
    if (bytes > b.cap) {
      if (b.p) TF_CUDA_CHECK(cudaFree(b.p));  // waits for the work that may still read it
      b.cap = bytes + bytes / 4;
      TF_CUDA_CHECK(cudaMalloc(&b.p, b.cap));
    }
    p = b.p;
  }
  const int64_t units = int64_t(m) * (k / 8);
  launch_pdl(silu ? permute_x_kernel<true> : permute_x_kernel<false>, unsigned((units + 255) / 256), 256, 0,
             s, static_cast<const uint4*>(x), static_cast<uint4*>(p), units, k / 8);
  return p;
}

template <int WGS, int BN, int CL, int SP, bool TMA, bool SWZ, int WP = 0>
void launch_with(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m,
                 int n, int k, cudaStream_t s, const CUtensorMap& tmw, const CUtensorMap& tmx, int xp = 0,
                 const uint32_t* qs = nullptr, int qshift = 0) {
  using C = Cfg<WGS, BN, CL, SP, WP>;
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(linear_wgmma_kernel<WGS, BN, CL, SP, TMA, SWZ, WP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    return true;
  }();
  (void)configured;
  const int m_tiles = (m + BN - 1) / BN, n_tiles = (n + C::kBM - 1) / C::kBM;
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  if constexpr (CL == 1 && SP == 1) {
    launch_pdl(linear_wgmma_kernel<WGS, BN, 1, 1, TMA, SWZ, WP>, dim3(m_tiles * n_tiles), dim3(C::kThreads),
               C::kSmem, s, xb, wb, bias, bias_kind, y, y_f32, m, n, k, m_tiles, tmw, tmx, xp, qs, qshift);
  } else {  // clusters: two weight tiles (CL; an odd last one computes clamped rows, all masked) or one
            // tile twice (SP)
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(CL == 2 ? m_tiles * ((n_tiles + 1) / 2) * 2 : m_tiles * n_tiles * 2);
    cfg.blockDim = dim3(C::kThreads);
    cfg.dynamicSmemBytes = C::kSmem, cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_wgmma_kernel<WGS, BN, CL, SP, TMA, SWZ, WP>, xb, wb, bias,
                                     bias_kind, y, y_f32, m, n, k, m_tiles, tmw, tmx, xp, qs, qshift));
  }
}

// The producer: TMA raw rows where the tile stages raw rows and Tma is set (the maps must encode); else
// 16-byte cp.async (raw tiles; Auto until the TMA path is measured) or the tile's 8-byte path.
// silu: x is a gate_up [m, 2k] whose silu_mul is the input (only the permuted-x producers, which
// linear_wgmma_silu_bf16 makes sure of).
template <int WGS, int BN, int CL = 1, int SP = 1>
void launch(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m, int n,
            int k, cudaStream_t s, bool silu = false) {
  using C = Cfg<WGS, BN, CL, SP>;
  CUtensorMap tmw{}, tmx{};
  if constexpr (C::kRaw && SP == 2) {  // the split tiles: 16-byte cp.async, swizzled (fewer kernels)
    return launch_with<WGS, BN, CL, SP, false, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
  } else if constexpr (C::kRaw) {
    if (g_producer == WgmmaProducer::TmaX || g_producer == WgmmaProducer::TmaXW ||
        (g_producer == WgmmaProducer::Auto && kAutoTmaX)) {
      // TmaXW: W permuted per call as well (its bytes read and written once more: pays for large M only).
      const bool wperm =
          g_producer == WgmmaProducer::TmaXW || (g_producer == WgmmaProducer::Auto && g_wperm_min_m > 0 &&
                                                 m >= g_wperm_min_m && size_t(n) * k * 2 <= kWPermMaxBytes);
      const void* wpp = wperm ? permuted_rows(w, n, k, s, 1) : nullptr;  // null: capture, or W unaligned
      // W's map first (permuted for TmaXW, raw rows for TmaX): x is permuted (a kernel launch), once, only
      // when a tensor-map launch can follow.
      const bool wmap = wpp ? make_map(&tmw, wpp, n, k, C::kBM, CU_TENSOR_MAP_SWIZZLE_64B)
                            : make_map(&tmw, w, n, k, C::kBM);
      const void* xp = wmap ? permuted_rows(x, m, k, s, 0, silu) : nullptr;  // null: capture
      const bool xmap = xp && make_map(&tmx, xp, m, k, BN, CU_TENSOR_MAP_SWIZZLE_64B);
      TF_CHECK(!silu || xmap, "wgmma linear: the silu input needs the permuted-x producer");
      TF_CHECK(
          g_producer != WgmmaProducer::TmaXW || (wpp && xmap) || !can_permute(w, s) || !can_permute(x, s),
          "wgmma linear: TmaXW producer forced but W's or x's tensor map could not be made");
      // Two-warpgroup 128- and 192-token tiles: 128-byte rows (WP = 2; TF_WGMMA_ROWS128=0 keeps 64-byte
      // ones).
      if constexpr (WGS == 2 && (BN == 128 || BN == 192) && CL == 1 && SP == 1) {
        CUtensorMap tmw2{}, tmx2{};
        if (xmap && wpp && g_rows128 && make_map(&tmw2, wpp, n, k, C::kBM, CU_TENSOR_MAP_SWIZZLE_128B, 64) &&
            make_map(&tmx2, xp, m, k, BN, CU_TENSOR_MAP_SWIZZLE_128B, 64))
          return launch_with<WGS, BN, CL, SP, true, true, 2>(x, w, bias, bias_kind, y, y_f32, m, n, k, s,
                                                             tmw2, tmx2, 2);
      }
      if (xmap && wpp)
        return launch_with<WGS, BN, CL, SP, true, true, 1>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw,
                                                           tmx, 2);
      if (xmap)
        return launch_with<WGS, BN, CL, SP, true, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx,
                                                        1);
    }
    if (g_swizzle && g_producer == WgmmaProducer::Tma && make_map(&tmw, w, n, k, C::kBM) &&
        make_map(&tmx, x, m, k, BN))
      return launch_with<WGS, BN, CL, SP, true, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
    TF_CHECK(g_producer != WgmmaProducer::Tma || !g_swizzle,
             "wgmma linear: TMA producer forced but no tensor map");
    if (g_swizzle)
      return launch_with<WGS, BN, CL, SP, false, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
    launch_with<WGS, BN, CL, SP, false, false>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
  } else {
    launch_with<WGS, BN, CL, SP, false, false>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
  }
}

// The tiles whose producers permute x once per call (the raw tiles), so that a silu input can ride along.
bool reads_permuted_x(WgmmaTile tile) {
  return tile == WgmmaTile::W64T64 || tile == WgmmaTile::W64T128 || tile == WgmmaTile::W128T64 ||
         tile == WgmmaTile::W128T128 || tile == WgmmaTile::W128T192;
}

// One call on `tile`; silu (only for reads_permuted_x tiles): x is a gate_up whose silu_mul is the input.
void launch_tile(WgmmaTile tile, const void* x, const void* w, const void* bias, int bias_kind, void* y,
                 bool f32, int m, int n, int k, cudaStream_t s, bool silu = false) {
  switch (tile) {
    case WgmmaTile::W64T64:
      return launch<1, 64>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W64T128:
      return launch<1, 128>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T64:
      return launch<2, 64>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T128:
      return launch<2, 128>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T192:
      return launch<2, 192>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T128C2:
      return launch<2, 128, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T192C2:
      return launch<2, 192, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W64T64S2:
      return launch<1, 64, 1, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W64T128S2:
      return launch<1, 128, 1, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T64S2:
      return launch<2, 64, 1, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    default:
      return launch<2, 256>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
  }
}

}  // namespace

bool make_linear_tensor_map(CUtensorMap* map, const void* base, int rows, int k, int box_rows,
                            bool swizzle_64b) {
  return make_map(map, base, rows, k, box_rows,
                  swizzle_64b ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE);
}

bool make_kv_tensor_map(CUtensorMap* map, const void* pool, int64_t slots, int heads, int head_dim,
                        int box_cols, int box_rows) {
  const EncodeTiled fn = encode_tiled();
  if (!fn || reinterpret_cast<uintptr_t>(pool) % 16 != 0) return false;
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(slots)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim) * 2, cuuint64_t(heads) * head_dim * 2};
  const cuuint32_t box[3] = {cuuint32_t(box_cols), 1, cuuint32_t(box_rows)}, elem[3] = {1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(pool), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Auto: the tile with the least estimated time on an H200 (132 SMs): waves x the slower of a tile's MMA
// time (989 TFLOP/s / 132 SMs, times an efficiency: the shared-memory traffic a chunk costs against its
// MMA time, and for 128x256 the `tot` round trips through shared memory) and its load time (the tile's
// bytes at the producer's rate an SM: 8-byte cp.async measured ~24 GB/s (run 16), the raw-staging path
// guessed at ~55), or all CTAs' bytes at ~10 TB/s of L2 if slower. All scale with K, so K drops out.
// Guesses to be replaced by measured tables (docs/cuda-notes.md v10); any tile gives the same bits.
WgmmaTile linear_wgmma_auto_tile(int m, int n) {
  struct Option {
    WgmmaTile tile;
    int bm, bn;
    double eff;
    int cl, sp;  // cluster kinds: x shared (cl = 2: half of x's bytes), slices split (sp = 2)
  };
  static constexpr Option kOptions[] = {
      {WgmmaTile::W128T192, 128, 192, 1.0, 1, 1},   {WgmmaTile::W128T256, 128, 256, 0.75, 1, 1},
      {WgmmaTile::W128T128, 128, 128, 0.82, 1, 1},  {WgmmaTile::W64T128, 64, 128, 0.68, 1, 1},
      {WgmmaTile::W128T64, 128, 64, 0.58, 1, 1},    {WgmmaTile::W64T64, 64, 64, 0.5, 1, 1},
      {WgmmaTile::W128T192C2, 128, 192, 1.0, 2, 1}, {WgmmaTile::W128T128C2, 128, 128, 0.82, 2, 1},
      {WgmmaTile::W64T128S2, 64, 128, 0.68, 1, 2},  {WgmmaTile::W128T64S2, 128, 64, 0.58, 1, 2},
      {WgmmaTile::W64T64S2, 64, 64, 0.5, 1, 2}};
  constexpr double kFlopsPerSm = 989e12 / 132, kL2Bytes = 10e12;
  constexpr double kRawBytesPerSm = 55e9, kCpAsync8BytesPerSm = 24e9;
  WgmmaTile best = WgmmaTile::W64T64;
  double best_t = 1e300;
  for (const Option& o : kOptions) {
    if ((o.cl > 1 || o.sp > 1) && !g_clusters) continue;
    const bool raw = o.cl == 1 && o.bn != 256;  // Cfg::kRaw
    const double rate = raw ? kRawBytesPerSm : kCpAsync8BytesPerSm;
    const long ctas = long((m + o.bn - 1) / o.bn) * ((n + o.bm - 1) / o.bm) * o.sp;
    const long waves = (ctas + 131) / 132;
    const double mma = 2.0 * o.bm * o.bn / (kFlopsPerSm * o.eff) / o.sp;
    const double bytes = 2.0 * (o.bm + o.bn / o.cl) / o.sp;
    // All CTAs' bytes through L2 at ~10 TB/s (binds large tiles at large M).
    const double t = std::max(double(waves) * std::max(mma, bytes / rate), double(ctas) * bytes / kL2Bytes);
    if (t < best_t) best_t = t, best = o.tile;
  }
  return best;
}

void set_linear_wgmma_rows128(bool on) {
  g_rows128 = on;
}

void set_linear_wgmma_clusters(bool on) {
  g_clusters = on;
}

void set_linear_wgmma_producer(WgmmaProducer producer) {
  g_producer = producer;
}

void set_linear_wgmma_swizzle(bool on) {
  g_swizzle = on;
}

const char* wgmma_producer_name(WgmmaProducer producer) {
  switch (producer) {
    case WgmmaProducer::Auto:
      return "auto";
    case WgmmaProducer::Raw:
      return "cp16";
    case WgmmaProducer::Tma:
      return "tma";
    case WgmmaProducer::TmaX:
      return "tmax";
    case WgmmaProducer::TmaXW:
      return "tmaxw";
  }
  return "?";
}

bool linear_wgmma_supported() {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaFuncAttributes attr{};
    // The kernels are only compiled for sm_90a; a build without it has no binary for them.
    return major == 9 && minor == 0 &&
           cudaFuncGetAttributes(&attr, linear_wgmma_kernel<1, 64, 1, 1, false, false>) == cudaSuccess &&
           attr.binaryVersion == 90;
  }();
  return ok;
}

void set_linear_wgmma_tile(WgmmaTile tile) {
  g_tile = tile;
}

const char* wgmma_tile_name(WgmmaTile tile) {
  switch (tile) {
    case WgmmaTile::Auto:
      return "auto";
    case WgmmaTile::W64T64:
      return "64x64";
    case WgmmaTile::W64T128:
      return "64x128";
    case WgmmaTile::W128T64:
      return "128x64";
    case WgmmaTile::W128T128:
      return "128x128";
    case WgmmaTile::W128T192:
      return "128x192";
    case WgmmaTile::W128T256:
      return "128x256";
    case WgmmaTile::W128T128C2:
      return "128x128c2";
    case WgmmaTile::W128T192C2:
      return "128x192c2";
    case WgmmaTile::W64T64S2:
      return "64x64s2";
    case WgmmaTile::W64T128S2:
      return "64x128s2";
    case WgmmaTile::W128T64S2:
      return "128x64s2";
  }
  return "?";
}

void linear_wgmma_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y,
                       DType y_dtype, int m, int n, int k, cudaStream_t s) {
  TF_CHECK(k % 32 == 0, "CUDA linear needs in_features divisible by 32, got " + std::to_string(k));
  TF_CHECK(linear_wgmma_supported(),
           "the wgmma linear needs an sm_90 GPU (H100/H200) and a build with CUDA architecture 90a");
  if (m <= 0 || n <= 0) return;
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool f32 = y_dtype == DType::F32;
  // M = 17..256 with the streaming kernel switched on (linear_rs.cu; same bits).
  if (g_tile == WgmmaTile::Auto && linear_rs_takes(m, n) &&
      linear_rs_bf16(x, w, bias, bias_dtype, y, y_dtype, m, n, k, s))
    return;
  launch_tile(g_tile == WgmmaTile::Auto ? linear_wgmma_auto_tile(m, n) : g_tile, x, w, bias, bias_kind, y,
              f32, m, n, k, s);
}

bool linear_wgmma_silu_bf16(const void* gate_up, const void* w, const void* bias, DType bias_dtype, void* y,
                            DType y_dtype, int m, int n, int k, cudaStream_t s) {
  // Only where linear_wgmma_bf16 would take a permuted-x producer: Auto tile, not the streaming kernel's M,
  // tensor maps encodable, gate_up and W 16-byte aligned, the stream not capturing (no buffer allocation).
  if (k % 32 != 0 || m <= 0 || n <= 0 || !linear_wgmma_supported() || g_tile != WgmmaTile::Auto ||
      !kAutoTmaX || g_producer == WgmmaProducer::Raw || g_producer == WgmmaProducer::Tma ||
      linear_rs_takes(m, n) || !encode_tiled() || !can_permute(gate_up, s) ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return false;
  const WgmmaTile tile = linear_wgmma_auto_tile(m, n);
  if (!reads_permuted_x(tile)) return false;  // 128x256 and the cluster tiles read x as it is
  launch_tile(tile, gate_up, w, bias,
              !bias                      ? 0
              : bias_dtype == DType::F32 ? 1
                                         : 2,
              y, y_dtype == DType::F32, m, n, k, s, true);
  return true;
}

namespace {

// One MLX 4-bit call on the 128-row tile of BN tokens (WP: plain or subnormal codes); false, launching
// nothing but perhaps x's permutation, where x's permuted copy or its tensor map cannot be made.
std::atomic<uint64_t> g_mlx4_launches{0};

template <int BN, int WP>
bool launch_mlx4(const void* x, const void* words, const uint32_t* scales, int chunk_shift, const void* bias,
                 int bias_kind, void* y, bool y_f32, int m, int n, int k, cudaStream_t s) {
  CUtensorMap tmw{}, tmx{};
  const void* xp = permuted_rows(x, m, k, s, 0);  // null: capture, or x unaligned
  if (!xp || !make_map(&tmx, xp, m, k, BN, CU_TENSOR_MAP_SWIZZLE_64B)) return false;
  launch_with<2, BN, 1, 1, true, true, WP>(x, words, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx, 1,
                                           scales, chunk_shift);
  g_mlx4_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

uint64_t linear_wgmma_mlx4_launches() {
  return g_mlx4_launches.load(std::memory_order_relaxed);
}

bool linear_wgmma_mlx4(const void* x, const void* words, const void* scales, int chunk_shift, bool subnormal,
                       const void* bias, DType bias_dtype, void* y, DType y_dtype, int m, int n, int k,
                       cudaStream_t s) {
  if (m <= 0 || n <= 0 || k % 128 != 0 || (chunk_shift != 1 && chunk_shift != 2) ||
      !linear_wgmma_supported() || !encode_tiled() || !can_permute(x, s) ||
      reinterpret_cast<uintptr_t>(words) % 16 != 0 || reinterpret_cast<uintptr_t>(scales) % 8 != 0)
    return false;
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool f32 = y_dtype == DType::F32;
  const auto* sc = static_cast<const uint32_t*>(scales);
  // 128 x 128 or 128 x 64 by linear_wgmma_auto_tile's estimate (waves x a tile's MMA time at its efficiency).
  const long n_tiles = (n + 127) / 128, t128 = (m + 127) / 128 * n_tiles, t64 = (m + 63) / 64 * n_tiles;
  const bool wide = double((t128 + 131) / 132) * 128 / 0.82 <= double((t64 + 131) / 132) * 64 / 0.58;
  if (wide)
    return subnormal
               ? launch_mlx4<128, kWpQ4Sub>(x, words, sc, chunk_shift, bias, bias_kind, y, f32, m, n, k, s)
               : launch_mlx4<128, kWpQ4>(x, words, sc, chunk_shift, bias, bias_kind, y, f32, m, n, k, s);
  return subnormal ? launch_mlx4<64, kWpQ4Sub>(x, words, sc, chunk_shift, bias, bias_kind, y, f32, m, n, k, s)
                   : launch_mlx4<64, kWpQ4>(x, words, sc, chunk_shift, bias, bias_kind, y, f32, m, n, k, s);
}

}  // namespace tf::cuda
