#pragma once
// Prefill linear on Hopper warpgroup MMAs (wgmma, sm_90a), giving the same bits as linear_bf16's other
// kernels (linear.cu / linear_mid.cu / linear_tiled.cu) for every element: per element the same 8 K
// slices, the same in-order chain of k16 steps per slice with the same 16 K values per step (staged by
// 8-byte cp.async into the layout wgmma reads), the slice partials folded in slice order, then the bias.
// linear_bf16 runs it on sm_90 devices from M = kWgmmaMinM rows (linear.cu); bench/cuda/wgmma_probe.cu
// checks that one wgmma k16 step rounds like one mma.sync m16n8k16 step, tests/ops/gpu/test_cuda_wgmma.cpp
// compares whole outputs with linear_bf16 at M = 1 for every tile shape.
#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#ifdef __CUDACC__
#include "ops/cuda/mbarrier.cuh"
#endif

namespace tf::cuda {

// y[m][n] = x[m][:] . w[n][:] (+ bias[n]); x [m, k] bf16, w [n, k] bf16, y [m, n] bf16 or f32, bias f32
// or bf16 or null. Needs k % 32 == 0 and linear_wgmma_supported() (throws otherwise); any m, n >= 1.
void linear_wgmma_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y,
                       DType y_dtype, int m, int n, int k, cudaStream_t s);
// y = silu_mul(gate_up) x W^T + bias for gate_up [M, 2K] (gate first), where linear_wgmma_bf16 would permute
// x once per call (Auto tile, a raw tile, not capturing): the permute kernel computes bf16(silu(g) * u)
// (activation.cuh, silu_mul's values) as it writes the permuted rows, so the bits equal silu_mul then
// linear_wgmma_bf16 and the activation never goes through memory unpermuted. False, launching nothing, where
// that path does not apply.
bool linear_wgmma_silu_bf16(const void* gate_up, const void* w, const void* bias, DType bias_dtype, void* y,
                            DType y_dtype, int m, int n, int k, cudaStream_t s);
// y = x · Wᵀ (+ bias) for an MLX 4-bit weight W in quant_common.cuh's device layout (`words`: every chunk in
// quads, so k % 128 == 0; `scales`: the u32 scale | bias words, groups of 32 << chunk_shift, 64 or 128;
// `subnormal`: kMlxBf16Sub's prescaled codes): the 128-row tiles with the producer dequantizing W into the
// stages (produce_q4) -- the bits of linear_wgmma_bf16 on dequantize_bf16's copy, without making that copy.
// False, launching nothing, where it does not apply (shape, alignment, no wgmma, a capturing stream).
// silu: x is a gate_up [m, 2k] and the input its silu_mul (silu_mul's bits, made as x is permuted).
bool linear_wgmma_mlx4(const void* x, const void* words, const void* scales, int chunk_shift, bool subnormal,
                       const void* bias, DType bias_dtype, void* y, DType y_dtype, int m, int n, int k,
                       cudaStream_t s, bool silu = false);
uint64_t linear_wgmma_mlx4_launches();  // launches so far (tests: that the path ran)
// The token tile of linear_wgmma_mlx4: 64, 128 or 192 (tests, benches; TF_Q4_PREFILL_BN), 0: by the grid
// estimate (default). Same bits.
void set_linear_wgmma_mlx4_tokens(int bn);
// True when the current device is sm_90 and this build has the sm_90a kernels (else callers must use
// the mma.sync kernels).
bool linear_wgmma_supported();
// CTA tile, weight rows x tokens (64/128 weight rows = 1/2 consumer warpgroups). Auto picks by the grid
// size (linear_wgmma_auto_tile); the others force one, for tests and benches. Every tile computes each
// element with the same arithmetic (identical bits, tested).
// The C2 tiles run as 2-CTA clusters that share the x tile (each CTA loads half and forwards it to the
// other), halving x's L2 traffic; the S2 tiles as 2-CTA clusters that split one tile's 8 K slices 4 + 4
// (rank 0 adds rank 1's four partials in slice order through distributed shared memory), twice the
// CTAs for small grids. Auto picks them only after set_linear_wgmma_clusters(true).
enum class WgmmaTile {
  Auto,
  W64T64,
  W64T128,
  W128T64,
  W128T128,
  W128T192,
  W128T256,
  W128T128C2,
  W128T192C2,
  W64T64S2,
  W64T128S2,
  W128T64S2
};
void set_linear_wgmma_tile(WgmmaTile tile);
WgmmaTile linear_wgmma_auto_tile(int m, int n);
// Whether Auto may pick the cluster tiles (C2, S2). Same bits either way.
void set_linear_wgmma_clusters(bool on);
// Whether the TmaXW 128x128 / 128x192 tiles stage two chunks as 128-byte rows (on) or one as 64-byte rows.
// Same bits.
void set_linear_wgmma_rows128(bool on);
// How tiles that stage raw rows (all but 128x256 and the C2 clusters, which copy 8-byte pieces straight
// into the wgmma layout) get them: Raw = 16-byte cp.async, Tma = 2D tensor-map loads (throws if a map
// does not encode: pointers must be 16-byte aligned), TmaX = x permuted once per call by a small kernel
// into the stage order, then tensor-map loads straight into the swizzled stages (only W goes through the
// raw hop; Raw inside a graph capture, which cannot allocate its buffer). Auto = TmaX (run 32: 1.2-1.4x
// Raw from M = 512). The S2 tiles always use 16-byte cp.async. Same bits.
// TmaXW: x and W both permuted once per call (permute kernels into per-stream buffers) and loaded into the
// stages by tensor map (no permutation pass in the CTA); Auto takes it from TF_WGMMA_WPERM_MIN_M rows on.
enum class WgmmaProducer { Auto, Raw, Tma, TmaX, TmaXW };
void set_linear_wgmma_producer(WgmmaProducer producer);
// Raw tiles stage in wgmma's 64-byte swizzle (on, the default since run 31: with permute_row's lane order
// its permutation stores are conflict-free, the no-swizzle layout's are 2-way) or in the no-swizzle
// core-matrix layout the 8-byte path writes (off; TMA needs it on, S2 tiles always use it). Same bits.
void set_linear_wgmma_swizzle(bool on);
const char* wgmma_producer_name(WgmmaProducer producer);
const char* wgmma_tile_name(WgmmaTile tile);

