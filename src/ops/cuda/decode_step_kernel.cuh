#pragma once
// The device side of the one-kernel decode step (decode_step.h; included by decode_step.cu only). Grown in
// the probe bench/cuda/mega_probe.cu (sessions 15-17; removed in session 18 -- its last version, with
// profiling, 4-bit and TMA variants, is in commit d409656) and measured there: docs/cuda-notes.md.
//
// Roles in a CTA (one CTA an SM, kThreads threads):
// - warp kProducer streams the CTA's 16-feature tiles of every op, in op order, stage by stage into a ring
//   of kRing<W> slots (bulk copies of the packed weights, pack_kernel), as far ahead as the ring allows:
//   weights are constants, so it runs ahead across every dependency;
// - warps 0..7 (consumers) make each op's x in shared memory once (add + RMSNorm, a copy) and compute the
//   CTA's tiles with linear.cu's arithmetic (8 K slices in warp order, 32-wide chunks through mma_chunk, the
//   slice sums in warp order), storing each output as a tagged word;
// - warps 9..11 (attention) stage the row's attention: (KV head, chunk) units dealt over the CTAs, each
//   the q/k norm + rope of its group's heads and (the chunk holding the row) the new K/V row; CTAs 0-7 hold
//   the units of the row's chunk and merge their KV head's partials. A unit's K/V rows come by tensor-map
//   boxes (a block's 16 rows of one head) onto an mbarrier, the partials to merge by bulk copies;
// - between a layer's qkv and o ops (idle otherwise: o's x is the attention's output) the consumer warps
//   compute each of the CTA's units (the chunk's partial with attention_mma's chunk arithmetic, split by
//   keys and output dims over the 8 warps) and, in a merging CTA, check and fold the merge's rounds, handed
//   over on named barriers (session 26: 8192 positions -8%, 512 -2.5% against the attention warps alone).
//
// Latency rule (session 17): under the weight stream, every dependent global access costs a round trip of
// ~2 us, so after a poll the chain touches only shared memory, registers and the polled words themselves;
// everything else it needs is fetched into shared memory before the poll.
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "ops/cuda/activation.cuh"
#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/decode_step.h"   // the probe's stamp slots
#include "ops/cuda/linear_wgmma.h"  // tma_load_3d
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/norm.cuh"
#include "ops/cuda/quant_common.cuh"  // MLX 4-bit dequantisation (the 4-bit linears' instructions)

