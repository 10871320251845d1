// Norms, rotary embedding, activation, KV writes, embedding gather and small utilities. Each row is
// reduced by a fixed number of threads chosen from the row length alone, in a fixed order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/cuda/activation.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/mbarrier.cuh"  // gtime
#include "ops/cuda/norm.cuh"

namespace tf::cuda {
namespace {

const bool g_pdl_group = pdl_group_enabled("ELEMENTWISE");  // launch.h
bool g_vec_norm = true;  // add_rms_norm_vec_kernel where it applies (set_vector_norm: tests, benches)

__device__ __forceinline__ void st(void* p, int64_t i, DType t, float v) {
  if (t == DType::F32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
}

__device__ __forceinline__ void rope_rotate(float x1, float x2, float cs, float sn, float& a, float& b) {
  a = __fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn));
  b = __fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn));
}

// Each thread holds its V elements of the row (i = tid + TPR * j) in registers between the two passes,
// so no store can force a reload. V = 0: rows too long for registers, re-read instead.
template <int TPR, int V>
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(const __nv_bfloat16* x, const void* w, DType wt, __nv_bfloat16* y, int64_t rows, int cols,
                    float eps, float offset) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  __shared__ float smem[kNormThreads / 32];
  const int64_t row = blockIdx.x * int64_t(kNormThreads / TPR) + threadIdx.x / TPR;
  const int tid = threadIdx.x % TPR;
  if (TPR == 32 && row >= rows) return;  // whole warps exit together
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;
  float ss = 0.f;
  if constexpr (V > 0) {
    float v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int i = tid + TPR * j;
      v[j] = i < cols ? bf(xr, i) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) ss = __fmaf_rn(v[j], v[j], ss);
    const float inv = norm_inv(row_sum<TPR>(ss, smem), cols, eps);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int i = tid + TPR * j;
      if (i < cols) yr[i] = __float2bfloat16_rn(norm_out(v[j], inv, __fadd_rn(ld(w, i, wt), offset)));
    }
  } else {
    for (int i = tid; i < cols; i += TPR) {
      const float v = bf(xr, i);
      ss = __fmaf_rn(v, v, ss);
    }
    const float inv = norm_inv(row_sum<TPR>(ss, smem), cols, eps);
    for (int i = tid; i < cols; i += TPR)
      yr[i] = __float2bfloat16_rn(norm_out(bf(xr, i), inv, __fadd_rn(ld(w, i, wt), offset)));
  }
}

template <int V>
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_kernel(void* res, DType rt, const __nv_bfloat16* x, const void* w, DType wt,
                        __nv_bfloat16* y, int cols, float eps, float offset) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  constexpr int TPR = kNormThreads;
  __shared__ float smem[kNormThreads / 32];
  const int64_t base = int64_t(blockIdx.x) * cols;
  const int tid = threadIdx.x;
  float ss = 0.f;
  if constexpr (V > 0) {
    float v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int i = tid + TPR * j;
      v[j] = i < cols ? add_residual(res, rt, x, base + i) : 0.f;
    }
    // Explicit roundings (the same instructions nvcc made of `ss += v * v`, `sum / cols + eps` and
    // `v * inv * (w + offset)`): linear_add_rms_norm_bf16 repeats this arithmetic (norm.cuh).
#pragma unroll
    for (int j = 0; j < V; ++j) ss = __fmaf_rn(v[j], v[j], ss);
    const float inv = norm_inv(row_sum<TPR>(ss, smem), cols, eps);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int i = tid + TPR * j;
      if (i < cols) {
        st(res, base + i, rt, v[j]);
        y[base + i] = __float2bfloat16(norm_out(v[j], inv, __fadd_rn(ld(w, i, wt), offset)));
      }
    }
  } else {
    for (int i = tid; i < cols; i += TPR) {
      const float v = round_to(ld(res, base + i, rt) + bf(x, base + i), rt);
      st(res, base + i, rt, v);
      ss += v * v;
    }
    const float inv = rsqrtf(row_sum<TPR>(ss, smem) / cols + eps);
    for (int i = tid; i < cols; i += TPR)
      y[base + i] = __float2bfloat16(ld(res, base + i, rt) * inv * (ld(w, i, wt) + offset));
  }
}

