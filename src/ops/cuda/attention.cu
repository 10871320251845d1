// Paged attention for any number of query rows per sequence (decode 1, verify k+1, prefill chunk n).
//
// Row invariance: a row's visible positions [lo, pos] are cut at fixed absolute multiples of
// kAttnChunk. One warp computes one (row, head, chunk) partial with an online softmax over the chunk's
// visible positions in increasing order (groups of 4 positions, starting at the first visible one),
// then a second kernel combines the row's partials in increasing chunk order. Nothing depends on the
// other rows in the call or on how they were batched, so a token's output is the same bits whether it
// is decoded alone, verified among k+1 rows or prefilled in a chunk of any size.
#include <cuda_bf16.h>

#include <cfloat>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace tf::cuda {
namespace {

constexpr int kHeadsPerBlock = 4;
constexpr int kGroup = 4;  // positions whose loads are in flight together

template <int DPL>
struct Vec {
  float v[DPL];
};

template <int DPL>
__device__ __forceinline__ Vec<DPL> load_bf16(const __nv_bfloat16* p) {
  Vec<DPL> r;
  if constexpr (DPL == 4) {
    uint2 u = *reinterpret_cast<const uint2*>(p);
    __nv_bfloat162 a = *reinterpret_cast<__nv_bfloat162*>(&u.x), b = *reinterpret_cast<__nv_bfloat162*>(&u.y);
    r.v[0] = __low2float(a), r.v[1] = __high2float(a), r.v[2] = __low2float(b), r.v[3] = __high2float(b);
  } else {
#pragma unroll
    for (int i = 0; i < DPL; ++i) r.v[i] = __bfloat162float(p[i]);
  }
  return r;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void row_range(const DeviceMeta& meta, int r, int window, int* lo, int* pos) {
  *pos = meta.positions[r];
  *lo = window > 0 ? max(0, *pos - window + 1) : 0;
}

template <int DPL>
__global__ void __launch_bounds__(kHeadsPerBlock * 32) attention_partial(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kp,
    const __nv_bfloat16* __restrict__ vp, DeviceMeta meta, int hq, int hk, float scale, int window,
    float softcap, int max_chunks, float* __restrict__ part_acc, float* __restrict__ part_ml) {
  constexpr int D = DPL * 32;
  const int head_blocks = (hq + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int r = blockIdx.x / head_blocks;
  const int h = (blockIdx.x % head_blocks) * kHeadsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (h >= hq) return;
  int lo, pos;
  row_range(meta, r, window, &lo, &pos);
  const int c = blockIdx.y;
  const int begin = max(c * kAttnChunk, lo), end = min((c + 1) * kAttnChunk - 1, pos);
  if (begin > end) return;
  const int kvh = h / (hq / hk);
  const int bs = meta.block_size;
  const int32_t* table = meta.tables + meta.table_offsets[meta.row_seq[r]];
  const Vec<DPL> qv = load_bf16<DPL>(q + (int64_t(r) * hq + h) * D + lane * DPL);
  auto at = [&](int p) {
    return (int64_t(table[p / bs]) * bs + p % bs) * hk * D + int64_t(kvh) * D + lane * DPL;
  };
  auto score = [&](const Vec<DPL>& kv) {
    float d = 0.f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) d += qv.v[i] * kv.v[i];
    float s = warp_sum(d) * scale;
    if (softcap > 0.f) s = softcap * tanhf(s / softcap);
    return s;
  };
  float m = -FLT_MAX, l = 0.f, acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) acc[i] = 0.f;
  int p = begin;
  for (; p + kGroup - 1 <= end; p += kGroup) {
    Vec<DPL> kv[kGroup], vv[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const int64_t o = at(p + j);
      kv[j] = load_bf16<DPL>(kp + o);
      vv[j] = load_bf16<DPL>(vp + o);
    }
    float s[kGroup], mx = m;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) s[j] = score(kv[j]), mx = fmaxf(mx, s[j]);
    const float corr = __expf(m - mx);
    l *= corr;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const float e = __expf(s[j] - mx);
      l += e;
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[i] += e * vv[j].v[i];
    }
    m = mx;
  }
  for (; p <= end; ++p) {
    const int64_t o = at(p);
    const float s = score(load_bf16<DPL>(kp + o));
    const Vec<DPL> v = load_bf16<DPL>(vp + o);
    const float mx = fmaxf(m, s), corr = __expf(m - mx), e = __expf(s - mx);
    l = l * corr + e;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] = acc[i] * corr + e * v.v[i];
    m = mx;
  }
  const int64_t slot = (int64_t(r) * hq + h) * max_chunks + c;