namespace tf::cuda::step {

constexpr int kSlices = 8;  // linear.cu's K slices (its warps): the arithmetic
constexpr int kCWarps = 8;  // consumer warps, one slice each
constexpr int kAWarps = 3;  // attention warps (12 warps take no more registers a thread than 9)
constexpr int kThreads = (kCWarps + 1 + kAWarps) * 32;
constexpr int kProducer = kCWarps;
constexpr int kRed = 2;  // slice-sum buffers, double-buffered: one consumer barrier a tile
// k-values of a slice's piece in a stage. bf16: 256 (16 KB stages, two ring slots a warp pair: one is in
// flight while the pair computes on the other; 2% faster than 32 KB stages and one slot a pair, run 271).
// MLX 4-bit: 512 (256 was 12% slower, run 271).
constexpr int kStageK = 256;
constexpr int kQStageK = 512;
constexpr int kSW = 2;                        // a stage row = pieces of kSW consecutive slices
constexpr int kOwners = kCWarps / kSW;        // warp pairs owning ring slots
constexpr int kRowBytes = kSW * kStageK * 2;  // packed rows are not padded; odd rows are swizzled
constexpr int kStageBytes = 16 * kRowBytes;   // 16 feature rows, one bulk copy
constexpr int kStages = 8;                    // bf16: ring slots (a multiple of kOwners: 2 a warp pair)
// MLX 4-bit weights (quant_linear.h's device layout, bf16 scale | bias words): a stage holds 16 rows x SW
// pieces of kQStageK k-values (SW consecutive K slices, as a bf16 stage's kSW) as packed codes (a row's
// piece = 4 quads of 64 bytes, lane-major as in the device layout; odd rows' quads q and q ^ 1 trade
// places) and then the pieces' scale words [SW][groups][16 rows]: 8.5-10 KB a slice pair.
constexpr int q_row_bytes(int sw) {  // a row's codes in a stage
  return sw * kQStageK / 2;
}
constexpr int q_code_bytes(int sw) {
  return 16 * q_row_bytes(sw);
}
constexpr int q_stage_bytes(int sw, int group) {  // codes, then a scale word a group of each row's pieces
  return q_code_bytes(sw) + 16 * sw * (kQStageK / group) * 4;
}
constexpr int q_slot_bytes(int sw) {  // groups of 32 at most
  return q_stage_bytes(sw, 32);
}
// Kernel variants by the linears' weight format (every linear alike): bf16, or MLX 4-bit with stages of
// 2, 4 or 8 slices (owned by warp pairs, quads, or all 8 consumer warps).
enum WFormat : int { kWBf16 = 0, kWMlx4 = 1, kWMlx4Sw4 = 2, kWMlx4Sw8 = 3 };
constexpr int sw_of(int w) {  // slices a stage
  return w == kWBf16 || w == kWMlx4 ? kSW : w == kWMlx4Sw4 ? 4 : 8;
}
template <int W>
constexpr int kSlotBytes = W == kWBf16 ? kStageBytes : q_slot_bytes(sw_of(W));
template <int W>  // ring slots: the bf16 ring's 4, or 4-bit slots in 120 KB, a multiple of the owners
constexpr int kRing = W == kWBf16 ? kStages
                                  : 120 * 1024 / kSlotBytes<W> / (kCWarps / sw_of(W)) * (kCWarps / sw_of(W));
static_assert(kRing<kWMlx4> == 12 && kRing<kWMlx4Sw4> == 6 && kRing<kWMlx4Sw8> == 3, "4-bit rings");
constexpr int kMaxK = 12288;   // the longest x (the down projection's)
constexpr int kHidden = 4096;  // the add + norm x (make_x: 16 elements a thread)
// The attention shape: q heads, KV heads, head dim; K/V/Q staging rows padded as attention_mma's.
constexpr int kHq = 32, kHk = 8, kGroup = kHq / kHk, kD = 128, kRS = kD + 8;
constexpr int kAttnBytes = (2 * attn::kC + 16) * kRS * 2;  // Ks, Vs [128][kRS], Qs [16][kRS]
constexpr int kBlock = 16;                                 // positions a KV pool block holds
// The positions the step takes (DecodeStep::bind): DecodeStep::kMaxPositions, or n in a bench build of
// decode_step.cu with -DTF_STEP_LIMIT=n (tools/step_variant.sh), to time the step past its limit.
#ifdef TF_STEP_LIMIT
constexpr int kLimit = TF_STEP_LIMIT;
#else
constexpr int kLimit = DecodeStep::kMaxPositions;
#endif
constexpr int kMaxChunks = (kLimit + attn::kC - 1) / attn::kC;  // the partials' 128-position chunks
constexpr int kRec = kD + 2;  // the merger's own partial in shared memory, floats: o [kD], max, sum
// A partial's record in global memory: 32-bit words o [kD], max, sum and two zeros (16-byte units), each an
// f32's bits; a word nobody has written since it was last merged holds kUnwritten (a NaN no arithmetic makes:
// the hardware's NaNs are 0x7fffffff, and a writer turns the bits kUnwritten into those). The merging CTA
// writes kUnwritten back over a round's records once it has folded them, so every word of a record is
// checked on its own, as the 64-bit words tagged with the launch's epoch were (until session 29), at half
// the bytes a round copies and checks.
constexpr int kRecW = kD + 4;
constexpr int kU = kRecW / 4;  // 16-byte units of a record (33)
constexpr uint32_t kUnwritten = 0xffffffffu;
#ifdef TF_STEP_MERGE_CHUNKS  // A/Bs (tools/step_variant.sh)
constexpr int kMergeChunks = TF_STEP_MERGE_CHUNKS;
#else
constexpr int kMergeChunks = 16;  // other chunks' partials a merge round brings in
#endif
static_assert(kMergeChunks * kGroup <= kAWarps * 32, "a round's records' last words: a thread each");
constexpr int kPownWords = (kGroup * kRec + 3) / 4 * 4;  // the own partial's words before a round's records
constexpr int kRoundWords = kGroup * kMergeChunks * kRecW;  // a merge round's buffer
// The merge's buffers in the attention's staging region (Ks, Vs, Qs: free once the merging CTA's last unit,
// the row's, is past its P V): the own partial (floats), then two rounds' records.
static_assert(kPownWords * 4 + 2 * kRoundWords * 4 <= kAttnBytes,
              "the merge's rounds must fit in Ks, Vs, Qs");
__device__ __forceinline__ uint32_t rec_word(float v) {
  const uint32_t u = __float_as_uint(v);
  return u == kUnwritten ? 0x7fffffffu : u;
}

// x kinds. kXAttnMerge: the o op, whose x (a copy) is the attention warps' output words.
enum XKind : int { kXCopy = 0, kXAddNorm = 1, kXAttnMerge = 2 };

// One op: a linear of the row, its x made by xkind. Activations are 32-bit words: bf16 bits in the low
// half, the writing launch's tag in the high half; a reader polls each word until its tag is the launch's.
struct Op {
  const unsigned char* wp;  // the weights, packed (pack_kernel / pack_q4_kernel)
  int sbytes;               // bytes of a stage (kStageBytes, or the 4-bit stage's codes + scales)
  int qsel;                 // 4-bit: the consumer's variant (q4_sel: subnormal codes and group size)
  int n, k, xkind, y_f32;
  const uint32_t* x;    // kXCopy / kXAttnMerge: x; kXAddNorm: the value added to the residual (null: none)
  const uint32_t* res;  // kXAddNorm: residual in
  uint32_t* res_out;    // kXAddNorm: residual + x, written by the CTA of the op's tile 0
  const __nv_bfloat16* nw;  // kXAddNorm: norm weight
  void* y;                  // words (y_f32: none, the logits go to Params::logits)
  int res_const;            // the residual was written before the launch (layer 0: its tag is not checked)
  int silu_out;             // gate_up: a tile is 8 gate and their 8 up features; it stores silu_mul of them
  int tile_begin;           // global index of the op's first tile (tiles are dealt round-robin to CTAs)
  int tiles;                // 16-feature tiles
  float eps;                // kXAddNorm
  // kXAttnMerge: one layer's K/V pool [slots][kHk][kD], q/k norm weights, the partials of (q head, chunk)
  // [kHq][kMaxChunks][kRecW] (32-bit words, kUnwritten where not written), the qkv words the attention
  // reads and its output words.
  __nv_bfloat16 *kp, *vp;
  const CUtensorMap *kmap, *vmap;  // the pools as tensor maps: a box is one head's rows of one block
  const __nv_bfloat16 *qn, *kn;
  uint32_t* part;
  const uint32_t* qkv;
  uint32_t* aout;
  __nv_bfloat16* dbg;  // debugging (DecodeStep::set_debug): the op's x as made, by the CTA of tile 0
};

// The launch's constants besides the op table.
struct Params {
  const Op* ops;
  int nops;
  const unsigned* epoch_word;  // the launch's epoch (step_prologue increments it before the launch)
  const int32_t* positions;    // begin_forward's metadata (DeviceMeta): the row's position, slot, table
  const int32_t* slots;
  const int32_t* row_seq;
  const int32_t* table_offsets;
  const int32_t* tables;
  const float* inv_freq;  // rope: [kD / 2]
  float rope_factor;      // the rope's attention factor (times sin and cos)
  float scale;            // attention scale
  float qk_eps;           // q/k norm eps
  float* logits;          // the lm_head's output (the y_f32 op), f32 [vocab]
  int early_bias;         // added to the merging CTAs' early chunks e (DecodeStep::set_early_bias)
  int ablate;             // the probe instance only (timing ablations, wrong bits): 1 no tile arithmetic,
                          // 2 MMAs on the raw 4-bit words (no dequantisation), 3 no consumer proxy fence
  // Benches (DecodeStep::set_probe; the probe instance only): timestamps [layer][CTA][kStampSlots] of the
  // attention's steps and the consumers' (DecodeStep::StampSlot), null: none.
  unsigned long long* stamps;
};
using SS = DecodeStep::StampSlot;
static_assert(SS::kStampOLast == SS::kStampQkvDone + 2, "qkv's (op % 4 == 0) and o's (1) slots");
constexpr int kStampSlots = DecodeStep::kStampSlots;
// The probe's timestamps of layer `layer` on CTA b, or null; stamp_row: of op `op`'s layer (4 ops a layer).
__device__ __forceinline__ unsigned long long* layer_row(unsigned long long* stamps, int layer, int G,
                                                         int b) {
  return stamps ? stamps + (int64_t(layer) * G + b) * kStampSlots : nullptr;
}
__device__ __forceinline__ unsigned long long* stamp_row(unsigned long long* stamps, int op, int G, int b) {
  return layer_row(stamps, op / 4, G, b);
}
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t saddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Named barriers: __syncwarp first (a warp leaving a per-lane polling loop is not converged) and the
// non-aligned forms.
__device__ __forceinline__ void nbar_sync(int id, int count) {
  __syncwarp();
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_consumers() {
  nbar_sync(1, kCWarps * 32);
}
__device__ __forceinline__ void abar() {
  nbar_sync(2, kAWarps * 32);
}
__device__ __forceinline__ void nbar_arrive(int id, int count) {
  __syncwarp();
  asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// barrier.red.and over `count` threads: whether p holds in every one of them.
__device__ __forceinline__ bool nbar_and(int id, int count, bool p) {
  __syncwarp();
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n barrier.red.and.pred q, %2, %3, p;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"(uint32_t(p)), "r"(id), "r"(count)
      : "memory");
  return r != 0;
}
// A merging CTA's consumer warps take part in the merge's rounds (merge_fold_help; they are idle then:
// their o op's x is this merge's output). Per round, on named barriers of all kHelpThreads: the attention
// warps bring the round in (kBarLanded), every thread checks its share of the round's words (kBarChecked:
// all there, or the attention warps copy the round again once its last words are seen, and every thread
// checks again), the consumers fold it and free the buffer (kBarRoundFolded).
constexpr int kHelpThreads = (kCWarps + kAWarps) * 32;
constexpr int kBarLanded = 3, kBarChecked = 4, kBarRoundFolded = 5;
// An attention unit's hand-overs (attention_unit / unit_scores_pv): Q and K staged (kBarUnitIn), the score
// MMAs done (kBarScored: Ks free), P V done and the partial written (kBarUnitOut: Vs and Qs free).
constexpr int kBarUnitIn = 6, kBarScored = 7, kBarUnitOut = 8;
// Whether the 16-byte units first, first + kHelpThreads, ... of a merge round (units of four record words)
// are all written (none kUnwritten); no branch a unit.
__device__ __forceinline__ bool round_units_ok(const uint32_t* mb, int units, int first) {
  bool ok = true;
#pragma unroll 4
  for (int i = first; i < units; i += kHelpThreads) {
    const uint4 v = *reinterpret_cast<const uint4*>(mb + 4 * i);
    ok &= (v.x != kUnwritten) & (v.y != kUnwritten) & (v.z != kUnwritten) & (v.w != kUnwritten);
  }
  return ok;
}
// Waits with a watchdog (seconds): a hang prints who waited for what and traps instead of spinning forever.
// What a wait_bar waits for (its hang message).
enum BarWait : int { kEmptyStage, kFullStage, kKChunk, kVChunk, kMergeRound };
__device__ void wait_bar(uint32_t bar, uint32_t parity, BarWait what, int j) {
  for (long long n = 0; !mbar_try_wait(bar, parity); ++n)
    if (n == (1ll << 24)) {
      static const char* const kWhat[] = {"empty stage", "full stage", "K chunk", "V chunk", "merge round"};
      printf("decode_step HANG block %d warp %d: %s %d parity %u\n", blockIdx.x, threadIdx.x / 32,
             kWhat[what], j, parity);
      __trap();
    }
  __syncwarp();
}
__device__ __forceinline__ uint32_t ldv(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long ldv64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __noinline__ void hang_word(const uint32_t* p, uint32_t w, uint32_t tag) {
  printf("decode_step HANG block %d thread %d: word %p tag %u, want %u\n", blockIdx.x, threadIdx.x, p,
         w >> 16, tag);
  __trap();
}
__device__ __forceinline__ float word_f(uint32_t w) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ uint32_t word_of(float v, uint32_t tag) {
  const __nv_bfloat16 h = __float2bfloat16(v);
  return (tag << 16) | *reinterpret_cast<const uint16_t*>(&h);
}
// Spins on the word at p until ok(word) (one load in flight); returns the word.
template <typename Ok>
__device__ __forceinline__ uint32_t spin_on(const uint32_t* p, Ok ok) {
  uint32_t v = ldv(p);
  for (long long n = 0; !ok(v); ++n) {
    v = ldv(p);
    if (n == (1ll << 26)) hang_word(p, v, 0);
  }
  return v;
}
// Polls words w[j] (at src(j)) until all carry `tag`. Not eager (all 32 lanes of the warp call it): one
// lane a warp -- the lowest with a word still without the tag -- spins on its first such word, then every
// lane reloads all its missing words together, until none is missing. (Every waiting thread of every CTA
// reloading all its words flooded the memory system, run 205; a spin a thread instead of a warp cost 0.2-
// 0.3% at 8192 positions and ~2.5% on the MLX 4-bit step, run 320; more loads in flight a spin 1-3%, run
// 319: the polls' traffic slows everything else.) Eager (few threads: the attention warps): every missing
// word reloaded each round.
template <int N, typename Src>
__device__ __forceinline__ void poll_words(uint32_t (&w)[N], Src src, uint32_t tag, bool eager = false) {
  for (long long n = 0;; ++n) {
    if (eager) {
      bool ready = true;
#pragma unroll
      for (int j = 0; j < N; ++j)
        if ((w[j] >> 16) != tag) ready = false, w[j] = ldv(src(j));
      if (ready) return;
      if (n == (1ll << 26))  // unrolled: a run-time index would put w[] in local memory
#pragma unroll
        for (int j = 0; j < N; ++j)
          if ((w[j] >> 16) != tag) hang_word(src(j), w[j], tag);
      continue;
    }
    int first = -1;
#pragma unroll
    for (int j = N - 1; j >= 0; --j)
      if ((w[j] >> 16) != tag) first = j;
    const unsigned waiting = __ballot_sync(0xffffffffu, first >= 0);
    if (waiting == 0) return;
    const bool spinner = first >= 0 && int(threadIdx.x % 32) == __ffs(waiting) - 1;
    uint32_t v = 0;
    if (spinner) v = spin_on(src(first), [&](uint32_t x) { return (x >> 16) == tag; });
    __syncwarp();
#pragma unroll
    for (int j = 0; j < N; ++j)
      if ((w[j] >> 16) != tag) w[j] = spinner && j == first ? v : ldv(src(j));
    if (n == (1ll << 26)) hang_word(src(0), w[0], tag);
  }
}
// N words at p[i * stride], loaded together; with `poll`, until they all carry `tag`.
template <int N>
__device__ __forceinline__ void load_words(uint32_t (&w)[N], const uint32_t* p, int stride, bool poll,
                                           uint32_t tag) {
#pragma unroll
  for (int j = 0; j < N; ++j) w[j] = ldv(p + j * stride);
  if (poll)
    poll_words(
        w, [&](int j) { return p + j * stride; }, tag);
}

__device__ __forceinline__ void ldv4(uint32_t* w, const uint32_t* p) {
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "l"(p)
               : "memory");
}
// A copy op's x (make_x): ng <= NG groups of 8 consecutive words, group q at base + kCWarps * 32 * 8 * q,
// loaded as 16-byte vectors and polled eagerly (every half-group holding a missing word reloaded each pass)
// until every word carries `tag`. A warp's load of its lanes' groups (32 bytes apart) touches 32 sectors
// whether it moves one word a lane or four: loaded word by word (until session 29) the copy ops' x cost 4x
// the requests, and the polls' traffic slowed everything else (run 329: 16-byte loads 512 -3.7%, 8192
// -3.3%, MLX 4-bit 512 -13%; eager 4-bit -1% against a spinning lane a warp, bf16 the same).
template <int NG>
__device__ __forceinline__ void poll_groups(uint32_t (&w)[NG][8], const uint32_t* base, int ng,
                                            uint32_t tag) {
  constexpr int kGS = kCWarps * 32 * 8;  // words between a thread's groups
#pragma unroll
  for (int q = 0; q < NG; ++q)
    if (q < ng) ldv4(&w[q][0], base + kGS * q), ldv4(&w[q][4], base + kGS * q + 4);
  for (long long n = 0;; ++n) {
    bool ready = true;
#pragma unroll
    for (int q = 0; q < NG; ++q)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        bool miss = false;
#pragma unroll
        for (int j = 0; j < 4; ++j) miss |= q < ng && (w[q][4 * hf + j] >> 16) != tag;
        if (miss) ready = false, ldv4(&w[q][4 * hf], base + kGS * q + 4 * hf);
      }
    if (ready) return;
    if (n == (1ll << 26)) hang_word(base, w[0][0], tag);
  }
}

// The op's x into shared memory (consumer warps), polling each word.
__device__ void make_x(const Op& o, __nv_bfloat16* xs, float* nred, bool writer, uint32_t tag) {
  const int tid = threadIdx.x;
  const int k = o.k;
  constexpr int kT = kCWarps * 32;
  if (o.xkind != kXAddNorm) {  // a copy, k = 4096 or 12288: groups of 8, all loads in flight
    constexpr int kGMax = kMaxK / 8 / kT;
    const int ng = k / 8 / kT;
    uint32_t w[kGMax][8];
    // Every group's words loaded before the first poll (o's 2 groups a thread, down's 6): polled group by
    // group, each group waited a round trip of its own (runs 313-314: 8192 -0.5%, 512 -0.8%, 4-bit -4.5%).
    poll_groups<kGMax>(w, o.x + tid * 8, ng, tag);
    bar_consumers();  // xs is free: every warp is past the previous op's MMAs
#pragma unroll
    for (int q = 0; q < kGMax; ++q) {
      if (q >= ng) break;
      uint32_t r[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) r[e] = (w[q][2 * e] & 0xffffu) | (w[q][2 * e + 1] << 16);
      *reinterpret_cast<uint4*>(xs + (tid + kT * q) * 8) = make_uint4(r[0], r[1], r[2], r[3]);
    }
  } else {  // add + RMSNorm, k = kHidden: kV elements a thread at i = tid + kT j
    constexpr int kV = kHidden / kT;
    float nwv[kV], v[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j) nwv[j] = __bfloat162float(o.nw[tid + kT * j]);  // constant: before any wait
    float ss = 0.f;
#pragma unroll
    for (int h = 0; h < kV; h += 8) {  // 8 at a time: fewer live registers (x's 16 words and the residual's
      // loaded before polling, or each group's residual and x words loaded together: lost, runs 314, 324)
      uint32_t rw[8], xw[8];
      load_words<8>(rw, o.res + tid + kT * h, kT, !o.res_const, tag);
      if (o.x) load_words<8>(xw, o.x + tid + kT * h, kT, true, tag);
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
    const float inv = norm_inv(tot, k, o.eps);
#pragma unroll
    for (int j = 0; j < kV; ++j)
      xs[tid + kT * j] = __float2bfloat16(norm_out(v[j], inv, __fadd_rn(nwv[j], 0.f)));
  }
  bar_consumers();
  if (writer && o.dbg)
    for (int i = tid; i < k; i += kT) o.dbg[i] = xs[i];
}

// Position p's slot in the paged K/V pool (attention_mma.cu's Tile::slot_of for blocks of kBlock).
__device__ __forceinline__ int kv_slot(const int32_t* table, int p) {
  return table[p / kBlock] * kBlock + p % kBlock;
}

// RMS norm + NeoX rope of one head held by a warp (element lane + 32 j): elementwise.cu's
// qk_norm_rope_kv_kernel<4> arithmetic (rotary_dim = head_dim), values rounded to bf16 as it does. rsin /
// rcos: sincosf(pos * inv_freq[i]) times the attention factor, made before the unit's poll.
__device__ __forceinline__ void norm_rope_head(float (&v)[4], const __nv_bfloat16* w, const float* rsin,
                                               const float* rcos, float eps, int lane) {
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) ss = __fmaf_rn(v[j], v[j], ss);
  const float inv = norm_inv(row_sum<32>(ss, nullptr), kD, eps);
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

// chunk_scores (attention_chunk.cuh) for decode's 4 real rows by the consumer warps, warp cw the keys of
// n-tile pair cw (16 keys): the same bits. Each score's MMA chain is its own; the row max is exact whatever
// the order (each warp's quad max, then the 8 in shared memory); each P value is elementwise; the row sum is
// added in chunk_scores' order (n-tiles 0..15, then the quad shuffles) by every warp from all warps' P values
// in shared memory (Pf: [16][32 lanes][2] floats in the Qs region, free once every warp's MMAs are done).
// Leaves in s what chunk_pv needs (row g's P, zeros for the padding rows g + 8), and mc / lc of row g. Once
// every warp's MMAs are done (Ks read and fenced), arrives on kBarScored: the attention warps may stage the
// next unit's K rows.
__device__ __forceinline__ void scores_pair(const __nv_bfloat16* Qs, const __nv_bfloat16* Ks, float* Pf,
                                            float* pmax, int cw, int lane, int c0, int pos, float scale,
                                            float (*s)[4], float& mc, float& lc) {
  const int qd = lane % 4, mi = lane / 8, li = lane % 8, g = lane / 4;
  float s2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
  for (int t = 0; t < kD / 16; ++t) {
    uint32_t a[4], bb[4];
    attn::ldsm_x4(a, Qs + ((mi % 2) * 8 + li) * kRS + t * 16 + (mi / 2) * 8);
    attn::ldsm_x4(bb, Ks + (cw * 16 + (mi / 2) * 8 + li) * kRS + t * 16 + (mi % 2) * 8);
    attn::mma(s2[0], a, bb[0], bb[1]);
    attn::mma(s2[1], a, bb[2], bb[3]);
  }
  const bool pad = g >= kGroup;  // rows 4-7 (and all rows g + 8): padding pairs
  float mx = -INFINITY;
  if (!pad) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int p = c0 + (2 * cw + j) * 8 + qd * 2 + e;
        float v = __fmul_rn(s2[j][e], scale);
        v = (p >= 0 && p <= pos) ? v : -INFINITY;
        s2[j][e] = v;
        mx = fmaxf(mx, v);
      }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if (qd == 0) pmax[cw * 8 + g] = mx;
  fence_proxy_async();  // this thread's reads of Ks before the next unit's K is copied into it
  bar_consumers();      // every warp's MMAs (Qs and Ks are free) and quad maxima
  nbar_arrive(kBarScored, kHelpThreads);
  mx = pmax[g];
#pragma unroll
  for (int w = 1; w < kCWarps; ++w) mx = fmaxf(mx, pmax[w * 8 + g]);
  mc = mx;
  const float base = mx == -INFINITY ? 0.f : mx;
  if (!pad) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        Pf[((2 * cw + j) * 32 + lane) * 2 + e] =
            __bfloat162float(__float2bfloat16_rn(__expf(__fsub_rn(s2[j][e], base))));
  }
  bar_consumers();  // every warp's P values
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

// What an attention unit's chain needs after its poll, in shared memory (fetched before the poll).
struct AttnParams {
  __nv_bfloat16 qn[kD], kn[kD];      // q / k norm weights
  float rsin[kD / 2], rcos[kD / 2];  // the rope of the row's position
  uint32_t* part;                    // the op's partials
  uint32_t* aout;                    // the op's output words
  __nv_bfloat16 *kdst, *vdst;        // the new row's K / V in the pool (head h)
  float eps;
  float pmax[kCWarps * 8];     // scores_pair's quad maxima
  unsigned long long bars[4];  // mbarriers: K and V staging (a phase a unit), the merge's two buffers
};
constexpr int kAttnParamBytes = (int(sizeof(AttnParams)) + 127) / 128 * 128;
constexpr int kAttnRegion = kAttnBytes + kAttnParamBytes;  // Ks, Vs, Qs, then the params

// The row's position and block table and the attention's constants, read once by each attention warp
// before its first unit (registers: a reference to the kernel's parameters could copy them to the stack).
struct Row {
  int pos, slot;
  const int32_t* table;
};

// Blocks of chunk c whose 16 rows all precede the row's position (one tensor-map box each).
__device__ __forceinline__ int full_blocks(int pos, int c) {
  return min(attn::kC / kBlock, max(0, (pos - c * attn::kC) / kBlock));
}
// Thread at < 8: the pool block of chunk c's block `at` (the block table's entry) where that block is full,
// loaded ahead of stage_kv (a global load's round trip is ~2 us under the weight stream).
__device__ __forceinline__ int block_of(const Row& row, int c, int at) {
  return at < full_blocks(row.pos, c) ? row.table[c * (attn::kC / kBlock) + at] : 0;
}

// Chunk c of KV head h from the pool into shared memory (KV = 0: the K rows into Ks, 1: the V rows into Vs,
// 2: both), on mbarriers kbar / vbar (thread 0 arms them with the chunk's bytes): each full block (16 rows
// before the row's position) by one tensor-map box of 16 padded rows (threads 0-7: `blk` is their block's
// pool block, block_of; 256-byte copies a row, 256 of them a chunk, cost ~2 us of issue, runs 247-248),
// the rows of a partial block before the position by a bulk copy each, rows past it zeroed (P V multiplies
// them by zeros: they must be finite), the row's own left out (its task writes it). The region's earlier
// accesses must be fenced (fence_proxy_async) and past a barrier.
template <int KV>
__device__ __forceinline__ void stage_kv(const Op& o, const Row& row, int h, int c, __nv_bfloat16* Ks,
                                         __nv_bfloat16* Vs, uint32_t kbar, uint32_t vbar, int blk) {
  const int at = threadIdx.x - (kProducer + 1) * 32;
  constexpr int kT = kAWarps * 32;
  const int pos = row.pos, c0 = c * attn::kC, full = full_blocks(pos, c);
  if (at == 0) {
    const uint32_t bytes = uint32_t(full * kBlock) * kRS * 2 +
                           uint32_t(max(0, min(attn::kC - full * kBlock, pos - c0 - full * kBlock))) * kD * 2;
    if (KV != 1) mbar_arrive_expect_tx(kbar, bytes);
    if (KV != 0) mbar_arrive_expect_tx(vbar, bytes);
  }
  if (at < full) {
    if (KV != 1) tma_load_3d(saddr(Ks + at * kBlock * kRS), o.kmap, 0, h, blk * kBlock, kbar);
    if (KV != 0) tma_load_3d(saddr(Vs + at * kBlock * kRS), o.vmap, 0, h, blk * kBlock, vbar);
  }
  for (int r = full * kBlock + at; r < attn::kC; r += kT) {  // the row's chunk only
    const int p = c0 + r;
    if (p < pos) {
      const int64_t off = (int64_t(kv_slot(row.table, p)) * kHk + h) * kD;
      if (KV != 1) bulk_copy_g2s(saddr(Ks + r * kRS), o.kp + off, kD * 2, kbar);
      if (KV != 0) bulk_copy_g2s(saddr(Vs + r * kRS), o.vp + off, kD * 2, vbar);
    } else if (p > pos) {
#pragma unroll
      for (int u = 0; u < kD / 8; ++u) {
        if (KV != 1) reinterpret_cast<uint4*>(Ks + r * kRS)[u] = make_uint4(0, 0, 0, 0);
        if (KV != 0) reinterpret_cast<uint4*>(Vs + r * kRS)[u] = make_uint4(0, 0, 0, 0);
      }
    }
  }
}

// The q/k/v words of KV head h's unit that attention warp aw polls (element lane + 32 j; kv: the unit holds
// the row): task 0 / 1 (q heads 2 aw, 2 aw + 1 of the group; warp 2: the new row's k), then v (warp 2). As
// scalars: an array indexed at run time would live in local memory.
struct UnitWords {
  const uint32_t *s0, *s1, *s2;
  bool l0, l1, l2;  // whether the thread polls task 0's, task 1's, v's words
  __device__ UnitWords(const Op& o, int h, bool kv, int aw, int lane)
      : s0(aw < 2 ? o.qkv + (h * kGroup + 2 * aw) * kD + lane : o.qkv + kHq * kD + h * kD + lane),
        s1(o.qkv + (h * kGroup + 2 * aw + 1) * kD + lane),
        s2(o.qkv + (kHq + kHk) * kD + h * kD + lane),
        l0(aw < 2 || kv),
        l1(aw < 2),
        l2(aw == 2 && kv) {}
  __device__ bool live(int t) const { return t == 0 ? l0 : t == 1 ? l1 : l2; }
  __device__ const uint32_t* src(int q) const { return (q < 4 ? s0 : q < 8 ? s1 : s2) + 32 * (q % 4); }
};

// One attention unit by the CTA's attention warps (their own shared memory: the consumers go on with the
// ring meanwhile): KV head h, chunk c of the row. Tasks: warps 0 and 1 q heads 2 aw and 2 aw + 1 of the
// group (q norm + rope of the qkv words, polled), warp 2 -- in the chunk holding the row -- the new token's
// k (norm + rope) and v, into shared memory and the pool; all stage the chunk's older K/V rows (unless the
// unit before did: `staged`). Then the CTA's consumer warps compute the chunk's partial of the group's 4
// heads (unit_scores_pv); the unit holding the row (the merger, always its CTA's last unit of the layer)
// merges the chunks' partials (combine_pair_u's order) into the o op's x words with them. nc >= 0: the CTA's
// next unit of the layer is (KV head nh, chunk nc), whose K rows are staged once this unit's scores are made
// and its V rows once its P V is, so that their loads overlap this unit's work.
__device__ __forceinline__ void attention_unit(const Op& o, const Row& row, int h, int c, bool staged, int nh,
                                               int nc, __nv_bfloat16* Ks, uint32_t tag, uint32_t par,
                                               uint32_t& mpar, unsigned long long* st, int ui,
                                               uint32_t (&pre)[12]) {
  const int at = threadIdx.x - (kProducer + 1) * 32, aw = at / 32, lane = at % 32;
  auto stamp = [&](int slot) {
    if (st && at == 0) st[slot] = gtime();
  };
  const int us = min(ui, SS::kStampUnits - 1) * SS::kStampUnitEvents;
  constexpr int kT = kAWarps * 32;
  const int pos = row.pos;
  const int c0 = c * attn::kC;
  __nv_bfloat16* Vs = Ks + attn::kC * kRS;
  __nv_bfloat16* Qs = Vs + attn::kC * kRS;
  AttnParams* P = reinterpret_cast<AttnParams*>(reinterpret_cast<unsigned char*>(Ks) + kAttnBytes);
  const bool kv_here = pos / attn::kC == c;
  const uint32_t kbar = saddr(&P->bars[0]), vbar = kbar + 8, mbar = kbar + 16;
  fence_proxy_async();  // this thread's accesses to the region before the bulk copies into it
  abar();               // the unit before is done with the region (its MMAs, its merge)
  stamp(us);
  if (!staged) stage_kv<2>(o, row, h, c, Ks, Vs, kbar, vbar, block_of(row, c, at));
  const int nblk = nc >= 0 ? block_of(row, nc, at) : 0;  // the next unit's, used after this unit's scores
  for (int i = at; i < 12 * (kRS / 8); i += kT)          // Q rows 4-15: padding pairs, zeros
    *reinterpret_cast<uint4*>(Qs + (kGroup + i / (kRS / 8)) * kRS + (i % (kRS / 8)) * 8) =
        make_uint4(0, 0, 0, 0);
  for (int i = at; i < kD && ui == 0; i += kT)  // the layer's (later units find them there)
    P->qn[i] = o.qn[i], P->kn[i] = o.kn[i];
  if (at == 0) {
    P->part = o.part, P->aout = o.aout;
    const int64_t dst = (int64_t(row.slot) * kHk + h) * kD;
    P->kdst = o.kp + dst, P->vdst = o.vp + dst;
  }
  static_assert(kAWarps == 3 && kGroup == 4, "the task split below");
  constexpr int kTasks = 2;
  constexpr int kW = 4 * (kTasks + 1);  // + v's words (the k/v task)
  static_assert(kW == sizeof(pre) / sizeof(pre[0]), "the next unit's words");
  const UnitWords uw(o, h, kv_here, aw, lane);
  auto src = [&](int q) { return uw.src(q); };
  abar();  // the params are in
  uint32_t w[kW];
#pragma unroll
  for (int q = 0; q < kW; ++q) w[q] = !uw.live(q / 4) ? (tag << 16) : staged ? pre[q] : ldv(src(q));
  poll_words(w, src, tag, true);
  stamp(us + 1);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kTasks; ++i) {
    const int task = aw < 2 ? 2 * aw + i : kGroup;
    if (!uw.live(i)) continue;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = word_f(w[4 * i + j]);
    if (task < kGroup) {  // q head `task` of the group
      norm_rope_head(v, P->qn, P->rsin, P->rcos, P->eps, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) Qs[task * kRS + lane + 32 * j] = __float2bfloat16_rn(v[j]);
    } else {  // the new token's k (normed, rotated) and v: shared memory and the pool
      norm_rope_head(v, P->kn, P->rsin, P->rcos, P->eps, lane);
      const int r = pos - c0;
      __nv_bfloat16 *kd = P->kdst, *vd = P->vdst;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __nv_bfloat16 kb = __float2bfloat16_rn(v[j]);
        __nv_bfloat16 vb;
        *reinterpret_cast<uint16_t*>(&vb) = uint16_t(w[4 * kTasks + j] & 0xffffu);
        Ks[r * kRS + lane + 32 * j] = kb, Vs[r * kRS + lane + 32 * j] = vb;
        kd[lane + 32 * j] = kb, vd[lane + 32 * j] = vb;
      }
    }
  }
  wait_bar(kbar, par, kKChunk, c);  // (V is waited for by the consumers before P V)
  abar();                           // and the new row's task
  stamp(us + 2);
  uint32_t* part = P->part;
  const int own = pos / attn::kC;  // chunks before the row's
  // The chunk's scores, P V and partial: the CTA's consumer warps (unit_scores_pv), meanwhile the next
  // unit's K rows (once the score MMAs are done) and V rows (once P V is) are staged.
  nbar_arrive(kBarUnitIn, kHelpThreads);
  // The next unit's words (`pre`, its first poll), loaded while the consumers compute this one: 8192 and
  // 16000 -0.4%, 512 the same (run 315; session 25's run 301 lost with them held across the attention warps'
  // own MMAs, since gone to the consumers).
  if (nc >= 0) {
    const UnitWords nw(o, nh, pos / attn::kC == nc, aw, lane);
#pragma unroll
    for (int q = 0; q < kW; ++q)
      if (nw.live(q / 4)) pre[q] = ldv(nw.src(q));
  }
  nbar_sync(kBarScored, kHelpThreads);
  stamp(us + 3);
  if (nc >= 0) stage_kv<0>(o, row, nh, nc, Ks, Vs, kbar, vbar, nblk);
  nbar_sync(kBarUnitOut, kHelpThreads);
  if (nc >= 0) stage_kv<1>(o, row, nh, nc, Ks, Vs, kbar, vbar, nblk);
  stamp(us + 4);
  stamp(us + 5);
  if (!kv_here) return;
  // The merge (combine_pair_u's order: chunks in increasing order from (-inf, 0, 0), then bf16(o / l)). The
  // other chunks' partials come into shared memory kMergeChunks at a time (after the own partial, two rounds'
  // buffers in Ks, Vs and Qs), by one bulk copy a head (its records of the round are contiguous), then
  // checked word by word without a branch a word by these warps and the CTA's consumer warps, which fold the
  // round (two dims of one head a thread) and write the output words (merge_fold_help; folded here, 8 dims a
  // thread, the merge paced ~0.27 us a chunk at 8k, run 305; with the consumers 8192 -3.9%, 16000 -6.5%, run
  // 309). Only a row in its first chunk (no other chunks) is finished here. (The 16-byte cp.async gather and
  // a branch a word took ~10 us a round, runs 249-252.) A round with a word not yet written (units still
  // running) is copied whole again by its bulk copies once its records' last words are seen (until session 26
  // the missing 16-byte units went again by cp.async: the same time, run 313, and a second copy path). A
  // round's bulk copy waits until the last word of each of its records is written (a thread a record; the
  // other words of a record come from the same unit's other warps at about the same time, and the check below
  // still reads every word): a round issued while units still run went the retry way, ~8 us a round (run
  // 296). Each round's last words are loaded while the round before lands and folds.
  auto tail_of = [&](int cb, int nb) {  // the record's last value word (its sum)
    return part + (int64_t(h * kGroup + at / nb) * kMaxChunks + cb + at % nb) * kRecW + kD + 1;
  };
  // Not below kPrewait chunks (one round; the row's units all run at once): the first load's round trip cost
  // 0.7% at 512 positions, the retries it saves 1% at 2048 (runs 297-299: with it from 8 chunks, 2048 4.296
  // -> 4.230 ms, 8192 4.95 -> 4.93, 512 and the 4-bit step unchanged).
  constexpr int kPrewait = 8;
  auto written = [&](uint32_t x) { return x != kUnwritten; };  // a record's last word is written
  // Round r goes to buffer r % 2 on mbarrier bars[2 + r % 2] (mpar: bit b the phase of buffer b's); round
  // r + 1 is copied in while the consumers fold round r (run 326: 8192 -1.1%, MLX 4-bit at 8192 -2%, 512,
  // 2048 and 16000 the same; two buffers of 12 or 8 chunks and one of 24 lost, runs 325-326).
  uint32_t* const mb0 = reinterpret_cast<uint32_t*>(Ks) + kPownWords;
  auto issue = [&](int cb, int nb, int buf) {  // round cb's bulk copies (a head's records each)
    const uint32_t bar = mbar + 8 * buf;
    if (at == 0) mbar_arrive_expect_tx(bar, uint32_t(kGroup * nb * kRecW * 4));
    if (at < kGroup)
      bulk_copy_g2s(saddr(mb0 + buf * kRoundWords + at * nb * kRecW),
                    part + (int64_t(h * kGroup + at) * kMaxChunks + cb) * kRecW, uint32_t(nb * kRecW * 4),
                    bar);
  };
  // This thread's record's last word in the round after the one being copied (0: written, or none).
  auto tail_load = [&](int cb) {
    const int nn = min(kMergeChunks, own - cb);
    return at < kGroup * nn ? ldv(tail_of(cb, nn)) : 0u;
  };
  const int nb0 = min(kMergeChunks, own);
  if (own >= kPrewait && at < kGroup * nb0) spin_on(tail_of(0, nb0), written);
  fence_proxy_async();  // the region's reads and writes before the bulk copies into it
  abar();               // pown is complete (and round 0's last words are written)
  const float* pown = reinterpret_cast<const float*>(Ks);
  uint32_t tw = 0;
  if (own > 0) issue(0, nb0, 0), tw = tail_load(kMergeChunks);
  for (int cb = 0, r = 0; cb < own; cb += kMergeChunks, ++r) {
    const int nb = min(kMergeChunks, own - cb), buf = r & 1;  // chunks cb .. cb + nb - 1 of the 4 heads
    const uint32_t* mb = mb0 + buf * kRoundWords;
    long long n = 0;
    for (;; ++n) {  // the round's copy, again (after its last words are seen) until every word is there
      if (n > 0) {
        if (at < kGroup * nb) spin_on(tail_of(cb, nb), written);
        abar();  // the round's last words are written
        issue(cb, nb, buf);
      }
      wait_bar(mbar + 8 * buf, (mpar >> buf) & 1u, kMergeRound, cb);
      mpar ^= 1u << buf;
      if (cb == kMergeChunks && n == 0) stamp(SS::kStampRound1Landed);
      nbar_arrive(kBarLanded, kHelpThreads);  // the consumers check their share too
      const bool ok = round_units_ok(mb, kGroup * nb * kU, kCWarps * 32 + at);
      fence_proxy_async();  // the check's reads of mb before a copy into it
      if (nbar_and(kBarChecked, kHelpThreads, ok)) break;
      if (n == (1ll << 20)) hang_word(part, 0, tag);
    }
    if (cb == kMergeChunks) {
      stamp(SS::kStampRound1Checked);
      if (st && at == 0) st[SS::kStampRound1Retries] = (unsigned long long)(n);
    }
    stamp(SS::kStampRoundIn + 2 * min(r, SS::kStampRounds - 1));
    // The next round: its last words waited for and its copy issued into the other buffer (free: its round
    // was folded before this one landed) while the consumers fold this round.
    if (const int nn = min(kMergeChunks, own - cb - kMergeChunks); nn > 0) {
      if (at < kGroup * nn && !written(tw)) spin_on(tail_of(cb + kMergeChunks, nn), written);
      abar();
      issue(cb + kMergeChunks, nn, buf ^ 1);
      if (cb == 0) stamp(SS::kStampRound1Issued);
      tw = tail_load(cb + 2 * kMergeChunks);
    }
    nbar_sync(kBarRoundFolded, kHelpThreads);  // folded (the last round: the output words written)
    stamp(SS::kStampRoundIn + 1 + 2 * min(r, SS::kStampRounds - 1));
  }
  if (own > 0) {
    stamp(SS::kStampAout);
  } else if (at < kGroup * (kD / 8)) {  // the row's chunk alone: item = 8 dims of one of the group's heads
    const int gi = at / (kD / 8), d0 = (at % (kD / 8)) * 8;
    float m = -INFINITY, l = 0.f, ov[8];
    const attn::MergeFactors f = attn::merge_chunk(m, l, pown[gi * kRec + kD], pown[gi * kRec + kD + 1]);
#pragma unroll
    for (int i = 0; i < 8; ++i) ov[i] = attn::merge_out(0.f, pown[gi * kRec + d0 + i], f);
    uint32_t* dst = P->aout + (h * kGroup + gi) * kD + d0;
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = word_of(attn::finish_out(ov[i], l), tag);
    stamp(SS::kStampAout);
  }
}