// add_rms_norm_kernel<32>'s arithmetic with one round of 16-byte loads (rows of a multiple of 8 elements,
// at most 8192, 16-byte aligned). The old kernel's 32 scalar loads a thread went out in ~5 dependent
// batches (a 1-block kernel at M = 1: pure latency, 10.7 us of a decode layer's ~137, twice). Here each
// thread loads 8-element units (x, residual) at once, the new residual values meet in shared memory, and
// thread t then folds exactly the values add_rms_norm_kernel<32> gives it (i = t + 256 j, j = 0..31, zeros
// past the row) in the same order; the outputs are the same expressions. The norm weights are constant:
// they are read before the wait, under the previous kernel.
template <DType RT, DType WT>
__global__ void __launch_bounds__(kNormThreads)
    add_rms_norm_vec_kernel(void* res, const __nv_bfloat16* x, const void* w, __nv_bfloat16* y, int cols,
                            float eps, float offset) {
  constexpr int TPR = kNormThreads, V = 32, U = V * TPR / (8 * TPR);  // U = 4 units of 8 a thread
  __shared__ float smem[kNormThreads / 32];
  __shared__ float vals[V * TPR];
  const int tid = threadIdx.x;
  const int64_t base = int64_t(blockIdx.x) * cols;
  float wo[U][8];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = (tid + TPR * u) * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) wo[u][e] = e0 < cols ? __fadd_rn(ldt<WT>(w, e0 + e), offset) : 0.f;
  }
  pdl_enter();  // dependent launch (launch.h): only the constant norm weights were read before it
  constexpr int RW = RT == DType::F32 ? 2 : 1;  // 16-byte words of residual a unit
  uint4 xv[U], rv[U][RW];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = (tid + TPR * u) * 8;
    if (e0 < cols) {
      xv[u] = ld_act16(x + base + e0);
#pragma unroll
      for (int h = 0; h < RW; ++h)
        rv[u][h] = RT == DType::F32 ? ld_act16(static_cast<const float*>(res) + base + e0 + 4 * h)
                                    : ld_act16(static_cast<const __nv_bfloat16*>(res) + base + e0);
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = (tid + TPR * u) * 8;
    if (e0 >= cols) continue;
    const __nv_bfloat16* xe = reinterpret_cast<const __nv_bfloat16*>(&xv[u]);
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float r;
      if constexpr (RT == DType::F32)
        r = reinterpret_cast<const float*>(&rv[u][0])[e];  // rv[u][0..1] are contiguous
      else
        r = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(&rv[u][0])[e]);
      v[e] = round_to(__fadd_rn(r, __bfloat162float(xe[e])), RT);
      vals[e0 + e] = v[e];
    }
    if constexpr (RT == DType::F32) {
      float4* o = reinterpret_cast<float4*>(static_cast<float*>(res) + base + e0);
      o[0] = make_float4(v[0], v[1], v[2], v[3]);
      o[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      __nv_bfloat162 o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) o[e] = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
      *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(res) + base + e0) = *reinterpret_cast<uint4*>(o);
    }
  }
  __syncthreads();
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int i = tid + TPR * j;
    const float v = i < cols ? vals[i] : 0.f;
    ss = __fmaf_rn(v, v, ss);
  }
  const float inv = norm_inv(row_sum<TPR>(ss, smem), cols, eps);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = (tid + TPR * u) * 8;
    if (e0 >= cols) continue;
    __nv_bfloat16 o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = __float2bfloat16(norm_out(vals[e0 + e], inv, wo[u][e]));
    *reinterpret_cast<uint4*>(y + base + e0) = *reinterpret_cast<uint4*>(o);
  }
}

