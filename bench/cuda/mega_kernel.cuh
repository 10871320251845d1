#pragma once
// The persistent decode kernel of tf_mega_probe (mega_probe.cu: its description, the host side and the
// checks): constants, the op list, the producer / consumer / attention warps, and the weight packing.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "ops/cuda/activation.cuh"
#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/linear_wgmma.h"  // tma_load_2d
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/norm.cuh"
#include "ops/cuda/quant_common.cuh"

#ifndef TF_MEGA_STAGE_K  // k-values of one slice's piece of a stage row: 512 or 256
#define TF_MEGA_STAGE_K 512
#endif
#ifndef TF_MEGA_SLICES_A_STAGE  // slices (consumer warps) sharing a stage: 1, or 2 (32 KB stages)
#define TF_MEGA_SLICES_A_STAGE 1
#endif
#ifndef TF_MEGA_TMA  // 1: stages come from the row-major weights by 2D tensor-map boxes (no packed copy)
#define TF_MEGA_TMA 0
#endif
#ifndef TF_MEGA_TMA_BOX  // TMA: a box's columns (16 rows x TF_MEGA_TMA_BOX; a 512-column piece is 512 / box
                         // boxes)
#define TF_MEGA_TMA_BOX 256
#endif
#ifndef TF_MEGA_Q4  // 1: MLX 4-bit (g64) weights, a stage = piece p of all 8 slices + their group words
#define TF_MEGA_Q4 0
#endif
#ifndef TF_MEGA_SPLIT_SCORES  // 1: the chunk's score MMAs split over the attention warps (split_scores)
#define TF_MEGA_SPLIT_SCORES 1
#endif
#ifndef TF_MEGA_ATTN_INLINE  // 1: the attention unit inlined into the kernel (else a noinline call: -1.8%,
                             // run 222)
#define TF_MEGA_ATTN_INLINE 1
#endif
#if TF_MEGA_ATTN_INLINE
#define TF_MEGA_ATTN_FN __forceinline__
#else
#define TF_MEGA_ATTN_FN __noinline__
#endif