// One attention unit's scores, P V and partial by the CTA's consumer warps (they are idle then: their
// next op is the o projection, whose x is the attention's output), warp cw the keys of n-tile pair cw and
// P V's output dims 16 cw .. 16 cw + 15, after the attention warps have staged Q and K (kBarUnitIn). The
// partial as a record of 32-bit words (kRecW: o [kD], max, sum, two zeros; f32 bits, rec_word); the unit
// holding the row (the merger) keeps its own in shared memory instead (Ks, free once every warp is past the
// score MMAs), [kGroup][kRec] floats.
__device__ __forceinline__ void unit_scores_pv(const Op& o, int pos, int h, int c, __nv_bfloat16* Ks,
                                               float scale, uint32_t par) {
  const int cw = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
  __nv_bfloat16* Vs = Ks + attn::kC * kRS;
  __nv_bfloat16* Qs = Vs + attn::kC * kRS;
  AttnParams* P = reinterpret_cast<AttnParams*>(reinterpret_cast<unsigned char*>(Ks) + kAttnBytes);
  float sc[16][4], mc, lc, oc[2][4];
  nbar_sync(kBarUnitIn, kHelpThreads);
  scores_pair(Qs, Ks, reinterpret_cast<float*>(Qs), P->pmax, cw, lane, c * attn::kC, pos, scale, sc, mc, lc);
  wait_bar(saddr(&P->bars[1]), par, kVChunk, c);
  attn::chunk_pv_pair<kD>(Vs, lane, sc, oc, cw);
  fence_proxy_async();  // this thread's reads of Vs before the next unit's V is copied into it
  if (g < kGroup) {
    if (pos / attn::kC == c) {
      float* pown = reinterpret_cast<float*>(Ks) + g * kRec;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        pown[(2 * cw + j) * 8 + qd * 2] = oc[j][0], pown[(2 * cw + j) * 8 + qd * 2 + 1] = oc[j][1];
      if (cw == 0 && qd == 0) pown[kD] = mc, pown[kD + 1] = lc;
    } else {
      uint32_t* dst = o.part + (int64_t(h * kGroup + g) * kMaxChunks + c) * kRecW;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        *reinterpret_cast<uint2*>(dst + (2 * cw + j) * 8 + qd * 2) =
            make_uint2(rec_word(oc[j][0]), rec_word(oc[j][1]));
      if (cw == 0 && qd == 0)
        *reinterpret_cast<uint4*>(dst + kD) = make_uint4(rec_word(mc), rec_word(lc), 0, 0);
    }
  }
  nbar_arrive(kBarUnitOut, kHelpThreads);
}