// ---- linear_rs.cu: the streaming linear for M = 17..256 (issue #8) ----
// wgmma with the weights as the register operand A (raw rows by TMA, each lane's 16-byte fragment loaded as
// linear.cu loads it) and x permuted into the stage by the consumers: no weight permutation pass, K slices
// split over a 1/2/4-CTA cluster so narrow weights fill the SMs. Same bits as linear_bf16 at M = 1 for every
// tile (tests/ops/gpu/test_cuda_wgmma.cpp). Tiles: weight rows x tokens, sN = the 8 K slices split over N
// CTAs of a cluster (rank 0 folds the others' slice partials in slice order).
enum class RsTile {
  Auto,
  W64T32,
  W64T32S2,
  W64T32S4,
  W64T64,
  W64T64S2,
  W64T64S4,
  W64T128,
  W64T128S2,
  W64T128S4,
  W128T64,
  W128T128
};
constexpr RsTile kRsTiles[] = {RsTile::W64T32,    RsTile::W64T32S2, RsTile::W64T32S4, RsTile::W64T64,
                               RsTile::W64T64S2,  RsTile::W64T64S4, RsTile::W64T128,  RsTile::W64T128S2,
                               RsTile::W64T128S4, RsTile::W128T64,  RsTile::W128T128};
// Runs it (any m >= 1; tiles of 128 tokens beyond M = 128). Returns false without launching when the
// tensor maps cannot be encoded (x or w not 16-byte aligned, a driver without the encoder); throws when
// k % 32 != 0 or !linear_wgmma_supported().
bool linear_rs_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y, DType y_dtype,
                    int m, int n, int k, cudaStream_t s);
// Whether linear_bf16's Auto dispatch sends M = 17..kRsMaxM to it (through linear_mid_bf16 /
// linear_wgmma_bf16 with their Auto tiles) on sm_90. Default: only the shapes where it measured faster than
// the kernel it replaces (linear_rs_policy_tile, run 54); set_linear_rs(true) / TF_LINEAR_RS=1: every M in
// range; set_linear_rs(false) / TF_LINEAR_RS=0: never. Same bits either way.
constexpr int kRsMinM = 17, kRsMaxM = 256;
void set_linear_rs(bool on);
void reset_linear_rs();    // back to the default policy
bool linear_rs_enabled();  // switched on for every M in range
// The hook linear_mid_bf16 and linear_wgmma_bf16 consult when their tile is Auto (and
// linear_wgmma_supported()).
bool linear_rs_takes(int m, int n);
void set_linear_rs_tile(RsTile tile);  // Auto: linear_rs_auto_tile (switched on) or the policy's tile
RsTile linear_rs_auto_tile(int m, int n);
// The default policy: the tile for an M x N the run-54 sweep found faster than today's kernels (lm_head-like
// N >= 100000 at M 17..64, gate_up-like N >= 16384 at M 33..64, N < 16384 at M 192..256), else Auto (= none).
RsTile linear_rs_policy_tile(int m, int n);
const char* rs_tile_name(RsTile tile);
// A [rows, k] bf16 row-major matrix as a 2D tensor map, boxes of 32 elements (one chunk) x box_rows, rows
// past `rows` zero-filled; swizzle_64b: wgmma's 64-byte swizzle. False when it cannot be encoded.
bool make_linear_tensor_map(CUtensorMap* map, const void* base, int rows, int k, int box_rows,
                            bool swizzle_64b);