namespace {

using namespace tf::cuda;

constexpr int kSlices = 8;  // linear.cu's K slices (its warps): the arithmetic
constexpr int kCWarps = 8;  // consumer warps, one slice each
constexpr int kAWarps =
    3;  // attention warps: 12 warps take no more registers a thread than 9 (3 a sub-partition)
constexpr int kThreads = (kCWarps + 1 + kAWarps) * 32;  // + the producer warp + the attention warps
constexpr int kProducer = kCWarps;
constexpr int kRed = 2;                   // slice-sum buffers, double-buffered: one consumer barrier a tile
constexpr int kStageK = TF_MEGA_STAGE_K;  // k-values of a slice's piece
constexpr bool kQ4 = TF_MEGA_Q4;
constexpr bool kTma = TF_MEGA_TMA;
constexpr int kBox = TF_MEGA_TMA_BOX;
constexpr int kSW = kQ4 ? kSlices : TF_MEGA_SLICES_A_STAGE;  // a stage row = pieces of kSW consecutive slices
constexpr int kOwners = kCWarps / kSW;                       // warp groups owning ring slots
constexpr int kRowBytes = kQ4 ? kSW * kStageK / 2 : kSW * kStageK * 2;
constexpr int kRowStride = kRowBytes;                // packed: rows are not padded, odd rows are swizzled
constexpr int kQ4ScaleRow = kSW * kStageK / 64 * 4;  // Q4: a row's group words (u32 scale | bias) of a stage
constexpr int kStageBytes = 16 * kRowStride + (kQ4 ? 16 * kQ4ScaleRow : 0);  // 16 feature rows, one copy
constexpr int kMaxK = 12288;
static_assert(!kTma || (kSW == 1 && !kQ4 && kStageK % kBox == 0), "TMA: one slice a stage, bf16");
// Slots a multiple of the owners (see the producer); 8 x 16 KB measured best of kSW = 1 (run 192: larger
// copies beat more slots: 24 x 8 KB was 13% slower, 16 x 1 KB copies a stage 30%). kSW = 2: 4 x 32 KB (not
// yet run).
constexpr int kDefaultStages = kQ4              ? 5
                               : kSW == 8       ? 192 * 1024 / kStageBytes
                               : kSW == 2       ? 4
                               : kStageK >= 512 ? 8
                                                : 24;

// Position s of a tile's stages (in the order the producer sends them) -> the packed stage: owner s %
// kOwners, its part s / kOwners (parts: the pieces of a slice, k / 8 / kStageK).
__host__ __device__ inline int packed_stage(int s, int k) {
  const int parts = k / kSlices / kStageK;
  return (s % kOwners) * parts + s / kOwners;
}

// kXAttnMerge: the o op, whose x (a copy, as kXCopy) is the attention warps' output words.
enum XKind : int { kXCopy = 0, kXAddNorm = 1, kXSilu = 2, kXAttnMerge = 3 };
// The attention shape (Qwen3-8B): q heads, KV heads, head dim; K/V/Q staging rows padded as attention_mma's.
constexpr int kHq = 32, kHk = 8, kGroup = kHq / kHk, kD = 128, kRS = kD + 8;
constexpr int kAttnBytes = (2 * attn::kC + 16) * kRS * 2;  // Ks, Vs [128][kRS], Qs [16][kRS]
constexpr int kBlock = 16;                                 // positions a KV pool block holds (the engine's)

// Activations are 32-bit words: bf16 bits in the low half, the writing launch's tag in the high half (the
// "LL" protocol: in mode 8 a reader polls each word until its tag is the launch's, so a value carries its own
// readiness and no counter, fence or release is needed; in the other modes the tags are written, not read).
struct Op {
  const __nv_bfloat16* w;   // [n, k] row-major (linear_bf16's layout; the bit check)
  const __nv_bfloat16* wp;  // the same weights packed: pack_kernel
  int n, k, xkind, y_f32;
  const uint32_t*
      x;  // kXCopy: x; kXAddNorm: the value added to the residual (null: none); kXSilu: gate_up [2k]
  const uint32_t* res;      // kXAddNorm: residual in
  uint32_t* res_out;        // kXAddNorm: residual + x, written by the CTA of the op's tile 0
  const __nv_bfloat16* nw;  // kXAddNorm: norm weight
  void* y;                  // words, or f32 (y_f32: the logits)
  int x_const, res_const;   // inputs written before the launch (their tags are not checked)
  int silu_out;    // gate_up packed with 8 gate and their 8 up features a tile (--silu-out): the tile
                   // stores silu_mul(bf16(g), bf16(u)) for its 8 features, the down op's x
  int tile_begin;  // global index of the op's first unit (units are dealt round-robin to CTAs)
  int tiles;       // 16-feature tiles
  // Attention (kXAttnMerge: x is the qkv words the attention warps read): one layer's K/V pool [ctx][kHk][kD]
  // and q/k norm weights; partials of (q head, chunk): o [kHq][chunks][kD] and (max, sum) [kHq][chunks][2]; a
  // KV head's chunks counted in done[h] (release adds: epoch * chunks when the launch's are all in).
  __nv_bfloat16 *kp = nullptr, *vp = nullptr;
  const __nv_bfloat16 *qn = nullptr, *kn = nullptr;
  unsigned long long* part = nullptr;  // [kHq][chunks][kD + 2]: o, max, sum as tagged words
  const uint32_t* qkv = nullptr;  // the qkv words the attention reads (x is the attention's output words)
  uint32_t* aout = nullptr;       // the attention's output words [kHq * kD], written by the units holding pos
  const float* inv_freq = nullptr;  // rope
  float scale = 0.f;
  int pos = 0, chunks = 0;
  const int32_t* table = nullptr;    // the sequence's block table: position p's pool slot is
                                     // table[p / kBlock] * kBlock + p % kBlock (the engine's paged pool)
  const CUtensorMap* map = nullptr;  // TMA: w as a 2D tensor map, boxes of kBox columns x 16 rows
  int rot = 0;  // the op's unit i is tile (i + rot) % tiles (--kv-first: qkv's k/v tiles dealt first)
};

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t r;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(r) : "r"(addr));
  return r;
}
__device__ __forceinline__ uint32_t saddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Named barriers. bar.sync / bar.arrive are the .aligned forms: every lane of a warp must execute them
// converged, and a warp leaving a per-lane polling loop is not (the first version of this probe hung on
// exactly that). So: __syncwarp first, and the non-aligned forms.
__device__ __forceinline__ void nbar_sync(int id, int count) {
  __syncwarp();
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_consumers() {
  nbar_sync(1, kCWarps * 32);
}
__device__ __forceinline__ unsigned ld_acquire_u32(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Waits with a watchdog (~seconds): a hang prints who waited for what and traps instead of spinning forever.
__device__ void wait_bar(uint32_t bar, uint32_t parity, int what, int j, int op) {
  for (long long n = 0; !mbar_try_wait(bar, parity); ++n)
    if (n == (1ll << 22)) {
      printf("HANG block %d warp %d: %s stage %d op %d parity %u\n", blockIdx.x, threadIdx.x / 32,
             what ? "full" : "empty", j, op, parity);
      __trap();
    }
  __syncwarp();
}
__device__ void wait_count(const unsigned* p, unsigned target, int op) {
  for (long long n = 0; ld_acquire_u32(p) < target; ++n)
    if (n == (1ll << 26)) {
      printf("HANG block %d: op %d count %u < %u\n", blockIdx.x, op, ld_acquire_u32(p), target);
      __trap();
    }
}

// Run-time knobs of the experiments (mega_probe sets them): [0] ns a consumer's spin sleeps between polls,
// [1] ns an attention warp's poll round sleeps when words are missing, [2] attention polls eager (1) or spin
// on the first missing word (0). (Tried and removed, runs 219-225: the merger copying the other chunks'
// partials into the consumers' idle x buffer while it computes its own: they are not written yet then,
// +0.3-0.8%.)
__constant__ int c_knob[4] = {0, 0, 1, 0};  // [3]: the profiled run records cycle deltas (g_acyc), no stamps
// Profiling (c_knob[3]): sums of clock64 deltas of the attention unit's steps, per warp, [pos unit?][step],
// and the warp counts in [.][15]. Steps: 0 poll done -> tasks done, 1 -> K/V staged, 2 -> scores, 3 -> P V,
// 4 -> partial stored, 5 -> the merge's other partials in, 6 -> merged; 7: polling (start -> done).
__device__ unsigned long long g_acyc[2][16];

__device__ __forceinline__ uint32_t ldv(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __noinline__ void hang_word(const uint32_t* p, uint32_t w, uint32_t tag) {
  printf("HANG block %d thread %d: word %p tag %u, want %u\n", blockIdx.x, threadIdx.x, p, w >> 16, tag);
  __trap();
}
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ float word_f(uint32_t w) {
  return __uint_as_float(w << 16);
}
// 8 bf16 silu_mul values (activation.cuh: the engine's silu_mul) of 8 gate and 8 up words, packed in pairs.
__device__ __forceinline__ void silu_words(const uint32_t (&gw)[8], const uint32_t (&uw)[8],
                                           uint32_t (&r)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const __nv_bfloat16 lo = silu_mul_bf16(word_f(gw[2 * e]), word_f(uw[2 * e]));
    const __nv_bfloat16 hi = silu_mul_bf16(word_f(gw[2 * e + 1]), word_f(uw[2 * e + 1]));
    r[e] = uint32_t(*reinterpret_cast<const uint16_t*>(&lo)) |
           (uint32_t(*reinterpret_cast<const uint16_t*>(&hi)) << 16);
  }
}
__device__ __forceinline__ uint32_t word_of(float v, uint32_t tag) {
  const __nv_bfloat16 h = __float2bfloat16(v);
  return (tag << 16) | *reinterpret_cast<const uint16_t*>(&h);
}
// Polls words w[j] (at src(j)) until all carry `tag`: spins on the first word still without it (one load in
// flight a thread: every waiting thread of every CTA reloading all its words flooded the memory system, run
// 205: the attention's steps 4-6x slower), then reloads all the missing ones together (one round trip when
// they are all there, not one a word in turn).
template <int N, typename Src>
__device__ __forceinline__ void poll_words(uint32_t (&w)[N], Src src, uint32_t tag, bool eager = false) {
  for (long long n = 0;; ++n) {
    if (eager) {  // few threads (the attention warps): every missing word reloaded each round
      bool ready = true;
#pragma unroll
      for (int j = 0; j < N; ++j)
        if ((w[j] >> 16) != tag) ready = false, w[j] = ldv(src(j));
      if (ready) return;
      if (c_knob[1]) __nanosleep(c_knob[1]);
      if (n == (1ll << 24))  // unrolled: a run-time index would put w[] (and src's arrays) in local memory
#pragma unroll
        for (int j = 0; j < N; ++j)
          if ((w[j] >> 16) != tag) hang_word(src(j), w[j], tag);
      continue;
    }
    int first = -1;
#pragma unroll
    for (int j = N - 1; j >= 0; --j)
      if ((w[j] >> 16) != tag) first = j;
    if (first < 0) return;
    uint32_t v = ldv(src(first));
    for (; (v >> 16) != tag; ++n) {
      if (c_knob[0]) __nanosleep(c_knob[0]);
      v = ldv(src(first));
      if (n == (1ll << 24)) hang_word(src(first), v, tag);
    }
#pragma unroll
    for (int j = 0; j < N; ++j)
      if ((w[j] >> 16) != tag) w[j] = j == first ? v : ldv(src(j));
  }
}
// N words at p[i * stride], loaded together; with `poll`, until they all carry `tag` (poll_words).
template <int N>
__device__ __forceinline__ void load_words(uint32_t (&w)[N], const uint32_t* p, int stride, bool poll,
                                           uint32_t tag) {
#pragma unroll
  for (int j = 0; j < N; ++j) w[j] = ldv(p + j * stride);
  if (poll)
    poll_words(
        w, [&](int j) { return p + j * stride; }, tag);
}

// The op's x into shared memory (consumer warps only): after thread 0 has seen the previous op complete
// (counters), or polling each word (ll).
__device__ void make_x(const Op& o, __nv_bfloat16* xs, float* nred, bool writer, __nv_bfloat16* dbg, bool ll,
                       uint32_t tag, unsigned epoch) {
  const int tid = threadIdx.x;
  const int k = o.k;
  constexpr int kT = kCWarps * 32;
  if (!ll) bar_consumers();                           // counters: thread 0 saw the previous op complete
  if (o.xkind == kXCopy || o.xkind == kXAttnMerge) {  // k = 4096 or 12288: groups of 8, all loads in flight
    constexpr int kGMax = kMaxK / 8 / kT;
    const int ng = k / 8 / kT;
    uint32_t w[kGMax][8];
#pragma unroll
    for (int q = 0; q < kGMax; ++q)
      if (q < ng) load_words<8>(w[q], o.x + (tid + kT * q) * 8, 1, ll && !o.x_const, tag);
    bar_consumers();  // xs is free: every warp is past the previous op's MMAs
#pragma unroll
    for (int q = 0; q < kGMax; ++q) {
      if (q >= ng) break;
      uint32_t r[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) r[e] = (w[q][2 * e] & 0xffffu) | (w[q][2 * e + 1] << 16);
      *reinterpret_cast<uint4*>(xs + (tid + kT * q) * 8) = make_uint4(r[0], r[1], r[2], r[3]);
    }
  } else if (o.xkind == kXSilu) {  // k = 12288: groups of 8
    bar_consumers();
#pragma unroll 2
    for (int q = 0; q < k / (8 * kT); ++q) {
      const int i = (tid + kT * q) * 8;
      uint32_t gw[8], uw[8];
      load_words<8>(gw, o.x + i, 1, ll && !o.x_const, tag);
      load_words<8>(uw, o.x + k + i, 1, ll && !o.x_const, tag);
      uint32_t r[4];
      silu_words(gw, uw, r);
      *reinterpret_cast<uint4*>(xs + i) = make_uint4(r[0], r[1], r[2], r[3]);
    }
  } else {  // add + RMSNorm, k = 4096: kV elements a thread at i = tid + kT j
    constexpr int kV = 4096 / kT;
    float nwv[kV], v[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j) nwv[j] = __bfloat162float(o.nw[tid + kT * j]);  // constant: before any wait
    float ss = 0.f;
#pragma unroll
    for (int h = 0; h < kV; h += 8) {  // 8 at a time: fewer live registers
      uint32_t rw[8], xw[8];
      load_words<8>(rw, o.res + tid + kT * h, kT, ll && !o.res_const, tag);
      if (o.x) load_words<8>(xw, o.x + tid + kT * h, kT, ll && !o.x_const, tag);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        // add_rms_norm (norm.cuh): the new residual rounded to bf16 first; the norm sees what is stored. No x
        // (layer 0): rms_norm of the residual as it is (adding zeros would turn -0.0 into +0.0).
        v[h + j] =
            o.x ? __bfloat162float(__float2bfloat16(__fadd_rn(word_f(rw[j]), word_f(xw[j])))) : word_f(rw[j]);
        if (writer) o.res_out[tid + kT * (h + j)] = word_of(v[h + j], tag);
        ss = __fmaf_rn(v[h + j], v[h + j], ss);
      }
    }
#pragma unroll
    for (int s = 16; s > 0; s /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, s);
    bar_consumers();  // xs and nred are free
    if (tid % 32 == 0) nred[tid / 32] = ss;
    bar_consumers();
    float tot = nred[0];  // row_sum<256>'s order
#pragma unroll
    for (int q = 1; q < kCWarps; ++q) tot += nred[q];
    const float inv = norm_inv(tot, k, 1e-6f);
#pragma unroll
    for (int j = 0; j < kV; ++j)
      xs[tid + kT * j] = __float2bfloat16(norm_out(v[j], inv, __fadd_rn(nwv[j], 0.f)));
  }
  bar_consumers();
  if (writer && dbg)
    for (int i = tid; i < k; i += kT) dbg[i] = xs[i];
}

// Position p's slot in a paged K/V pool (attention_mma.cu's Tile::slot_of for a power-of-two block).
__device__ __forceinline__ int kv_slot(const int32_t* table, int p) {
  return table[p / kBlock] * kBlock + p % kBlock;
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// RMS norm + NeoX rope of one head held by a warp (element lane + 32 j): elementwise.cu's
// qk_norm_rope_kv_kernel<4> arithmetic (rotary_dim = head_dim, factor 1), values rounded to bf16 as it does.
// rsin / rcos: sincosf(pos * inv_freq[i]) (times the attention factor 1), made before the unit's poll
// (run 222: computed after it, inside the chain, the tasks took 1.4-2.6 us).
__device__ __forceinline__ void norm_rope_head(float (&v)[4], const __nv_bfloat16* w, const float* rsin,
                                               const float* rcos, int lane) {
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) ss = __fmaf_rn(v[j], v[j], ss);
  const float inv = norm_inv(row_sum<32>(ss, nullptr), kD, 1e-6f);
#pragma unroll
  for (int j = 0; j < 4; ++j)
    v[j] = __bfloat162float(
        __float2bfloat16_rn(norm_out(v[j], inv, __fadd_rn(__bfloat162float(w[lane + 32 * j]), 0.f))));
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float sn = rsin[lane + 32 * j], cs = rcos[lane + 32 * j];
    const float a = __fsub_rn(__fmul_rn(v[j], cs), __fmul_rn(v[j + 2], sn));
    const float b = __fadd_rn(__fmul_rn(v[j + 2], cs), __fmul_rn(v[j], sn));
    v[j] = __bfloat162float(__float2bfloat16_rn(a));
    v[j + 2] = __bfloat162float(__float2bfloat16_rn(b));
  }
}