// A merge's rounds by a merging CTA's consumer warps (own > 0 chunks before the row's): each round the
// attention warps bring in (attention_unit's merge) checked (their share) and folded in chunk order, then
// the own partial and the output words (the last round). Thread i folds dims d0, d0 + 1 of
// head gi of the group: per dim the same merge_chunk / merge_out sequence as the attention warps' 8-dim
// items, so the same bits. Once a round is folded its records in global memory are written kUnwritten
// again (for the next launch's check), after the fold's arrival: off the attention warps' way.
__device__ __forceinline__ void merge_fold_help(const Op& o, int h, int own, const __nv_bfloat16* attn_smem,
                                                uint32_t tag) {
  const int ct = threadIdx.x;
  static_assert(kCWarps * 32 == kGroup * kD / 2, "a consumer thread folds two dims");
  const int gi = ct / (kD / 2), d0 = (ct % (kD / 2)) * 2;
  const float* pown = reinterpret_cast<const float*>(attn_smem);
  const uint32_t* mb0 = reinterpret_cast<const uint32_t*>(attn_smem) + kPownWords;
  float m = -INFINITY, l = 0.f, ov[2] = {0.f, 0.f};
  for (int cb = 0, r = 0; cb < own; cb += kMergeChunks, ++r) {
    const int nb = min(kMergeChunks, own - cb);
    const uint32_t* mb = mb0 + (r & 1) * kRoundWords;  // round r's buffer (attention_unit)
    for (bool ok = false; !ok;) {  // the round, copied again until every word is there (attention_unit)
      nbar_sync(kBarLanded, kHelpThreads);
      ok = round_units_ok(mb, kGroup * nb * kU, ct);
      fence_proxy_async();  // the check's reads of mb before a copy into it
      ok = nbar_and(kBarChecked, kHelpThreads, ok);
    }
    // (not unrolled: unrolled 4 or 8 it cost 8192 +1.2%, 512 +2.7%, run 309)
#pragma unroll 1
    for (int q = 0; q < nb; ++q) {
      const uint32_t* rec = mb + (gi * nb + q) * kRecW;
      const attn::MergeFactors f =
          attn::merge_chunk(m, l, __uint_as_float(rec[kD]), __uint_as_float(rec[kD + 1]));
      const uint2 v = *reinterpret_cast<const uint2*>(rec + d0);
      ov[0] = attn::merge_out(ov[0], __uint_as_float(v.x), f);
      ov[1] = attn::merge_out(ov[1], __uint_as_float(v.y), f);
    }
    if (cb + kMergeChunks >= own) {  // the own partial, then the output words
      const attn::MergeFactors f = attn::merge_chunk(m, l, pown[gi * kRec + kD], pown[gi * kRec + kD + 1]);
      uint32_t* dst = o.aout + (h * kGroup + gi) * kD + d0;
#pragma unroll
      for (int i = 0; i < 2; ++i)
        dst[i] = word_of(attn::finish_out(attn::merge_out(ov[i], pown[gi * kRec + d0 + i], f), l), tag);
    }
    fence_proxy_async();  // these reads of mb before the next round's bulk copies
    nbar_arrive(kBarRoundFolded, kHelpThreads);
    for (int hh = 0; hh < kGroup; ++hh) {  // the round's records of head hh: nb * kU units, contiguous
      uint4* r = reinterpret_cast<uint4*>(o.part + (int64_t(h * kGroup + hh) * kMaxChunks + cb) * kRecW);
      for (int i = ct; i < nb * kU; i += kCWarps * 32)
        r[i] = make_uint4(kUnwritten, kUnwritten, kUnwritten, kUnwritten);
    }
  }
}

