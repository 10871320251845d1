// Probe for issues 6/11/12 (docs/cuda-notes.md "Session 15", "Session 16"): a persistent, warp-specialised
// decode kernel that runs a whole Qwen3-8B decode step at M = 1 with the engine's bits.
//
// The forward at b=1 is ~250 dependent kernels; each waits (griddepcontrol) for the whole previous grid, and
// only its first register ring of weights is in flight before that. Here one kernel runs all 36 layers of
// the Qwen3-8B shape and the lm_head at M = 1, one CTA an SM: a producer warp streams the CTA's weight tiles
// (packed so that a stage is one contiguous bulk copy, or -- TF_MEGA_TMA -- as 2D tensor-map boxes of the
// row-major weights) into a shared-memory ring -- weights are constant, so it runs ahead across every
// dependency, as far as the ring holds -- and 8 consumer warps compute each 16-feature tile with linear.cu's
// exact arithmetic (8 K slices in warp order, 32-wide chunks through mma_chunk, the slice sum in warp
// order). An op's consumers wait for the previous op (a completion counter, or -- mode bit 3, the default --
// by polling the tagged activation words themselves), then make their x in shared memory: add + RMSNorm
// (qkv, gate_up, lm_head: every CTA reduces the whole row itself, with add_rms_norm's arithmetic, so the norm
// is no step of its own), a copy (o: the attention's output words; down: gate_up's tiles store
// silu_mul(gate, up) -- --silu-out 1, the default), or silu_mul (down, --silu-out 0). Three attention warps a
// CTA (--attn 1, the default) make the attention of the row at position ctx - 1 (--ctx, default 512): (KV
// head, chunk) units dealt over the CTAs, q/k norm + rope + the new K/V row with qk_norm_rope_kv's
// arithmetic, each chunk's partial with attention_mma's (attention_chunk.cuh) as tagged words, the unit holding pos merging
// them into o's x words.
//
// Printed: the bits of every step of every layer against the engine's kernels on the same inputs (linears:
// linear_bf16; add + norm: add_rms_norm; attention: qkv_norm_rope_kv + attention_mma; must all be equal), a
// profile of one forward (where a CTA's cycles go, op-boundary and attention timelines), the time of one
// forward against today's linears alone in a graph (linear_bf16, dependent launch; no norms, no silu, no
// attention), against the copy-bandwidth roofline of the weights. Build: `ninja -C build-cuda
// tf_mega_probe_pairs` (not part of `all`); run on the GPU with no arguments (36 layers). Variants
// (compile-time): tf_mega_probe (16 KB stages a warp owns), tf_mega_probe_pairs (32 KB stages a warp pair
// owns: the fastest), tf_mega_probe_q4 (MLX 4-bit g64 weights), tf_mega_probe_tma (row-major weights by TMA).
// bench/cuda/mega_pack_check.py emulates the packings and the consumers' read addresses on the host.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ops/cuda/activation.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"  // tma_load_2d
#include "ops/cuda/norm.cuh"
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_linear.h"
#include "quant_weights.h"

#ifndef TF_MEGA_STAGE_K  // k-values of one slice's piece of a stage row: 512 or 256
#define TF_MEGA_STAGE_K 512
#endif
#ifndef TF_MEGA_SLICES_A_STAGE  // slices (consumer warps) sharing a stage: 1, or 2 (32 KB stages)
#define TF_MEGA_SLICES_A_STAGE 1
#endif
#ifndef TF_MEGA_MFULL  // 1: a slot's (op, unit) is published before its bytes land (its own mbarrier)
#define TF_MEGA_MFULL 1
#endif
#ifndef TF_MEGA_TMA  // 1: stages come from the row-major weights by 2D tensor-map boxes (no packed copy)
#define TF_MEGA_TMA 0
#endif
#ifndef TF_MEGA_TMA_BOX  // TMA: a box's columns (16 rows x TF_MEGA_TMA_BOX; a 512-column piece is 512 / box boxes)
#define TF_MEGA_TMA_BOX 256
#endif
#ifndef TF_MEGA_Q4  // 1: MLX 4-bit (g64) weights, a stage = piece p of all 8 slices + their group words
#define TF_MEGA_Q4 0
#endif

namespace {

using namespace tf::cuda;

constexpr int kSlices = 8;                    // linear.cu's K slices (its warps): the arithmetic
constexpr int kCWarps = 8;                    // consumer warps, one slice each
constexpr int kAWarps = 3;  // attention warps: 12 warps take no more registers a thread than 9 (3 a sub-partition)
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
constexpr int kDefaultStages = kQ4 ? 5 : kSW == 8 ? 192 * 1024 / kStageBytes : kSW == 2 ? 4 : kStageK >= 512 ? 8 : 24;

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

// Activations are 32-bit words: bf16 bits in the low half, the writing launch's tag in the high half (the
// "LL" protocol: in mode 8 a reader polls each word until its tag is the launch's, so a value carries its own
// readiness and no counter, fence or release is needed; in the other modes the tags are written, not read).
struct Op {
  const __nv_bfloat16* w;   // [n, k] row-major (linear_bf16's layout; the bit check)
  const __nv_bfloat16* wp;  // the same weights packed: pack_kernel
  int n, k, xkind, y_f32;
  const uint32_t* x;        // kXCopy: x; kXAddNorm: the value added to the residual; kXSilu: gate_up [2k]
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
      if (n == (1ll << 24))
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
  if (poll) poll_words(w, [&](int j) { return p + j * stride; }, tag);
}

// The op's x into shared memory (consumer warps only): after thread 0 has seen the previous op complete
// (counters), or polling each word (ll).
__device__ void make_x(const Op& o, __nv_bfloat16* xs, float* nred, bool writer, __nv_bfloat16* dbg, bool ll,
                       uint32_t tag, unsigned epoch) {
  const int tid = threadIdx.x;
  const int k = o.k;
  constexpr int kT = kCWarps * 32;
  if (!ll) bar_consumers();  // counters: thread 0 saw the previous op complete
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
      load_words<8>(xw, o.x + tid + kT * h, kT, ll && !o.x_const, tag);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        // add_rms_norm (norm.cuh): the new residual rounded to bf16 first; the norm sees what is stored
        v[h + j] = __bfloat162float(__float2bfloat16(__fadd_rn(word_f(rw[j]), word_f(xw[j]))));
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
    for (int j = 0; j < kV; ++j) xs[tid + kT * j] = __float2bfloat16(norm_out(v[j], inv, __fadd_rn(nwv[j], 0.f)));
  }
  bar_consumers();
  if (writer && dbg)
    for (int i = tid; i < k; i += kT) dbg[i] = xs[i];
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// RMS norm + NeoX rope of one head held by a warp (element lane + 32 j): elementwise.cu's
// qk_norm_rope_kv_kernel<4> arithmetic (rotary_dim = head_dim, factor 1), values rounded to bf16 as it does.
__device__ __forceinline__ void norm_rope_head(float (&v)[4], const __nv_bfloat16* w, float pos,
                                               const float* inv_freq, int lane) {
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
    float sn, cs;
    sincosf(pos * inv_freq[lane + 32 * j], &sn, &cs);
    cs *= 1.f;
    sn *= 1.f;
    const float a = __fsub_rn(__fmul_rn(v[j], cs), __fmul_rn(v[j + 2], sn));
    const float b = __fadd_rn(__fmul_rn(v[j + 2], cs), __fmul_rn(v[j], sn));
    v[j] = __bfloat162float(__float2bfloat16_rn(a));
    v[j + 2] = __bfloat162float(__float2bfloat16_rn(b));
  }
}

