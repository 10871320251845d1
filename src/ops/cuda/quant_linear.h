#pragma once
// Weight-only quantized linears on the GPU (quant_linear.cu): MLX affine 2/3/4/5/6/8-bit and FP8 e4m3 with
// per-row-group f32 scales (block 128x128, per-channel and per-tensor scales all normalised to that shape
// at load, ops/cpu/quant.h). Needs in_features % 32 == 0 and groups of 32 * 2^i inputs (or one per row).
// Weights stay packed on the device; each kernel reads every packed byte once per token tile and dequantizes
// in registers.
//
// Arithmetic (the same for every M, so a row's bits never depend on the batch): every weight value is
// dequantized to bf16 (MLX 2-6-bit with bf16 scales: bf16(scale*q + bias) with one rounding; other MLX
// widths/scale types: bf16(fmaf(scale, q, bias)); FP8: bf16(f32(e4m3) * scale)), then multiplied on the
// tensor cores exactly as linear.cu's bf16 kernel would multiply that bf16 weight: same K permutation,
// same 8 fixed K slices, same slice sum. Hence the fused kernel, and dequantize_bf16() followed by the
// bf16 linear (what large-M calls use), give identical bits (tested).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace tf::cuda {

// Uploads a quantized host weight, packed, at its shipped size. Device layout (what a LinearWeight of
// these formats holds on the GPU): `weight` as shipped, except 4-bit weights: each 32-bit word has its 8
// values reordered (value i at nibble i/2 + 4*(i%2)), and within a row the words of each 128 inputs (4
// chunks of 32 x 4 lanes' 8 values) are ordered lane-major, so that a lane reads its 8 values of 4
// consecutive chunks as 16 contiguous bytes (the trailing in % 128 inputs keep their order; word_of() in
// quant_linear.cu); MLX bf16 scales and biases interleaved as one
// U32 per group in `scales` (bf16 scale in the low half, bias in the high half; `biases` empty); f16/f32
// MLX scales and biases as f32; FP8 scales f32. Returns false, uploading nothing, when the format or its
// shape has no kernel here (the caller then falls back to dense bf16).
bool upload_quantized_linear(const LinearWeight& host, LinearWeight& dev, cudaStream_t s);
// MLX 4-bit with bf16 scales in the layout above: stores every scale times 2^133 and sets w.subnormal_codes
// when all of them stay finite bf16 (|scale| < 2^-5; upload_quantized_linear does it). A code q in the
// mantissa of a bf16 with zero exponent bits is then the subnormal q * 2^-133, and one bf16 fma with the
// stored scale gives scale*q + bias rounded once: the same bf16 weight, with one instruction a pair fewer
// than the magic-number form (quant_common.cuh). Returns whether it did; false (nothing changed) for other
// formats, scales out of range, or set_mlx_subnormal_codes(false) / TF_MLX_SUBNORMAL=0.
bool prescale_mlx4(LinearWeight& w, cudaStream_t s);
void set_mlx_subnormal_codes(bool on);
// log2(group / 32) of an MLX weight's groups (a 32-value chunk's group is its index >> this); 30 when there
// is one group per row (any group size); -1 when no kernel takes the group size.
int chunk_shift(const LinearWeight& w);
// The slice partials and the per-tile tickets of q4_ks_kernel (quant_ks.cu): one per stream (the backend
// owns it), made outside graph captures; the tickets are zero between calls (each call's last warpgroup of a
// tile resets its ticket).
struct Q4KsWorkspace {
  float* part = nullptr;   // [max_tiles][8 slices][2048] f32 (a 16-row call uses 1024 of each)
  int* tickets = nullptr;  // [max_tiles]
  int max_tiles = 0;
};
// Whether q4_ks_kernel can take calls on this uploaded weight (MLX 4-bit with bf16 scales, groups >= 64, K a
// multiple of 1024 up to 12288, wgmma on the device): the backend then makes its workspace if the mode
// (set_q4_ks) is on at that upload.
bool q4_ks_takes(const LinearWeight& w);
Q4KsWorkspace make_q4_ks_workspace();  // 24 MB, tickets zeroed (empty without wgmma); synchronous
void free_q4_ks_workspace(Q4KsWorkspace& ws);
void reset_q4_ks_workspace(const Q4KsWorkspace& ws, cudaStream_t s);  // tickets to zero (after a failure)
// y[M,N] (bf16 or f32) = x[M,K] (bf16) · Wᵀ + bias for a weight from upload_quantized_linear. `ks`: the
// stream's workspace for q4_ks_kernel (null: that kernel is not used).
void linear_quantized(const Tensor& x, const LinearWeight& w, Tensor& y, cudaStream_t s,
                      const Q4KsWorkspace* ks = nullptr);