// Position s of a tile's stages (in the order the producer sends them) -> the packed stage: owner s %
// owners, its part s / owners (parts: the pieces of a slice, k / 8 / sk; sk: kStageK or kQStageK).
__host__ __device__ inline int packed_stage(int s, int k, int owners, int sk) {
  const int parts = k / kSlices / sk;
  return (s % owners) * parts + s / owners;
}

// Shared memory: the ring, x, the attention region, the slice sums, the norm partials, the mbarriers and
// the slots' metadata.
template <int W>
constexpr size_t kSmemBytes = size_t(kRing<W>) * kSlotBytes<W> + kMaxK * 2 + kAttnRegion +
                              (kRed * kSlices * 16 + 8) * 4 + 3 * kRing<W> * 8 + 2 * kRing<W> * 4;

// The 4-bit consumer's variants: plain or subnormal codes (quant_common.cuh's kMlxBf16 / kMlxBf16Sub) x
// groups of 32, 64, 128 (gshift 0-2: a chunk's group is its index >> gshift).
__host__ __device__ constexpr int q4_sel(bool subnormal, int gshift) {
  return (subnormal ? 3 : 0) + gshift;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t r;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(r) : "r"(addr));
  return r;
}
// One warp's piece of a 4-bit stage (16 chunks of its K slice) into acc: for each chunk the bf16 weights
// dequant<KIND, 4> makes of rows g and g + 8 (the values linear_quantized multiplies), then mma_chunk as
// the bf16 loop: the bits of linear_quantized, which are linear_bf16's on the dequantized weight. cb: the
// piece's codes (+ 16 t), sb: its scale words, xb: its x (+ 16 t).
template <int SW, int KIND, int GS, bool kRaw = false>
__device__ __forceinline__ void q4_piece(float (&acc)[4], uint32_t cb, uint32_t sb, uint32_t xb, int g) {
  constexpr int kQRowBytes = q_row_bytes(SW);
  const uint32_t swz = (g & 1) * 64;
#pragma unroll
  for (int q = 0; q < kQStageK / 128; ++q) {
    const uint4 wa = lds128(cb + g * kQRowBytes + ((q * 64) ^ swz));
    const uint4 wb = lds128(cb + (g + 8) * kQRowBytes + ((q * 64) ^ swz));
    const uint32_t wav[4] = {wa.x, wa.y, wa.z, wa.w}, wbv[4] = {wb.x, wb.y, wb.z, wb.w};
    uint32_t sa = 0, sbv = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = 4 * q + i;
      if (i == 0 || (c >> GS) != ((c - 1) >> GS)) {  // a new group: its scale words (rows g, g + 8)
        sa = lds32(sb + (c >> GS) * 64 + g * 4);
        sbv = lds32(sb + (c >> GS) * 64 + 32 + g * 4);
      }
      const uint4 a =
          kRaw ? make_uint4(wav[i], sa, wav[i] ^ sa, sa) : dequant<KIND, 4>(Raw{wav[i], 0, sa, 0});
      const uint4 bb =
          kRaw ? make_uint4(wbv[i], sbv, wbv[i] ^ sbv, sbv) : dequant<KIND, 4>(Raw{wbv[i], 0, sbv, 0});
      // Every lane loads x (a broadcast: the lanes of one t read one address), so that every MMA column
      // is x: column 0, the one stored, is the same sum as with zeros in columns 1-7 (each output element
      // is its own dot product), without two instructions a chunk zeroing the other lanes' operand.
      const uint4 xv = lds128(xb + c * 64);
      mma_chunk(acc, a, bb, xv);
    }
  }
}