// One attention unit at M = 1, by the CTA's kAWarps attention warps (their own shared memory: the consumers go
// on with the ring meanwhile): KV head h, chunk c of the row at position o.pos. Tasks q head 0-3 (q/k norm +
// rope from the qkv words, polled) and the new token's k and v (the chunk holding pos: into shared memory and
// the pool) go round the warps; all stage the chunk's older K/V rows. Then warp 0 computes the chunk partial
// of its 4 pairs with attention_mma's chunk arithmetic (the other 12 MMA rows are padding: a pair's bits
// depend only on its own row) and publishes it: partials, fence, flag = tag.
__device__ __forceinline__ void abar() {
  nbar_sync(2, kAWarps * 32);
}
// atl (profiling, else null): globaltimer maxima of this op's units: [0] q/k/v words in, [1] K/V staged, [2]
// partial stored, [4] merged words stored (the units holding pos).
__device__ __noinline__ void attention_unit(const Op& o, int unit, __nv_bfloat16* Ks, uint32_t tag,
                                            unsigned long long* atl) {
  const int at = threadIdx.x - (kProducer + 1) * 32, aw = at / 32, lane = at % 32;
  constexpr int kT = kAWarps * 32;
  const int h = unit % kHk, c = unit / kHk, c0 = c * attn::kC, pos = o.pos;
  __nv_bfloat16* Vs = Ks + attn::kC * kRS;
  __nv_bfloat16* Qs = Vs + attn::kC * kRS;
  abar();  // warp 0 is done with the unit before (its MMAs read this region)
  for (int i = at; i < attn::kC * (kD / 8); i += kT) {  // 16-byte units: row i / 16, column (i % 16) * 8
    const int row = i / (kD / 8), col = (i % (kD / 8)) * 8, p = c0 + row;
    if (p == pos) continue;  // the new row: its task writes it
    const int64_t off = (int64_t(p) * kHk + h) * kD + col;
    cp_async16(saddr(Ks + row * kRS + col), p < pos ? o.kp + off : o.kp, p < pos);
    cp_async16(saddr(Vs + row * kRS + col), p < pos ? o.vp + off : o.vp, p < pos);
  }
  asm volatile("cp.async.commit_group;");
  for (int i = at; i < 12 * (kRS / 8); i += kT)  // Q rows 4-15: padding pairs, zeros
    *reinterpret_cast<uint4*>(Qs + (kGroup + i / (kRS / 8)) * kRS + (i % (kRS / 8)) * 8) = make_uint4(0, 0, 0, 0);
  // Tasks round the warps: q heads 0-3 of the group, then (the chunk holding pos) the new token's k and v. A
  // warp's words are loaded and polled together (one round trip a round), then normed.
  const bool kv_here = pos / attn::kC == c;
  constexpr int kTasks = (kGroup + 1 + kAWarps - 1) / kAWarps;  // tasks a warp at most (2)
  constexpr int kW = 4 * (kTasks + 1);                           // + v's words (the k/v task)
  const uint32_t* src[kTasks + 1];
  bool live[kTasks + 1];
#pragma unroll
  for (int i = 0; i < kTasks; ++i) {
    const int task = aw + kAWarps * i;
    live[i] = task < kGroup || (task == kGroup && kv_here);
    src[i] = task < kGroup ? o.qkv + (h * kGroup + task) * kD + lane : o.qkv + kHq * kD + h * kD + lane;
  }
  live[kTasks] = aw + kAWarps * (kTasks - 1) == kGroup && kv_here;  // this warp's last task is k/v
  src[kTasks] = o.qkv + (kHq + kHk) * kD + h * kD + lane;
  uint32_t w[kW];
#pragma unroll
  for (int q = 0; q < kW; ++q) w[q] = live[q / 4] ? ldv(src[q / 4] + 32 * (q % 4)) : (tag << 16);
  poll_words(w, [&](int q) { return src[q / 4] + 32 * (q % 4); }, tag, true);
  if (atl && lane == 0 && !kv_here) atomicMax(atl + 6, gtime());
#pragma unroll
  for (int i = 0; i < kTasks; ++i) {
    const int task = aw + kAWarps * i;
    if (!live[i]) continue;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = word_f(w[4 * i + j]);
    if (task < kGroup) {  // q head `task` of the group
      norm_rope_head(v, o.qn, float(pos), o.inv_freq, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) Qs[task * kRS + lane + 32 * j] = __float2bfloat16_rn(v[j]);
    } else {  // the new token's k (normed, rotated) and v: shared memory and the pool
      norm_rope_head(v, o.kn, float(pos), o.inv_freq, lane);
      const int row = pos - c0;
      const int64_t dst = (int64_t(pos) * kHk + h) * kD;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __nv_bfloat16 kb = __float2bfloat16_rn(v[j]);
        __nv_bfloat16 vb;
        *reinterpret_cast<uint16_t*>(&vb) = uint16_t(w[4 * kTasks + j] & 0xffffu);
        Ks[row * kRS + lane + 32 * j] = kb, Vs[row * kRS + lane + 32 * j] = vb;
        o.kp[dst + lane + 32 * j] = kb, o.vp[dst + lane + 32 * j] = vb;
      }
    }
  }
  if (atl && lane == 0) atomicMax(atl, gtime());
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  if (atl && lane == 0) atomicMax(atl + 1, gtime());
  abar();
  {
    // Every attention warp computes the chunk's scores (the same bits in each) and its share of P V's output
    // columns (chunk_pv<D, J0, J1>: column pairs [J0, J1); each element's chain is its own), then stores them.
    const int g = lane / 4, qd = lane % 4;
    // Row g's range (padding: lo > pos), row g + 8 padding. (Written out: an initializer list of conditional
    // Range temporaries here crashes nvcc 13.0's cicc.)
    attn::Range rg[2];
    rg[0].lo = g < kGroup ? 0 : 1, rg[0].pos = g < kGroup ? pos : 0, rg[1].lo = 1, rg[1].pos = 0;
    float sc[16][4], mc[2], lc[2], oc[kD / 8][4];
    attn::chunk_scores<kD>(Qs, Ks, 0, lane, c0, rg, o.scale, 0.f, sc, mc, lc);
    static_assert(kAWarps == 3 && kD == 128, "the column split below");
    const int j0 = aw == 0 ? 0 : aw == 1 ? 3 : 6, j1 = aw == 0 ? 3 : aw == 1 ? 6 : 8;
    if (aw == 0) attn::chunk_pv<kD, 0, 3>(Vs, lane, sc, oc);
    else if (aw == 1) attn::chunk_pv<kD, 3, 6>(Vs, lane, sc, oc);
    else attn::chunk_pv<kD, 6, 8>(Vs, lane, sc, oc);
    // The partial as tagged 64-bit words (value | tag << 32: "LL", no fence): o [kD], then max and sum.
    if (g < kGroup) {
      unsigned long long* dst = o.part + (int64_t(h * kGroup + g) * o.chunks + c) * (kD + 2);
      const unsigned long long tg = uint64_t(tag) << 32;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j)
        if (j >= 2 * j0 && j < 2 * j1) {
          dst[j * 8 + qd * 2] = tg | __float_as_uint(oc[j][0]);
          dst[j * 8 + qd * 2 + 1] = tg | __float_as_uint(oc[j][1]);
        }
      if (aw == 0 && qd == 0) dst[kD] = tg | __float_as_uint(mc[0]), dst[kD + 1] = tg | __float_as_uint(lc[0]);
    }
  }
  if (atl && lane == 0) atomicMax(atl + 2, gtime());
  // The unit holding pos (the one that waits for k and v, so usually the KV head's last) merges the group's
  // heads, polling the other chunks' tagged partials.
  if (c != pos / attn::kC) return;
  // Merge (combine_pair_u's order: chunks in increasing order from (-inf, 0, 0), then bf16(o / l)): item =
  // 4 dims of one of the group's heads; U chunks' words (4 values, max, sum) polled together.
  const int nc = pos / attn::kC + 1;
  for (int it = at; it < kGroup * (kD / 4); it += kT) {
    const int hq = h * kGroup + it / (kD / 4), d0 = (it % (kD / 4)) * 4;
    const unsigned long long* base = o.part + int64_t(hq) * o.chunks * (kD + 2);
    float m = -INFINITY, l = 0.f, ov[4] = {0.f, 0.f, 0.f, 0.f};
    constexpr int U = 4;
    for (int cb = 0; cb < nc; cb += U) {
      unsigned long long v[U][6];
      auto addr = [&](int u, int e) { return base + (cb + u) * (kD + 2) + (e < 4 ? d0 + e : kD + e - 4); };
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int e = 0; e < 6; ++e)
          if (cb + u < nc) asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v[u][e]) : "l"(addr(u, e)));
      for (long long n = 0;; ++n) {  // few threads poll (one CTA a KV head): every missing word each round
        bool ready = true;
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < 6; ++e)
            if (cb + u < nc && uint32_t(v[u][e] >> 32) != tag) {
              ready = false;
              asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v[u][e]) : "l"(addr(u, e)));
            }
        if (ready) break;
        if (n == (1ll << 24)) hang_word(reinterpret_cast<const uint32_t*>(base), 0, tag);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (cb + u >= nc) break;
        const attn::MergeFactors f =
            attn::merge_chunk(m, l, __uint_as_float(uint32_t(v[u][4])), __uint_as_float(uint32_t(v[u][5])));