// The bf16 weight [N, K] the kernels multiply by (for tests and for the large-M path).
Tensor dequantize_bf16(const LinearWeight& w, cudaStream_t s);
// K chunks (32 values) whose packed bytes a warp loads ahead per step for M <= 16: 4, 8 or 16, or 0 (the
// default: 4-bit with bf16 scales and groups >= 64, 16 at M <= 8 and 8 at M <= 16; other widths <= 4 bits
// 8; else 4). For benches; every output bit is the same (tested).
void set_quant_loads_per_step(int chunks);
// Benches: with stamps on, every later one-row call that takes q4_decode_kernel with x in shared memory runs
// its stamps instance (thread 0 of each block: globaltimer ns at entry, past the wait, with x in shared
// memory, past its last store), each launch into the next of a ring of kQ4StampSlots; q4_stamps(back) returns
// the stamps of the launch `back` before the latest (0: the latest), block b's stamp i at [b * kQ4Stamps + i]
// (0: not reached), and its grid in *blocks. The slot is a launch parameter: under a CUDA graph, the slots of
// the capture. Speed only (same bits, tested): one-row MLX 4-bit calls (groups >= 64, K = 1024 or 2048) whose
// 16-feature tiles outnumber the persistent grid's blocks run one tile a block of 4 warps, two K slices a
// warp (q4_row2_kernel; the 30B-A3B qkv projection: 320 tiles). TF_Q4_ROW2=0 off.
void set_q4_row2(bool on);
// Speed only (same bits, tested): MLX 4-bit calls (groups >= 64) of 9-16 rows with two 16-feature groups a
// warp (q4_pair_kernel, quant_pair.cu). Mode 0 off (q4_decode_kernel), 1 only where its 32-feature tiles
// fill the persistent grid, 2 at every width, 3 (the default since run 455) as 1 and also where K and the
// width are both >= 4096 (the 8B qkv and o, beside q4_wg on the gate_up and q4_ks on the down).
// TF_Q4_PAIR=0-3.
void set_q4_pair(int mode);
int q4_pair_mode();
// Speed only (same bits, tested): MLX 4-bit calls (groups >= 64, K a multiple of 1024 up to 4096) of up to
// 16 rows on warpgroup MMAs (q4_wg_kernel, quant_wg.cu; sm_90a), before q4_pair_kernel. Mode 0 off, 1 at 9-16
// rows where its 64-feature tiles fill its grid (one CTA an SM; the default since run 455: the gate_up and
// the lm_head), 2 at 1-16 rows and every width, 3 as 1 for lm_head widths (>= 65536) only (see quant_wg.cu).
// TF_Q4_WG=0/1/2/3.
void set_q4_wg(int mode);
int q4_wg_mode();
// Speed only (same bits, tested): MLX 4-bit calls (groups >= 64, K a multiple of 1024 up to 12288, widths up
// to 24576) of 9-16 rows split by K slice across CTAs, each CTA holding one slice of x (q4_ks_kernel,
// quant_ks.cu; sm_90a), before q4_wg_kernel. Needs the backend's workspace, made at an upload while the mode
// is on (or by reserve_q4_ks_workspace). Mode 0 off, 1 at 9-16 rows, 2 at 1-16 rows, 3 as 1 for K > 4096
// only (the down; the default since run 453: the 8B b=16 forward -1.3..-1.6%), 4 as 1 for widths <= 8192
// only. TF_Q4_KS=0-4; configuration 1 by default.
// Configurations (TF_Q4_KS_CFG, set_q4_ks_config): 0 one warpgroup a CTA, 1 two, 2 / 3 the same with the
// fragments by chunk parity, 4 four (one CTA an SM), 5 / 6 two / one with the fold in a cluster of the 8
// slices. q4_ks_launches() counts its launches (tests).
void set_q4_ks(int mode);
int q4_ks_mode();
// 17-32 rows (q4_decode_kernel's 32-row tiles otherwise): q4_ks_kernel with 32 token rows a wgmma
// (m64n32k16), configuration 1, whatever set_q4_ks says. Mode 0 off, 1 every width, 2 K > 4096 only (the
// down; the default: run 491, the 8B b=32 forward -2.1%, where every width loses +6%) (TF_Q4_KS32; same
// bits).
void set_q4_ks32(int mode);
int q4_ks32_mode();
// 17-64-row MLX 4-bit calls in pieces, each on its own kernels: 0 off; 1 17-32 rows of widths > 8192 as 16 +
// the rest (run 492: the 8B b=32 forward -4.6..-6%); 2 as 1 for every width; 3 as 1, and 33-64 rows of
// widths > 8192 by 16 rows; 4 (the default) as 3, and 33-64 rows of K > 4096 by 32 rows (run 494: the 8B
// linears at 64 / 48 rows -12% / -20%). TF_Q4_SPLIT32; same bits.
void set_q4_split32(int mode);
// MLX 4-bit calls of kDequantMinM (128) rows or more on the wgmma linear that dequantizes the weight in the
// CTA (on, the default, up to TF_Q4_PREFILL_MAX_M = 4096 rows; TF_Q4_PREFILL) or on the bf16 linear on a
// dequantized copy of the weight (off). Same bits.
void set_q4_prefill(bool on);
// y = silu_mul(gu) · Wᵀ + bias for gu [m, 2k] (gate first) where the 4-bit prefill path above takes the
// call (the activation made as x is permuted: silu_mul's bits, no act tensor); false, launching nothing,
// otherwise.
bool linear_quantized_silu(const Tensor& gu, const LinearWeight& w, Tensor& y, cudaStream_t s);
bool q4_prefill();
int q4_split32_mode();
void set_q4_ks_config(int cfg);
int q4_ks_config();
long q4_ks_launches();
// Its configuration (measurements; same bits): 0 = 4 K slices a warpgroup (two warpgroups), 1 = 2 slices
// (four warpgroups; the default), each with two quads of weights in flight ahead. TF_Q4_WG_CFG=0/1.
void set_q4_wg_config(int cfg);
int q4_wg_config();
// Speed only (same bits, tested): q4_wg_kernel's cluster instance -- a 64-feature tile's 8 K slices over two
// CTAs (x's half of K each: 32 token rows of K <= 4096), rank 0's partial sum pushed into rank 1, which adds
// its own and stores (quant_wg.cu). Mode 0 off, 1 (the default) 17-32 rows (no pieces then) and 32-row pieces
// of 33-64-row calls whose widths' tiles as pairs fill 3/4 of the SMs, 2 as 1 with pieces of every width.
// TF_Q4_WGC=0-2. q4_wgc_launches() counts its launches (tests).
void set_q4_wgc(int mode);
int q4_wgc_mode();
long q4_wgc_launches();
constexpr int kQ4Stamps = 4;
void set_q4_stamps(bool on);
std::vector<unsigned long long> q4_stamps(int back, int* blocks);
// Fills `bytes` bytes of device memory with pseudo-random bytes ANDed with `mask` (benches: random
// packed weights; mask 0xBF keeps e4m3 bytes finite).
void fill_random_bytes(void* p, size_t bytes, uint64_t seed, uint8_t mask, cudaStream_t s);

}  // namespace tf::cuda
