// Row-invariant bf16 linear layer on tensor cores (mma.sync m16n8k16, fp32 accumulation).
//
// Roles are swapped: the weight tile is the MMA's A operand (16 output features) and the activations
// are its B operand (8 tokens per MMA), so decode pads the token count to 8, not 16. A block owns 16
// output features and 8*NT tokens; its 8 warps split K into 8 fixed slices (a function of K alone),
// each slice accumulates 32-wide K chunks in increasing order, and the 8 partials are summed in warp
// order. NT (tokens per block) only changes how many MMAs a warp issues, never the arithmetic of one
// output element, so a row's bits do not depend on M. No split-K that depends on M, no atomics.
//
// K is permuted inside each 32-wide chunk so that every lane loads 16 contiguous bytes of W and x: lane
// (g, t) loads W[n0+g][k0+8t .. +8], W[n0+g+8][...] and x[m][k0+8t .. +8]; A and B use the same
// permutation, so the dot product is unchanged up to summation order (which is fixed).
//
// M = 17..512 goes to linear_mid.cu (64x64 tiles, a cp.async ring per warp) and larger M to
// linear_tiled.cu (128x128 tiles); both compute every element with this same MMA chain per slice and
// the same slice sum (tested bit-equal across M, tests/ops/gpu/test_cuda_linear.cpp).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "ops/cuda/activation.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/norm.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;        // = the K slices; linear_tiled.cu's kSlices must match
constexpr int kFewBlocks = 256;  // grids smaller than this keep 8 K chunks a warp in flight
// Where linear_bf16 runs linear_wgmma.cu on sm_90 (same bits). Measured on the H200 (run 16,
// bench/cuda/results/run16-wgmma_probe.log): wgmma's best tile beats linear_mid.cu from M = 512 for
// every 8B shape, from M = 128 for wide weights (gate_up, lm_head), and loses below (q/o/down at M = 64:
// 43/136 us vs 21/56 us).
constexpr int kWgmmaMinM = 512;
constexpr int kWgmmaMinMWide = 128;  // for weights with at least kWideN output features
constexpr int kWideN = 16384;
LoopVariant g_linear_variant = LoopVariant::Auto;
bool g_pdl = true;

// How the kernel gets its x: kX loads it; kSilu and kSilu1 compute x = silu_mul(gate_up) from a gate_up
// input [m, 2k] (gate, then up k values later), the values silu_mul would store, in registers. kSilu: each
// lane makes its own 8 values of a chunk. kSilu1 (M = 1, one token row): the 4 lanes holding that row would
// make 8 values each while 28 lanes idle, so every lane makes one of the chunk's 32 and the 4 collect
// theirs by shuffles (8x fewer issued silu instructions; the same values).
// kAddNorm: x = add_rms_norm's output for residual + the x given (NormIn), M <= 16: the block first reduces
// each of its rows exactly as add_rms_norm_kernel<32> does (256 threads, element i at thread i % 256, the
// same fma chain, butterfly and warp order) and writes the new residual out of place (blocks of the first
// feature tile only), then makes the normalised values of each chunk where it would load x.
enum XMode { kX = 0, kSilu = 1, kSilu1 = 2, kAddNorm = 3 };

constexpr int kAddNormMaxM = 8;
static_assert(kWarps * 32 == kNormThreads,
              "kAddNorm reduces a row over the block's threads as add_rms_norm does");

struct NormIn {
  const void* res = nullptr;  // [m, k] residual, `rt`
  DType rt = DType::BF16;
  const void* w = nullptr;  // [k] norm weight, `wt`
  DType wt = DType::BF16;
  void* res_out = nullptr;  // [m, k] residual + x, `rt`
  float eps = 0.f, offset = 0.f;
};