__global__ void rope_kernel(__nv_bfloat16* q, __nv_bfloat16* k, int rows, int hq, int hk, int d, int rot,
                            const float* __restrict__ inv_freq, float factor, bool interleaved,
                            const int32_t* __restrict__ positions) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  const int half = rot / 2;
  const int64_t n = int64_t(rows) * (hq + hk) * half;
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= n) return;
  const int i = int(idx % half);
  const int64_t rh = idx / half;
  const int r = int(rh / (hq + hk)), h = int(rh % (hq + hk));
  __nv_bfloat16* base = h < hq ? q + (int64_t(r) * hq + h) * d : k + (int64_t(r) * hk + (h - hq)) * d;
  float sn, cs;
  sincosf(float(positions[r]) * inv_freq[i], &sn, &cs);
  cs *= factor;
  sn *= factor;
  const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
  const float x1 = __bfloat162float(base[a]), x2 = __bfloat162float(base[b]);
  float ya, yb;
  rope_rotate(x1, x2, cs, sn, ya, yb);
  base[a] = __float2bfloat16_rn(ya);
  base[b] = __float2bfloat16_rn(yb);
}

// rms_norm (warp path) + rope + kv_write for one (row, head) a warp; V = head_dim / 32 elements a lane
// (element lane + 32 j). Rope pairs (i, i + half) sit in the same lane when half % 32 == 0.
// Reads q/k/v rows at `in_stride` elements (hq*D, hk*D, hk*D separately, or (hq + 2hk)*D all three from
// one fused qkv projection); writes q to qo [R, hq, D] and k to ko [R, hk, D] when ko is given. The
// in-place call passes qo == qi and ko == ki (each lane reads its elements before it writes them).
template <int V>
__global__ void __launch_bounds__(256)
    qk_norm_rope_kv_kernel(const __nv_bfloat16* qi, int64_t q_stride, __nv_bfloat16* qo,
                           const __nv_bfloat16* ki, int64_t k_stride, __nv_bfloat16* ko,
                           const __nv_bfloat16* vin, int64_t v_stride, const void* qw, const void* kw,
                           DType wt, float eps, float offset, int rows, int hq, int hk, int rot,
                           const float* __restrict__ inv_freq, float factor,
                           const int32_t* __restrict__ positions, __nv_bfloat16* kp, __nv_bfloat16* vp,
                           const int32_t* __restrict__ slots) {
  pdl_launch_dependents();
  constexpr int D = 32 * V;
  const int64_t idx = blockIdx.x * int64_t(8) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (idx >= int64_t(rows) * (hq + hk)) return;  // whole warps
  const int r = int(idx / (hq + hk)), h = int(idx % (hq + hk));
  const bool is_q = h < hq;
  // Before the wait, what no earlier kernel of the forward writes: the norm weights and rope frequencies
  // (constants), the row's position and pool slot (the round's metadata, copied in before its first kernel),
  // and so the rope's sines and cosines. After it, one round of loads (the head's q or k values and, for a
  // K/V head, its v values), then arithmetic and stores: this kernel was ~4 us a layer of dependent round
  // trips (30B-A3B 4-bit b=1, run 362: run twice +4.2 us). Same values, same arithmetic.
  const void* w = is_q ? qw : kw;
  float wo[V];
  if (w) {
#pragma unroll
    for (int j = 0; j < V; ++j) wo[j] = __fadd_rn(ld(w, lane + 32 * j, wt), offset);
  }
  const int h32 = rot / 64;  // half / 32
  float sn[V], cs[V];
  {
    const float pos = float(positions[r]);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (j >= h32) break;
      sincosf(pos * inv_freq[lane + 32 * j], &sn[j], &cs[j]);
      cs[j] *= factor;
      sn[j] *= factor;
    }
  }
  const int slot = is_q ? -1 : slots[r];
  pdl_wait();
  const __nv_bfloat16* x =
      is_q ? qi + int64_t(r) * q_stride + int64_t(h) * D : ki + int64_t(r) * k_stride + int64_t(h - hq) * D;
  __nv_bfloat16* xo = is_q ? qo + (int64_t(r) * hq + h) * D
                      : ko ? ko + (int64_t(r) * hk + (h - hq)) * D
                           : nullptr;
  const bool kv = !is_q && slot >= 0;  // (a negative slot: a padding row)
  const __nv_bfloat16* vr = vin + int64_t(r) * v_stride + int64_t(h - hq) * D;
  float v[V];
  __nv_bfloat16 vv[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    v[j] = bf(x, lane + 32 * j);
    if (kv) vv[j] = vr[lane + 32 * j];
  }
  if (w) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) ss = __fmaf_rn(v[j], v[j], ss);
    const float inv = norm_inv(row_sum<32>(ss, nullptr), D, eps);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = __bfloat162float(__float2bfloat16_rn(norm_out(v[j], inv, wo[j])));
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (j >= h32) break;
    float a, b;
    rope_rotate(v[j], v[j + h32], cs[j], sn[j], a, b);
    v[j] = __bfloat162float(__float2bfloat16_rn(a));
    v[j + h32] = __bfloat162float(__float2bfloat16_rn(b));
  }
  if (xo) {
#pragma unroll
    for (int j = 0; j < V; ++j) xo[lane + 32 * j] = __float2bfloat16_rn(v[j]);
  }
  if (!kv) return;
  const int64_t dst = (int64_t(slot) * hk + (h - hq)) * D;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    kp[dst + lane + 32 * j] = __float2bfloat16_rn(v[j]);
    vp[dst + lane + 32 * j] = vv[j];
  }
}

