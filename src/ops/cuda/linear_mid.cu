// Mid-M linear (17..512 rows: batched decode, mixed decode + prefill rounds): the decode kernel's
// (linear.cu) per-element arithmetic with bigger tiles and a deep cp.async pipeline.
//
// The arithmetic is the decode kernel's, literally: 8 warps per CTA, warp w owns K slice w (chunks
// [w*C/8, (w+1)*C/8), a function of K alone), an in-order MMA chain over its 32-wide chunks starting
// from 0, with the same MMA (m16n8k16, weights as A, 8 tokens as B) and the same in-chunk K permutation
// (lane (g, t) feeds W[f][c*32 + 8t .. +8] and x[tok][c*32 + 8t .. +8]); then the 8 partials are summed
// in warp order (s = red[0]; s += red[1] ...), the bias added, the result rounded. What differs is only
// the tile: a CTA owns 16*NF features x 8*NT tokens (the decode kernel: 16 x 8*NT), so that a weight
// chunk feeds NT token MMAs and an x chunk feeds NF feature MMAs (the decode kernel at M = 32 reads
// twice as many x bytes from L2 as weight bytes), and each warp streams its slice through a private
// S-stage cp.async ring in shared memory (S - 1 chunks in flight per warp without registers; no CTA
// barrier in the main loop, only __syncwarp).
//
// Tiles (MidTile in kernels.h, v8 and v11 in docs/cuda-notes.md): 32/64 features x 32/64 tokens (v8);
// 32x128 and 64x96 (one token tile up to M = 128 / 96; 2-stage rings, as 8 warps' accumulators of the
// whole tile must fit in the register file); 32x32 with two CTAs an SM or a 6-stage ring; and persistent
// grids of 32x32, 64x32, 32x64 (a CTA an SM walks tiles; each warp's ring runs on across tile borders);
// and 32x32, 64x32, 32x64 with two chunks a stage (a W row's 128 contiguous bytes loaded at once).
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/mma.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;  // = the K slices; linear.cu's kWarps and linear_tiled.cu's kSlices
constexpr int kThreads = kWarps * 32;
constexpr int kRowBytes = 64;  // one 32-wide bf16 chunk of one row
LinearKernel g_kernel = LinearKernel::Auto;
int g_mid_max_m = 512;
int g_mid_features = 0;  // 0: by the grid size (below), else 32 or 64
MidTile g_mid_tile = MidTile::Auto;

// A CTA tile: 16*NF features x 8*NT tokens, an SD-stage ring per warp (0: 4 stages when 8 warps' rings fit
// in 200 KB, else 3), B CTAs an SM (registers capped at 65536 / (256 B) by __launch_bounds__); P: a
// persistent grid (B CTAs an SM, each looping over tiles); C consecutive chunks of the slice a stage (C = 2:
// a W row's 128 contiguous bytes, a whole L2 line, in one go instead of two halves one step apart).
template <int NF, int NT, int SD = 0, int B = 1, bool P = false, int C = 1>
struct Tile {
  static constexpr int kF = 16 * NF, kT = 8 * NT;
  static constexpr int kRows = kF + kT;                  // W rows then x rows of one chunk
  static constexpr int kChunks = C;                      // chunks a stage, one after the other
  static constexpr int kChunkBytes = kRows * kRowBytes;  // one chunk's part of a stage
  static constexpr int kStageBytes = C * kChunkBytes;    // per warp
  static constexpr int kRedStride = kF + 4;              // floats; +4 spreads the 4 t-lanes over banks
  static constexpr int kRedBytes = kWarps * kT * kRedStride * 4;
  static constexpr int kStages = SD ? SD : kWarps * 4 * kStageBytes <= 200 * 1024 ? 4 : 3;
  static constexpr int kPipeBytes = kWarps * kStages * kStageBytes;
  static constexpr bool kPersistent = P;
  static constexpr int kSmemBytes = P                        ? kPipeBytes + kRedBytes
                                    : kPipeBytes > kRedBytes ? kPipeBytes
                                                             : kRedBytes;
  static constexpr int kCtasPerSm = B;
  static_assert(kRows % 8 == 0 && (C == 1 || C == 2), "a pass copies 32 lanes x 16 bytes: 8 or 4 rows");
  static_assert(kStages >= 2, "the ring needs a stage to compute on and one to fill");
  static_assert(B * (kSmemBytes + 1024) <= 228 * 1024, "shared memory of B CTAs an SM");
};