// x's 8 values at p (kX), or silu_mul's 8 values with p in the gate half of a gate_up row (kSilu).
template <int ACT>
__device__ __forceinline__ uint4 load_x(const __nv_bfloat16* p, int k) {
  if constexpr (ACT == kX) {
    return ld_act16(p);
  } else {
    const uint4 g = ld_act16(p), u = ld_act16(p + k);
    const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 gf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&gw[i]));
      const float2 uf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&uw[i]));
      __nv_bfloat162 r;
      r.x = silu_mul_bf16(gf.x, uf.x);
      r.y = silu_mul_bf16(gf.y, uf.y);
      o[i] = *reinterpret_cast<const uint32_t*>(&r);
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// U: K chunks loaded per step; PREFETCH: the next step's weight loads are issued before this step's
// MMAs (register double buffer) so that loads stay in flight. Neither changes the arithmetic. ACT: where
// x comes from (XMode); kSilu1 needs NT = 1 and m = 1.
template <int NT, int U, bool PREFETCH, int ACT = kX>
__global__ void __launch_bounds__(kWarps * 32)
    linear_kernel(const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ w, const void* __restrict__ bias,
                  int bias_kind, void* __restrict__ y, bool y_f32, int m, int n, int k, int m_tiles,
                  NormIn nrm) {
  __shared__ float red[kWarps][NT * 8][16];
  __shared__ float norm_smem[kWarps], norm_inv_s[NT * 8];
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int m_tile = blockIdx.x % m_tiles, n_tile = blockIdx.x / m_tiles;
  const int n0 = n_tile * 16, m0 = m_tile * NT * 8;
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, c_end = (warp + 1) * chunks / kWarps;

  const int na = min(n0 + g, n - 1), nb = min(n0 + g + 8, n - 1);  // clamped; masked at the store
  const __nv_bfloat16* wa = w + int64_t(na) * k + 8 * t;
  const __nv_bfloat16* wb = w + int64_t(nb) * k + 8 * t;
  const __nv_bfloat16* xr[NT];
  bool xok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    int row = m0 + 8 * j + g;
    xok[j] = row < m;
    xr[j] = x + int64_t(xok[j] ? row : 0) * (ACT != kX ? 2 * k : k) + 8 * t;
  }
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  // kSilu1 (row 0 only): lane L loads value L of chunk c's gate and up halves (raw bf16 bits, gate low),
  // makes silu_mul of them, and lane (0, t) collects values 8t.. by shuffles.
  auto silu1_raw = [&](int c) -> uint32_t {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(x);
    return uint32_t(h[c * 32 + lane]) | (uint32_t(h[k + c * 32 + lane]) << 16);
  };
  auto silu1_make = [&](uint32_t raw) {
    const float gv = __uint_as_float(raw << 16), uv = __uint_as_float(raw & 0xffff0000u);
    const __nv_bfloat16 a = silu_mul_bf16(gv, uv);
    const uint32_t mine = *reinterpret_cast<const uint16_t*>(&a);
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[i] = __shfl_sync(0xffffffffu, mine, 8 * t + 2 * i) |
             (__shfl_sync(0xffffffffu, mine, 8 * t + 2 * i + 1) << 16);
    return xok[0] ? make_uint4(o[0], o[1], o[2], o[3]) : make_uint4(0, 0, 0, 0);
  };
  // x's 8 values for token tile j of chunk c, loaded (kX, kSilu) or made (kSilu1, kAddNorm).
  auto x_of = [&](int j, int c) {
    uint4 xv;
    if constexpr (ACT == kSilu1) {
      xv = silu1_make(silu1_raw(c));
    } else if constexpr (ACT == kAddNorm) {
      xv = make_uint4(0, 0, 0, 0);
      if (xok[j]) {
        const int col = c * 32 + 8 * t;
        const int64_t at = int64_t(m0 + 8 * j + g) * k + col;
        const float inv = norm_inv_s[8 * j + g];
        uint32_t o[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          __nv_bfloat162 r;
          r.x = __float2bfloat16(norm_out(add_residual(nrm.res, nrm.rt, x, at + 2 * i), inv,
                                          __fadd_rn(ld(nrm.w, col + 2 * i, nrm.wt), nrm.offset)));
          r.y = __float2bfloat16(norm_out(add_residual(nrm.res, nrm.rt, x, at + 2 * i + 1), inv,
                                          __fadd_rn(ld(nrm.w, col + 2 * i + 1, nrm.wt), nrm.offset)));
          o[i] = *reinterpret_cast<const uint32_t*>(&r);
        }
        xv = make_uint4(o[0], o[1], o[2], o[3]);
      }
    } else {
      xv = xok[j] ? load_x<ACT>(xr[j] + c * 32, k) : make_uint4(0, 0, 0, 0);
    }
    return xv;
  };
  auto step = [&](const uint4& a, const uint4& b, int c) {
#pragma unroll
    for (int j = 0; j < NT; ++j) mma_chunk(acc[j], a, b, x_of(j, c));
  };
  // kAddNorm, after griddepcontrol.wait (the residual and x come from earlier kernels): each row's 1/rms
  // as add_rms_norm_kernel<32> computes it (V = 32 elements a thread, zeros past k included).
  auto prologue = [&] {
    if constexpr (ACT == kAddNorm) {
      const int rows = min(NT * 8, m - m0);
      for (int r = 0; r < rows; ++r) {
        const int64_t base = int64_t(m0 + r) * k;
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          const int i = threadIdx.x + kNormThreads * j;
          const float v = i < k ? add_residual(nrm.res, nrm.rt, x, base + i) : 0.f;
          ss = __fmaf_rn(v, v, ss);
          if (n_tile == 0 && i < k) {
            if (nrm.rt == DType::F32)
              static_cast<float*>(nrm.res_out)[base + i] = v;
            else
              static_cast<__nv_bfloat16*>(nrm.res_out)[base + i] = __float2bfloat16(v);
          }
        }
        const float inv = norm_inv(row_sum<kNormThreads>(ss, norm_smem), k, nrm.eps);
        if (threadIdx.x == 0) norm_inv_s[r] = inv;
        __syncthreads();  // norm_smem is reused by the next row; norm_inv_s is read by every warp
      }
    }
  };
  int c = c_begin;
  if constexpr (PREFETCH) {
    uint4 a[U], b[U];
    auto load = [&](int at) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        a[u] = load_stream(wa + (at + u) * 32);
        b[u] = load_stream(wb + (at + u) * 32);
      }
    };
    // kX: x is register-double-buffered too. Loaded inside step(), each chunk's MMA waited for its own L2
    // round trip (SASS: load x, HMMA on it, then the next x), ~2 dependent L2 latencies a U-step that the
    // weight prefetch could not hide; now the next step's x loads go out with its weight loads.
    // One token tile only: at NT = 2 the extra registers (164) would halve the blocks an SM holds.
    // kSilu1 the same way: the next step's raw gate/up values (the silu loses to a separate kernel without).
    constexpr bool kXAhead = ACT == kX && NT == 1, kSiluAhead = ACT == kSilu1;
    uint4 xs[kXAhead ? U : 1][NT];
    uint32_t gs[kSiluAhead ? U : 1];
    auto load_xs = [&](int at) {
      if constexpr (kXAhead) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int j = 0; j < NT; ++j) xs[u][j] = x_of(j, at + u);
      }
      if constexpr (kSiluAhead) {
#pragma unroll
        for (int u = 0; u < U; ++u) gs[u] = silu1_raw(at + u);
      }
    };
    if (c + U <= c_end) load(c);
    pdl_wait();  // weights are constant; x is not
    prologue();
    if (c + U <= c_end) load_xs(c);
    for (; c + U <= c_end; c += U) {
      uint4 ca[U], cb[U], cx[kXAhead ? U : 1][NT];
      uint32_t cg[kSiluAhead ? U : 1];
#pragma unroll
      for (int u = 0; u < U; ++u) ca[u] = a[u], cb[u] = b[u];
      if constexpr (kSiluAhead) {
#pragma unroll
        for (int u = 0; u < U; ++u) cg[u] = gs[u];
      }
      if constexpr (kXAhead) {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int j = 0; j < NT; ++j) cx[u][j] = xs[u][j];
      }
      if (c + 2 * U <= c_end) load(c + U), load_xs(c + U);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if constexpr (kXAhead) {
#pragma unroll
          for (int j = 0; j < NT; ++j) mma_chunk(acc[j], ca[u], cb[u], cx[u][j]);
        } else if constexpr (kSiluAhead) {
          mma_chunk(acc[0], ca[u], cb[u], silu1_make(cg[u]));
        } else {
          step(ca[u], cb[u], c + u);
        }
      }
    }
  } else {
    pdl_wait();
    prologue();
    for (; c + U <= c_end; c += U) {
      uint4 a[U], b[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        a[u] = load_stream(wa + (c + u) * 32);
        b[u] = load_stream(wb + (c + u) * 32);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) step(a[u], b[u], c + u);
    }
  }
  for (; c < c_end; ++c) step(load_stream(wa + c * 32), load_stream(wb + c * 32), c);

    // acc[j]: c0 = (n0+g, token 8j+2t), c1 = (n0+g, 8j+2t+1), c2/c3 the same for n0+g+8.
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    red[warp][8 * j + 2 * t][g] = acc[j][0];
    red[warp][8 * j + 2 * t + 1][g] = acc[j][1];
    red[warp][8 * j + 2 * t][g + 8] = acc[j][2];
    red[warp][8 * j + 2 * t + 1][g + 8] = acc[j][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < NT * 8 * 16; i += kWarps * 32) {
    const int tok = i / 16, f = i % 16;
    const int row = m0 + tok, col = n0 + f;
    if (row >= m || col >= n) continue;
    float s = red[0][tok][f];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) s += red[q][tok][f];
    store_biased(s, bias, bias_kind, y, y_f32, row, col, n);
  }
}