// One attention unit at M = 1, by the CTA's kAWarps attention warps (their own shared memory: the consumers
// go on with the ring meanwhile): KV head h, chunk c of the row at position o.pos. Tasks q head 0-3 (q/k norm
// + rope from the qkv words, polled) and the new token's k and v (the chunk holding pos: into shared memory
// and the pool) go round the warps; all stage the chunk's older K/V rows. Then the warps compute the chunk
// partial of the group's 4 heads with attention_mma's chunk arithmetic (the other 12 MMA rows are padding: a
// pair's bits depend only on its own row) and publish it as tagged words; the unit holding pos merges.
//
// Latency: under the weight stream every dependent global access costs a round trip of ~2 us (run 217: the
// unit's Op fields, norm weights and rope table read after the poll, and the merge's arrays in local memory
// -- 29 KB of L1 beside 227 KB of shared memory -- made the step after qkv ~18 us). So everything the chain
// needs after the poll is fetched into shared memory (AttnParams) before it, and the merge brings the other
// chunks' partials into shared memory with cp.async (no register arrays, no stack).
__device__ __forceinline__ void abar() {
  nbar_sync(2, kAWarps * 32);
}
// chunk_scores (attention_chunk.cuh) for decode's 4 real rows, its MMAs split over the attention warps by
// key n-tile pairs [JB, JE): the same bits. Each score's MMA chain is its own; the row max is exact whatever
// the order (each warp's quad max, then the 3 in shared memory); each P value is elementwise; the row sum is
// added in chunk_scores' order (n-tiles 0..15, then the quad shuffles) by every warp from all warps' P values
// in shared memory (Pf: [16][32 lanes][2] floats in the Qs region, free once every warp's MMAs are done).
// Leaves in s what chunk_pv needs (row g's P, zeros for the padding rows g + 8), and mc / lc of row g.
template <int JB, int JE>
__device__ __forceinline__ void split_scores(const __nv_bfloat16* Qs, const __nv_bfloat16* Ks, float* Pf,
                                             float* pmax, int aw, int lane, int c0, int pos, float scale,
                                             float (*s)[4], float& mc, float& lc) {
  const int qd = lane % 4, mi = lane / 8, li = lane % 8, g = lane / 4;
#pragma unroll
  for (int j = 2 * JB; j < 2 * JE; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int t = 0; t < kD / 16; ++t) {
    uint32_t a[4];
    attn::ldsm_x4(a, Qs + ((mi % 2) * 8 + li) * kRS + t * 16 + (mi / 2) * 8);
#pragma unroll
    for (int jj = JB; jj < JE; ++jj) {
      uint32_t b[4];
      attn::ldsm_x4(b, Ks + (jj * 16 + (mi / 2) * 8 + li) * kRS + t * 16 + (mi % 2) * 8);
      attn::mma(s[2 * jj], a, b[0], b[1]);
      attn::mma(s[2 * jj + 1], a, b[2], b[3]);
    }
  }
  const bool pad = g >= kGroup;  // rows 4-7 (and all rows g + 8): padding pairs
  float mx = -INFINITY;
  if (!pad) {
#pragma unroll
    for (int j = 2 * JB; j < 2 * JE; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int p = c0 + j * 8 + qd * 2 + e;
        float v = __fmul_rn(s[j][e], scale);
        v = (p >= 0 && p <= pos) ? v : -INFINITY;
        s[j][e] = v;
        mx = fmaxf(mx, v);
      }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if (qd == 0) pmax[aw * 8 + g] = mx;
  abar();  // every warp's MMAs (Qs is free) and quad maxima
  mx = fmaxf(fmaxf(pmax[g], pmax[8 + g]), pmax[16 + g]);
  mc = mx;
  const float base = mx == -INFINITY ? 0.f : mx;
  if (!pad) {
#pragma unroll
    for (int j = 2 * JB; j < 2 * JE; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        Pf[(j * 32 + lane) * 2 + e] = __bfloat162float(__float2bfloat16_rn(__expf(__fsub_rn(s[j][e], base))));
  }
  abar();  // every warp's P values
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 pv =
        pad ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(Pf + (j * 32 + lane) * 2);
    s[j][0] = pv.x, s[j][1] = pv.y, s[j][2] = 0.f, s[j][3] = 0.f;
    if (!pad) sum = __fadd_rn(__fadd_rn(sum, pv.x), pv.y);
  }
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
  lc = sum;
}

struct AttnParams {
  __nv_bfloat16 qn[kD], kn[kD];      // q / k norm weights
  float rsin[kD / 2], rcos[kD / 2];  // the rope of position pos (norm_rope_head)
  unsigned long long* part;          // the op's partials
  uint32_t* aout;                    // the op's output words
  __nv_bfloat16 *kdst, *vdst;        // the new row's K / V in the pool (head h)
  float scale;
  int chunks;
  float pmax[kAWarps * 8];  // split_scores' quad maxima
};
constexpr int kAttnParamBytes = (int(sizeof(AttnParams)) + 127) / 128 * 128;
constexpr int kAttnRegion = kAttnBytes + kAttnParamBytes;  // Ks, Vs, Qs, then the params
constexpr int kRec = kD + 2;                               // a partial's 64-bit words: o [kD], max, sum
constexpr int kMergeChunks = 12;
constexpr int kAttnStamps = 24;  // the profiled run's timeline slots an attention op (atl, below)  // other
                                 // chunks' partials a merge round brings in (4 x 12 x 1040 B)
// atl (profiling, else null): globaltimer maxima of this op's units: [0] q/k/v words in, [1] K/V staged, [2]
// partial stored, [4] merged words stored (the units holding pos); the units holding pos: [3] polling
// starts, [8 + w] attention warp w's words in, [11] the merge's first round of other chunks' words in; [6]
// the q-only units' words in ([5], [7]: qkv's q and k/v tiles' last stores, by the consumers).
__device__ TF_MEGA_ATTN_FN void attention_unit(const Op& o, int unit, __nv_bfloat16* Ks, uint32_t tag,
                                               unsigned long long* atl) {  // atl: not const (cycle mode)
  const int at = threadIdx.x - (kProducer + 1) * 32, aw = at / 32, lane = at % 32;
  constexpr int kT = kAWarps * 32;
  const int h = unit % kHk, c = unit / kHk, c0 = c * attn::kC, pos = o.pos;
  const bool cy = atl && c_knob[3];  // cycle deltas instead of the globaltimer stamps
  if (cy) atl = nullptr;
  long long cyc[9];
  __nv_bfloat16* Vs = Ks + attn::kC * kRS;
  __nv_bfloat16* Qs = Vs + attn::kC * kRS;
  AttnParams* P = reinterpret_cast<AttnParams*>(reinterpret_cast<unsigned char*>(Ks) + kAttnBytes);
  const bool kv_here = pos / attn::kC == c;
  abar();  // the unit before is done with the region (its MMAs, its merge)
  for (int i = at; i < attn::kC * (kD / 8); i += kT) {  // 16-byte units: row i / 16, column (i % 16) * 8
    const int row = i / (kD / 8), col = (i % (kD / 8)) * 8, p = c0 + row;
    if (p == pos) continue;  // the new row: its task writes it
    const int64_t off = (int64_t(kv_slot(o.table, p)) * kHk + h) * kD + col;
    cp_async16(saddr(Ks + row * kRS + col), p < pos ? o.kp + off : o.kp, p < pos);
    cp_async16(saddr(Vs + row * kRS + col), p < pos ? o.vp + off : o.vp, p < pos);
  }
  asm volatile("cp.async.commit_group;");
  for (int i = at; i < 12 * (kRS / 8); i += kT)  // Q rows 4-15: padding pairs, zeros
    *reinterpret_cast<uint4*>(Qs + (kGroup + i / (kRS / 8)) * kRS + (i % (kRS / 8)) * 8) =
        make_uint4(0, 0, 0, 0);
  for (int i = at; i < kD; i += kT) {
    P->qn[i] = o.qn[i], P->kn[i] = o.kn[i];
    if (i < kD / 2) {  // elementwise.cu's qk_norm_rope_kv: sincosf(pos * inv_freq), times the factor 1
      float sn, cs;
      sincosf(float(pos) * o.inv_freq[i], &sn, &cs);
      P->rsin[i] = sn * 1.f, P->rcos[i] = cs * 1.f;
    }
  }
  if (at == 0) {
    P->part = o.part, P->aout = o.aout, P->scale = o.scale, P->chunks = o.chunks;
    const int64_t dst = (int64_t(kv_slot(o.table, pos)) * kHk + h) * kD;
    P->kdst = o.kp + dst, P->vdst = o.vp + dst;
  }
  // Tasks: warps 0 and 1 q heads 2 aw and 2 aw + 1 of the group, warp 2 (the chunk holding pos) the new
  // token's k and v (qkv's k/v tiles are dealt last: the k/v warp's wait is the unit's, its work alone after
  // it). A warp's words are loaded and polled together (one round trip a round), then normed.
  static_assert(kAWarps == 3 && kGroup == 4, "the task split below");
  constexpr int kTasks = 2;
  constexpr int kW = 4 * (kTasks + 1);  // + v's words (the k/v task)
  bool live[kTasks + 1];
#pragma unroll
  for (int i = 0; i < kTasks; ++i) live[i] = aw < 2 || (i == 0 && kv_here);
  live[kTasks] = aw == 2 && kv_here;  // v's words
  // The words' sources as scalars (the non-eager poll picks one by a run-time index: an array would live in
  // local memory): task 0 / 1 (q heads 2 aw, 2 aw + 1; warp 2: k), then v.
  const uint32_t* s0 = aw < 2 ? o.qkv + (h * kGroup + 2 * aw) * kD + lane : o.qkv + kHq * kD + h * kD + lane;
  const uint32_t* s1 = o.qkv + (h * kGroup + 2 * aw + 1) * kD + lane;  // live only for aw < 2
  const uint32_t* s2 = o.qkv + (kHq + kHk) * kD + h * kD + lane;
  auto src = [&](int q) { return (q < 4 ? s0 : q < 8 ? s1 : s2) + 32 * (q % 4); };
  abar();  // the params are in
  uint32_t w[kW];
  if (atl && lane == 0 && kv_here) atomicMax(atl + 3, gtime());
  if (cy) cyc[8] = clock64();
#pragma unroll
  for (int q = 0; q < kW; ++q) w[q] = live[q / 4] ? ldv(src(q)) : (tag << 16);
  poll_words(w, src, tag, c_knob[2] != 0);
  __syncwarp();  // every lane's words are in (the stamp: the warp's, not lane 0's)
  if (atl && lane == 0) atomicMax(atl + (kv_here ? 8 + aw : 6), gtime());
  if (cy) cyc[0] = clock64();
#pragma unroll
  for (int i = 0; i < kTasks; ++i) {
    const int task = aw < 2 ? 2 * aw + i : kGroup;
    if (!live[i]) continue;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = word_f(w[4 * i + j]);
    if (task < kGroup) {  // q head `task` of the group
      norm_rope_head(v, P->qn, P->rsin, P->rcos, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) Qs[task * kRS + lane + 32 * j] = __float2bfloat16_rn(v[j]);
    } else {  // the new token's k (normed, rotated) and v: shared memory and the pool
      norm_rope_head(v, P->kn, P->rsin, P->rcos, lane);
      const int row = pos - c0;
      __nv_bfloat16 *kd = P->kdst, *vd = P->vdst;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __nv_bfloat16 kb = __float2bfloat16_rn(v[j]);
        __nv_bfloat16 vb;
        *reinterpret_cast<uint16_t*>(&vb) = uint16_t(w[4 * kTasks + j] & 0xffffu);
        Ks[row * kRS + lane + 32 * j] = kb, Vs[row * kRS + lane + 32 * j] = vb;
        kd[lane + 32 * j] = kb, vd[lane + 32 * j] = vb;
      }
    }
  }
  if (atl && lane == 0) {
    atomicMax(atl, gtime());
    atomicMax(atl + (kv_here ? 13 : 18), gtime());
  }
  if (cy) cyc[1] = clock64();
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  if (atl && lane == 0) atomicMax(atl + 1, gtime());
  if (cy) cyc[2] = clock64();
  abar();
  const int chunks = P->chunks;
  unsigned long long* part = P->part;
  const int nc = pos / attn::kC + 1, own = nc - 1;
  constexpr int kU = kRec * 8 / 16;  // 16-byte units of a partial's record (65)
  {
    // The chunk's scores (split_scores: each warp a third of the keys; else chunk_scores, the same bits in
    // every warp), then each warp's share of P V's output columns (chunk_pv<D, J0, J1>: column pairs [J0,
    // J1); each element's chain is its own), then the partial.
    const int g = lane / 4, qd = lane % 4;
    float sc[16][4], mc[2], lc[2], oc[kD / 8][4];
#if TF_MEGA_SPLIT_SCORES
    float* Pf = reinterpret_cast<float*>(Qs);
    if (aw == 0)
      split_scores<0, 3>(Qs, Ks, Pf, P->pmax, aw, lane, c0, pos, P->scale, sc, mc[0], lc[0]);
    else if (aw == 1)
      split_scores<3, 6>(Qs, Ks, Pf, P->pmax, aw, lane, c0, pos, P->scale, sc, mc[0], lc[0]);
    else
      split_scores<6, 8>(Qs, Ks, Pf, P->pmax, aw, lane, c0, pos, P->scale, sc, mc[0], lc[0]);
#else
    // Row g's range (padding: lo > pos), row g + 8 padding. (Written out: an initializer list of conditional
    // Range temporaries here crashes nvcc 13.0's cicc.)
    attn::Range rg[2];
    rg[0].lo = g < kGroup ? 0 : 1, rg[0].pos = g < kGroup ? pos : 0, rg[1].lo = 1, rg[1].pos = 0;
    attn::chunk_scores<kD>(Qs, Ks, 0, lane, c0, rg, P->scale, 0.f, sc, mc, lc);
#endif
    if (atl && lane == 0) atomicMax(atl + (kv_here ? 14 : 19), gtime());
    if (cy) cyc[3] = clock64();
    static_assert(kAWarps == 3 && kD == 128, "the column split below");
    const int j0 = aw == 0 ? 0 : aw == 1 ? 3 : 6, j1 = aw == 0 ? 3 : aw == 1 ? 6 : 8;
    if (aw == 0)
      attn::chunk_pv<kD, 0, 3>(Vs, lane, sc, oc);
    else if (aw == 1)
      attn::chunk_pv<kD, 3, 6>(Vs, lane, sc, oc);
    else
      attn::chunk_pv<kD, 6, 8>(Vs, lane, sc, oc);
    if (atl && lane == 0) atomicMax(atl + (kv_here ? 15 : 20), gtime());
    if (cy) cyc[4] = clock64();
    // The partial as tagged 64-bit words (value | tag << 32: "LL", no fence): o [kD], then max and sum. The
    // unit holding pos (the merger) keeps its own in shared memory instead (Ks: every warp is past
    // chunk_scores after the barrier), [kGroup][kRec] floats.
    if (kv_here) {
      abar();
      float* pown = reinterpret_cast<float*>(Ks);
      if (g < kGroup) {
#pragma unroll
        for (int j = 0; j < kD / 8; ++j)
          if (j >= 2 * j0 && j < 2 * j1)
            pown[g * kRec + j * 8 + qd * 2] = oc[j][0], pown[g * kRec + j * 8 + qd * 2 + 1] = oc[j][1];
        if (aw == 0 && qd == 0) pown[g * kRec + kD] = mc[0], pown[g * kRec + kD + 1] = lc[0];
      }
    } else if (g < kGroup) {
      unsigned long long* dst = part + (int64_t(h * kGroup + g) * chunks + c) * kRec;
      const unsigned long long tg = uint64_t(tag) << 32;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j)
        if (j >= 2 * j0 && j < 2 * j1) {
          dst[j * 8 + qd * 2] = tg | __float_as_uint(oc[j][0]);
          dst[j * 8 + qd * 2 + 1] = tg | __float_as_uint(oc[j][1]);
        }
      if (aw == 0 && qd == 0)
        dst[kD] = tg | __float_as_uint(mc[0]), dst[kD + 1] = tg | __float_as_uint(lc[0]);
    }
  }
  if (atl && lane == 0) {
    atomicMax(atl + 2, gtime());
    if (!kv_here) atomicMax(atl + 12, gtime());
  }
  if (cy) {
    cyc[5] = clock64();
    if (!kv_here && lane == 0) {
      for (int i = 0; i < 5; ++i) atomicAdd(&g_acyc[0][i], (unsigned long long)(cyc[i + 1] - cyc[i]));
      atomicAdd(&g_acyc[0][7], (unsigned long long)(cyc[0] - cyc[8]));
      atomicAdd(&g_acyc[0][15], 1ull);
    }
  }
  if (!kv_here) return;
  // The merge (combine_pair_u's order: chunks in increasing order from (-inf, 0, 0), then bf16(o / l)), item
  // = 8 dims of one of the group's heads (64 items, one round). The other chunks' partials come into shared
  // memory by cp.async, kMergeChunks at a time (after the own partial: Ks + kGroup * kRec floats, rounded to
  // 16 bytes); words without the launch's tag (not yet written) are polled there before the merge reads them.
  abar();  // pown is complete
  const float* pown = reinterpret_cast<const float*>(Ks);
  unsigned long long* mb = reinterpret_cast<unsigned long long*>(Ks) + (kGroup * kRec + 3) / 4 * 2;
  const bool item = at < kGroup * (kD / 8);
  const int gi = at / (kD / 8), d0 = (at % (kD / 8)) * 8;
  float m = -INFINITY, l = 0.f, ov[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (cy && own == 0) cyc[6] = clock64();
  for (int cb = 0; cb < own; cb += kMergeChunks) {
    const int nb = min(kMergeChunks, own - cb);  // chunks cb .. cb + nb - 1 of the group's 4 heads
    for (int i = at; i < kGroup * nb * kU; i += kT) {
      const int r = i / kU, u = i % kU, hg = r / nb, cc = cb + r % nb;
      cp_async16(saddr(mb + r * kRec + u * 2), part + (int64_t(h * kGroup + hg) * chunks + cc) * kRec + u * 2,
                 true);
    }
    asm volatile("cp.async.commit_group;");
    // Each thread checks the units it copied (its own copies: no barrier needed) and copies the ones with a
    // word not yet written again, all of them a round (one round trip a round, not one a word: polling the
    // words one by one cost ~10 us a layer, run 219). (Folding the first copy into this loop brought spills
    // back into the chain: stack 96 -> 144 B.)
    for (long long n = 0;; ++n) {
      asm volatile("cp.async.wait_group 0;" ::: "memory");
      bool again = false;
      for (int i = at; i < kGroup * nb * kU; i += kT) {
        const int r = i / kU, u = i % kU, hg = r / nb, cc = cb + r % nb;
        const unsigned long long* w2 = mb + r * kRec + u * 2;
        if (uint32_t(w2[0] >> 32) == tag && uint32_t(w2[1] >> 32) == tag) continue;
        again = true;
        cp_async16(saddr(w2), part + (int64_t(h * kGroup + hg) * chunks + cc) * kRec + u * 2, true);
      }
      if (!again) break;
      asm volatile("cp.async.commit_group;");
      if (c_knob[1]) __nanosleep(c_knob[1]);
      if (n == (1ll << 22)) hang_word(reinterpret_cast<const uint32_t*>(part), 0, tag);
    }
    abar();  // every thread's units are complete
    if (atl && lane == 0 && cb == 0) atomicMax(atl + 11, gtime());
    if (cy && cb == 0) cyc[6] = clock64();
    if (item)
      for (int q = 0; q < nb; ++q) {
        const unsigned long long* rec = mb + (gi * nb + q) * kRec;
        const attn::MergeFactors f = attn::merge_chunk(m, l, __uint_as_float(uint32_t(rec[kD])),
                                                       __uint_as_float(uint32_t(rec[kD + 1])));
#pragma unroll
        for (int i = 0; i < 8; ++i) ov[i] = attn::merge_out(ov[i], __uint_as_float(uint32_t(rec[d0 + i])), f);
      }
    abar();  // mb is free for the next round
  }
  if (item) {
    const attn::MergeFactors f = attn::merge_chunk(m, l, pown[gi * kRec + kD], pown[gi * kRec + kD + 1]);
#pragma unroll
    for (int i = 0; i < 8; ++i) ov[i] = attn::merge_out(ov[i], pown[gi * kRec + d0 + i], f);
    uint32_t* dst = P->aout + (h * kGroup + gi) * kD + d0;
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = word_of(attn::finish_out(ov[i], l), tag);
  }
  if (atl && lane == 0) atomicMax(atl + 4, gtime());
  if (cy && lane == 0) {
    cyc[7] = clock64();
    for (int i = 0; i < 5; ++i) atomicAdd(&g_acyc[1][i], (unsigned long long)(cyc[i + 1] - cyc[i]));
    atomicAdd(&g_acyc[1][5], (unsigned long long)(cyc[6] - cyc[5]));
    atomicAdd(&g_acyc[1][6], (unsigned long long)(cyc[7] - cyc[6]));
    atomicAdd(&g_acyc[1][7], (unsigned long long)(cyc[0] - cyc[8]));
    atomicAdd(&g_acyc[1][15], 1ull);
  }
}