// Copies rows [r_begin, r_end) of chunks c .. c + nc - 1 (nc <= T::kChunks) into one stage: W rows
// (features n0 + r) then x rows (tokens m0 + r - kF), chunk q's rows at q * kChunkBytes. Rows past N or M
// (and chunks past nc) are zero-filled; their outputs are never stored (never read).
template <class T>
__device__ __forceinline__ void load_rows(uint32_t dst, const __nv_bfloat16* w, const __nv_bfloat16* x,
                                          int n0, int m0, int n, int m, int k, int c, int nc, int r_begin,
                                          int r_end, int lane) {
  constexpr int kUnits = 4 * T::kChunks;  // 16-byte units of a row in a stage, contiguous in global memory
  const int unit = lane % kUnits, q = unit / 4;
#pragma unroll 4
  for (int r = r_begin + lane / kUnits; r < r_end; r += 32 / kUnits) {
    const bool is_w = r < T::kF;
    const int row = is_w ? n0 + r : m0 + r - T::kF;
    const bool ok = row < (is_w ? n : m) && q < nc;
    const __nv_bfloat16* src = is_w ? w : x;
    cp_async16(dst + q * T::kChunkBytes + r * kRowBytes + (unit % 4) * 16,
               ok ? src + int64_t(row) * k + c * 32 + unit * 8 : src, ok);
  }
}

// One chunk of the warp's slice from stage `st`: each accumulator's two MMAs of the chunk, in K order.
template <class T>
__device__ __forceinline__ void mma_chunk(float (&acc)[T::kF / 16][T::kT / 8][4], uint32_t st, int g, int t) {
  constexpr int NF = T::kF / 16, NT = T::kT / 8;
  uint4 fa[NF], fb[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) {
    fa[f] = lds128(st + (16 * f + g) * kRowBytes + t * 16);
    fb[f] = lds128(st + (16 * f + g + 8) * kRowBytes + t * 16);
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const uint4 xv = lds128(st + (T::kF + 8 * j + g) * kRowBytes + t * 16);
#pragma unroll
    for (int f = 0; f < NF; ++f) {
      mma_bf16(acc[f][j], fa[f].x, fb[f].x, fa[f].y, fb[f].y, xv.x, xv.y);
      mma_bf16(acc[f][j], fa[f].z, fb[f].z, fa[f].w, fb[f].w, xv.z, xv.w);
    }
  }
}

// The 8 slice partials of one tile summed in slice order (s = red[0]; s += red[1] ...), bias, rounding,
// store. Called by every thread after a __syncthreads that frees `red`; ends before anyone may reuse it.
template <class T>
__device__ __forceinline__ void reduce_store(float* red, const float (&acc)[T::kF / 16][T::kT / 8][4],
                                             int warp, int g, int t, int m0, int n0,
                                             const void* __restrict__ bias, int bias_kind,
                                             void* __restrict__ y, bool y_f32, int m, int n) {
  // acc[f][j]: c0 = (feature 16f+g, token 8j+2t), c1 = (16f+g, 8j+2t+1), c2/c3 the same for 16f+g+8.
  auto at = [&](int q, int tok, int feat) -> float& { return red[(q * T::kT + tok) * T::kRedStride + feat]; };
#pragma unroll
  for (int f = 0; f < T::kF / 16; ++f)
#pragma unroll
    for (int j = 0; j < T::kT / 8; ++j) {
      at(warp, 8 * j + 2 * t, 16 * f + g) = acc[f][j][0];
      at(warp, 8 * j + 2 * t + 1, 16 * f + g) = acc[f][j][1];
      at(warp, 8 * j + 2 * t, 16 * f + g + 8) = acc[f][j][2];
      at(warp, 8 * j + 2 * t + 1, 16 * f + g + 8) = acc[f][j][3];
    }
  __syncthreads();
  for (int idx = threadIdx.x; idx < T::kT * T::kF; idx += kThreads) {
    const int tok = idx / T::kF, feat = idx % T::kF;
    const int row = m0 + tok, col = n0 + feat;
    if (row >= m || col >= n) continue;
    float s = at(0, tok, feat);
#pragma unroll
    for (int q = 1; q < kWarps; ++q) s += at(q, tok, feat);
    store_biased(s, bias, bias_kind, y, y_f32, row, col, n);
  }
}