#pragma unroll
        for (int i = 0; i < 4; ++i) ov[i] = attn::merge_out(ov[i], __uint_as_float(uint32_t(v[u][i])), f);
      }
    }
    uint32_t* dst = o.aout + hq * kD + d0;
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = word_of(attn::finish_out(ov[i], l), tag);
  }
  if (atl && lane == 0) atomicMax(atl + 4, gtime());
}

// clock64() where profiling (kProf), else 0: the timed kernel keeps no cycle counters in registers.
template <bool kProf>
__device__ __forceinline__ long long clk() {
  if constexpr (kProf) return clock64();
  return 0;
}

template <bool kProf>
__global__ void __launch_bounds__(kThreads, 1)
    mega_kernel(const Op* __restrict__ ops, int nops, unsigned* cnt, unsigned epoch, int stages_n, int xregion,
                __nv_bfloat16* dbg, int mode, long long* prof, unsigned long long* tl) {
  // tl (optional), per op, globaltimer ns: [0] the last tile stored, [1] the earliest time a CTA stored its
  // last tile of the op, [2] / [3] the first / last CTA to have its x for the op.
  // mode bit 0: a CTA's share of an op is released with one red.release.gpu add (else __threadfence +
  // atomicAdd); bit 1: no fence.proxy.async before a consumer frees a slot; bit 2: a stage as 16 bulk copies,
  // one a row (else one copy); bit 3: readers poll the activations' tags (no counters, no releases).
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
  float* red = reinterpret_cast<float*>(smem + stages_n * kStageBytes + kMaxK * 2 + xregion);  // [kRed][8][16]
  float* nred = red + kRed * kSlices * 16;            // [8]
  uint64_t* full = reinterpret_cast<uint64_t*>(nred + 8);
  uint64_t* empty = full + stages_n;
  uint64_t* mfull = empty + stages_n;  // the slot's meta is written (before its bytes land)
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
        attention_unit(ops[op], u, attn_smem, tag, kProf && tl ? tl + 4 * nops + 8 * op : nullptr);
      u0 += units;
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
              tma_load_2d(saddr(ring + slot * kStageBytes + lane * kBox * 32), ops[op].map, k0 + lane * kBox, n0,
                          saddr(full + slot));
          } else if (lane < 2 * kStageK / kBox) {  // 8-row boxes: gate rows n0/2.. as rows 0-7, up rows as 8-15
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
      wait_bar(saddr((TF_MEGA_MFULL ? mfull : full) + slot), (jj / stages_n) & 1, 1, jj, -1);
      pc[1] += clk<kProf>() - t0;
      op = meta[2 * slot], tile = meta[2 * slot + 1];
    }
    if (kProf && tl && warp == 0 && lane == 0 && op != prev_op && prev_op >= 0)
      atomicMin(tl + 4 * prev_op + 1, last_store);  // this CTA's last tile of prev_op was stored then
    prev_op = op;
    if (op >= nops) break;
    const Op& o = ops[op];
    const int n0 = tile * 16, k = o.k;
    const bool last_of_op = tile + G >= o.tiles;  // counters: a CTA releases its tiles of an op after its last
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
        if (op + 1 < nops && ops[op + 1].xkind == kXAttnMerge)  // qkv: the k/v tiles' and q tiles' last stores
          atomicMax(tl + 4 * nops + 8 * (op + 1) + (n0 >= kHq * kD ? 7 : 5), last_store);
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

