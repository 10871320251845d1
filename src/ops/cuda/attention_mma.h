#pragma once
// Tensor-core paged attention (attention_mma.cu): the CUDA backend's attention for head_dim 64 and 128
// with GQA groups that divide 16; other shapes use attention() in kernels.h. Same contract: a row's
// output bits depend only on its own query, position and sequence.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "ops/cuda/kernels.h"

namespace tf::cuda {

bool attention_mma_supported(int head_dim, int hq, int hk);
// Rows of one sequence a block serves (64 (row, head) pairs).
int attention_mma_rows_per_tile(int hq, int hk);

// How tiles are scheduled; identical bits either way (tests force each).
enum class TileSchedule { Auto, Loop, Split };
// Cuts the batch's rows into tiles of at most `rows_per_tile` consecutive rows of one sequence, as
// (first row, rows) pairs: loop tiles walk their chunks in one block, split tiles spread them.
// Auto makes half-full tiles loop tiles only when there are at least `min_loop_tiles` of them, and every
// tile a loop tile when `call_chunks` (kAttnChunk chunks of the call's longest row; 0 = unknown) is at most
// the short-call limit (set_attention_loop_max_chunks; 4 by default): no combine launch at short context.
void plan_attention_tiles(const std::vector<int32_t>& row_seq, int rows_per_tile, TileSchedule schedule,
                          std::vector<int32_t>& loop_tiles, std::vector<int32_t>& split_tiles,
                          int min_loop_tiles = 0, int call_chunks = 0);

// Process-wide switches for tests and benches: the schedule (default Auto) and whether the backend
// uses this kernel at all where supported (default on; off = attention() of kernels.h everywhere).
void set_attention_tile_schedule(TileSchedule s);
TileSchedule attention_tile_schedule();
void set_attention_mma(bool on);
// Chunks one split-schedule block walks (0 = from the call's size; speed only, same bits).
void set_attention_split_chunks(int n);
// Auto's short-call limit in chunks (0 = never all-loop; negative = the default, 4). Same bits; benches.
void set_attention_loop_max_chunks(int n);
bool attention_mma_enabled();
// Speed only (same bits, tested): loop tiles joined in pairs (widen_loop_tiles) for the 8-warp,
// double-buffered loop kernel (default on; TF_ATTN_WIDE=0 off).
void set_attention_loop_wide(bool on);
bool attention_loop_wide();
// Speed only (same bits, tested): the split schedule's partials merged by each (tile, KV head)'s last block
// (AttentionMmaArgs::tickets) instead of a combine launch (default on; TF_ATTN_FUSED_COMBINE=0 off).
void set_attention_fused_combine(bool on);
// The merge of a pair's split partials loads 16 chunks' partials at a time (on, default) or 4 (A/B only:
// the merge order, so the bits, are the same; TF_ATTN_WIDE_COMBINE=0 off).
void set_attention_wide_combine(bool on);
// The wide loop kernel (prefill) stages K/V by bulk copies (on, default) or by its cp.async loops (A/B only:
// the same bytes; TF_ATTN_WIDE_TMA=0 off).
void set_attention_wide_tma(bool on);
bool attention_fused_combine();
// The fused combine only for calls of at most n (split tile, KV head) pairs (the backend's rule; default 64:
// up to 8 decode rows of 8 KV heads, from run 94, where 16 rows lost 1% with it), n <= kFusedCombineCap (the
// backend's ticket buffer; TF_ATTN_FUSED_MAX sets it at start-up). Speed only (the merge order, so the bits,
// are the combine launch's; tested).
constexpr int kFusedCombineCap = 512;
void set_attention_fused_combine_max(int n);
int attention_fused_combine_max();
// Speed only (same bits, tested): a split tile whose (row, head) pairs fit one warp (decode rows) has all 4
// warps of its blocks compute each chunk (S n-tiles and output columns split, P through shared memory:
// attention_chunk.cuh's spread_*). Default on; TF_ATTN_SPREAD=0 off.
void set_attention_spread(bool on);
// Speed only (same bits, tested): the fused combine merges two pairs a warp at once (16 lanes a pair).
// Default on (30B-A3B 4-bit b=1 -1.2%, b=8 -0.8%, run 377); TF_ATTN_HALF_COMBINE=0 off.
void set_attention_half_combine(bool on);
// Speed only (same bits, tested): split tiles whose pairs fit one warp (decode rows) as one block a (tile,
// KV head) walking all its chunks, K/V double-buffered, merged in registers (attention_decode_loop_kernel: no
// partials, no combine). 0 off, 1 where the blocks about fill the card once (3/4 of the SMs to all of them)
// and the longest row has at most kDecodeLoopMaxChunks chunks (run 455: 16 rows at 2048 positions, 16 chunks
// a block in turn, 48 -> 64 us a layer alone), 2 always (tests); with two teams of 4 warps a block taking
// alternate chunks (session 45): 3 wherever the blocks fill 2/3 of the SMs or more (no upper bound, any
// context: 12, 16 and 32 rows of 8 KV heads at 512-8192 positions gain), or 45% of them at up to 4 chunks (8
// rows: session 47, run 464), 4 always (tests). Default 3 (runs 458-460: the 8B forward at b = 16 -3.6%
// (H200) / -6% (H100) in 4-bit, -2% / -2.6% in bf16).
// TF_ATTN_DECODE_LOOP sets it at start-up. The launches so far (tests: that it ran).
void set_attention_decode_loop(int mode);
int attention_decode_loop();
// Whether a call of `split_tiles` split tiles over `hk` KV heads, `chunks` chunks in its longest row (the
// partials' layout: max_chunks), runs the decode loop kernel, and with how many teams: 0 (no), 1 or 2 (the
// launch's choice; graphs key on it).
constexpr int kDecodeLoopMaxChunks = 8, kDecodeTeamsHalfMaxChunks = 4;  // (mode 1's, mode 3's below 2/3)
static_assert((kDecodeLoopMaxChunks & (kDecodeLoopMaxChunks - 1)) == 0 && kDecodeLoopMaxChunks <= 32 &&
                  (kDecodeTeamsHalfMaxChunks & (kDecodeTeamsHalfMaxChunks - 1)) == 0,
              "graphs pass the chunk bucket (attention_chunk_bucket: powers of two to 32): eager and graph "
              "calls must agree");
int attention_decode_loop_takes(int split_tiles, int hk, bool split_one_warp, int chunks);
// Its launches so far (two_teams: those with two teams only).
long attention_decode_loop_launches(bool two_teams = false);
// Benches: globaltimer stamps of every split block of the latest split launch, kAttnStamps a block (entered,
// waited, K in, scores, V in, partials out, ticket, merged; 0 = not reached), block
// (y, x) at [(y * grid x + x) * kAttnStamps]. `blocks`: the launch's blocks.
constexpr int kAttnStamps = 8;
void set_attention_stamps(bool on);
std::vector<unsigned long long> attention_stamps(int* blocks);
// Joins consecutive loop tiles of one sequence in pairs (at most 2 x rows_per_tile rows a tile): the
// tiles of AttentionMmaArgs::wide_loop.
void widen_loop_tiles(const std::vector<int32_t>& row_seq, int rows_per_tile, std::vector<int32_t>& tiles);

struct AttentionMmaArgs {
  const void* q = nullptr;  // [rows, hq, D] bf16
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  void* out = nullptr;  // [rows, hq, D] bf16
  DeviceMeta meta;
  int hq = 0, hk = 0, head_dim = 0;
  float scale = 1.f;
  int window = 0;
  float softcap = 0.f;
  int max_chunks = 0;                // chunks of the longest row (split schedule's partial layout)
  const int2* loop_tiles = nullptr;  // device
  int num_loop_tiles = 0;
  bool wide_loop = false;  // loop tiles of up to 2 x attention_mma_rows_per_tile rows (widen_loop_tiles)
  const int2* split_tiles = nullptr;  // device
  int num_split_tiles = 0;
  // The split tiles (every one's pairs fitting one warp) run as the decode loop kernel with this many teams
  // (0: not): the caller's attention_decode_loop_takes.
  int decode_loop = 0;
  float* part_acc = nullptr;  // split only: [rows * hq * max_chunks, D]
  float* part_ml = nullptr;   //             [rows * hq * max_chunks, 2]
  // Split only, optional: one zeroed int per (split tile, KV head), left zeroed again by every launch. When
  // given, the last block of a (tile, KV head) to finish merges its pairs' partials (the combine kernel's
  // code and order: same bits) and the combine launch is saved.
  int* tickets = nullptr;
  int64_t pool_slots = 0;  // slots of k_pool / v_pool ([slots, hk, D]): attention_wgmma_loop's tensor maps
};
void attention_mma(const AttentionMmaArgs& args, cudaStream_t s);
// The wide loop tiles of a head_dim 128 call on Hopper warpgroup MMAs (attention_wgmma.cu): the same bits as
// the wide loop kernel. False (nothing launched) where it does not take the call: off, not sm_90a, another
// head_dim, no wide loop tiles, blocks of other than 16 positions, or tensor maps that cannot be made.
bool attention_wgmma_loop(const AttentionMmaArgs& args, cudaStream_t s);
// Speed only (same bits, tested): TF_ATTN_WGMMA; the launches so far (tests: that it ran).
void set_attention_wgmma(bool on);
bool attention_wgmma();
// The two warpgroups' MMAs in turns (TF_ATTN_WGMMA_PP; speed only, same bits).
void set_attention_wgmma_pp(bool on);
bool attention_wgmma_pp();
uint64_t attention_wgmma_launches();

}  // namespace tf::cuda