// A CTA computes tiles blockIdx.x, + gridDim.x, ... (one tile unless T::kPersistent). Each warp's ring runs
// through the concatenation of its slice's stages over those tiles (step i = stage i % nst of the CTA's
// (i / nst)-th tile, a stage = kChunks consecutive chunks), so a persistent CTA loads the next tile's
// first chunks while it finishes the current one; its reduction buffer then lies after the rings.
template <class T>
__global__ void __launch_bounds__(kThreads, T::kCtasPerSm)
    linear_mid_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                      const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m,
                      int n, int k, int m_tiles, int tiles) {
  constexpr int S = T::kStages;
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, nch = (warp + 1) * chunks / kWarps - c_begin;
  const int my_tiles = int(blockIdx.x) < tiles ? (tiles - 1 - int(blockIdx.x)) / int(gridDim.x) + 1 : 0;
  const int nst = (nch + T::kChunks - 1) / T::kChunks;  // stages a tile
  const int steps = my_tiles * nst;  // nst = 0 (an empty slice): no steps, so no division by it below
  const uint32_t ring = sbase + warp * S * T::kStageBytes;
  auto stage = [&](int i) { return ring + (i % S) * T::kStageBytes; };
  auto load_step = [&](int i, int r_begin, int r_end) {
    const int tile = blockIdx.x + (i / nst) * gridDim.x, c = (i % nst) * T::kChunks;
    const int m0 = (tile % m_tiles) * T::kT, n0 = (tile / m_tiles) * T::kF;
    load_rows<T>(stage(i), w, x, n0, m0, n, m, k, c_begin + c, min(T::kChunks, nch - c), r_begin, r_end,
                 lane);
  };

  // Prologue: the weights are constant, so their first stages load before the wait for the previous
  // kernel; x (its output) after. Group s holds stage s's x rows (and, in group 0, all prologue W rows).
  for (int s = 0; s < S - 1; ++s)
    if (s < steps) load_step(s, 0, T::kF);
  pdl_wait();
  for (int s = 0; s < S - 1; ++s) {
    if (s < steps) load_step(s, T::kF, T::kRows);
    asm volatile("cp.async.commit_group;");
  }

  float* red = reinterpret_cast<float*>(smem + (T::kPersistent ? T::kPipeBytes : 0));
  int i = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    float acc[T::kF / 16][T::kT / 8][4];
#pragma unroll
    for (int f = 0; f < T::kF / 16; ++f)
#pragma unroll
      for (int j = 0; j < T::kT / 8; ++j) acc[f][j][0] = acc[f][j][1] = acc[f][j][2] = acc[f][j][3] = 0.f;
    for (int p = 0; p < nst; ++p, ++i) {
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 2));
      __syncwarp();  // step i landed for every lane; every lane is done reading step i - 1's stage
      if (i + S - 1 < steps) load_step(i + S - 1, 0, T::kRows);
      asm volatile("cp.async.commit_group;");
#pragma unroll
      for (int q = 0; q < T::kChunks; ++q)
        if (q == 0 || p * T::kChunks + q < nch) mma_chunk<T>(acc, stage(i) + q * T::kChunkBytes, g, t);
    }
    if (!T::kPersistent) asm volatile("cp.async.wait_group 0;");
    // Not persistent: every warp is done with its ring, which `red` overlays. Persistent: every thread is
    // done reading the previous tile's partials.
    __syncthreads();
    reduce_store<T>(red, acc, warp, g, t, (tile % m_tiles) * T::kT, (tile / m_tiles) * T::kF, bias, bias_kind,
                    y, y_f32, m, n);
  }
  asm volatile("cp.async.wait_group 0;");
}

template <class T>
void launch_mid(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m,
                int n, int k, cudaStream_t s) {
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(linear_mid_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       T::kSmemBytes));
    // All of the unified L1/shared array as shared memory, so that B CTAs of kSmemBytes fit on an SM.
    TF_CUDA_CHECK(cudaFuncSetAttribute(linear_mid_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       int(cudaSharedmemCarveoutMaxShared)));
    return true;
  }();
  (void)configured;
  const int m_tiles = (m + T::kT - 1) / T::kT, tiles = m_tiles * ((n + T::kF - 1) / T::kF);
  const int grid = T::kPersistent ? std::min(tiles, T::kCtasPerSm * sm_count()) : tiles;
  // Token tiles vary fastest: the CTAs that share a weight tile run together (L2 reuse of W).
  launch_pdl(linear_mid_kernel<T>, dim3(grid), dim3(kThreads), T::kSmemBytes, s,
             static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bias, bias_kind, y,
             y_f32, m, n, k, m_tiles, tiles);
}

int cdiv(int a, int b) {
  return (a + b - 1) / b;
}

// The v8 rule: 32 tokens a CTA up to M = 32, else 64; 64 features when that still gives about one CTA per
// SM of an H200 (132), else 32; `features` forces 32 or 64.
MidTile v8_tile(int m, int n, int features) {
  const bool t64 = m > 32;
  const int m_tiles = cdiv(m, t64 ? 64 : 32);
  const bool f64 = features ? features == 64 : cdiv(n, 64) * m_tiles >= 128;
  if (t64) return f64 ? MidTile::F64T64 : MidTile::F32T64;
  return f64 ? MidTile::F64T32 : MidTile::F32T32;
}

}  // namespace