__global__ void bump_epoch(unsigned* w) {
  ++*w;
}

// clock64() where profiling (kProf), else 0: the timed kernel keeps no cycle counters in registers.
template <bool kProf>
__device__ __forceinline__ long long clk() {
  if constexpr (kProf) return clock64();
  return 0;
}

template <bool kProf>
__global__ void __launch_bounds__(kThreads, 1)
    mega_kernel(const Op* __restrict__ ops, int nops, unsigned* cnt, unsigned epoch_arg,
                const unsigned* epoch_word, int stages_n, int xregion, __nv_bfloat16* dbg, int mode,
                long long* prof, unsigned long long* tl) {
  // The launch's epoch (its tag): the argument, or -- a launch replayed from a CUDA graph, whose arguments
  // are fixed -- the device word that a kernel before it (bump_epoch) increments.
  const unsigned epoch = epoch_word ? *epoch_word : epoch_arg;
  // tl (optional), per op, globaltimer ns: [0] the last tile stored, [1] the earliest time a CTA stored its
  // last tile of the op, [2] / [3] the first / last CTA to have its x for the op.
  // mode bit 0: a CTA's share of an op is released with one red.release.gpu add (else __threadfence +
  // atomicAdd); bit 1: no fence.proxy.async before a consumer frees a slot; bit 2: a stage as 16 bulk copies,
  // one a row (else one copy); bit 3: readers poll the activations' tags (no counters, no releases); bit 5:
  // every layer's attention units on the same CTAs (-0.9% against rotating them, run 230; the default 41).
  // (Tried and removed, docs/cuda-notes.md "Session 15": an L2 prefetch ahead of the ring, commit 7de05a1,
  // and per-warp-slice x, cf5b417.) prof (optional): per CTA, clock cycles: [0] producer waiting for free
  // slots, [1] consumers waiting for data (all warps), [2] consumers computing, [3] epilogues, [4] dependency
  // waits, [5] making x, [6] waits at the tile barrier (all warps), [7] warp 0 from start to end.
  long long pc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const long long t_start = clk<kProf>();
  const bool ll = mode & 8;
  const uint32_t tag = epoch & 0xffffu;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem + stages_n * kStageBytes);
  // xs: the op's x; then the attention warps' K, V, Q staging (xregion bytes: 0 without attention)
  __nv_bfloat16* attn_smem = xregion ? xs + kMaxK : nullptr;
  float* red =
      reinterpret_cast<float*>(smem + stages_n * kStageBytes + kMaxK * 2 + xregion);  // [kRed][8][16]
  float* nred = red + kRed * kSlices * 16;                                            // [8]
  uint64_t* full = reinterpret_cast<uint64_t*>(nred + 8);
  uint64_t* empty = full + stages_n;
  uint64_t* mfull = empty + stages_n;                    // the slot's meta is written (before its bytes land)
  int* meta = reinterpret_cast<int*>(mfull + stages_n);  // [stages_n][2]: the slot's (op, unit)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages_n; ++i)
      mbar_init(saddr(full + i), 1), mbar_init(saddr(empty + i), kSW), mbar_init(saddr(mfull + i), 1);
    mbar_init_fence();
  }
  __syncthreads();
  const int G = gridDim.x, b = blockIdx.x;

  if (warp > kProducer) {  // attention warps: the (KV head, chunk) units of every layer dealt to this CTA
    if (!attn_smem) return;
    for (int op = 0, u0 = 0; op < nops; ++op) {
      if (ops[op].xkind != kXAttnMerge) continue;
      const int units = kHk * ops[op].chunks;
      for (int u = (b - u0 % G + G) % G; u < units; u += G)
        attention_unit(ops[op], u, attn_smem, tag, kProf && tl ? tl + 4 * nops + kAttnStamps * op : nullptr);
      if (!(mode & 32)) u0 += units;  // mode bit 5: every layer's units on the same CTAs (0, 1, ...)
    }
    return;
  }
  if (warp == kProducer) {  // producer: this CTA's tiles, stage by stage, as far ahead as the ring allows
    // Which units: global unit i = b, b + G, ... (round-robin over the CTAs, op after op). Each slot carries
    // (op, unit) for its consumers, published on mfull before the bytes land; an attention unit has no
    // bytes: one meta-only stage an owner. After the last op, one sentinel stage an owner (op = nops).
    // (Tried and removed, docs/cuda-notes.md "Session 16": dynamic dealing from per-op counters, and
    // K-split down units passing the slices' accumulators on: commit f0ee631.)
    int j = 0, op = 0;
    for (int i = b;; i += G) {
      while (op < nops && i >= ops[op].tile_begin + ops[op].tiles) ++op;
      if (op == nops) break;
      const int tile = (i - ops[op].tile_begin + ops[op].rot) % ops[op].tiles;
      const __nv_bfloat16* w = ops[op].wp;
      const int k = ops[op].k, n0 = tile * 16;
      const int stages = k / kStageK / kSW;
      for (int s = 0; s < stages; ++s, ++j) {
        // Stage s of a tile belongs to owner s % kOwners (warps kSW*o .. : their pieces of K in order), and
        // the ring's slots are a multiple of kOwners: slot j % stages_n is only ever used by owner j %
        // kOwners, so each warp waits on every phase of its own slots in order. (A warp waiting on a slot
        // that other warps also use may find it two phases behind -- bulk copies complete out of order --
        // and an mbarrier parity wait cannot tell that apart: the first version of this probe hung on that.)
        const int ks = packed_stage(s, k);
        const int slot = j % stages_n;
        const long long t0 = clk<kProf>();
        if (j >= stages_n) wait_bar(saddr(empty + slot), ((j / stages_n) & 1) ^ 1, 0, j, op);
        pc[0] += clk<kProf>() - t0;
        if (lane == 0) {
          meta[2 * slot] = op, meta[2 * slot + 1] = tile;  // released by the arrive on mfull
          mbar_arrive(saddr(mfull + slot));
          mbar_arrive_expect_tx(saddr(full + slot), kStageBytes);
        }
        __syncwarp();
        const __nv_bfloat16* src = w + (int64_t(n0 / 16) * stages + ks) * (kStageBytes / 2);
        if constexpr (kTma) {  // piece (slice s % 8, part s / 8) of rows n0..n0+15: kStageK / kBox boxes
          const int k0 = (s % kOwners) * (k / kSlices) + (s / kOwners) * kStageK;
          if (!ops[op].silu_out) {
            if (lane < kStageK / kBox)
              tma_load_2d(saddr(ring + slot * kStageBytes + lane * kBox * 32), ops[op].map, k0 + lane * kBox,
                          n0, saddr(full + slot));
          } else if (lane <
                     2 * kStageK / kBox) {  // 8-row boxes: gate rows n0/2.. as rows 0-7, up rows as 8-15
            const int bx = lane / 2, up = lane % 2;
            tma_load_2d(saddr(ring + slot * kStageBytes + bx * kBox * 32 + up * kBox * 16), ops[op].map,
                        k0 + bx * kBox, (up ? ops[op].n / 2 : 0) + n0 / 2, saddr(full + slot));
          }
        } else if ((mode & 4) && !kQ4) {  // the packed stage as 16 copies, one a row (the copy count's cost)
          if (lane < 16)
            bulk_copy_g2s(saddr(ring + slot * kStageBytes + lane * kRowBytes), src + lane * (kRowBytes / 2),
                          kRowBytes, saddr(full + slot));
        } else if (lane == 0) {
          bulk_copy_g2s(saddr(ring + slot * kStageBytes), src, kStageBytes, saddr(full + slot));
        }
      }
    }
    for (int s = 0; s < kOwners; ++s, ++j) {  // the sentinel: one stage an owner, no bytes
      const int slot = j % stages_n;
      if (j >= stages_n) wait_bar(saddr(empty + slot), ((j / stages_n) & 1) ^ 1, 0, j, nops);
      if (lane == 0) meta[2 * slot] = nops, meta[2 * slot + 1] = 0, mbar_arrive(saddr(mfull + slot));
      __syncwarp();
    }
    if (kProf && prof && lane == 0) atomicAdd(reinterpret_cast<unsigned long long*>(prof + 8 * b), pc[0]);
    return;
  }

  // consumers: the tiles the producer chose, in its order; (op, tile) from the first slot of each tile this
  // warp owns (every warp sees the same sequence).
  const int g = lane / 4, t = lane % 4;
  const int owner = warp / kSW, half = warp % kSW;
  int j = 0, x_op = -1, tcount = 0, done = 0, prev_op = -1;
  unsigned long long last_store = 0;
  for (;;) {
    int op, tile;
    {
      const int jj = j + owner, slot = jj % stages_n;
      const long long t0 = clk<kProf>();
      wait_bar(saddr(mfull + slot), (jj / stages_n) & 1, 1, jj, -1);
      pc[1] += clk<kProf>() - t0;
      op = meta[2 * slot], tile = meta[2 * slot + 1];
    }
    if (kProf && tl && warp == 0 && lane == 0 && op != prev_op && prev_op >= 0)
      atomicMin(tl + 4 * prev_op + 1, last_store);  // this CTA's last tile of prev_op was stored then
    prev_op = op;
    if (op >= nops) break;
    const Op& o = ops[op];
    const int n0 = tile * 16, k = o.k;
    const bool last_of_op =
        tile + G >= o.tiles;  // counters: a CTA releases its tiles of an op after its last
    if (op != x_op) {
      const long long t0 = clk<kProf>();
      if (!ll && threadIdx.x == 0 && op > 0) {
        const unsigned target = epoch * unsigned(ops[op - 1].tiles);
        wait_count(cnt + op - 1, target, op);
      }
      const long long t1 = clk<kProf>();
      make_x(o, xs, nred, tile == 0, dbg ? dbg + int64_t(op) * kMaxK : nullptr, ll, tag, epoch);
      if (kProf && tl && threadIdx.x == 0) {
        const unsigned long long now = gtime();
        atomicMin(tl + 4 * op + 2, now), atomicMax(tl + 4 * op + 3, now);
      }
      pc[4] += t1 - t0, pc[5] += clk<kProf>() - t1;
      x_op = op;
    }
    const int stages = k / kStageK / kSW, spw = k / kSlices / kStageK;  // spw: parts of a slice
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const uint32_t xbase = saddr(xs) + 16 * t;
    for (int part = 0; part < spw; ++part) {  // this warp's K slice, in order
      const int jj = j + part * kOwners + owner, slot = jj % stages_n;
      const long long t0 = clk<kProf>();
      wait_bar(saddr(full + slot), (jj / stages_n) & 1, 1, jj, op);
      const long long t1 = clk<kProf>();
      pc[1] += t1 - t0;
      const uint32_t base = saddr(ring + slot * kStageBytes) + half * (kStageK * 2) + 16 * t;
      const uint32_t swz = (g & 1) * 64;  // pack_kernel: odd rows hold chunk c at chunk c ^ 1's place
      const uint32_t xb = xbase + (warp * spw + part) * kStageK * 2;
      if constexpr (kQ4) {
        // Rows g and g + 8: lane t's words of 4 chunks are 16 bytes (quant_common.cuh word_of), quads of odd
        // rows swapped (pack_q4_kernel); group words rotated by the row (bank-conflict free). The bits:
        // dequant's bf16 weights through linear.cu's chunk chain, as linear_quantized.
        const uint32_t sb = saddr(ring + slot * kStageBytes);
        const uint32_t wa = sb + g * kRowBytes + warp * (kStageK / 2) + 16 * t, wb = wa + 8 * kRowBytes;
        const uint32_t sa = sb + 16 * kRowBytes + g * kQ4ScaleRow, sb8 = sa + 8 * kQ4ScaleRow;
#pragma unroll
        for (int qd = 0; qd < kStageK / 128; ++qd) {
          const uint4 a4 = lds128(wa + ((qd * 64) ^ swz)), b4 = lds128(wb + ((qd * 64) ^ swz));
          const uint32_t av[4] = {a4.x, a4.y, a4.z, a4.w}, bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = qd * 4 + e, wi = warp * (kStageK / 64) + c / 2;
            const uint32_t s_a = lds32(sa + ((wi + g) & 63) * 4), s_b = lds32(sb8 + ((wi + g + 8) & 63) * 4);
            const uint4 a = dequant<kMlxBf16Sub, 4>(Raw{av[e], 0, s_a, 0});
            const uint4 bb = dequant<kMlxBf16Sub, 4>(Raw{bv[e], 0, s_b, 0});
            const uint4 xv = g == 0 ? lds128(xb + c * 64) : make_uint4(0, 0, 0, 0);
            mma_chunk(acc, a, bb, xv);
          }
        }
      } else if constexpr (kTma) {  // box c * 32 / kBox: [16 rows][kBox], no swizzle (2-way bank conflicts)
        const uint32_t tb = saddr(ring + slot * kStageBytes) + 16 * t;
#pragma unroll 4
        for (int c = 0; c < kStageK / 32; ++c) {
          const uint32_t cb = tb + (c * 32 / kBox) * (kBox * 32) + (c * 32 % kBox) * 2;
          const uint4 a = lds128(cb + g * (kBox * 2)), bb = lds128(cb + (g + 8) * (kBox * 2));
          const uint4 xv = g == 0 ? lds128(xb + c * 64) : make_uint4(0, 0, 0, 0);
          mma_chunk(acc, a, bb, xv);
        }
      } else {
#pragma unroll 4
        for (int c = 0; c < kStageK / 32; ++c) {
          const uint4 a = lds128(base + g * kRowStride + ((c * 64) ^ swz));
          const uint4 bb = lds128(base + (g + 8) * kRowStride + ((c * 64) ^ swz));
          const uint4 xv = g == 0 ? lds128(xb + c * 64) : make_uint4(0, 0, 0, 0);
          mma_chunk(acc, a, bb, xv);
        }
      }
      if (!(mode & 2)) fence_proxy_async();  // this warp's reads of the slot before the next bulk copy
      __syncwarp();
      if (lane == 0) mbar_arrive(saddr(empty + slot));
      pc[2] += clk<kProf>() - t1;
    }
    j += stages;
    // The slice sums: warp 0 adds them in warp order and stores the tile (a word with the launch's tag);
    // counters: one release a CTA an op, after its last tile. red is double-buffered: a warp writes red[p]
    // for tile i + 2 only after the barrier of tile i + 1, which warp 0 reaches after reading tile i's.
    float* r = red + (tcount & 1) * kSlices * 16;
    if (t == 0) r[warp * 16 + g] = acc[0], r[warp * 16 + g + 8] = acc[2];
    const long long t2 = clk<kProf>();
    bar_consumers();
    const long long t3 = clk<kProf>();
    pc[6] += t3 - t2;
    ++done;
    if (warp == 0) {
      float sum = 0.f;
      if (lane < 16) {
        sum = r[lane];
#pragma unroll
        for (int q = 1; q < kSlices; ++q) sum += r[q * 16 + lane];
      }
      if (o.silu_out) {  // lanes 0-7 gate features n0/2 + l, lanes 8-15 their up values: the bits of
                         // gate_up stored as bf16, then silu_mul (activation.cuh)
        const float gb = __bfloat162float(__float2bfloat16(sum));
        const float ub = __shfl_down_sync(0xffffffffu, gb, 8);
        if (lane < 8)
          static_cast<uint32_t*>(o.y)[n0 / 2 + lane] = word_of(__bfloat162float(silu_mul_bf16(gb, ub)), tag);
      } else if (lane < 16) {
        if (o.y_f32)
          static_cast<float*>(o.y)[n0 + lane] = sum;
        else
          static_cast<uint32_t*>(o.y)[n0 + lane] = word_of(sum, tag);
      }
      __syncwarp();
      if (kProf && tl && lane == 0) {
        last_store = gtime();
        atomicMax(tl + 4 * op, last_store);
        if (op + 1 < nops &&
            ops[op + 1].xkind == kXAttnMerge)  // qkv: the k/v tiles' and q tiles' last stores
          atomicMax(tl + 4 * nops + kAttnStamps * (op + 1) + (n0 >= kHq * kD ? 7 : 5), last_store);
      }
      if (!ll && last_of_op && lane == 0) {  // this CTA's last tile of the op
        if (mode & 1) {
          asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(cnt + op), "r"(done) : "memory");
        } else {
          __threadfence();
          atomicAdd(cnt + op, unsigned(done));
        }
      }
      pc[3] += clk<kProf>() - t3;
    }
    if (last_of_op) done = 0;
    ++tcount;
  }
  if (kProf && prof && lane == 0) {
    pc[7] = warp == 0 ? clk<kProf>() - t_start : 0;
    for (int q = 1; q < 8; ++q) atomicAdd(reinterpret_cast<unsigned long long*>(prof + 8 * b + q), pc[q]);
  }
}

