#pragma once
// The one-kernel decode step's shared ground (decode_step_kernel.cuh has the roles and the kernel): the
// launch's shapes and constants, the op table and the launch's parameters, named barriers and waits, the
// tagged 32-bit words and their polls, and make_x (an op's x in shared memory).
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "ops/cuda/attention_chunk.cuh"  // attn::kC
#include "ops/cuda/decode_step.h"        // the probe's stamp slots
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/norm.cuh"

// The shape the kernel is compiled for: TF_STEP_MOE 0 (decode_step.cu: the dense Qwen3-8B layout, namespace
// step) or 1 (decode_step_moe.cu: the Qwen3-30B-A3B layout with sparse MLPs, namespace step_moe).
#ifndef TF_STEP_MOE
#define TF_STEP_MOE 0
#endif
#if TF_STEP_MOE
#define TF_STEP_NS step_moe
#else
#define TF_STEP_NS step
#endif

namespace tf::cuda::TF_STEP_NS {

constexpr int kSlices = 8;  // linear.cu's K slices (its warps): the arithmetic
constexpr int kCWarps = 8;  // consumer warps (bf16: a K slice each; MLX 4-bit: two teams, two slices each)
constexpr int kAWarps = 3;  // attention warps (12 warps take no more registers a thread than 9)
constexpr int kThreads = (kCWarps + 1 + kAWarps) * 32;
constexpr int kProducer = kCWarps;
// k-values of a slice's piece in a stage. bf16: 256 (16 KB stages, two ring slots a warp pair: one is in
// flight while the pair computes on the other; 2% faster than 32 KB stages and one slot a pair, run 271).
// MLX 4-bit: 512 (256 was 12% slower, run 271); the MoE shape's 256 (its hidden 2048 makes a K slice 256
// k-values: a piece of 512 would straddle two slices).
constexpr int kStageK = 256;
constexpr int kQStageK = TF_STEP_MOE ? 256 : 512;
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
// The MoE shape's experts are read where they are (not packed): a stage of an expert's tile is 16 row
// copies into rows padded by 64 bytes (rows g and g + 1 in different banks, as the packed layout's chunk swap
// gives): kExRowBytes a row, at most (the gate_up's 1 KB of each row's two K slices; the down's are shorter).
constexpr int kExRowBytes = kRowBytes + 64;
constexpr int kBf16SlotBytes = TF_STEP_MOE ? 16 * kExRowBytes : kStageBytes;
template <int W>
constexpr int kSlotBytes = W == kWBf16 ? kBf16SlotBytes : q_slot_bytes(sw_of(W));
// The ring's bytes: bf16, kStages slots of kStageBytes; MLX 4-bit, 126 KB (what the shared memory has
// beside x, the attention region and the barriers) in slots of the model's stage (Params::slot_bytes, the
// largest of its ops' stages), as many as fit: 7 of SW 4's 18 KB stages at groups of 64 (6 when every slot
// took a group-of-32 stage), 14 of SW 2's, 3 of SW 8's. The 4-bit teams check each slot's stage counter
// before its parity wait, so their slot count need not be a multiple of the owners.
template <int W>
constexpr int kRingBytes = W == kWBf16 ? (kStages* kBf16SlotBytes) : 126 * 1024;
#if TF_STEP_MOE
constexpr int kMaxK = 6144;    // the longest x (the down's: top_k x the experts' intermediate, at most)
constexpr int kHidden = 2048;  // the add + norm x (make_x: 8 elements a thread)
constexpr int kDredRanks = 8;  // the MLX 4-bit down's slice sums of this many ranks (one barrier a tile)
// The MLX 4-bit down's stage from chunk c0 (groups of 32 << gshift): its scale-word box starts at c0's
// group's word rounded down to a multiple of 4 (a tiled box's first element 16-byte aligned; run 549's
// boxes from word 3 raised illegal instructions). make_step sizes the box (Op::dwords) from it, the
// producer loads from it, the consumer indexes from it.
__host__ __device__ constexpr int q4_down_word0(int c0, int gshift) {
  return (c0 >> gshift) & ~3;
}
#else
constexpr int kMaxK = 12288;   // the longest x (the down projection's)
constexpr int kHidden = 4096;  // the add + norm x (make_x: 16 elements a thread)
constexpr int kDredRanks = 0;
#endif
// Consumer teams (decode_step_kernel.cuh): bf16, one team of all 8 warps, a K slice a warp, every tile; MLX
// 4-bit, two teams of 4 warps taking the CTA's tiles in turn, two K slices a warp (two independent MMA
// chains: a 4-bit tile's arithmetic is its warps' MMA chain latency, ~2100 cycles for 16 chunks, run 332).
template <int W>
constexpr int kTeams = W == kWBf16 ? 1 : 2;
template <int W>  // slice-sum buffers: double-buffered a team (one team barrier a tile)
constexpr int kRed = 2 * kTeams<W>;
// The attention shape: q heads, KV heads, head dim; K/V/Q staging rows padded as attention_mma's.
constexpr int kHq = 32, kHk = TF_STEP_MOE ? 4 : 8, kGroup = kHq / kHk, kD = 128, kRS = kD + 8;
constexpr int kAttnBytes = (2 * attn::kC + 16) * kRS * 2;  // Ks, Vs [128][kRS], Qs [16][kRS]
// Ring slots at most (the barriers'): bf16's kStages; 4-bit, as many of the smallest stage (groups of 128)
// as the ring and the attention's staging region hold (a CTA without attention work lends it the ring).
// The MoE shape's bf16 ring: kStages slots, or (a CTA without attention work; not in variant 8) as many more
// as its attention staging region holds (12 in all).
constexpr int kStagesLent = kStages + kAttnBytes / kBf16SlotBytes;
template <int W>
constexpr int kRing = W == kWBf16 ? (TF_STEP_MOE ? kStagesLent : kStages)
                                  : (kRingBytes<W> + kAttnBytes) / q_stage_bytes(sw_of(W), 128);
static_assert(TF_STEP_MOE || (kRing<kWMlx4> == 23 && kRing<kWMlx4Sw4> == 11 && kRing<kWMlx4Sw8> == 5),
              "4-bit rings");
constexpr int kBlock = 16;  // positions a KV pool block holds
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
// Other chunks' partials a merge round brings in (groups of 8: two rounds of 8 fill the staging region).
constexpr int kMergeChunks = TF_STEP_MOE ? 8 : 16;
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
#if TF_STEP_MOE
  // A sparse MLP's ops (MoeKind), each layer's router, gate_up and down in that order. The router: a packed
  // [experts, hidden] linear of the add + norm x whose outputs are f32 logit words (tag << 32 | f32 bits:
  // bf16 words cannot carry them). gate_up: top_k x inter / 8 tiles, tile t = r (inter / 8) + f the gate rows
  // 8f .. 8f + 7 and up rows inter + 8f .. of rank r's expert (silu_out: act words [top_k][inter]); k =
  // hidden. down: hidden / 16 tiles over every rank (stage (r, owner): rows n0 .. n0 + 15 of rank r's expert,
  // the owner's two K slices), combined in rank order (moe combine's fmas) into the output words; k = top_k
  // x inter (its x: the act words). Experts are read where they are (ex: the layer's experts' weights).
  int moe;
  const unsigned long long* rlog;  // gate_up, down: the router op's logit words
  const __nv_bfloat16* const* ex;  // gate_up: [experts] of [2 inter, hidden]; down: of [hidden, inter]
  // The experts' weights as tensor maps (make_rows8_tensor_map: a box of 8 rows x 512 (gate_up) or inter / 4
  // (down) columns in the 128-byte swizzle): a stage by two copies, not 16; null: by row copies.
  const CUtensorMap* exmap;
  int experts, top_k, inter, norm_topk;
  int dranks;  // down: ranks a stage (1 or 2; 2: rank 2 q and 2 q + 1 of an owner's slices, one after the
               // other)
  // MLX 4-bit experts (the 4-bit instance; qsel: their q4_sel): exmap holds each expert's codes as a 3D map
  // (make_quads_tensor_map: a box of 16 words x 8 rows x quads lands [quad][row][64 bytes]) and exsc its
  // scale words as a 2D map (a box of words x 8 rows lands [row][words]). A gate_up stage (owner s): its 16
  // rows' quads 4s .. 4s + 3 (two boxes: gate rows, up rows), then their scale words 16 s >> gshift ..
  // (512 / group a row). A down stage (rank, part p of the rank's dsplit): rows n0 .. n0 + 15's dquads quads
  // from the part's first chunk's (p inter / 32 / dsplit >> 2), then their dwords scale words from its first
  // chunk's group. dsplit 2 (halves, read by the rank's warp) or 4 (owners, read by the owner's warp of the
  // rank's team; TF_STEP_MOE_Q4_DOWN_STAGES=4 at make: before session 65).
  const CUtensorMap* exsc;
  int dquads, dwords, dsplit;
  // Where the op's pieces are not the instance's (kQStageK 4-bit codes): sk bf16 k-values a piece (the MLX
  // 4-bit instance's router, dequantized to bf16: pack_bf16_pieces_kernel); 0: the instance's.
  int sk;
#endif
};
enum MoeKind : int { kMoeNone = 0, kMoeRouter = 1, kMoeGateUp = 2, kMoeDown = 3 };