// A paged K or V pool [slots, heads, head_dim] (bf16) as a 3D tensor map whose box is one head's rows of a
// run of slots: {box_cols elements of a row (those past head_dim zero-filled: a padded shared-memory row),
// 1 head, box_rows slots}; swizzle_128b: written into shared memory in the 128-byte swizzle (box_cols * 2 <=
// 128). False when it cannot be encoded.
bool make_kv_tensor_map(CUtensorMap* map, const void* pool, int64_t slots, int heads, int head_dim,
                        int box_cols, int box_rows, bool swizzle_128b = false);
// A [rows, k] bf16 row-major matrix (rows even, k a multiple of 64) as a 4D tensor map whose box is 8 rows
// (from an even row) x box_blocks blocks of 64 columns, written into shared memory in the 128-byte swizzle as
// [block][row parity][row pair][64]: row g of the box on the block's 128-byte line (g & 1) * 4 + g / 2, so
// that rows g and g + 1 -- one quarter-warp's 16-byte loads of an MMA fragment -- fall in different bank
// halves. Coordinates {0, row / 2, 0, block}. False when it cannot be encoded.
bool make_rows8_tensor_map(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int box_blocks);
// An MLX 4-bit weight's codes [rows, k / 8] (U32, the device layout: quads of 128 k-values, 64 bytes, lane
// t's 16 bytes at 16 t) as a 3D tensor map {16 words of a quad, rows, quads} whose box is 8 rows x box_quads
// quads, landing as [quad][row][64 bytes] (no swizzle: rows g and g + 1 of a quarter-warp's 16-byte loads are
// 64 bytes apart, in different banks); quads past the row's zero-filled. Coordinates {0, row, quad}. False
// when it cannot be encoded (k % 128 != 0 among others).
bool make_quads_tensor_map(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int box_quads);
// A [rows, words] U32 matrix (MLX scale | bias words) as a 2D tensor map whose box is box_words x 8 rows,
// landing as [row][box_words]; words past the row's zero-filled. Coordinates {word, row}. False when it
// cannot be encoded (a row's bytes not a multiple of 16, box_words % 4 != 0 among others).
bool make_words_tensor_map(CUtensorMap* map, const void* base, int64_t rows, int64_t words, int box_words);

#ifdef __CUDACC__
// ---- device helpers shared with the probe (inline PTX per the PTX ISA, "warpgroup-level MMA") ----

// One 2D tensor-map load (box at column col, row row) into shared memory at dst, completing on mbarrier bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int col, int row,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

// One 3D tensor-map load (box at coordinates x, y, z) into shared memory at dst, completing on mbarrier bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

// One 4D tensor-map load (box at coordinates x, y, z, w) into shared memory at dst, completing on mbarrier
// bar.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, int w,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
      : "memory");
}

// The 16 bytes of row g (0-7) of a make_rows8_tensor_map box landed at shared address `base` (1 KB-aligned)
// that hold its columns col .. col + 7 (col % 8 == 0): block col / 64's line (g & 1) * 4 + g / 2, the 16-byte
// unit swizzled by that line.
__device__ __forceinline__ uint32_t rows8_addr(uint32_t base, int g, int col) {
  const int pg = (g & 1) * 4 + g / 2;
  return base + ((col >> 6) * 8 + pg) * 128 + ((((col & 63) >> 3) ^ pg) << 4);
}

// Shared-memory matrix descriptor, no swizzle ("interleave"): the operand is a grid of 8x8 core
// matrices (8 rows of 16 contiguous bytes = 8 bf16 along K, 128 bytes in all). lbo: bytes between core
// matrices adjacent in K; sbo: bytes between core matrices adjacent in M/N. Address fields drop 4 bits.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo & 0x3FFFF) >> 4) << 32);  // bits 49-51 base offset 0, bits 62-63 swizzle 0
}

// desc with its start address `units` 16-byte units further on, added to the low word only: the start address
// field (bits 0-13) holds any shared-memory address, so the sum never carries out of it, and a 32-bit add is
// all the uniform datapath needs (a 64-bit sum of a signed offset costs a sign extension and a carry a use).
__device__ __forceinline__ uint64_t wgmma_desc_plus(uint64_t desc, uint32_t units) {
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + units);
}

