#pragma once
// Host-side launchers for the CUDA backend's kernels. Plain pointers and sizes so that the backend
// (compiled as C++) stays free of device code. Every kernel computes a row with the same instruction
// sequence whatever the number of rows (see DESIGN.md "Row invariance"); the comments say how.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tf::cuda {

// Batch metadata as the kernels see it (device pointers into one uploaded buffer).
struct DeviceMeta {
  const int32_t* tokens = nullptr;         // [R]
  const int32_t* positions = nullptr;      // [R]
  const int32_t* row_seq = nullptr;        // [R]
  const int32_t* slots = nullptr;          // [R]
  const int32_t* table_offsets = nullptr;  // [S] start of each sequence's block table in `tables`
  const int32_t* tables = nullptr;         // concatenated block tables
  int rows = 0, block_size = 0;
};

// Attention splits each row's KV at multiples of this absolute position; one partial per split,
// combined in increasing order. Fixed, so a row's arithmetic depends only on its own position.
constexpr int kAttnChunk = 128;

// y[M,N] (bf16 or f32) = x[M,K] (bf16) · W[N,K]ᵀ (bf16) + bias. K % 32 == 0.
void linear_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y, DType y_dtype,
                 int m, int n, int k, cudaStream_t s);
// y[M,N] = silu_mul(gate_up)[M,K] · W[N,K]ᵀ + bias, gate_up [M, 2K] (gate first), for M <= 16: the decode
// kernel computes bf16(silu(g) * u) in registers where it would load x (activation.cuh, the silu_mul
// kernel's arithmetic), so the bits equal silu_mul followed by linear_bf16. M > 16 where linear_bf16 would
// run the wgmma kernel with a permuted-x producer: silu inside that permute (linear_wgmma_silu_bf16).
// Returns false, launching nothing, for other M (the caller runs the two ops).
bool linear_silu_bf16(const void* gate_up, const void* w, const void* bias, DType bias_dtype, void* y,
                      DType y_dtype, int m, int n, int k, cudaStream_t s);
// residual_out = residual + x and y[M,N] = rms_norm(residual_out)[M,K] · W[N,K]ᵀ + bias for M <= 8 and
// K <= 8192: the decode kernel reduces each of its rows exactly as add_rms_norm does (norm.cuh) and makes the
// normalised values where it would load x, so y and residual_out equal add_rms_norm (into a copy of the
// residual) followed by linear_bf16, bit for bit. Out of place: every block reads the old residual.
// Returns false, launching nothing, for shapes it does not take (the caller runs the two ops).
bool linear_add_rms_norm_bf16(const void* residual, DType res_dtype, const void* x, const void* norm_w,
                              DType norm_w_dtype, float eps, float offset, void* residual_out, const void* w,
                              const void* bias, DType bias_dtype, void* y, DType y_dtype, int m, int n, int k,
                              cudaStream_t s);
// Loop variants of the linear and attention kernels, for benches and tests. Every variant issues the
// same arithmetic in the same order (identical bits, tested); they differ only in when loads are issued.
// Auto is what measured fastest on an H200 (docs/cuda-notes.md): linear prefetches the next K step's
// weights into registers for M <= 16 and uses the plain loop above; attention uses the plain tile loop.
enum class LoopVariant { Auto, Plain, Prefetch };
void set_linear_variant(LoopVariant v);
// Which linear kernel serves a call. Auto: the decode kernel (linear.cu) for M <= 16, linear_mid.cu up to
// set_linear_mid_max_m (512 by default), linear_tiled.cu above; on sm_90 devices the wgmma kernel
// (linear_wgmma.cu) instead of those two from M = 64. The others force one kernel for every M, for tests
// and benches (Wgmma throws on other GPUs): all compute every element with the same arithmetic
// (identical bits, tested).
enum class LinearKernel { Auto, Decode, Mid, Tiled, Wgmma };
void set_linear_kernel(LinearKernel kernel);
void set_linear_mid_max_m(int m);
// linear_mid.cu's features a CTA: 0 = the Auto tile (default), 32 or 64 forced with v8's tokens by M
// (32 up to M = 32, else 64) and one-chunk stages (benches; same bits).
void set_linear_mid_features(int features);
// linear_mid.cu's CTA tiles, features x tokens a CTA: x2 = two CTAs an SM (3-stage rings), Deep = a 6-stage
// ring, P = a persistent grid (one CTA an SM looping over tiles, the next tile's first chunks in flight
// during the current one's last), W = two chunks a stage (128 contiguous bytes of a row a load); 32x128 and
// 64x96 have 2-stage rings. Auto: by M and N
// (linear_mid_auto_tile, docs/cuda-notes.md v11). A forced tile (tests, benches; same bits) wins over
// set_linear_mid_features.
enum class MidTile {
  Auto,
  F32T32,
  F64T32,
  F32T64,
  F64T64,
  F32T128,
  F64T96,
  F32T32x2,
  F32T32Deep,
  F32T32P,
  F64T32P,
  F32T64P,
  F32T32W,
  F64T32W,
  F32T64W
};
constexpr MidTile kMidTiles[] = {MidTile::F32T32,  MidTile::F64T32,  MidTile::F32T64,   MidTile::F64T64,
                                 MidTile::F32T128, MidTile::F64T96,  MidTile::F32T32x2, MidTile::F32T32Deep,
                                 MidTile::F32T32P, MidTile::F64T32P, MidTile::F32T64P,  MidTile::F32T32W,
                                 MidTile::F64T32W, MidTile::F32T64W};
