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
#include <cuda_bf16.h>

#include <string>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;  // = the K slices; linear.cu's kWarps and linear_tiled.cu's kSlices
constexpr int kThreads = kWarps * 32;
constexpr int kRowBytes = 64;  // one 32-wide bf16 chunk of one row
LinearKernel g_kernel = LinearKernel::Auto;
int g_mid_max_m = 512;
int g_mid_features = 0;  // 0: by the grid size (below), else 32 or 64

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(addr));
  return r;
}

__device__ __forceinline__ void mma_bf16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int NF, int NT>
struct Tile {
  static constexpr int kF = 16 * NF, kT = 8 * NT;
  static constexpr int kRows = kF + kT;                  // W rows then x rows in a stage
  static constexpr int kStageBytes = kRows * kRowBytes;  // per warp
  static constexpr int kRedStride = kF + 4;              // floats; +4 spreads the 4 t-lanes over banks
  static constexpr int kRedBytes = kWarps * kT * kRedStride * 4;
  static constexpr int kStages = kWarps * 4 * kStageBytes <= 200 * 1024 ? 4 : 3;  // 1 CTA per SM
  static constexpr int kPipeBytes = kWarps * kStages * kStageBytes;
  static constexpr int kSmemBytes = kPipeBytes > kRedBytes ? kPipeBytes : kRedBytes;
  static_assert(kRows % 8 == 0, "a stage is copied 8 rows (32 lanes x 16 bytes) at a time");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
};

// Copies rows [r_begin, r_end) of chunk c of one stage: W rows (features n0 + r) then x rows (tokens
// m0 + r - kF). Rows past N or M are zero-filled; their outputs are never stored.
template <class T>
__device__ __forceinline__ void load_rows(uint32_t dst, const __nv_bfloat16* w, const __nv_bfloat16* x,
                                          int n0, int m0, int n, int m, int k, int c, int r_begin, int r_end,
                                          int lane) {
  const int unit = lane % 4;
#pragma unroll 4
  for (int r = r_begin + lane / 4; r < r_end; r += 8) {
    const bool is_w = r < T::kF;
    const int row = is_w ? n0 + r : m0 + r - T::kF;
    const bool ok = row < (is_w ? n : m);
    const __nv_bfloat16* src = is_w ? w : x;
    cp_async16(dst + r * kRowBytes + unit * 16, ok ? src + int64_t(row) * k + c * 32 + unit * 8 : src, ok);
  }
}

template <int NF, int NT>
__global__ void __launch_bounds__(kThreads, 1)
    linear_mid_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                      const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m,
                      int n, int k, int m_tiles) {
  using T = Tile<NF, NT>;
  constexpr int S = T::kStages;
  extern __shared__ __align__(128) unsigned char smem[];
  asm volatile("griddepcontrol.launch_dependents;");
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m0 = (blockIdx.x % m_tiles) * T::kT, n0 = (blockIdx.x / m_tiles) * T::kF;
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, nch = (warp + 1) * chunks / kWarps - c_begin;
  const uint32_t ring = sbase + warp * S * T::kStageBytes;
  auto stage = [&](int i) { return ring + (i % S) * T::kStageBytes; };

  // Prologue: the weights are constant, so their first stages load before the wait for the previous
  // kernel; x (its output) after. Group s holds stage s's x rows (and, in group 0, all prologue W rows).
  for (int s = 0; s < S - 1; ++s)
    if (s < nch) load_rows<T>(stage(s), w, x, n0, m0, n, m, k, c_begin + s, 0, T::kF, lane);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int s = 0; s < S - 1; ++s) {
    if (s < nch) load_rows<T>(stage(s), w, x, n0, m0, n, m, k, c_begin + s, T::kF, T::kRows, lane);
    asm volatile("cp.async.commit_group;");
  }

  float acc[NF][NT][4];
#pragma unroll
  for (int i = 0; i < NF; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

  for (int i = 0; i < nch; ++i) {
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 2));
    __syncwarp();  // chunk i landed for every lane; every lane is done reading chunk i - 1's stage
    if (i + S - 1 < nch)
      load_rows<T>(stage(i + S - 1), w, x, n0, m0, n, m, k, c_begin + i + S - 1, 0, T::kRows, lane);
    asm volatile("cp.async.commit_group;");
    const uint32_t st = stage(i);
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
  asm volatile("cp.async.wait_group 0;");
  __syncthreads();  // every warp is done with its ring: the reduction buffer overlays the rings

  // acc[f][j]: c0 = (feature 16f+g, token 8j+2t), c1 = (16f+g, 8j+2t+1), c2/c3 the same for 16f+g+8.
  float* red = reinterpret_cast<float*>(smem);
  auto at = [&](int q, int tok, int feat) -> float& { return red[(q * T::kT + tok) * T::kRedStride + feat]; };
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
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
    if (bias_kind == 1) s += static_cast<const float*>(bias)[col];
    if (bias_kind == 2) s += __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[col]);
    if (y_f32)
      static_cast<float*>(y)[int64_t(row) * n + col] = s;
    else
      static_cast<__nv_bfloat16*>(y)[int64_t(row) * n + col] = __float2bfloat16(s);
  }
}

template <int NF, int NT>
void launch_mid(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m,
                int n, int k, cudaStream_t s) {
  using T = Tile<NF, NT>;
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(linear_mid_kernel<NF, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       T::kSmemBytes));
    return true;
  }();
  (void)configured;
  const int m_tiles = (m + T::kT - 1) / T::kT, n_tiles = (n + T::kF - 1) / T::kF;
  // Token tiles vary fastest: the CTAs that share a weight tile run together (L2 reuse of W).
  launch_pdl(linear_mid_kernel<NF, NT>, dim3(m_tiles * n_tiles), dim3(kThreads), T::kSmemBytes, s,
             static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bias, bias_kind, y,
             y_f32, m, n, k, m_tiles);
}

}  // namespace

void linear_mid_bf16(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32,
                     int m, int n, int k, cudaStream_t s) {
  // 32 tokens a CTA up to M = 32, else 64; 64 features a CTA when that still gives about one CTA per SM
  // of an H200 (132), else 32. The tile never changes an element's arithmetic.
  const bool t64 = m > 32;
  const int m_tiles = (m + (t64 ? 63 : 31)) / (t64 ? 64 : 32);
  const bool f64 = g_mid_features ? g_mid_features == 64 : (n + 63) / 64 * m_tiles >= 128;
  if (t64 && f64) return launch_mid<4, 8>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
  if (t64) return launch_mid<2, 8>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
  if (f64) return launch_mid<4, 4>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
  return launch_mid<2, 4>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
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