// W [n, k] row-major -> stages: tile t's stage ps (packed_stage) holds, for its 16 rows, the pieces of kSW
// consecutive slices (kStageK k-values each) side by side, contiguous (one bulk copy); in odd rows the
// 64-byte chunks c and c ^ 1 of each piece trade places, so that the rows g and g + 1 read by a
// quarter-warp's 16-byte loads fall on different banks. inter > 0 (a gate_up weight, gate rows then up rows):
// tile t holds gate rows 8t..8t+7 then up rows inter+8t..inter+8t+7.
__global__ void pack_kernel(const __nv_bfloat16* w, __nv_bfloat16* wp, int n, int k, int inter) {
  const int stages = k / kStageK / kSW, parts = k / kSlices / kStageK;
  const int64_t stage = blockIdx.x;  // tile * stages + packed stage index
  const int tile = int(stage / stages), ps = int(stage % stages);
  const int owner = ps / parts, part = ps % parts;
  constexpr int kUnits = kStageK / 8;  // 16-byte units of a piece
  for (int u = threadIdx.x; u < 16 * kSW * kUnits; u += blockDim.x) {
    const int r = u / (kSW * kUnits), sub = u % (kSW * kUnits) / kUnits, cu = u % kUnits;
    const int src_unit = (r & 1) ? (cu ^ 4) : cu;  // chunk c ^ 1 = unit ^ 4
    const int slice = owner * kSW + sub;
    const int src_row = inter > 0 ? (r < 8 ? 8 * tile + r : inter + 8 * tile + r - 8) : tile * 16 + r;
    const uint4 v = *reinterpret_cast<const uint4*>(w + int64_t(src_row) * k +
                                                    (slice * parts + part) * kStageK + src_unit * 8);
    *reinterpret_cast<uint4*>(wp + stage * (kStageBytes / 2) + r * (kRowBytes / 2) + sub * kStageK + cu * 8) =
        v;
  }
}