__global__ void silu_mul_kernel(const __nv_bfloat16* gu, __nv_bfloat16* out, int64_t rows, int inter) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= rows * inter) return;
  const int64_t r = idx / inter, i = idx % inter;
  const float g = bf(gu, r * 2 * inter + i), u = bf(gu, r * 2 * inter + inter + i);
  out[idx] = silu_mul_bf16(g, u);
}

// 8 elements a thread (inter % 8 == 0): 16-byte loads of gate and up, one 16-byte store; each element the
// scalar kernel's expression (run 125: the scalar kernel moved ~1.3 TB/s at 4096 x 12288).
__global__ void silu_mul_vec_kernel(const uint4* gu, uint4* out, int64_t units, int inter_units) {
  pdl_enter();
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= units) return;
  const int64_t r = idx / inter_units, j = idx % inter_units;
  out[idx] = silu_mul_unit(ld_act16(gu + r * 2 * inter_units + j),
                           ld_act16(gu + r * 2 * inter_units + inter_units + j));
}

// 16-byte copies of one row's K and V into the pool slot.
__global__ void kv_write_kernel(uint4* kp, uint4* vp, const uint4* k, const uint4* v, int rows, int vecs,
                                const int32_t* __restrict__ slots) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= int64_t(rows) * vecs) return;
  const int r = int(idx / vecs), j = int(idx % vecs);
  const int slot = slots[r];
  if (slot < 0) return;  // padding row
  kp[int64_t(slot) * vecs + j] = k[idx];
  vp[int64_t(slot) * vecs + j] = v[idx];
}

__global__ void embedding_kernel(const void* table, DType tt, const int32_t* __restrict__ tokens, void* out,
                                 DType ot, int rows, int hidden, float scale) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= int64_t(rows) * hidden) return;
  const int r = int(idx / hidden), j = int(idx % hidden);
  st(out, idx, ot, ld(table, int64_t(tokens[r]) * hidden + j, tt) * scale);
}

__global__ void add_kernel(void* a, DType at, const void* b, DType bt, int64_t n) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx < n) st(a, idx, at, ld(a, idx, at) + ld(b, idx, bt));
}

__global__ void gather_kernel(const uint8_t* x, const int32_t* __restrict__ rows, uint8_t* out, int nrows,
                              int64_t row_bytes, bool vec16) {
  pdl_enter();  // dependent launch (launch.h): nothing below touches memory before it
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t units = vec16 ? row_bytes / 16 : row_bytes;
  if (idx >= int64_t(nrows) * units) return;
  const int64_t i = idx / units, j = idx % units;
  if (vec16)
    reinterpret_cast<uint4*>(out + i * row_bytes)[j] =
        reinterpret_cast<const uint4*>(x + int64_t(rows[i]) * row_bytes)[j];
  else
    out[i * row_bytes + j] = x[int64_t(rows[i]) * row_bytes + j];
}