// A layer's attention units of CTA b (the attention warps' and the consumer warps' same list): (KV head,
// chunk) for the row's C chunks. CTA h < kHk merges KV head h: its chunks 0..e-1, then the row's chunk and
// the merge. The other units, chunks e..C-2 of every head, are dealt round-robin over the other CTAs in chunk
// order (the merge takes the chunks in that order too). A CTA's next unit of the layer is staged during its
// current one. e: 1 once the other units average kEarlyUnits a CTA or more, else 0 (with the consumers
// computing the units, run 310: 4096 positions e = 0 -1.2% against 1; 8192 e = 1 -1.1% against 0; 12000 and
// 16000 e = 1 best of 0-3, -1% and -2.7% against the rule before, which grew e with the context); more on
// fewer CTAs (TF_STEP_GRID). Params::early_bias shifts it for A/Bs.
#ifdef TF_STEP_EARLY_UNITS
constexpr int kEarlyUnits = TF_STEP_EARLY_UNITS;
#else
constexpr int kEarlyUnits = 3;
#endif
struct UnitList {
  int C, e, others, Go, b;
  __device__ UnitList(int pos, int G, int b_, int early_bias) : b(b_) {
    C = pos / attn::kC + 1;
    const int e0 = kHk * (C - 1) >= kEarlyUnits * (G - kHk) ? 1 : 0;
    e = min(C - 1, max(0, e0 + early_bias));
    others = kHk * (C - 1 - e), Go = G - kHk;
  }
  __device__ bool at(int i, int& h, int& c) const {  // unit i of the layer, if the CTA has one
    if (b < kHk) {
      h = b, c = i < e ? i : C - 1;
      return i <= e;
    }
    const int u = b - kHk + i * Go;
    h = u % kHk, c = e + u / kHk;
    return u < others;
  }
};

