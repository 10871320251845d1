#pragma once
// The fused mixture-of-experts path of the CUDA backend (moe_grouped.cu, driven by moe_fused.cpp):
// routing, token-to-expert grouping, a grouped GEMM (bf16 or MLX 4/8-bit experts) and the combine, all
// on the device (no host sync).
//
// A "pair" is (row t, rank j), p = t * top_k + j. Grouping gives every pair a slot: the pairs of one
// expert occupy consecutive slots, cut into tiles of at most 8 * NT slots; the order of pairs inside an
// expert's range is whatever the atomics gave, which changes no bits: a slot's GEMM arithmetic is the
// same whatever its neighbours (fixed K slices, per-column MMA chains) and the combine reads slots
// through slot_of_pair in rank order.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/add_norm.h"

namespace tf::cuda {

constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeMaxTopK = 32;

// Tiles an upper bound can hold: sum over experts of ceil(count / tile) <= pairs / tile + min(E, pairs).
inline int moe_max_tiles(int pairs, int experts, int tile) {
  return pairs / tile + (experts < pairs ? experts : pairs);
}

// logits [rows, experts] f32 -> experts_out/weights_out [rows * top_k] in rank order (the highest
// probability first, ties to the lower expert id); softmax in f32, weights renormalised when `norm`.
void moe_route(const float* logits, int rows, int experts, int top_k, bool norm, int32_t* experts_out,
               float* weights_out, cudaStream_t s);
// Groups the pairs by expert. tiles: int4 {expert, first slot, slots, 0} per tile after a header int4
// {tiles, 0, 0, 0}; slot_of_pair [pairs]; slot_row [pairs] (the row a slot reads). One block.
void moe_group(const int32_t* pair_expert, int pairs, int top_k, int experts, int tile, int4* tiles,
               int32_t* slot_of_pair, int32_t* slot_row, cudaStream_t s);
// moe_route then moe_group, as one kernel of one block for calls of up to kRouteGroupMaxRows rows (the
// same values; one dependent step a layer fewer at decode), else the two launches. (Run 351, 30B-A3B: the
// one kernel ties the two launches at b=1 and 8 and loses at 32 -- 6.840 vs 6.571 ms 4-bit, 22.17 vs 22.07
// bf16 -- so it stops at 16 rows, unmeasured there.)
// set_moe_route_group(false) (TF_MOE_ROUTE_GROUP=0) keeps the two launches, for A/B.
constexpr int kRouteGroupMaxRows = 16;
void moe_route_group(const float* logits, int rows, int experts, int top_k, bool norm, int32_t* experts_out,
                     float* weights_out, int tile, int4* tiles, int32_t* slot_of_pair, int32_t* slot_row,
                     cudaStream_t s);
void set_moe_route_group(bool on);
// A weight's layout as the MoE kernels read it. bits 16: dense bf16 [N, K]; 4 or 8: MLX affine weights in
// quant_linear.h's device layout with bf16 scale|bias words (scales [N, groups] U32), row_bytes = K * bits /
// 8, chunk_shift = log2(group / 32) (30: one group a row), quad_chunks = K / 128 * 4 (4-bit word order).
struct MoeLayout {
  int64_t row_bytes = 0;
  int groups = 0, chunk_shift = 0, quad_chunks = 0;
  int bits = 16;
  bool subnormal = false;  // 4-bit: scales stored times 2^133 (quant_linear.h's prescale_mlx4)
};
// One projection's experts on the device (all of one layout). weights / scales: device tables of [experts]
// device pointers (scales unused for bf16).
struct MoeExperts : MoeLayout {
  int experts = 0;  // entries of weights (and scales)
  const void* const* weights = nullptr;
  const void* const* scales = nullptr;
  // bf16: a device table of [experts] CUtensorMaps of the weights (rows of 32 values x 128, no swizzle:
  // moe_grouped_wgmma's W loads), or null (the wgmma path then leaves the call to moe_grouped_gemm).
  const void* maps = nullptr;
};

// y[slot, N] (bf16) = x[row(slot), K] (bf16) · W_e[N, K]ᵀ for every slot of every tile, e the tile's
// expert; row(slot) = x_rows[slot], or the slot itself when x_rows is null. Each element's arithmetic is
// linear_bf16's on the bf16 weight (8 fixed K slices of in-order m16n8k16 chains, summed in slice order),
// for MLX experts the weight as quant_linear.cu dequantizes it (the same device code): the same bits as
// linear_bf16 / linear_quantized on that row alone. Each active expert's (packed) weights are read once
// per tile of its tokens.
// `slots`: the pairs grouped (rows * top_k), the length of x_rows.
// silu (only where moe_grouped_fuses_silu says so: the persistent 4-bit kernel, tiles of 8 tokens): y is
// act [slots, n / 2] = silu_mul of the gate_up product, the silu_mul kernel's bits (its gate and up features
// in one MMA tile, as moe_routed_gemm's gate_up).
void moe_grouped_gemm(const void* x, const int32_t* x_rows, const MoeExperts& w, const int4* tiles,
                      int max_tiles, int tile, int slots, void* y, int n, int k, cudaStream_t s,
                      bool silu = false);
bool moe_grouped_fuses_silu(const MoeExperts& w, int max_tiles, int tile, int slots, int k);
// Prefill-sized groups of MLX 4-bit experts (moe_wgmma.cu) on the wgmma linear's pipeline, the weights
// dequantized in the CTA, or of bf16 experts with their tensor maps (MoeExperts::maps;
// set_moe_wgmma_bf16): the grouping tile (128 or 64 slots) for a call of `pairs` pairs whose average
// active expert has at least 96 (48) of them, with x (the gate_up's input, 16-byte aligned) on stream s (not
// capturing: x's permuted copy needs a buffer); 0 where the call stays on moe_grouped_gemm (shapes, no wgmma,
// set_moe_wgmma(false), TF_MOE_WGMMA=0). set_moe_wgmma_tile forces the tile (A/B).
int moe_grouped_wgmma_tile(const MoeExperts& gate_up, const MoeExperts& down, int pairs, int hidden,
                           int inter, const void* x, cudaStream_t s);
// moe_grouped_gemm's product for such a call: y [slots, n] (bf16) from x's rows x_rows[slot] (or the slot
// itself where null; silu: x is the gate_up [slots, 2k] and the input its silu_mul, the silu_mul kernel's
// bits), tiles grouped with `tile` (moe_grouped_wgmma_tile's). The same bits as moe_grouped_gemm.
void moe_grouped_wgmma(const void* x, const int32_t* x_rows, bool silu, const MoeExperts& w,
                       const int4* tiles, int max_tiles, int tile, int slots, void* y, int n, int k,
                       cudaStream_t s);
// bf16 experts' tensor maps for moe_grouped_wgmma (MoeExperts::maps): a device table (cudaMalloc'd; the
// caller frees it) of one map a weight [n, k] (`weights`: the experts' device pointers), copied on s and
// synchronized (once a layer, at its first forward); null where a map cannot be encoded.
void* moe_wgmma_maps(const std::vector<const void*>& weights, int n, int k, cudaStream_t s);
void set_moe_wgmma(bool on);
void set_moe_wgmma_bf16(bool on);  // bf16 experts on it as well (TF_MOE_WGMMA_BF16)
bool moe_wgmma_bf16();
// The bf16 experts' wgmma kernel in persistent CTAs (default) or one a tile (TF_MOE_WGMMA_PERSIST=0); A/B.
void set_moe_wgmma_persistent(bool on);
// The grouping tile of the wgmma path: 64 or 128 always, or 0 (default) by the call's average (A/B).
void set_moe_wgmma_tile(int tile);
bool moe_wgmma();
uint64_t moe_grouped_wgmma_launches();  // launches so far (tests: that the path ran)
// Tests and benches: false (or TF_MOE_GROUPED_SILU=0) keeps the silu_mul kernel after the grouped gate_up.
void set_moe_grouped_silu(bool on);
// Decode calls of up to kMoeRoutedMaxRows rows with MLX 4-bit experts (moe_routed_ok): no routing or
// grouping kernel. The gate_up GEMM (route = true) routes the rows itself (each block runs the routing's
// arithmetic on the logits; block 0 writes pair_e and pair_w; pair p's slot is p), and every
// pair is a one-token tile at slot p; the down GEMM (route = false) reads pair_e. Same routing, same per-slot
// arithmetic: the bits of moe_route_group + moe_grouped_gemm. set_moe_routed(false) (TF_MOE_ROUTED=0) turns
// it off (A/B).
constexpr int kMoeRoutedMaxRows = 4;
struct MoeRouting {
  const float* logits = nullptr;  // route: the router's logits [rows, experts] (f32)
  int rows = 0, top_k = 0;
  bool norm = false;
  int32_t* pair_e = nullptr;  // route: written; down: read
  float* pair_w = nullptr;    // route: written
};
bool moe_routed_ok(const MoeExperts& gate_up, const MoeExperts& down, int rows, int top_k, int hidden,
                   int inter);
// route (the gate_up GEMM, n = 2 * inter): y[pair, inter] = silu_mul of x[row, k] · W_e[n, k]ᵀ, row =
// pair / top_k, the silu_mul kernel's bits fused (its gate and up features in one MMA tile). Else (down):
// y[pair, n] = x[pair, k] · W_e[n, k]ᵀ.
void moe_routed_gemm(const MoeRouting& r, bool route, const void* x, const MoeExperts& w, void* y, int n,
                     int k, cudaStream_t s);
void set_moe_routed(bool on);
// Timing only (same values): the routed gate_up's routing code run once on zeros before its wait, warming the
// instruction cache (true, default), or not (false; TF_MOE_ROUTED_WARM=0).
void set_moe_routed_warm(bool on);
// Tests: true routes every row with the shared-memory scratch (else up to 256 experts use registers; the same
// picks and weights). Synchronous; not while a forward runs.
void set_moe_route_smem_only(bool on);
// The MoE of one decode row (rows == 1) with MLX 4-bit experts in one kernel (moe_decode.cu): the routing,
// moe_routed_gemm's gate_up with silu_mul into act [top_k, inter], its down and moe_combine's sum into out
// (bf16 or f32 [1, hidden]), with a grid barrier between the gate_up and the down (each down block's weights
// copied into shared memory before it). The same bits as that chain. `barrier`: kMoeDecodeBarrierWords
// zeroed device words, 8-byte aligned, owned by the call site (one block a layer): a 64-bit arrival count
// that every launch raises by its grid (the same every launch), so no reset is needed between launches or
// graph replays; the grid is every block that fits the device at once. set_moe_decode(false)
// (TF_MOE_DECODE=0): the chain (A/B).
// The router linear inside it too (MoeRouter, moe_decode_ok with it): blocks 0 .. experts / 16 - 1 each
// compute 16 logits with the linear's bits (its weights requested before the kernel's wait), publish them
// as tagged words (f32 bits | the launch's number << 32, after the barrier words) and every block polls
// them: one dependent kernel a layer fewer. Then r.logits is not read; x is the router's input too.
// set_moe_decode_router(false) (TF_MOE_DECODE_ROUTER=0): the router linear runs first (A/B).
// After the tagged logits: the o fold's finished-block count (64-bit, MoeOProj).
constexpr int kMoeDecodeBarrierWords = 4 + 2 * kMoeMaxExperts;
// The router's weight [experts, hidden]: dense bf16 (bits 16), or MLX affine 4- or 8-bit; no bias.
struct MoeRouter : MoeLayout {
  const void* weight = nullptr;  // null: logits from MoeRouting::logits
  const void* scales = nullptr;
};
// With router.weight set: whether the call fits with the router inside (else false: ask again without it).
bool moe_decode_ok(const MoeExperts& gate_up, const MoeExperts& down, int rows, int top_k, int hidden,
                   int inter, const MoeRouter& router = MoeRouter{});
// norm.res set (the router inside): x is the value added to norm.res, and every block makes the MoE's input
// h = add_rms_norm's output itself (its bits; block 0 stores the new residual to norm.res_out): one
// add_rms_norm kernel fewer a layer. x and out may be the same tensor (x is read before the grid barrier,
// out written after it).
// The attention's o projection inside it too (MoeOProj, with the router and the add + norm inside): x is then
// the o output [hidden] (bf16), which the kernel writes itself from `attn` [k] (bf16) and the o weight (MLX
// 4-bit [hidden, k], the experts' scale codes, no bias), with linear_quantized's bits. Each block b below
// hidden / 16 computes one 16-feature tile (set_moe_o_one_tile), its weights requested before the kernel's
// wait; every block waits for all of them (a count after the tagged logits) before its add + norm.
// moe_decode's blocks can then be resident while the attention runs (an SM cannot hold both an o linear block
// and a moe_decode block), so their prologue is off the step's critical path, and one kernel boundary a layer
// goes. set_moe_o_fold(false) (TF_MOE_O_FOLD=0): the o linear runs first (A/B). Run 406 (30B-A3B MLX 4-bit
// b=1, same call): -3.9 / -4.2%.
struct MoeOProj : MoeLayout {
  const void* weight = nullptr;  // null: no o projection inside
  const void* scales = nullptr;
  const void* attn = nullptr;  // [k] bf16
  int k = 0;
};
// moe_decode_ok with the o projection inside too (router, norm and the call's layout permitting).
bool moe_decode_o_ok(const MoeExperts& gate_up, const MoeExperts& down, int top_k, int hidden, int inter,
                     const MoeRouter& router, const MoeOProj& o);
void moe_decode(const MoeRouting& r, const void* x, const MoeExperts& gate_up, const MoeExperts& down,
                void* act, void* out, DType out_dtype, int hidden, int inter, unsigned* barrier,
                cudaStream_t s, const MoeRouter& router = MoeRouter{},
                const AddNormArgs& norm = AddNormArgs{}, const MoeOProj& o = MoeOProj{});
void set_moe_o_fold(bool on);
bool moe_o_fold();
// Timing only (same values): the router inside as 8 logits a block (true, default) or 16 (false;
// TF_MOE_ROUTER_ROWS=16).
void set_moe_router_rows(bool eight);
// Timing only (same values): every block arrives on the o fold's count (true), or the o blocks only (false,
// default; TF_MOE_O_COUNT_ALL=1 for true).
void set_moe_o_count_all(bool on);
// Timing only (same values): the o fold's tiles one a block on blocks 0 .. hidden / 16 - 1 (true, default),
// or two a block, one a team, on blocks 0 .. hidden / 32 - 1 (false; TF_MOE_O_TILES=2).
void set_moe_o_one_tile(bool on);
// Timing only (same values): the router tile's rows padded in shared memory (true, default; no bank
// conflicts in its chain's loads), or as they are (false; TF_MOE_ROUTER_PAD=0).
void set_moe_router_pad(bool on);
void set_moe_decode(bool on);
void set_moe_decode_router(bool on);
// Timing only (same values): moe_decode's prologue copies by warps 1-15 while warp 0 warms the routing
// (default), or by every warp first (TF_MOE_PROLOGUE_SPLIT=0).
void set_moe_prologue_split(bool on);
// Benches: with stamps on, every later moe_decode launch has each block's thread 0 write globaltimer (ns) at
// 0 after its wait, 1 gate_up done, 2 past the barrier, 3 act and the down tile in shared memory, 4 the down
// MMAs done, 5 the combine stored, 6 + 2j / 7 + 2j team 0's j-th item landed / stored (j < 3), 12 routed,
// 13 its router logits published (router blocks), 14 entered (before the wait), 15 the logits polled, 16
// thread 0 past the routing; 17 - 20 the SM's clock64 (cycles, not ns) with stamps 15, 16, 0 and 5 (the
// clock rate over the routing and over the kernel), 21 - 23 clock64 as warp 0 begins its down pairs, its
// second round of pairs and ends them, 24 - 27 as warp 0's first and second items have landed and been
// computed, 28 past the o fold's hand-over (every o tile stored), 29 past the add + norm, 30 the router
// tile's chain done (before its slice sums), 31 the o tiles' chains done, 32 past the router tile's
// mbarrier, 33 - 36 clock64 as warp 0's router chain begins, after its chunks 0 and 3, at its end:
// moe_decode_stamps()[block * kMoeDecodeStamps + i] of the last launch (0: not reached).
constexpr int kMoeDecodeStamps = 37;
void set_moe_decode_stamps(bool on);
std::vector<unsigned long long> moe_decode_stamps(int* blocks);
// slot_of_pair null: pair p's slot is p (moe_routed_gemm's layout).
// out[t, :] = sum over j < top_k, in increasing j, of weights[t*top_k+j] * y[slot_of_pair[t*top_k+j], :]
// in fp32, rounded once to out's dtype (bf16 or f32).
void moe_combine(const void* y, const int32_t* slot_of_pair, const float* weights, void* out, DType out_dtype,
                 int rows, int top_k, int width, cudaStream_t s);

}  // namespace tf::cuda