__global__ void fill_uniform_kernel(void* p, DType t, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * uint64_t(i + 1);  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.f / 16777216.f);
    st(p, i, t, lo + (hi - lo) * u);
  }
}

unsigned blocks_for(int64_t n, int threads = 256) {
  return unsigned((n + threads - 1) / threads);
}

}  // namespace

void rms_norm(const void* x, const void* w, DType wt, void* y, int64_t rows, int cols, float eps,
              float offset, cudaStream_t s) {
  if (rows == 0) return;
  auto xp = static_cast<const __nv_bfloat16*>(x);
  auto yp = static_cast<__nv_bfloat16*>(y);
  // The variant depends on the row length alone, never on the number of rows.
  if (cols <= 512)  // per-head q/k norms: one warp a row
    launch_pdl_if(g_pdl_group, rms_norm_kernel<32, 16>, blocks_for(rows, kNormThreads / 32), kNormThreads, 0,
                  s, xp, w, wt, yp, rows, cols, eps, offset);
  else if (cols <= 8192)
    launch_pdl_if(g_pdl_group, rms_norm_kernel<256, 32>, unsigned(rows), kNormThreads, 0, s, xp, w, wt, yp,
                  rows, cols, eps, offset);
  else
    launch_pdl_if(g_pdl_group, rms_norm_kernel<256, 0>, unsigned(rows), kNormThreads, 0, s, xp, w, wt, yp,
                  rows, cols, eps, offset);
  TF_CUDA_LAUNCH_CHECK();
}

void add_rms_norm(void* res, DType rt, const void* x, const void* w, DType wt, void* y, int64_t rows,
                  int cols, float eps, float offset, cudaStream_t s) {
  if (rows == 0) return;
  auto xp = static_cast<const __nv_bfloat16*>(x);
  auto yp = static_cast<__nv_bfloat16*>(y);
  const bool aligned =
      (reinterpret_cast<uintptr_t>(res) | reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) %
          16 ==
      0;
  const bool vec_w = wt == DType::BF16 || wt == DType::F32 || wt == DType::F16;
  if (cols <= 8192 && cols % 8 == 0 && aligned && vec_w && (rt == DType::BF16 || rt == DType::F32) &&
      g_vec_norm) {
    auto go = [&](auto kernel) {
      launch_pdl_if(g_pdl_group, kernel, unsigned(rows), kNormThreads, 0, s, res, xp, w, yp, cols, eps,
                    offset);
    };
    const bool f32 = rt == DType::F32;
    if (wt == DType::BF16)
      go(f32 ? add_rms_norm_vec_kernel<DType::F32, DType::BF16>
             : add_rms_norm_vec_kernel<DType::BF16, DType::BF16>);
    else if (wt == DType::F32)
      go(f32 ? add_rms_norm_vec_kernel<DType::F32, DType::F32>
             : add_rms_norm_vec_kernel<DType::BF16, DType::F32>);
    else
      go(f32 ? add_rms_norm_vec_kernel<DType::F32, DType::F16>
             : add_rms_norm_vec_kernel<DType::BF16, DType::F16>);
  } else if (cols <= 8192)
    launch_pdl_if(g_pdl_group, add_rms_norm_kernel<32>, unsigned(rows), kNormThreads, 0, s, res, rt, xp, w,
                  wt, yp, cols, eps, offset);
  else
    launch_pdl_if(g_pdl_group, add_rms_norm_kernel<0>, unsigned(rows), kNormThreads, 0, s, res, rt, xp, w, wt,
                  yp, cols, eps, offset);
  TF_CUDA_LAUNCH_CHECK();
}

void set_vector_norm(bool on) {
  g_vec_norm = on;
}