// W: the linears' weight format (WFormat). kProbe: the benches' instance (DecodeStep::set_probe):
// timestamps of the attention's steps; the product's has none of them in its code.
template <int W, bool kProbe>
__global__ void __launch_bounds__(kThreads, 1) decode_step_kernel(Params prm) {
  constexpr int kSlots = kRing<W>, kSlot = kSlotBytes<W>;
  constexpr int SW = sw_of(W), kOwn = kCWarps / SW;     // slices a stage, ring slot owners
  constexpr int SK = W == kWBf16 ? kStageK : kQStageK;  // k-values of a slice's piece
  // The launch's epoch (its tag: the low 16 bits), from the device word step_prologue incremented: a launch
  // replayed from a CUDA graph has fixed arguments.
  const unsigned epoch = *prm.epoch_word;
  const uint32_t tag = epoch & 0xffffu;
  const Op* __restrict__ ops = prm.ops;
  const int nops = prm.nops;
  float* const logits = prm.logits;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem + kSlots * kSlot);
  __nv_bfloat16* attn_smem = xs + kMaxK;
  float* red = reinterpret_cast<float*>(smem + kSlots * kSlot + kMaxK * 2 + kAttnRegion);  // [kRed][8][16]
  float* nred = red + kRed * kSlices * 16;                                                 // [8]
  uint64_t* full = reinterpret_cast<uint64_t*>(nred + 8);
  uint64_t* empty = full + kSlots;
  uint64_t* mfull = empty + kSlots;                    // the slot's meta is written (before its bytes land)
  int* meta = reinterpret_cast<int*>(mfull + kSlots);  // [kSlots][2]: the slot's (op, tile)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kSlots; ++i)
      mbar_init(saddr(full + i), 1), mbar_init(saddr(empty + i), SW), mbar_init(saddr(mfull + i), 1);
    mbar_init_fence();
  }
  __syncthreads();
  const int G = gridDim.x, b = blockIdx.x;
  unsigned long long* const stamps = kProbe ? prm.stamps : nullptr;

  if (warp > kProducer) {  // attention warps: the (KV head, chunk) units of every layer dealt to this CTA
    Row row;
    row.pos = prm.positions[0];
    row.slot = prm.slots[0];
    row.table = prm.tables + prm.table_offsets[prm.row_seq[0]];
    AttnParams* P = reinterpret_cast<AttnParams*>(reinterpret_cast<unsigned char*>(attn_smem) + kAttnBytes);
    {  // the launch's constants in shared memory (published by the first unit's barrier)
      const int at = threadIdx.x - (kProducer + 1) * 32;
      if (at < kD / 2) {  // elementwise.cu's qk_norm_rope_kv: sincosf(pos * inv_freq), times the factor
        float sn, cs;
        sincosf(float(row.pos) * prm.inv_freq[at], &sn, &cs);
        P->rsin[at] = sn * prm.rope_factor, P->rcos[at] = cs * prm.rope_factor;
      }
      if (at == 0) P->eps = prm.qk_eps;
    }
    // A layer's units (UnitList; the consumer warps compute their scores, P V and partials).
    const UnitList units(row.pos, G, b, prm.early_bias);
    if (threadIdx.x == (kProducer + 1) * 32) {
      for (int i = 0; i < 4; ++i) mbar_init(saddr(&P->bars[i]), 1);
      mbar_init_fence();
    }                            // published by the unit's first barrier
    uint32_t par = 0, mpar = 0;  // the staging mbarriers' phase (one a unit), the merge buffers' (bits 0, 1)
    uint32_t pre[12] = {};       // the next unit's q / k / v words (attention_unit)
    for (int op = 0; op < nops; ++op) {
      if (ops[op].xkind != kXAttnMerge) continue;
      unsigned long long* st = stamp_row(stamps, op, G, b);
      int h = 0, c = 0;
      bool have = units.at(0, h, c), staged = false;
      for (int i = 0; have; ++i) {  // one call site: the unit is inlined once
        int nh = 0, nc = 0;
        const bool next = units.at(i + 1, nh, nc);
        attention_unit(ops[op], row, h, c, staged, nh, next ? nc : -1, attn_smem, tag, par, mpar, st, i, pre);
        par ^= 1;
        h = nh, c = nc, have = next, staged = next;
      }
    }
    return;
  }
  if (warp == kProducer) {  // this CTA's tiles, stage by stage, as far ahead as the ring allows
    // Tiles i = b, b + G, ... (round-robin over the CTAs, op after op). Each slot carries (op, tile) for its
    // consumers, published on mfull before the bytes land. After the last op, one sentinel stage an owner.
    int j = 0, op = 0;
    long long p_empty = 0, p_t0 = clock64();  // the probe's counters
    int p_layer = 0;
    for (int i = b;; i += G) {
      while (op < nops && i >= ops[op].tile_begin + ops[op].tiles) ++op;
      if (op == nops) break;
      if (kProbe && stamps && op / 4 != p_layer) {
        if (lane == 0 && p_layer * 4 + 4 < nops) {
          unsigned long long* row = layer_row(stamps, p_layer, G, b);
          const long long now = clock64();
          row[SS::kStampWaitEmpty] = p_empty, row[SS::kStampProdCycles] = now - p_t0;
          p_t0 = now;
        }
        p_empty = 0, p_layer = op / 4;
      }
      const int tile = i - ops[op].tile_begin;
      const unsigned char* w = ops[op].wp;
      const int k = ops[op].k, sbytes = ops[op].sbytes;
      const int stages = k / SK / SW;
      for (int s = 0; s < stages; ++s, ++j) {
        // Stage s of a tile belongs to owner s % kOwners and the ring's slots are a multiple of kOwners:
        // slot j % kSlots is only ever used by owner j % kOwners, so each warp pair waits on every phase of
        // its own slots in order (bulk copies complete out of order; a parity wait cannot tell phases apart).
        const int slot = j % kSlots;
        const long long pw = kProbe ? clock64() : 0;
        if (j >= kSlots) wait_bar(saddr(empty + slot), ((j / kSlots) & 1) ^ 1, kEmptyStage, j);
        if (kProbe) p_empty += clock64() - pw;
        if (lane == 0) {
          meta[2 * slot] = op, meta[2 * slot + 1] = tile;  // released by the arrive on mfull
          mbar_arrive(saddr(mfull + slot));
          mbar_arrive_expect_tx(saddr(full + slot), uint32_t(sbytes));
          bulk_copy_g2s(saddr(ring + slot * kSlot),
                        w + (int64_t(tile) * stages + packed_stage(s, k, kOwn, SK)) * sbytes,
                        uint32_t(sbytes), saddr(full + slot));
        }
        __syncwarp();
      }
    }
    for (int s = 0; s < kOwn; ++s, ++j) {  // the sentinel: one stage an owner, no bytes
      const int slot = j % kSlots;
      if (j >= kSlots) wait_bar(saddr(empty + slot), ((j / kSlots) & 1) ^ 1, kEmptyStage, j);
      if (lane == 0) meta[2 * slot] = nops, meta[2 * slot + 1] = 0, mbar_arrive(saddr(mfull + slot));
      __syncwarp();
    }
    return;
  }

  // Consumers: the tiles the producer chose, in its order; (op, tile) from the first slot of each tile this
  // warp owns (every warp sees the same sequence).
  const int g = lane / 4, t = lane % 4;
  const int owner = warp / SW, half = warp % SW;
  const int c_pos = prm.positions[0];  // the row
  const UnitList c_units(c_pos, G, b, prm.early_bias);
  uint32_t c_par = 0;  // the V staging mbarrier's phase (one a unit, as the attention warps')
  int j = 0, x_op = -1, tcount = 0;
  long long c_full = 0, c_x = 0, c_bar = 0, c_fence = 0, c_t0 = clock64();  // the probe's counters (warp 1)
  int c_layer = 0;
  const bool counting = kProbe && stamps && threadIdx.x == 32;  // warp 1 (warp 0 also stores the tiles)
  for (;;) {
    int op, tile;
    {
      const int jj = j + owner, slot = jj % kSlots;
      const long long cw = kProbe ? clock64() : 0;
      wait_bar(saddr(mfull + slot), (jj / kSlots) & 1, kFullStage, jj);
      if (kProbe) c_full += clock64() - cw;
      op = meta[2 * slot], tile = meta[2 * slot + 1];
    }
    if (counting && op / 4 != c_layer) {
      if (c_layer * 4 + 4 < nops) {
        unsigned long long* row = layer_row(stamps, c_layer, G, b);
        const long long now = clock64();
        row[SS::kStampWaitFull] = c_full, row[SS::kStampWaitX] = c_x, row[SS::kStampWaitBar] = c_bar;
        row[SS::kStampFence] = c_fence;
        row[SS::kStampLayerCycles] = now - c_t0;
        c_t0 = now;
      }
      c_full = c_x = c_bar = c_fence = 0, c_layer = op / 4;
    }
    if (op >= nops) break;
    const Op& o = ops[op];
    const int n0 = tile * 16, k = o.k;
    if (op != x_op) {
      const long long cx = kProbe ? clock64() : 0;
      if (o.xkind == kXAttnMerge) {  // the layer's attention units, then (a merging CTA) the merge
        int h = 0, c = 0;
        for (int i = 0; c_units.at(i, h, c); ++i, c_par ^= 1)
          unit_scores_pv(o, c_pos, h, c, attn_smem, prm.scale, c_par);
        if (b < kHk && c_units.C > 1) merge_fold_help(o, b, c_units.C - 1, attn_smem, tag);
      }
      make_x(o, xs, nred, tile == 0, tag);
      if (kProbe) c_x += clock64() - cx;
      x_op = op;
      if (stamps && threadIdx.x == 0 && o.xkind == kXAttnMerge)
        stamp_row(stamps, op, G, b)[SS::kStampXMade] = gtime();
    }
    const int stages = k / SK / SW, spw = k / kSlices / SK;  // spw: parts of a slice
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const uint32_t xbase = saddr(xs) + 16 * t;
    for (int part = 0; part < spw; ++part) {  // this warp's K slice, in order
      const int jj = j + part * kOwn + owner, slot = jj % kSlots;
      const long long cw = kProbe ? clock64() : 0;
      wait_bar(saddr(full + slot), (jj / kSlots) & 1, kFullStage, jj);
      if (kProbe) c_full += clock64() - cw;
      const uint32_t xb = xbase + (warp * spw + part) * SK * 2;
      if (kProbe && prm.ablate == 1) {
        // (timing: the stage waited for and released, nothing computed)
      } else if constexpr (W == kWBf16) {
        const uint32_t base = saddr(ring + slot * kSlot) + half * (kStageK * 2) + 16 * t;
        const uint32_t swz = (g & 1) * 64;  // pack_kernel: odd rows hold chunk c at chunk c ^ 1's place
#pragma unroll 4
        for (int c = 0; c < kStageK / 32; ++c) {
          const uint4 a = lds128(base + g * kRowBytes + ((c * 64) ^ swz));
          const uint4 bb = lds128(base + (g + 8) * kRowBytes + ((c * 64) ^ swz));
          const uint4 xv = lds128(xb + c * 64);  // every lane: q4_piece's broadcast
          mma_chunk(acc, a, bb, xv);
        }
      } else {  // pack_q4_kernel's stage: this warp's piece is the half-th of each row
        const uint32_t cb = saddr(ring + slot * kSlot) + half * (kQStageK / 2) + 16 * t;
        const int ng = kQStageK >> (5 + o.qsel % 3);  // groups a piece
        const uint32_t sb = saddr(ring + slot * kSlot) + q_code_bytes(SW) + half * ng * 64;
        if (kProbe && prm.ablate == 2)
          q4_piece<SW, kMlxBf16Sub, 1, true>(acc, cb, sb, xb, g);
        else
          switch (o.qsel) {  // uniform: one op's tiles
            case q4_sel(false, 0):
              q4_piece<SW, kMlxBf16, 0>(acc, cb, sb, xb, g);
              break;
            case q4_sel(false, 1):
              q4_piece<SW, kMlxBf16, 1>(acc, cb, sb, xb, g);
              break;
            case q4_sel(false, 2):
              q4_piece<SW, kMlxBf16, 2>(acc, cb, sb, xb, g);
              break;
            case q4_sel(true, 0):
              q4_piece<SW, kMlxBf16Sub, 0>(acc, cb, sb, xb, g);
              break;
            case q4_sel(true, 1):
              q4_piece<SW, kMlxBf16Sub, 1>(acc, cb, sb, xb, g);
              break;
            default:
              q4_piece<SW, kMlxBf16Sub, 2>(acc, cb, sb, xb, g);
              break;
          }
      }
      const long long cf = kProbe ? clock64() : 0;
      if (!kProbe || prm.ablate != 3)
        fence_proxy_async();  // this warp's reads of the slot before the next bulk copy into it
      __syncwarp();
      if (kProbe) c_fence += clock64() - cf;
      if (lane == 0) mbar_arrive(saddr(empty + slot));
    }
    j += stages;
    // The slice sums: warp 0 adds them in warp order and stores the tile (words with the launch's tag). red
    // is double-buffered: a warp writes red[p] for tile i + 2 only after the barrier of tile i + 1, which
    // warp 0 reaches after reading tile i's.
    float* r = red + (tcount & 1) * kSlices * 16;
    if (t == 0) r[warp * 16 + g] = acc[0], r[warp * 16 + g + 8] = acc[2];
    const long long cb = kProbe ? clock64() : 0;
    bar_consumers();
    if (kProbe) c_bar += clock64() - cb;
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
          logits[n0 + lane] = sum;
        else
          static_cast<uint32_t*>(o.y)[n0 + lane] = word_of(sum, tag);
      }
      if (stamps && lane == 0 && op / 4 * 4 + 4 < nops) {  // a layer's op: this CTA's last tile (so far)
        constexpr int kSlot[4] = {SS::kStampQkvDone, SS::kStampOLast, SS::kStampGuLast, SS::kStampDownLast};
        stamp_row(stamps, op, G, b)[kSlot[op % 4]] = gtime();
      }
      __syncwarp();
    }
    ++tcount;
  }
}