template <int NT, int U, bool PREFETCH, int ACT = kX>
void launch(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m, int n,
            int k, cudaStream_t s, const NormIn& nrm = NormIn{}) {
  const int m_tiles = (m + NT * 8 - 1) / (NT * 8);
  const int n_tiles = (n + 15) / 16;
  // Token tiles vary fastest so that the blocks sharing a weight tile run together (L2 reuse).
  launch_pdl(linear_kernel<NT, U, PREFETCH, ACT>, dim3(n_tiles * m_tiles), dim3(kWarps * 32), 0, s,
             static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bias, bias_kind, y,
             y_f32, m, n, k, m_tiles, nrm);
}

// linear_bf16's choice of the wgmma kernel: the kernel not forced (set_linear_kernel Auto, exactly when M = 1
// gets the decode kernel and huge M another one), M large enough, sm_90.
bool wgmma_chosen(int m, int n) {
  const bool auto_pick =
      linear_kernel_for(1) == LinearKernel::Decode && linear_kernel_for(INT_MAX) != LinearKernel::Decode;
  const bool wgmma_pays = m >= kWgmmaMinM || (m >= kWgmmaMinMWide && n >= kWideN);
  return auto_pick && wgmma_pays && linear_wgmma_supported();
}

}  // namespace

void linear_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y, DType y_dtype,
                 int m, int n, int k, cudaStream_t s) {
  TF_CHECK(k % 32 == 0, "CUDA linear needs in_features divisible by 32, got " + std::to_string(k));
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool y_f32 = y_dtype == DType::F32;
  const LinearKernel kernel = linear_kernel_for(m);  // linear_mid.cu: by M, or forced for tests
  if (kernel == LinearKernel::Wgmma || wgmma_chosen(m, n))
    return linear_wgmma_bf16(x, w, bias, bias_dtype, y, y_dtype, m, n, k, s);
  if (kernel == LinearKernel::Tiled) return linear_tiled_bf16(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
  if (kernel == LinearKernel::Mid) return linear_mid_bf16(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
  const bool few_blocks = (n + 15) / 16 * ((m + 7) / 8) < kFewBlocks;
  auto go = [&](auto pf) {
    constexpr bool P = decltype(pf)::value;
    if (m <= 8 && P && few_blocks)  // k/v-sized weights: more bytes in flight per warp
      launch<1, 8, P>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else if (m <= 8)
      launch<1, 4, P>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else if (m <= 16)
      launch<2, 4, P>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else if (m <= 32)
      launch<4, 2, P>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else
      launch<8, 2, P>(x, w, bias, bias_kind, y, y_f32, m, n, k, s);
  };
  const bool prefetch =
      g_linear_variant == LoopVariant::Prefetch || (g_linear_variant == LoopVariant::Auto && m <= 16);
  if (prefetch)
    go(std::true_type{});
  else
    go(std::false_type{});
}

bool linear_silu_bf16(const void* gate_up, const void* w, const void* bias, DType bias_dtype, void* y,
                      DType y_dtype, int m, int n, int k, cudaStream_t s) {
  if (m > 16)  // where linear_bf16 would run the wgmma kernel: silu inside its x permute, if it has one
    return wgmma_chosen(m, n) && linear_wgmma_silu_bf16(gate_up, w, bias, bias_dtype, y, y_dtype, m, n, k, s);
  if (m <= 0) return true;
  TF_CHECK(k % 32 == 0, "CUDA linear needs in_features divisible by 32, got " + std::to_string(k));
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool y_f32 = y_dtype == DType::F32;
  const bool few_blocks = (n + 15) / 16 * ((m + 7) / 8) < kFewBlocks;
  // linear_bf16's M <= 16 choices (speed only; every choice has the same arithmetic).
  auto go = [&](auto pf) {
    constexpr bool P = decltype(pf)::value;
    if (m == 1 && P && few_blocks)
      launch<1, 8, P, kSilu1>(gate_up, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else if (m == 1)
      launch<1, 4, P, kSilu1>(gate_up, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else if (m <= 8 && P && few_blocks)
      launch<1, 8, P, kSilu>(gate_up, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else if (m <= 8)
      launch<1, 4, P, kSilu>(gate_up, w, bias, bias_kind, y, y_f32, m, n, k, s);
    else
      launch<2, 4, P, kSilu>(gate_up, w, bias, bias_kind, y, y_f32, m, n, k, s);
  };
  if (g_linear_variant == LoopVariant::Plain)
    go(std::false_type{});
  else
    go(std::true_type{});
  return true;
}

bool linear_add_rms_norm_bf16(const void* residual, DType res_dtype, const void* x, const void* norm_w,
                              DType norm_w_dtype, float eps, float offset, void* residual_out, const void* w,
                              const void* bias, DType bias_dtype, void* y, DType y_dtype, int m, int n, int k,
                              cudaStream_t s) {
  // add_rms_norm runs add_rms_norm_kernel<32> for rows up to 8192: the reduction repeated here.
  // M <= 8 only: at NT = 2 the prologue's registers (169) would halve the blocks an SM holds.
  if (m > kAddNormMaxM || k > 32 * kNormThreads || (res_dtype != DType::BF16 && res_dtype != DType::F32))
    return false;
  if (m <= 0) return true;
  TF_CHECK(k % 32 == 0, "CUDA linear needs in_features divisible by 32, got " + std::to_string(k));
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool y_f32 = y_dtype == DType::F32;
  const bool few_blocks = (n + 15) / 16 * ((m + 7) / 8) < kFewBlocks;
  NormIn nrm;
  nrm.res = residual, nrm.rt = res_dtype, nrm.w = norm_w, nrm.wt = norm_w_dtype, nrm.res_out = residual_out;
  nrm.eps = eps, nrm.offset = offset;
  auto go = [&](auto pf) {  // linear_bf16's M <= 8 choices (speed only)
    constexpr bool P = decltype(pf)::value;
    if (P && few_blocks)
      launch<1, 8, P, kAddNorm>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, nrm);
    else
      launch<1, 4, P, kAddNorm>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, nrm);
  };
  if (g_linear_variant == LoopVariant::Plain)
    go(std::false_type{});
  else
    go(std::true_type{});
  return true;
}

void set_linear_variant(LoopVariant v) {
  g_linear_variant = v;
}

void set_linear_pdl(bool on) {
  g_pdl = on;
}

int resident_blocks(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::unordered_map<const void*, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(kernel); it != cache.end()) return it->second;
  if (smem > (48 << 10))
    TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int dev = 0, sms = 0, per_sm = 0;
  TF_CUDA_CHECK(cudaGetDevice(&dev));
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  TF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  // 0 when the block cannot run at all as asked (e.g. static + dynamic shared memory over 48 KB without the
  // attribute): a persistent grid of 1 block would run ~100x slower without a word (run 162).
  TF_CHECK(per_sm > 0, "resident_blocks: a block of " + std::to_string(threads) + " threads and " +
                           std::to_string(smem) + " bytes of dynamic shared memory does not fit an SM");
  return cache[kernel] = sms * per_sm;
}

int sm_count() {
  static const int count = [] {
    int dev = 0, v = 0;
    TF_CUDA_CHECK(cudaGetDevice(&dev));
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return count;
}

bool env_switch(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (v && std::strcmp(v, "0") == 0) return false;
  if (v && std::strcmp(v, "1") == 0) return true;
  return dflt;
}

int env_int(const char* name, int lo, int hi, int dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= lo && n <= hi ? int(n) : dflt;
}

int env_digit(const char* name, int max, int dflt) {
  return env_int(name, 0, max, dflt);
}

bool pdl_enabled() {
  static const bool env_on = env_switch("TF_PDL", true);
  return g_pdl && env_on;
}

bool pdl_group_enabled(const char* name) {
  return env_switch((std::string("TF_PDL_") + name).c_str(), true);
}

}  // namespace tf::cuda