void set_linear_mid_tile(MidTile tile);
MidTile linear_mid_auto_tile(int m, int n);
const char* linear_mid_tile_name(MidTile tile);
void set_attention_variant(LoopVariant v);
// Programmatic dependent launch (launch.h) of every kernel that takes it (on by default; off for benches).
// Same bits.
void set_linear_pdl(bool on);
// Attention blocks serve several rows of a sequence for calls of >= 64 rows (Auto) or one row always
// (Plain). Same bits (tested); for benches and tests.
void set_attention_rows_per_block(LoopVariant v);
// add_rms_norm's one-round-of-loads kernel for rows of a multiple of 8 elements up to 8192 (default on);
// off: the scalar add_rms_norm_kernel<32>. Same bits (tested); for tests and benches.
void set_vector_norm(bool on);
void rms_norm(const void* x, const void* w, DType w_dtype, void* y, int64_t rows, int cols, float eps,
              float offset, cudaStream_t s);
void add_rms_norm(void* residual, DType res_dtype, const void* x, const void* w, DType w_dtype, void* y,
                  int64_t rows, int cols, float eps, float offset, cudaStream_t s);
void rope(void* q, void* k, int rows, int hq, int hk, int head_dim, int rotary_dim, const float* inv_freq,
          float attention_factor, bool interleaved, const int32_t* positions, cudaStream_t s);
void silu_mul(const void* gate_up, void* out, int64_t rows, int inter, cudaStream_t s);
// Fused per-head q/k RMS norm (when q_w/k_w are given) + NeoX rope + K/V pool write, one warp per (row,
// head): the same arithmetic as rms_norm, rope and kv_write in sequence (bitwise, tested). Supports
// head_dim 64/128/256 with (rotary_dim / 2) % 32 == 0, not interleaved; returns false otherwise.
bool qk_norm_rope_kv(void* q, void* k, const void* v, const void* q_w, const void* k_w, DType w_dtype,
                     float eps, float offset, int rows, int hq, int hk, int head_dim, int rotary_dim,
                     const float* inv_freq, float factor, bool interleaved, const int32_t* positions,
                     void* k_pool, void* v_pool, const int32_t* slots, cudaStream_t s);
// The same, reading q, k and v from one fused projection's output qkv [R, (hq + 2 hk) * D] (q heads, then
// k heads, then v heads of a row): q_out [R, hq, D] receives q normed and rotated, k and v go only to the
// pool. Bitwise what qk_norm_rope_kv gives on the three parts.
bool qkv_norm_rope_kv(const void* qkv, void* q_out, const void* q_w, const void* k_w, DType w_dtype,
                      float eps, float offset, int rows, int hq, int hk, int head_dim, int rotary_dim,
                      const float* inv_freq, float factor, bool interleaved, const int32_t* positions,
                      void* k_pool, void* v_pool, const int32_t* slots, cudaStream_t s);
void kv_write(void* k_pool, void* v_pool, const void* k, const void* v, int rows, int row_elems,
              const int32_t* slots, cudaStream_t s);
// Partials: acc [R, Hq, max_chunks, D] and ml [R, Hq, max_chunks, 2] floats.
void attention(const void* q, const void* k_pool, const void* v_pool, void* out, const DeviceMeta& meta,
               int hq, int hk, int head_dim, float scale, int window, float softcap, int max_chunks,
               float* part_acc, float* part_ml, cudaStream_t s);
void embedding(const void* table, DType table_dtype, const int32_t* tokens, void* out, DType out_dtype,
               int rows, int hidden, float scale, cudaStream_t s);
void add(void* a, DType a_dtype, const void* b, DType b_dtype, int64_t n, cudaStream_t s);
// out[rows[i]] += weights[i] * y[i] over rows of `width` elements (bf16 or f32, fp32 arithmetic).
void scatter_add_rows(void* out, const void* y, DType dtype, const int32_t* rows, const float* weights,
                      int nrows, int64_t width, cudaStream_t s);
void gather_rows(const void* x, const int32_t* rows, void* out, int nrows, int64_t row_bytes, cudaStream_t s);
void fill_uniform(void* p, DType dtype, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t s);
// Benches only: one dependent launch (launch_pdl) of `blocks` blocks that waits for the previous kernel and
// exits -- what one more dependent step costs a forward, with nothing to do.
void empty_step(int blocks, cudaStream_t s);
// Tests only: `blocks` one-warp blocks, each with 120 KB of shared memory, that spin for `us` microseconds on
// stream s: they hold that many SMs against a launch on another stream whose blocks each need a whole SM
// (moe_decode), so that some of its blocks become resident only later.
void hold_sms(int blocks, int us, cudaStream_t s);

}  // namespace tf::cuda