// The step's first node: the launch's epoch (the device word + 1) and layer 0's residual -- the embedding
// row (bf16, the engine's embedding kernel) -- as words with its tag.
__global__ void step_prologue(unsigned* epoch_word, const __nv_bfloat16* emb, uint32_t* words, int n) {
  const unsigned e = *epoch_word + 1;
  __syncthreads();  // every thread has read the old value
  if (threadIdx.x == 0) *epoch_word = e;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    words[i] = ((e & 0xffffu) << 16) | *reinterpret_cast<const uint16_t*>(emb + i);
}

// Row r of a packed tile t's 16: the weight's row (inter > 0, a gate_up weight of gate rows then up rows:
// gate rows 8t..8t+7 then up rows inter+8t.., so the tile's outputs pair each gate feature with its up).
__device__ __forceinline__ int packed_row(int t, int r, int inter) {
  return inter > 0 ? (r < 8 ? 8 * t + r : inter + 8 * t + r - 8) : t * 16 + r;
}

// W [n, k] row-major -> stages: tile t's stage ps (packed_stage) holds, for its 16 rows, the pieces of kSW
// consecutive slices (kStageK k-values each) side by side, contiguous (one bulk copy); in odd rows the
// 64-byte chunks c and c ^ 1 of each piece trade places (bank-conflict free quarter-warp loads). Rows:
// packed_row (inter > 0: a gate_up weight).
__global__ void pack_kernel(const __nv_bfloat16* w, __nv_bfloat16* wp, int n, int k, int inter) {
  (void)n;
  const int stages = k / kStageK / kSW, parts = k / kSlices / kStageK;
  const int64_t stage = blockIdx.x;  // tile * stages + packed stage index
  const int tile = int(stage / stages), ps = int(stage % stages);
  const int owner = ps / parts, part = ps % parts;
  constexpr int kUnits = kStageK / 8;  // 16-byte units of a piece
  for (int u = threadIdx.x; u < 16 * kSW * kUnits; u += blockDim.x) {
    const int r = u / (kSW * kUnits), sub = u % (kSW * kUnits) / kUnits, cu = u % kUnits;
    const int src_unit = (r & 1) ? (cu ^ 4) : cu;  // chunk c ^ 1 = unit ^ 4
    const int slice = owner * kSW + sub;
    const int src_row = packed_row(tile, r, inter);
    const uint4 v = *reinterpret_cast<const uint4*>(w + int64_t(src_row) * k +
                                                    (slice * parts + part) * kStageK + src_unit * 8);
    *reinterpret_cast<uint4*>(wp + stage * (kStageBytes / 2) + r * (kRowBytes / 2) + sub * kStageK + cu * 8) =
        v;
  }
}

// MLX 4-bit W (quant_linear.h's device layout: w [n][k / 8] words, a row's quads of 4 chunks lane-major; sc
// [n][k >> (5 + gshift)] scale | bias words) -> stages as pack_kernel's (tile t's stage ps: the 16 rows'
// pieces of kSW consecutive slices), each kQCodeBytes of codes -- row r, piece sub: its 4 quads (64 bytes
// each) at r * kQRowBytes + sub * kQRowBytes / kSW, quads q and q ^ 1 traded in odd rows -- then the
// pieces' scale words [sub][group][16 rows]; a stage is `sbytes` long. Rows: packed_row, as pack_kernel's.
template <int SW>
__global__ void pack_q4_kernel(const uint32_t* w, const uint32_t* sc, unsigned char* wp, int k, int inter,
                               int gshift, int sbytes) {
  constexpr int kQRowBytes = q_row_bytes(SW);
  const int stages = k / kQStageK / SW, parts = k / kSlices / kQStageK;
  const int64_t stage = blockIdx.x;
  const int tile = int(stage / stages), ps = int(stage % stages);
  const int owner = ps / parts, part = ps % parts;
  const int ng = kQStageK >> (5 + gshift), row_groups = k >> (5 + gshift);
  unsigned char* dst = wp + stage * sbytes;
  constexpr int kQuads = kQStageK / 128;
  for (int u = threadIdx.x; u < 16 * SW * kQuads * 4; u += blockDim.x) {  // 16-byte units: a lane's quad
    const int r = u / (SW * kQuads * 4), sub = u / (kQuads * 4) % SW, q = u / 4 % kQuads, lt = u % 4;
    const int slice = owner * SW + sub;
    const int64_t quad = int64_t(slice * parts + part) * kQuads + q;  // the row's quad (128 k-values)
    const uint4 v = *reinterpret_cast<const uint4*>(w + int64_t(packed_row(tile, r, inter)) * (k / 8) +
                                                    quad * 16 + lt * 4);
    *reinterpret_cast<uint4*>(dst + r * kQRowBytes + sub * (kQRowBytes / SW) + ((q ^ (r & 1)) * 64) +
                              lt * 16) = v;
  }
  uint32_t* sdst = reinterpret_cast<uint32_t*>(dst + q_code_bytes(SW));
  for (int u = threadIdx.x; u < SW * ng * 16; u += blockDim.x) {
    const int r = u % 16, gi = u / 16 % ng, sub = u / 16 / ng;
    const int slice = owner * SW + sub;
    const int group = ((slice * parts + part) * kQStageK >> (5 + gshift)) + gi;
    sdst[(sub * ng + gi) * 16 + r] = sc[int64_t(packed_row(tile, r, inter)) * row_groups + group];
  }
}

}  // namespace tf::cuda::step