// MLX 4-bit (device layout of upload_quantized_linear: quant_linear.h) -> stages: tile t's stage p holds, per
// row, piece p (kStageK k-values: 4 quads of lane-major words, 256 bytes) of slices 0..7 side by side, the
// quads qd and qd ^ 1 of odd rows swapped; then per row the 8 x 8 group words of those pieces, word i of row
// r at (i + r) % 64. inter: as pack_kernel.
__global__ void pack_q4_kernel(const uint8_t* w4, const uint32_t* s4, uint8_t* wp, int n, int k, int inter) {
  const int parts = k / kSlices / kStageK;
  const int64_t stage = blockIdx.x;
  const int tile = int(stage / parts), part = int(stage % parts);
  uint8_t* dst = wp + stage * kStageBytes;
  const int64_t row_bytes = k / 2;
  const int groups = k / 64;
  constexpr int kUnits = kRowBytes / 16, kPieceUnits = kStageK / 32;  // 128 and 16
  for (int u = threadIdx.x; u < 16 * kUnits; u += blockDim.x) {
    const int r = u / kUnits, cu = u % kUnits, sl = cu / kPieceUnits, qu = cu % kPieceUnits;
    const int src_qu = (r & 1) ? (qu ^ 4) : qu;
    const int src_row = inter > 0 ? (r < 8 ? 8 * tile + r : inter + 8 * tile + r - 8) : tile * 16 + r;
    const int64_t c0 = int64_t(sl * parts + part) * (kStageK / 32);  // the piece's first chunk: byte c0 * 16
    *reinterpret_cast<uint4*>(dst + r * kRowBytes + cu * 16) =
        *reinterpret_cast<const uint4*>(w4 + src_row * row_bytes + c0 * 16 + src_qu * 16);
  }
  for (int u = threadIdx.x; u < 16 * 64; u += blockDim.x) {
    const int r = u / 64, wi = u % 64, sl = wi / 8, gi = wi % 8;
    const int src_row = inter > 0 ? (r < 8 ? 8 * tile + r : inter + 8 * tile + r - 8) : tile * 16 + r;
    const int64_t g0 = int64_t(sl * parts + part) * (kStageK / 64);
    reinterpret_cast<uint32_t*>(dst + 16 * kRowBytes + r * kQ4ScaleRow)[(wi + r) & 63] =
        s4[int64_t(src_row) * groups + g0 + gi];
  }
}

}  // namespace