// The op of tile i (the CTA's tiles i = b, b + G, ..., op after op), from `op`, the op of the tile before:
// the producer's and every consumer warp's walk of the same sequence (nops: past the last op).
__device__ __forceinline__ int op_of_tile(const Op* ops, int nops, int op, int i) {
  while (op < nops && i >= ops[op].tile_begin + ops[op].tiles) ++op;
  return op;
}
// CTA b's first tile of an op whose tiles start at launch index tile_begin, as an index among the op's tiles
// (tile i of the launch is CTA i % G's): its m-th is that plus m G.
__device__ __forceinline__ int first_tile_of(int b, int tile_begin, int G) {
  return ((b - tile_begin) % G + G) % G;
}

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
                          // (the MoE shape's: decode_step_host.cuh's TF_STEP_MOE_ABLATE)
  int ring;  // bf16, the probe instance only: the ring's slots in use (0: all; DecodeStep::set_ring)
  int nslots, slot_bytes;  // MLX 4-bit: the ring's slots in use and their stride (DecodeStep::make)
  uint32_t slot_magic;     // MLX 4-bit: ceil(2^32 / nslots): j / nslots = umulhi(j, magic) for j < 2^28
  int nslots_lent;         // MLX 4-bit: the slots with the attention's staging region lent (0: none lent)
  uint32_t slot_magic_lent;
  int inflight;  // ring stages requested and not yet landed a CTA, at most (0: every free slot)
  // Benches (DecodeStep::set_probe; the probe instance only): timestamps [layer][CTA][kStampSlots] of the
  // attention's steps and the consumers' (DecodeStep::StampSlot), null: none.
  unsigned long long* stamps;
  int tile_log;  // with stamps: warp 0's tile log (TF_STEP_TILE_LOG; its clock reads slow the step ~25%)
  int l2pf;      // the dense shape: a CTA's first gate_up tiles of a layer bulk-prefetched into L2 once the
                 // layer's qkv is done (0: none; DecodeStep::set_l2pf)
  int inflight_gu;  // the dense shape, with inflight > 0: the cap for the gate_up's tiles past the l2pf
                    // prefetched ones (0: inflight; DecodeStep::set_inflight_gu)
};
using SS = DecodeStep::StampSlot;
// A layer's ops (qkv, o, [router,] gate_up, down) and the gate_up's index among them (the probe's stamps).
constexpr int kOpsPerLayer = TF_STEP_MOE ? 5 : 4;
constexpr int kOpGateUp = TF_STEP_MOE ? 3 : 2;
static_assert(SS::kStampOLast == SS::kStampQkvDone + 2, "qkv's (op % 4 == 0) and o's (1) slots");
constexpr int kStampSlots = DecodeStep::kStampSlots;
// The probe's timestamps of layer `layer` on CTA b, or null; stamp_row: of op `op`'s layer.
__device__ __forceinline__ unsigned long long* layer_row(unsigned long long* stamps, int layer, int G,
                                                         int b) {
  return stamps ? stamps + (int64_t(layer) * G + b) * kStampSlots : nullptr;
}
__device__ __forceinline__ unsigned long long* stamp_row(unsigned long long* stamps, int op, int G, int b) {
  return layer_row(stamps, op / kOpsPerLayer, G, b);
}
// (gtime, saddr, nbar_sync and nbar_arrive: mbarrier.cuh)
__device__ __forceinline__ void bar_consumers() {
  nbar_sync(1, kCWarps * 32);
}
__device__ __forceinline__ void abar() {
  nbar_sync(2, kAWarps * 32);
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
// A 4-bit consumer team's slice-sum barrier (kBarTeam + team; the bf16 team of all 8 warps: bar_consumers).
constexpr int kBarTeam = 9;
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
#if TF_STEP_MOE
// wait_bar for one lane of a warp whose lanes wait for different barriers (no __syncwarp: the caller's).
__device__ void wait_bar_lane(uint32_t bar, uint32_t parity, BarWait what, int j) {
  for (long long n = 0; !mbar_try_wait(bar, parity); ++n)
    if (n == (1ll << 24)) {
      printf("decode_step HANG block %d lane %d: stage wait %d, stage %d parity %u\n", blockIdx.x,
             threadIdx.x % 32, int(what), j, parity);
      __trap();
    }
}
#endif
__device__ __forceinline__ uint32_t ldv(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
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

}  // namespace tf::cuda::TF_STEP_NS