// Orders this thread's earlier register writes (accumulators) before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins accumulator registers in place around wgmma issue/wait: the asm statements only say the
// registers are written at issue, so without this the compiler could read them before the wait.
template <int COUNT>
__device__ __forceinline__ void wgmma_fence_operands(float* d) {
#pragma unroll
  for (int i = 0; i < COUNT; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulator operands of a wgmma's asm: "+f"(d[i]) .. "+f"(d[i + N - 1]), N = 8..64 registers.
#define TF_WGMMA_D8(d, i)                                                                                 \
  "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define TF_WGMMA_D16(d, i) TF_WGMMA_D8(d, i), TF_WGMMA_D8(d, (i) + 8)
#define TF_WGMMA_D32(d, i) TF_WGMMA_D16(d, i), TF_WGMMA_D16(d, (i) + 16)
#define TF_WGMMA_D64(d, i) TF_WGMMA_D32(d, i), TF_WGMMA_D32(d, (i) + 32)

// D[64 x N] = A[64 x 16] * B[16 x N] + (scale_d ? D : 0), bf16 inputs, f32 accumulators; A and B both
// K-major in shared memory (no transpose). Thread (warp w, lane g*4+t) of the warpgroup holds
// d[4j + e] = D[16w + g + 8(e/2)][8j + 2t + e%2], j < N/8 (the mma.sync m16n8 layout per warp).
__device__ __forceinline__ void wgmma_m64n8(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3"
      "}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

__device__ __forceinline__ void wgmma_m64n64(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : TF_WGMMA_D32(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

__device__ __forceinline__ void wgmma_m64n128(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : TF_WGMMA_D64(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

__device__ __forceinline__ void wgmma_m64n192(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
      : TF_WGMMA_D64(d, 0), TF_WGMMA_D32(d, 64)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

__device__ __forceinline__ void wgmma_m64n256(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : TF_WGMMA_D64(d, 0), TF_WGMMA_D64(d, 64)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d)
      : "memory");
}

// ---- wgmma with A from registers (PTX ISA "wgmma.mma_async", register A: per warp w of the warpgroup the
// mma.sync m16n8k16 A fragment of rows 16w..16w+15: a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g,
// 2t+8..), a[3] = (g+8, 2t+8..)); B K-major in shared memory; D as in wgmma_m64n64 above (m64n16: two 8-token
// halves). linear_rs.cu (N = 32-128) and quant_wg.cu (N = 16). ----
__device__ __forceinline__ void wgmma_rs_m64n16(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : TF_WGMMA_D8(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}

__device__ __forceinline__ void wgmma_rs_m64n32(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : TF_WGMMA_D16(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}

// TB = 1: B MN-major in shared memory (imm-trans-b; attention_wgmma.cu's P V, V as stored).
template <int TB = 0>
__device__ __forceinline__ void wgmma_rs_m64n64(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(TB == 0 || TB == 1, "imm-trans-b is 0 or 1");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : TF_WGMMA_D32(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(TB)
      : "memory");
}

__device__ __forceinline__ void wgmma_rs_m64n128(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : TF_WGMMA_D64(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}

template <int BN>
__device__ __forceinline__ void wgmma_rs(float* d, const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (BN == 32) wgmma_rs_m64n32(d, a, desc_b);
  if constexpr (BN == 64) wgmma_rs_m64n64<>(d, a, desc_b);
  if constexpr (BN == 128) wgmma_rs_m64n128(d, a, desc_b);
}

// Bytes from a dynamic shared-memory base to its next 1024-byte boundary (swizzle atoms and TMA boxes
// need it whatever the static shared memory before).
__device__ __forceinline__ uint32_t smem_pad1k(const void* base) {
  return (1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(base)) & 1023)) & 1023;
}

// ---- clusters (mapa, barrier.cluster) and the 64-byte swizzle descriptor, shared by linear_wgmma.cu and
// linear_rs.cu (mbarriers: mbarrier.cuh) ----
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// The peer CTA's shared::cluster address of this CTA's shared address `a`.
__device__ __forceinline__ uint32_t peer_addr(uint32_t a, uint32_t peer) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(peer));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// K-major operand in the 64-byte swizzle: rows of 64 bytes (one chunk: step h at bytes 32h..32h+31), 8-row
// atoms of 512 bytes (SBO), 16-byte unit u of row r stored at unit u ^ ((r >> 1) & 3) -- the XOR of
// address bits 4-5 with bits 7-8 that wgmma applies (atoms 512-byte aligned). LBO is unused (1).
// Step h's descriptor starts 32h bytes into the rows; the hardware swizzles the final addresses.
// The same in the 128-byte swizzle: 128-byte rows (two chunks), 8-row atoms of 1024 bytes (atoms 1024-byte
// aligned); step h of the row's chunk j starts 64 j + 32 h bytes into the rows.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
__device__ __forceinline__ uint64_t desc_sw64(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(512 >> 4) << 32) |
         (uint64_t(2) << 62);
}
#endif  // __CUDACC__

}  // namespace tf::cuda