#pragma unroll
  for (int i = 0; i < DPL; ++i) part_acc[slot * D + lane * DPL + i] = acc[i];
  if (lane == 0) part_ml[slot * 2] = m, part_ml[slot * 2 + 1] = l;
}

// One warp per (row, head): merges the row's chunk partials in increasing chunk order.
template <int DPL>
__global__ void attention_combine(DeviceMeta meta, int hq, int window, int max_chunks,
                                  const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                                  __nv_bfloat16* __restrict__ out) {
  constexpr int D = DPL * 32;
  const int idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (idx >= meta.rows * hq) return;
  const int r = idx / hq;
  int lo, pos;
  row_range(meta, r, window, &lo, &pos);
  const int c0 = lo / kAttnChunk, c1 = pos / kAttnChunk;
  const float* ml = part_ml + int64_t(idx) * max_chunks * 2;
  const float* pa = part_acc + int64_t(idx) * max_chunks * D;
  float mx = -FLT_MAX;
  for (int c = c0; c <= c1; ++c) mx = fmaxf(mx, ml[2 * c]);
  float l = 0.f, acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) acc[i] = 0.f;
  for (int c = c0; c <= c1; ++c) {
    const float w = __expf(ml[2 * c] - mx);
    l += ml[2 * c + 1] * w;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] += pa[int64_t(c) * D + lane * DPL + i] * w;
  }
  const float inv = 1.f / l;
#pragma unroll
  for (int i = 0; i < DPL; ++i) out[int64_t(idx) * D + lane * DPL + i] = __float2bfloat16(acc[i] * inv);
}

template <int DPL>
void launch(const void* q, const void* k_pool, const void* v_pool, void* out, const DeviceMeta& meta,
            int hq, int hk, float scale, int window, float softcap, int max_chunks, float* part_acc,
            float* part_ml, cudaStream_t s) {
  const int head_blocks = (hq + kHeadsPerBlock - 1) / kHeadsPerBlock;
  dim3 grid(meta.rows * head_blocks, max_chunks);
  attention_partial<DPL><<<grid, kHeadsPerBlock * 32, 0, s>>>(
      static_cast<const __nv_bfloat16*>(q), static_cast<const __nv_bfloat16*>(k_pool),
      static_cast<const __nv_bfloat16*>(v_pool), meta, hq, hk, scale, window, softcap, max_chunks,
      part_acc, part_ml);
  TF_CUDA_LAUNCH_CHECK();
  const int warps = meta.rows * hq;
  attention_combine<DPL><<<(warps + 3) / 4, 128, 0, s>>>(meta, hq, window, max_chunks, part_acc, part_ml,
                                                         static_cast<__nv_bfloat16*>(out));
  TF_CUDA_LAUNCH_CHECK();
}

}  // namespace

void attention(const void* q, const void* k_pool, const void* v_pool, void* out, const DeviceMeta& meta,
               int hq, int hk, int head_dim, float scale, int window, float softcap, int max_chunks,
               float* part_acc, float* part_ml, cudaStream_t s) {
  TF_CHECK(hk > 0 && hq % hk == 0, "attention: query heads must be a multiple of KV heads");
  if (meta.rows == 0) return;
  switch (head_dim) {
    case 64: return launch<2>(q, k_pool, v_pool, out, meta, hq, hk, scale, window, softcap, max_chunks, part_acc, part_ml, s);
    case 128: return launch<4>(q, k_pool, v_pool, out, meta, hq, hk, scale, window, softcap, max_chunks, part_acc, part_ml, s);
    case 256: return launch<8>(q, k_pool, v_pool, out, meta, hq, hk, scale, window, softcap, max_chunks, part_acc, part_ml, s);
    default:
      throw Error("CUDA attention supports head_dim 64, 128 and 256, got " + std::to_string(head_dim));
  }
}

}  // namespace tf::cuda