MidTile linear_mid_auto_tile(int m, int n) {
  // v11 (docs/cuda-notes.md, predicted before its run). M <= 32: the v8 features with 2-chunk stages (run
  // 17: the 32x32 and 64x32 tiles stream W at the same ~2.9 TB/s whatever their L2 bytes and waves, the
  // decode kernel, 4 chunks of a row a load, at ~3.7: the 64-byte half lines look like the limit).
  // M = 65..96, N >= 8192: 64x96 (W through L2 once instead of twice). Everything else: the v8 rule.
  if (m <= 32) return v8_tile(m, n, 0) == MidTile::F64T32 ? MidTile::F64T32W : MidTile::F32T32W;
  if (m > 64 && m <= 96 && n >= 8192) return MidTile::F64T96;
  return v8_tile(m, n, 0);
}

const char* linear_mid_tile_name(MidTile tile) {
  switch (tile) {
    case MidTile::Auto:
      return "auto";
    case MidTile::F32T32:
      return "32x32";
    case MidTile::F64T32:
      return "64x32";
    case MidTile::F32T64:
      return "32x64";
    case MidTile::F64T64:
      return "64x64";
    case MidTile::F32T128:
      return "32x128";
    case MidTile::F64T96:
      return "64x96";
    case MidTile::F32T32x2:
      return "32x32x2";
    case MidTile::F32T32Deep:
      return "32x32d";
    case MidTile::F32T32P:
      return "32x32p";
    case MidTile::F64T32P:
      return "64x32p";
    case MidTile::F32T64P:
      return "32x64p";
    case MidTile::F32T32W:
      return "32x32w";
    case MidTile::F64T32W:
      return "64x32w";
    case MidTile::F32T64W:
      return "32x64w";
  }
  return "?";
}

void linear_mid_bf16(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32,
                     int m, int n, int k, cudaStream_t s) {
  // The streaming wgmma kernel (linear_rs.cu) when switched on, for the Auto tile only (same bits).
  if (g_mid_tile == MidTile::Auto && !g_mid_features && linear_rs_takes(m, n) &&
      linear_rs_bf16(x, w, bias, bias_kind == 1 ? DType::F32 : DType::BF16, y,
                     y_f32 ? DType::F32 : DType::BF16, m, n, k, s))
    return;
  // The tile never changes an element's arithmetic (tested), only the speed.
  const MidTile tile = g_mid_tile != MidTile::Auto ? g_mid_tile
                       : g_mid_features            ? v8_tile(m, n, g_mid_features)
                                                   : linear_mid_auto_tile(m, n);
  switch (tile) {
    case MidTile::Auto:
    case MidTile::F32T32:
      return launch_mid<Tile<2, 4>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F64T32:
      return launch_mid<Tile<4, 4>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T64:
      return launch_mid<Tile<2, 8>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F64T64:
      return launch_mid<Tile<4, 8>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T128:
      return launch_mid<Tile<2, 16, 2>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F64T96:
      return launch_mid<Tile<4, 12, 2>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T32x2:
      return launch_mid<Tile<2, 4, 3, 2>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T32Deep:
      return launch_mid<Tile<2, 4, 6>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T32P:
      return launch_mid<Tile<2, 4, 4, 1, true>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F64T32P:
      return launch_mid<Tile<4, 4, 3, 1, true>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T64P:
      return launch_mid<Tile<2, 8, 3, 1, true>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T32W:
      return launch_mid<Tile<2, 4, 3, 1, false, 2>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F64T32W:
      return launch_mid<Tile<4, 4, 2, 1, false, 2>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    case MidTile::F32T64W:
      return launch_mid<Tile<2, 8, 2, 1, false, 2>>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
  }
}

void set_linear_mid_tile(MidTile tile) {
  g_mid_tile = tile;
}

void set_linear_kernel(LinearKernel kernel) {
  g_kernel = kernel;
}

void set_linear_mid_max_m(int m) {
  g_mid_max_m = m;
}

void set_linear_mid_features(int features) {
  TF_CHECK(features == 0 || features == 32 || features == 64,
           "linear_mid features a CTA: 0 (auto), 32 or 64, got " + std::to_string(features));
  g_mid_features = features;
}

LinearKernel linear_kernel_for(int m) {
  if (g_kernel != LinearKernel::Auto) return g_kernel;
  if (m <= 16) return LinearKernel::Decode;
  return m <= g_mid_max_m ? LinearKernel::Mid : LinearKernel::Tiled;
}

}  // namespace tf::cuda