void rope(void* q, void* k, int rows, int hq, int hk, int d, int rot, const float* inv_freq, float factor,
          bool interleaved, const int32_t* positions, cudaStream_t s) {
  const int64_t n = int64_t(rows) * (hq + hk) * (rot / 2);
  if (n == 0) return;
  launch_pdl_if(g_pdl_group, rope_kernel, blocks_for(n), 256, 0, s, static_cast<__nv_bfloat16*>(q),
                static_cast<__nv_bfloat16*>(k), rows, hq, hk, d, rot, inv_freq, factor, interleaved,
                positions);
  TF_CUDA_LAUNCH_CHECK();
}

namespace {

bool qk_norm_rope_kv_strided(const void* qi, int64_t q_stride, void* qo, const void* ki, int64_t k_stride,
                             void* ko, const void* v, int64_t v_stride, const void* q_w, const void* k_w,
                             DType wt, float eps, float offset, int rows, int hq, int hk, int d, int rot,
                             const float* inv_freq, float factor, bool interleaved, const int32_t* positions,
                             void* kp, void* vp, const int32_t* slots, cudaStream_t s) {
  if (interleaved || rot % 64 != 0 || rot > d || (d != 64 && d != 128 && d != 256)) return false;
  const int64_t warps = int64_t(rows) * (hq + hk);
  if (warps == 0) return true;
  auto* qip = static_cast<const __nv_bfloat16*>(qi);
  auto* qop = static_cast<__nv_bfloat16*>(qo);
  auto* kip = static_cast<const __nv_bfloat16*>(ki);
  auto* kop = static_cast<__nv_bfloat16*>(ko);
  auto* vv = static_cast<const __nv_bfloat16*>(v);
  auto* kpp = static_cast<__nv_bfloat16*>(kp);
  auto* vpp = static_cast<__nv_bfloat16*>(vp);
  const unsigned blocks = unsigned((warps + 7) / 8);
  auto go = [&](auto kernel) {
    launch_pdl_if(g_pdl_group, kernel, blocks, 256, 0, s, qip, q_stride, qop, kip, k_stride, kop, vv,
                  v_stride, q_w, k_w, wt, eps, offset, rows, hq, hk, rot, inv_freq, factor, positions, kpp,
                  vpp, slots);
  };
  if (d == 64)
    go(qk_norm_rope_kv_kernel<2>);
  else if (d == 128)
    go(qk_norm_rope_kv_kernel<4>);
  else
    go(qk_norm_rope_kv_kernel<8>);
  TF_CUDA_LAUNCH_CHECK();
  return true;
}

}  // namespace

bool qk_norm_rope_kv(void* q, void* k, const void* v, const void* q_w, const void* k_w, DType wt, float eps,
                     float offset, int rows, int hq, int hk, int d, int rot, const float* inv_freq,
                     float factor, bool interleaved, const int32_t* positions, void* kp, void* vp,
                     const int32_t* slots, cudaStream_t s) {
  return qk_norm_rope_kv_strided(q, int64_t(hq) * d, q, k, int64_t(hk) * d, k, v, int64_t(hk) * d, q_w, k_w,
                                 wt, eps, offset, rows, hq, hk, d, rot, inv_freq, factor, interleaved,
                                 positions, kp, vp, slots, s);
}

bool qkv_norm_rope_kv(const void* qkv, void* q_out, const void* q_w, const void* k_w, DType wt, float eps,
                      float offset, int rows, int hq, int hk, int d, int rot, const float* inv_freq,
                      float factor, bool interleaved, const int32_t* positions, void* kp, void* vp,
                      const int32_t* slots, cudaStream_t s) {
  const int64_t stride = int64_t(hq + 2 * hk) * d;
  auto* base = static_cast<const __nv_bfloat16*>(qkv);
  return qk_norm_rope_kv_strided(base, stride, q_out, base + int64_t(hq) * d, stride, nullptr,
                                 base + int64_t(hq + hk) * d, stride, q_w, k_w, wt, eps, offset, rows, hq, hk,
                                 d, rot, inv_freq, factor, interleaved, positions, kp, vp, slots, s);
}