template <typename T>
T* dalloc(size_t n) {
  T* p = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  TF_CUDA_CHECK(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int layers = 36, reps = 20, stages_n = 0, mode = 9, silu_out = 1, attn = 1, ctx = 512, kv_first = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--layers") layers = std::atoi(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--stages") stages_n = std::atoi(argv[i + 1]);
    if (a == "--mode") mode = std::atoi(argv[i + 1]);
    if (a == "--silu-out") silu_out = std::atoi(argv[i + 1]);
    if (a == "--attn") attn = std::atoi(argv[i + 1]);
    if (a == "--ctx") ctx = std::atoi(argv[i + 1]);
    if (a == "--kv-first") kv_first = std::atoi(argv[i + 1]);
  }
  const int H = 4096, QKV = 6144, I = 12288, V = 151936;
  cudaStream_t s;
  TF_CUDA_CHECK(cudaStreamCreate(&s));
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  // The attention warps stage K/V/Q in 74 KB of their own: Q4's 36 KB stages then fit 3 in the ring.
  if (stages_n == 0) stages_n = kQ4 && attn ? 3 : kDefaultStages;
  if (attn && !(mode & 8)) {
    std::fprintf(stderr, "--attn 1 needs --mode with bit 3 (the attention polls tagged words)\n");
    return 2;
  }
  if (ctx < 1 || ctx % 16) {
    std::fprintf(stderr, "--ctx must be a positive multiple of 16\n");
    return 2;
  }
  if (stages_n % kOwners || size_t(stages_n) * kStageBytes > 192 * 1024) {
    std::fprintf(stderr, "--stages must be a multiple of %d, at most 192 KB of ring\n", kOwners);
    return 2;
  }
  const std::unique_ptr<tf::Backend> be = tf::bench::shape_bench_backend(0, "tf_mega_probe");
  if (!be) return 2;
  const int pos = ctx - 1, chunks = pos / attn::kC + 1;  // the decode row: position ctx - 1
  std::printf("device: %s, %d SMs; layers %d, ring %d stages of %d bytes; mode %d, silu-out %d, %s\n",
              prop.name, prop.multiProcessorCount, layers, stages_n, kStageBytes, mode, silu_out,
              attn ? ("attention at position " + std::to_string(pos)).c_str() : "no attention (o <- q part)");

  // Weights and norm weights (random, made on the device), per-layer activations (no reuse: no hazards).
  struct L {
    __nv_bfloat16 *wqkv, *wo, *wgu, *wd, *n1, *n2;
    __nv_bfloat16 *qkv, *o, *gu, *d, *h1, *h2;   // the graph of today's kernels
    uint32_t *tqkv, *to, *tgu, *td, *th1, *th2;  // the probe's (tagged words)
    __nv_bfloat16 *kp, *vp, *qn, *kn;            // attention: K/V pool [ctx][kHk][kD], q/k norm weights
    unsigned long long* part;
    uint32_t* aout;
  };
  std::vector<L> ls(layers);
  double bytes = 0;
  uint64_t seed = 1;
  auto rnd = [&](__nv_bfloat16* p, int64_t n, float lo, float hi) {
    fill_uniform(p, tf::DType::BF16, n, seed++, lo, hi, s);
  };
  // Q4: the MLX 4-bit weights of the benches (quant_weights.h: device layout, scales prescaled), one
  // LinearWeight an op in op order (qkv, o, gate_up, down per layer, lm_head); no bf16 weights.
  std::vector<tf::LinearWeight> q4w;
  auto q4_weight = [&](int n, int k) {
    q4w.push_back(tf::bench::rand_linear_weight(*be, tf::bench::WeightFormat::Mlx4, n, k, seed++));
    if (!q4w.back().subnormal_codes) {
      std::fprintf(stderr, "the 4-bit weights were not prescaled (TF_MLX_SUBNORMAL=0?)\n");
      std::exit(2);
    }
    bytes += double(tf::bench::linear_weight_bytes(q4w.back()));
  };
  for (auto& l : ls) {
    if (kQ4) {
      q4_weight(QKV, H), q4_weight(H, H), q4_weight(2 * I, H), q4_weight(H, I);
      l.wqkv = l.wo = l.wgu = l.wd = nullptr;
    } else {
      l.wqkv = dalloc<__nv_bfloat16>(int64_t(QKV) * H), rnd(l.wqkv, int64_t(QKV) * H, -0.03f, 0.03f);
      l.wo = dalloc<__nv_bfloat16>(int64_t(H) * H), rnd(l.wo, int64_t(H) * H, -0.03f, 0.03f);
      l.wgu = dalloc<__nv_bfloat16>(int64_t(2 * I) * H), rnd(l.wgu, int64_t(2 * I) * H, -0.03f, 0.03f);
      l.wd = dalloc<__nv_bfloat16>(int64_t(H) * I), rnd(l.wd, int64_t(H) * I, -0.02f, 0.02f);
      bytes += 2.0 * (double(QKV) * H + double(H) * H + 2.0 * I * H + double(H) * I);
    }
    l.n1 = dalloc<__nv_bfloat16>(H), rnd(l.n1, H, 0.5f, 1.5f);
    l.n2 = dalloc<__nv_bfloat16>(H), rnd(l.n2, H, 0.5f, 1.5f);
    l.qkv = dalloc<__nv_bfloat16>(QKV), l.o = dalloc<__nv_bfloat16>(H), l.gu = dalloc<__nv_bfloat16>(2 * I);
    l.d = dalloc<__nv_bfloat16>(H), l.h1 = dalloc<__nv_bfloat16>(H), l.h2 = dalloc<__nv_bfloat16>(H);
    l.tqkv = dalloc<uint32_t>(QKV), l.to = dalloc<uint32_t>(H), l.tgu = dalloc<uint32_t>(2 * I);
    l.td = dalloc<uint32_t>(H), l.th1 = dalloc<uint32_t>(H), l.th2 = dalloc<uint32_t>(H);
    const int64_t pool = int64_t(ctx) * kHk * kD;
    l.kp = dalloc<__nv_bfloat16>(pool), rnd(l.kp, pool, -1.f, 1.f);
    l.vp = dalloc<__nv_bfloat16>(pool), rnd(l.vp, pool, -1.f, 1.f);
    l.qn = dalloc<__nv_bfloat16>(kD), rnd(l.qn, kD, 0.5f, 1.5f);
    l.kn = dalloc<__nv_bfloat16>(kD), rnd(l.kn, kD, 0.5f, 1.5f);
    l.part = dalloc<unsigned long long>(size_t(kHq) * chunks * (kD + 2));
    l.aout = dalloc<uint32_t>(kHq * kD);
  }
  // Rope (Qwen3: theta 1e6, rotary dim = head dim), as the engine's host table (one float per pair).
  float* inv_freq = dalloc<float>(kD / 2);
  {
    std::vector<float> f(kD / 2);
    for (int i = 0; i < kD / 2; ++i) f[i] = float(1.0 / std::pow(1e6, double(2 * i) / kD));
    TF_CUDA_CHECK(cudaMemcpy(inv_freq, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
  }
  __nv_bfloat16* wlm = nullptr;
  if (kQ4) {
    q4_weight(V, H);
    TF_CUDA_CHECK(cudaDeviceSynchronize());  // the weights were made on the backend's stream
  } else {
    wlm = dalloc<__nv_bfloat16>(int64_t(V) * H);
    rnd(wlm, int64_t(V) * H, -0.03f, 0.03f);
    bytes += 2.0 * V * H;
  }
  __nv_bfloat16* nf = dalloc<__nv_bfloat16>(H);
  rnd(nf, H, 0.5f, 1.5f);
  __nv_bfloat16* emb = dalloc<__nv_bfloat16>(H);
  rnd(emb, H, -1.f, 1.f);
  __nv_bfloat16* zeros = dalloc<__nv_bfloat16>(H);
  uint32_t* temb = dalloc<uint32_t>(H);
  uint32_t* tzeros = dalloc<uint32_t>(H);
  {
    std::vector<uint16_t> hb(H);
    TF_CUDA_CHECK(cudaMemcpy(hb.data(), emb, H * 2, cudaMemcpyDeviceToHost));
    std::vector<uint32_t> hw(hb.begin(), hb.end());
    TF_CUDA_CHECK(cudaMemcpy(temb, hw.data(), H * 4, cudaMemcpyHostToDevice));
  }
  float* logits = dalloc<float>(V);

  // The op list: qkv (add+norm), o (q part of qkv), gate_up (add+norm), down (silu_mul) per layer; lm_head.
  std::vector<Op> ops;
  std::vector<int> op_w;  // the op's weight (q4w index, ops in order), -1: the attention op
  int tiles = 0, nw = 0;
  auto add = [&](Op o) {
    o.tiles = o.n / 16;
    o.tile_begin = tiles, tiles += o.tiles;
    op_w.push_back(nw++);
    ops.push_back(o);
  };
  auto with_attn = [&](Op o, const L& l) {
    o.kp = l.kp, o.vp = l.vp, o.qn = l.qn, o.kn = l.kn, o.part = l.part;
    o.qkv = l.tqkv, o.aout = l.aout, o.inv_freq = inv_freq, o.scale = 1.f / std::sqrt(float(kD)), o.pos = pos;
    o.chunks = chunks;
    return o;
  };
  for (int li = 0; li < layers; ++li) {
    L& l = ls[li];
    const uint32_t* res = li == 0 ? temb : ls[li - 1].th2;
    const uint32_t* add_in = li == 0 ? tzeros : ls[li - 1].td;
    const int first = li == 0;
    {
      Op qkv{l.wqkv, nullptr, QKV, H, kXAddNorm, 0, add_in, res, l.th1, l.n1, l.tqkv, first, first, 0, 0, 0};
      qkv.rot = kv_first ? kHq * kD / 16 : 0;  // k and v tiles first: the attention's last inputs come earlier
      add(qkv);
    }
    if (attn) {  // o's x: the attention of the qkv words (the attention warps), merged by every CTA
      add(with_attn({l.wo, nullptr, H, H, kXAttnMerge, 0, l.aout, nullptr, nullptr, nullptr, l.to, 0, 0, 0, 0, 0},
                    l));
    } else {
      add({l.wo, nullptr, H, H, kXCopy, 0, l.tqkv, nullptr, nullptr, nullptr, l.to, 0, 0, 0, 0, 0});
    }
    add({l.wgu, nullptr, 2 * I, H, kXAddNorm, 0, l.to, l.th1, l.th2, l.n2, l.tgu, 0, 0, silu_out, 0, 0});
    add({l.wd, nullptr, H, I, silu_out ? kXCopy : kXSilu, 0, l.tgu, nullptr, nullptr, nullptr, l.td, 0, 0, 0,
         0, 0});
  }
  uint32_t* hf = dalloc<uint32_t>(H);
  add({wlm, nullptr, V, H, kXAddNorm, 1, ls[layers - 1].td, ls[layers - 1].th2, hf, nf, logits, 0, 0, 0, 0,
       0});
  const int nops = int(ops.size());
  // TMA: the ops' weights as 2D tensor maps (row-major, no copy), in one device array.
  CUtensorMap* maps = kTma ? dalloc<CUtensorMap>(nops) : nullptr;
  if (kTma) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    TF_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    std::vector<CUtensorMap> hm(nops);
    for (int oi = 0; oi < nops; ++oi) {
      const cuuint64_t dims[2] = {cuuint64_t(ops[oi].k), cuuint64_t(ops[oi].n)}, strides[1] = {cuuint64_t(ops[oi].k) * 2};
      // gate_up with --silu-out: a tile is 8 gate and their 8 up rows, two boxes of 8 rows
      const cuuint32_t box[2] = {cuuint32_t(kBox), ops[oi].silu_out ? 8u : 16u}, elem[2] = {1, 1};
      if (reinterpret_cast<Encode>(fn)(&hm[oi], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(ops[oi].w),
                                       dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuTensorMapEncodeTiled failed (op %d)\n", oi);
        return 2;
      }
      ops[oi].map = maps + oi;
    }
    TF_CUDA_CHECK(cudaMemcpy(maps, hm.data(), nops * sizeof(CUtensorMap), cudaMemcpyHostToDevice));
  }
  for (int oi = 0; oi < nops && !kTma; ++oi) {  // the packed copies
    Op& o = ops[oi];
    const int stages = (o.n / 16) * (o.k / kStageK / kSW);
    __nv_bfloat16* wp = dalloc<__nv_bfloat16>(int64_t(stages) * kStageBytes / 2);
    if (kQ4)
      pack_q4_kernel<<<stages, 256, 0, s>>>(static_cast<const uint8_t*>(q4w[op_w[oi]].weight.raw()),
                                            static_cast<const uint32_t*>(q4w[op_w[oi]].scales.raw()),
                                            reinterpret_cast<uint8_t*>(wp), o.n, o.k,
                                            o.silu_out ? o.n / 2 : 0);
    else
      pack_kernel<<<stages, 256, 0, s>>>(o.w, wp, o.n, o.k, o.silu_out ? o.n / 2 : 0);
    o.wp = wp;
  }
  Op* dops = dalloc<Op>(nops);
  TF_CUDA_CHECK(cudaMemcpy(dops, ops.data(), nops * sizeof(Op), cudaMemcpyHostToDevice));
  unsigned* cnt = dalloc<unsigned>(nops);
  __nv_bfloat16* dbg = dalloc<__nv_bfloat16>(int64_t(nops) * kMaxK);

  const int xregion = attn ? kAttnBytes : 0;
  const size_t smem =
      size_t(stages_n) * kStageBytes + kMaxK * 2 + xregion + (kRed * kSlices * 16 + 8) * 4 + 3 * stages_n * 8 +
      (2 * stages_n + 2) * 4;
  if (smem > prop.sharedMemPerBlockOptin) {
    std::fprintf(stderr, "%zu bytes of shared memory: more than the %zu a block may have (fewer --stages)\n",
                 smem, size_t(prop.sharedMemPerBlockOptin));
    return 2;
  }
  TF_CUDA_CHECK(cudaFuncSetAttribute(mega_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  TF_CUDA_CHECK(cudaFuncSetAttribute(mega_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  TF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mega_kernel<false>, kThreads, smem));
  const int grid = prop.multiProcessorCount * per_sm;
  std::printf("smem %zu bytes, %d CTA(s) an SM, grid %d, %d ops, %d tiles\n", smem, per_sm, grid, nops,
              tiles);
  if (per_sm < 1) return 2;
  unsigned epoch = 0;
  long long* prof = dalloc<long long>(size_t(grid) * 8);
  unsigned long long* tl = dalloc<unsigned long long>(size_t(nops) * 12);  // + the attention's [nops][8]
  bool prof_on = false;
  auto run = [&](__nv_bfloat16* d) {
    ++epoch;
    if (prof_on)
      mega_kernel<true><<<grid, kThreads, smem, s>>>(dops, nops, cnt, epoch, stages_n, xregion, d, mode, prof, tl);
    else
      mega_kernel<false><<<grid, kThreads, smem, s>>>(dops, nops, cnt, epoch, stages_n, xregion, d, mode, nullptr,
                                                      nullptr);
  };

  // Bits: every op's output against linear_bf16 on the x the probe used.
  run(dbg);
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  TF_CUDA_CHECK(cudaGetLastError());
  int bad_ops = 0;
  {
    __nv_bfloat16* yref = dalloc<__nv_bfloat16>(2 * I);
    __nv_bfloat16* sref = dalloc<__nv_bfloat16>(I);
    float* lref = dalloc<float>(V);
    std::vector<uint16_t> r(2 * I);
    std::vector<uint32_t> aw(2 * I);
    std::vector<uint32_t> la(V), lr(V);
    int linear_ops = 0;
    for (int oi = 0; oi < nops; ++oi) {
      const Op& o = ops[oi];
        ++linear_ops;
      const bool f32 = o.y_f32;
      // Q4: the bf16 weights the 4-bit kernels multiply by (quant_linear.h: dequantize_bf16, then linear_bf16
      // gives linear_quantized's bits).
      tf::Tensor deq = kQ4 ? tf::cuda::dequantize_bf16(q4w[op_w[oi]], s) : tf::Tensor();
      linear_bf16(dbg + int64_t(oi) * kMaxK, kQ4 ? deq.raw() : o.w, nullptr, tf::DType::BF16,
                  f32 ? (void*)lref : (void*)yref, f32 ? tf::DType::F32 : tf::DType::BF16, 1, o.n, o.k, s);
      TF_CUDA_CHECK(cudaStreamSynchronize(s));
      int diff = 0;
      if (f32) {
        TF_CUDA_CHECK(cudaMemcpy(la.data(), o.y, V * 4, cudaMemcpyDeviceToHost));
        TF_CUDA_CHECK(cudaMemcpy(lr.data(), lref, V * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < V; ++i) diff += la[i] != lr[i];
      } else {
        int n = o.n;
        if (o.silu_out) {  // the reference: gate_up, then the engine's silu_mul
          silu_mul(yref, sref, 1, o.n / 2, s);
          TF_CUDA_CHECK(cudaStreamSynchronize(s));
          n = o.n / 2;
        }
        TF_CUDA_CHECK(cudaMemcpy(aw.data(), o.y, n * 4, cudaMemcpyDeviceToHost));
        TF_CUDA_CHECK(cudaMemcpy(r.data(), o.silu_out ? sref : yref, n * 2, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) diff += (aw[i] & 0xffffu) != r[i] || (aw[i] >> 16) != (epoch & 0xffffu);
      }
      if (diff) {
        ++bad_ops;
        if (bad_ops <= 5) std::printf("  op %d (n %d k %d): %d outputs differ\n", oi, o.n, o.k, diff);
      }
    }
    std::printf("bits: %d of %d linear ops equal linear_bf16 on the same x%s\n", linear_ops - bad_ops,
                linear_ops, bad_ops ? "  <-- MISMATCH" : "");
  }

  // The x the probe made against the engine's ops on the same inputs: add + RMSNorm (add_rms_norm), and the
  // attention (qkv_norm_rope_kv + attention_mma on the probe's qkv words: the o op's x, the pool's new row).
  {
    auto words_to_bf16 = [&](const uint32_t* w, int n, __nv_bfloat16* out) {
      std::vector<uint32_t> hw(n);
      std::vector<uint16_t> hb(n);
      TF_CUDA_CHECK(cudaMemcpy(hw.data(), w, n * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) hb[i] = uint16_t(hw[i] & 0xffffu);
      TF_CUDA_CHECK(cudaMemcpy(out, hb.data(), n * 2, cudaMemcpyHostToDevice));
    };
    auto same = [&](const void* a, const void* b, size_t bytes) {
      std::vector<uint8_t> ha(bytes), hb(bytes);
      TF_CUDA_CHECK(cudaMemcpy(ha.data(), a, bytes, cudaMemcpyDeviceToHost));
      TF_CUDA_CHECK(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost));
      return ha == hb;
    };
    __nv_bfloat16 *rb = dalloc<__nv_bfloat16>(H), *xb = dalloc<__nv_bfloat16>(H), *hb = dalloc<__nv_bfloat16>(H);
    int norms = 0, norms_ok = 0;
    for (int oi = 0; oi < nops; ++oi) {
      const Op& o = ops[oi];
      if (o.xkind != kXAddNorm) continue;
      words_to_bf16(o.res, H, rb), words_to_bf16(o.x, H, xb);
      add_rms_norm(rb, tf::DType::BF16, xb, o.nw, tf::DType::BF16, hb, 1, H, 1e-6f, 0.f, s);
      TF_CUDA_CHECK(cudaStreamSynchronize(s));
      ++norms, norms_ok += same(hb, dbg + int64_t(oi) * kMaxK, H * 2);
    }
    std::printf("bits: %d of %d add+norm x equal add_rms_norm's%s\n", norms_ok, norms,
                norms_ok == norms ? "" : "  <-- MISMATCH");
    bad_ops += norms - norms_ok;
    if (attn) {
      const int64_t pool = int64_t(ctx) * kHk * kD;
      __nv_bfloat16 *qkvb = dalloc<__nv_bfloat16>(QKV), *qref = dalloc<__nv_bfloat16>(H);
      __nv_bfloat16 *aref = dalloc<__nv_bfloat16>(H), *kref = dalloc<__nv_bfloat16>(pool),
                    *vref = dalloc<__nv_bfloat16>(pool);
      std::vector<int32_t> table(ctx / 16);
      for (int i = 0; i < ctx / 16; ++i) table[i] = i;
      int32_t* d_pos = dalloc<int32_t>(1);
      int32_t* d_zero = dalloc<int32_t>(1);
      int32_t* d_table = dalloc<int32_t>(table.size());
      int2* d_tile = dalloc<int2>(1);
      const int2 tile{0, 1};
      TF_CUDA_CHECK(cudaMemcpy(d_pos, &pos, 4, cudaMemcpyHostToDevice));
      TF_CUDA_CHECK(cudaMemcpy(d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
      TF_CUDA_CHECK(cudaMemcpy(d_tile, &tile, sizeof(tile), cudaMemcpyHostToDevice));
      tf::cuda::DeviceMeta meta;
      meta.positions = d_pos, meta.row_seq = d_zero, meta.slots = d_pos, meta.table_offsets = d_zero;
      meta.tables = d_table, meta.rows = 1, meta.block_size = 16;
      int att_ok = 0, kv_ok = 0;
      for (int li = 0; li < layers; ++li) {
        const L& l = ls[li];
        words_to_bf16(l.tqkv, QKV, qkvb);
        TF_CUDA_CHECK(cudaMemcpy(kref, l.kp, pool * 2, cudaMemcpyDeviceToDevice));
        TF_CUDA_CHECK(cudaMemcpy(vref, l.vp, pool * 2, cudaMemcpyDeviceToDevice));
        const int64_t row = int64_t(pos) * kHk * kD;  // the new row: the reference writes its own
        TF_CUDA_CHECK(cudaMemset(kref + row, 0, kHk * kD * 2));
        TF_CUDA_CHECK(cudaMemset(vref + row, 0, kHk * kD * 2));
        if (!qkv_norm_rope_kv(qkvb, qref, l.qn, l.kn, tf::DType::BF16, 1e-6f, 0.f, 1, kHq, kHk, kD, kD, inv_freq,
                              1.f, false, d_pos, kref, vref, d_pos, s)) {
          std::fprintf(stderr, "qkv_norm_rope_kv refused the shape\n");
          return 2;
        }
        tf::cuda::AttentionMmaArgs a;
        a.q = qref, a.k_pool = kref, a.v_pool = vref, a.out = aref, a.meta = meta;
        a.hq = kHq, a.hk = kHk, a.head_dim = kD, a.scale = 1.f / std::sqrt(float(kD)), a.max_chunks = chunks;
        a.loop_tiles = d_tile, a.num_loop_tiles = 1;
        tf::cuda::attention_mma(a, s);
        TF_CUDA_CHECK(cudaStreamSynchronize(s));
        int o_op = 0;  // this layer's o op
        for (int oi = 0, seen = -1; oi < nops; ++oi)
          if (ops[oi].xkind == kXAttnMerge && ++seen == li) o_op = oi;
        att_ok += same(aref, dbg + int64_t(o_op) * kMaxK, H * 2);
        kv_ok += same(kref + row, l.kp + row, kHk * kD * 2) && same(vref + row, l.vp + row, kHk * kD * 2);
      }
      std::printf("bits: %d of %d layers' attention equal qkv_norm_rope_kv + attention_mma's, %d of %d new K/V "
                  "rows%s\n",
                  att_ok, layers, kv_ok, layers, att_ok == layers && kv_ok == layers ? "" : "  <-- MISMATCH");
      bad_ops += (layers - att_ok) + (layers - kv_ok);
    }
  }

  // Time: the probe (one launch a forward) and the same linears as today's kernels in a graph.
  auto time_fn = [&](const std::function<void()>& fn) { return tf::bench::time_ms(s, fn, 3, reps); };
  const double mega_ms = time_fn([&] { run(nullptr); });
  TF_CUDA_CHECK(cudaGetLastError());
  {  // one profiled forward: where a CTA's cycles go (means over CTAs, microseconds at the SM clock)
    TF_CUDA_CHECK(cudaMemset(prof, 0, size_t(grid) * 8 * 8));
    {
      std::vector<unsigned long long> init(size_t(nops) * 12, 0ull);  // the attention's maxima start at 0
      for (int q = 0; q < nops; ++q)
        init[4 * q] = init[4 * q + 3] = 0, init[4 * q + 1] = init[4 * q + 2] = ~0ull;
      TF_CUDA_CHECK(cudaMemcpy(tl, init.data(), init.size() * 8, cudaMemcpyHostToDevice));
    }
    prof_on = true;
    run(nullptr);
    prof_on = false;
    TF_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<long long> pv(size_t(grid) * 8);
    TF_CUDA_CHECK(cudaMemcpy(pv.data(), prof, pv.size() * 8, cudaMemcpyDeviceToHost));
    double m[8] = {0};
    for (int b = 0; b < grid; ++b)
      for (int q = 0; q < 8; ++q) m[q] += double(pv[size_t(b) * 8 + q]) / grid;
    int khz = 0;
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const double us = 1e3 / khz;  // microseconds a cycle
    const char* names[8] = {"producer waits for slots",
                            "consumer warps wait for data (sum of 8)",
                            "consumer warps compute (sum of 8)",
                            "warp 0: tile sums, stores, releases",
                            "dependency waits",
                            "making x",
                            "tile barrier waits (sum of 8)",
                            "warp 0 total"};
    std::printf("profile (mode %d, one forward, SM clock %d MHz):\n", mode, khz / 1000);
    for (int q = 0; q < 8; ++q) std::printf("  %-42s %9.1f us\n", names[q], m[q] * us);
    // The op boundaries (globaltimer): per kind of the next op, means over the layers' ops.
    std::vector<unsigned long long> tv(size_t(nops) * 12);
    TF_CUDA_CHECK(cudaMemcpy(tv.data(), tl, tv.size() * 8, cudaMemcpyDeviceToHost));
    if (attn) {  // the attention's steps, after the qkv op's last tile (means over the layers)
      double st[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int n = 0;
      for (int q = 1; q < nops; ++q) {
        if (ops[q].xkind != kXAttnMerge) continue;
        for (int e = 0; e < 8; ++e)
          st[e] += (double(tv[4 * nops + 8 * q + e]) - double(tv[4 * (q - 1)])) * 1e-3;
        ++n;
      }
      std::printf("  attention after qkv's last tile, us (means, latest unit): q tiles stored %.2f, k/v tiles %.2f | "
                  "words in %.2f (q-only units %.2f) | K/V staged %.2f | partial stored %.2f | merged %.2f\n",
                  st[5] / n, st[7] / n, st[0] / n, st[6] / n, st[1] / n, st[2] / n, st[4] / n);
    }
    const char* kinds[4] = {"copy (o / down)", "add+norm (qkv, gate_up, lm_head)", "silu (down)",
                            "attention merge (o)"};
    std::printf(
        "  op boundaries, us (means): op time | last CTA done - first CTA done | first x ready - "
        "last tile | last x ready - first\n");
    for (int kd = 0; kd < 4; ++kd) {
      double a = 0, bsum = 0, c = 0, d = 0;
      int n = 0;
      for (int q = 1; q < nops; ++q) {
        if (ops[q].xkind != kd) continue;
        a += (double(tv[4 * q]) - double(tv[4 * (q - 1)])) * 1e-3;
        bsum += (double(tv[4 * (q - 1)]) - double(tv[4 * (q - 1) + 1])) * 1e-3;
        c += (double(tv[4 * q + 2]) - double(tv[4 * (q - 1)])) * 1e-3;
        d += (double(tv[4 * q + 3]) - double(tv[4 * q + 2])) * 1e-3;
        ++n;
      }
      if (n)
        std::printf("    %-34s %7.2f | %7.2f | %7.2f | %7.2f  (%d ops)\n", kinds[kd], a / n, bsum / n, c / n,
                    d / n, n);
    }
  }
  auto q4_linear = [&](const void* x, int oi, void* y, bool y_f32) {
    const tf::LinearWeight& w = q4w[oi];
    const tf::Tensor xt =
        tf::Tensor::borrow(const_cast<void*>(x), {1, w.in_features}, tf::DType::BF16, tf::Device::CUDA);
    tf::Tensor yt = tf::Tensor::borrow(y, {1, w.out_features}, y_f32 ? tf::DType::F32 : tf::DType::BF16,
                                       tf::Device::CUDA);
    tf::cuda::linear_quantized(xt, w, yt, s);
  };
  auto chain = [&] {
    const __nv_bfloat16* x = emb;
    int oi = 0;
    for (auto& l : ls) {
      if (kQ4) {  // today's 4-bit decode kernels (linear_quantized), the same chain
        q4_linear(x, oi++, l.qkv, false), q4_linear(l.qkv, oi++, l.o, false);
        q4_linear(l.o, oi++, l.gu, false), q4_linear(l.gu, oi++, l.d, false);
      } else {
        linear_bf16(x, l.wqkv, nullptr, tf::DType::BF16, l.qkv, tf::DType::BF16, 1, QKV, H, s);
        linear_bf16(l.qkv, l.wo, nullptr, tf::DType::BF16, l.o, tf::DType::BF16, 1, H, H, s);
        linear_bf16(l.o, l.wgu, nullptr, tf::DType::BF16, l.gu, tf::DType::BF16, 1, 2 * I, H, s);
        linear_bf16(l.gu, l.wd, nullptr, tf::DType::BF16, l.d, tf::DType::BF16, 1, H, I, s);
      }
      x = l.d;
    }
    if (kQ4)
      q4_linear(x, oi, logits, true);
    else
      linear_bf16(x, wlm, nullptr, tf::DType::BF16, logits, tf::DType::F32, 1, V, H, s);
  };
  const double chain_ms = tf::bench::time_graph_ms(s, chain);
  // Copy bandwidth (read + write) of 2 GiB, as the benches' roofline.
  const double copy_gbs = tf::bench::copy_bandwidth_gbs(*be);  // the benches' roofline denominator
  const double roof_ms = bytes / (copy_gbs * 1e9) * 1e3;
  std::printf("weights %.2f GB; copy %.0f GB/s; roofline %.3f ms\n", bytes / 1e9, copy_gbs, roof_ms);
  std::printf("persistent probe (norms, silu in): %.3f ms = %.1f%% of roofline (%.0f GB/s)\n", mega_ms,
              100.0 * roof_ms / mega_ms, bytes / (mega_ms * 1e-3) / 1e9);
  std::printf("today's linears, graph (no norms): %.3f ms = %.1f%% of roofline (%.0f GB/s)\n", chain_ms,
              100.0 * roof_ms / chain_ms, bytes / (chain_ms * 1e-3) / 1e9);
  return bad_ops ? 1 : 0;
}