void silu_mul(const void* gu, void* out, int64_t rows, int inter, cudaStream_t s) {
  if (rows * inter == 0) return;
  if (inter % 8 == 0 && reinterpret_cast<uintptr_t>(gu) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    const int64_t units = rows * (inter / 8);
    launch_pdl_if(g_pdl_group, silu_mul_vec_kernel, blocks_for(units), 256, 0, s,
                  static_cast<const uint4*>(gu), static_cast<uint4*>(out), units, inter / 8);
  } else {
    launch_pdl_if(g_pdl_group, silu_mul_kernel, blocks_for(rows * inter), 256, 0, s,
                  static_cast<const __nv_bfloat16*>(gu), static_cast<__nv_bfloat16*>(out), rows, inter);
  }
  TF_CUDA_LAUNCH_CHECK();
}

void kv_write(void* kp, void* vp, const void* k, const void* v, int rows, int row_elems, const int32_t* slots,
              cudaStream_t s) {
  TF_CHECK(row_elems % 8 == 0, "kv_write: kv_heads * head_dim must be a multiple of 8");
  const int vecs = row_elems / 8;
  if (rows == 0) return;
  launch_pdl_if(g_pdl_group, kv_write_kernel, blocks_for(int64_t(rows) * vecs), 256, 0, s,
                static_cast<uint4*>(kp), static_cast<uint4*>(vp), static_cast<const uint4*>(k),
                static_cast<const uint4*>(v), rows, vecs, slots);
  TF_CUDA_LAUNCH_CHECK();
}

void embedding(const void* table, DType tt, const int32_t* tokens, void* out, DType ot, int rows, int hidden,
               float scale, cudaStream_t s) {
  if (rows == 0) return;
  launch_pdl_if(g_pdl_group, embedding_kernel, blocks_for(int64_t(rows) * hidden), 256, 0, s, table, tt,
                tokens, out, ot, rows, hidden, scale);
  TF_CUDA_LAUNCH_CHECK();
}

void add(void* a, DType at, const void* b, DType bt, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_pdl_if(g_pdl_group, add_kernel, blocks_for(n), 256, 0, s, a, at, b, bt, n);
  TF_CUDA_LAUNCH_CHECK();
}

void gather_rows(const void* x, const int32_t* rows, void* out, int nrows, int64_t row_bytes,
                 cudaStream_t s) {
  if (nrows == 0) return;
  const bool vec16 = row_bytes % 16 == 0 && uintptr_t(x) % 16 == 0 && uintptr_t(out) % 16 == 0;
  const int64_t units = vec16 ? row_bytes / 16 : row_bytes;
  launch_pdl_if(g_pdl_group, gather_kernel, blocks_for(nrows * units), 256, 0, s,
                static_cast<const uint8_t*>(x), rows, static_cast<uint8_t*>(out), nrows, row_bytes, vec16);
  TF_CUDA_LAUNCH_CHECK();
}

__global__ void empty_step_kernel() {
  pdl_enter();
}

void empty_step(int blocks, cudaStream_t s) {
  launch_pdl_if(g_pdl_group, empty_step_kernel, blocks, 256, 0, s);
  TF_CUDA_LAUNCH_CHECK();
}

__global__ void hold_sm_kernel(unsigned long long ns) {
  const unsigned long long t0 = gtime();
  while (gtime() - t0 < ns) {
  }
}

void hold_sms(int blocks, int us, cudaStream_t s) {
  constexpr int kSmem = 120 << 10;  // (two do not fit an SM)
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(hold_sm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  hold_sm_kernel<<<blocks, 32, kSmem, s>>>(static_cast<unsigned long long>(us) * 1000ull);
  TF_CUDA_LAUNCH_CHECK();
}

void fill_uniform(void* p, DType t, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  if (n == 0) return;
  fill_uniform_kernel<<<4096, 256, 0, s>>>(p, t, n, seed, lo, hi);
  TF_CUDA_LAUNCH_CHECK();
}

}  // namespace tf::cuda
