#pragma once
// Device code shared by the weight-only quantized kernels (quant_linear.cu) and the grouped MoE GEMM
// (moe_grouped.cu): the packed-weight addressing, the dequantization of 8 values to bf16 pairs and the
// bf16 MMA. One definition, so that both give the same bits for the same weight (quant_linear.h
// describes the arithmetic and the device layout).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "ops/cuda/mma.cuh"  // mma_bf16, load_stream

namespace tf::cuda {

// MLX with bf16 scales, MLX with f32 scales, FP8, and MLX 4-bit whose bf16 scales are stored times 2^133
// (kMlxBf16Sub: prescale_mlx4; the same values, one instruction fewer a bf16 pair, see dequant).
enum QuantKind { kMlxBf16 = 0, kMlxF32 = 1, kFp8 = 2, kMlxBf16Sub = 3 };

struct QArgs {
  const uint8_t* w;    // packed rows, row_bytes apart
  const void* scales;  // [N, groups]: u32 bf16 scale | bf16 bias << 16 (kMlxBf16), or f32
  const void* biases;  // [N, groups] f32, kMlxF32 only
  int64_t row_bytes;
  int groups;
  int chunk_shift;  // group of chunk c (32 values) = c >> chunk_shift (groups are 32 * 2^shift wide)
  int quad_chunks;  // 4-bit: chunks below this (a multiple of 4) are stored in quads (word_of)
};
// load_quad's spair: a quad's two scale words a row by one 8-byte load (groups of 64, and an even group count
// a row, so every row's words start 8-byte aligned). The 16-row kernels' SP instances are picked by it.
__host__ __device__ inline bool quad_scale_pairs(const QArgs& q) {
  return q.chunk_shift == 1 && (q.groups & 1) == 0;
}

// The packed bits of 8 consecutive values of one row (little-endian bit stream: value i at bit B*i, but
// for 4-bit see nibble_of) and the raw bits of their group's scale and bias (kMlxBf16: both in s).
struct Raw {
  uint32_t v0, v1, s, b;
};

// Where lane t's bytes of one row start (4-bit: the row's start), and that row's scales and biases.
struct RowPtr {
  const uint8_t* w;
  const unsigned int *s, *b;
  int t, quad_chunks;  // 4-bit only
};

// 4-bit device layout, per row: the 32-bit word holding values 32c + 8t .. +7 (chunk c, lane t). Chunks
// below quad_chunks go in quads of 4 whose 16 words are ordered by lane, so that lane t's words of 4
// consecutive chunks are 16 contiguous bytes (one 16-byte load feeds 8 MMAs); the rest stay as shipped.
__host__ __device__ constexpr int64_t word_of(int64_t c, int t, int64_t quad_chunks) {
  return c < quad_chunks ? (c >> 2) * 16 + t * 4 + (c & 3) : c * 4 + t;
}

template <int KIND, int B>
__device__ __forceinline__ RowPtr row_ptr(const QArgs& q, int row, int t) {
  RowPtr r;
  r.w = q.w + int64_t(row) * q.row_bytes + (B == 4 ? 0 : t * B);
  r.t = t, r.quad_chunks = q.quad_chunks;
  r.s = static_cast<const unsigned int*>(q.scales) + int64_t(row) * q.groups;
  r.b = KIND == kMlxF32 ? static_cast<const unsigned int*>(q.biases) + int64_t(row) * q.groups : nullptr;
  return r;
}

// Values 32c + 8t .. 32c + 8t + 7 of the row of `rp` (lane t's).
template <int KIND, int B>
__device__ __forceinline__ Raw load_raw(const RowPtr& rp, int c, int chunk_shift) {
  Raw r{0, 0, 0, 0};
  const uint8_t* p = rp.w + (B == 4 ? 0 : c * (4 * B));  // < row_bytes <= 2^30
  if constexpr (B == 8) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    r.v0 = u.x, r.v1 = u.y;
  } else if constexpr (B == 4) {
    r.v0 = __ldg(reinterpret_cast<const unsigned int*>(rp.w) + word_of(c, rp.t, rp.quad_chunks));
  } else if constexpr (B == 2) {
    r.v0 = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else if constexpr (B == 6) {  // 6 bytes at an even offset
    const auto* h = reinterpret_cast<const unsigned short*>(p);
    r.v0 = uint32_t(__ldg(h)) | (uint32_t(__ldg(h + 1)) << 16);
    r.v1 = __ldg(h + 2);
  } else {  // 3 or 5 bytes at any offset
    uint64_t v = 0;
#pragma unroll
    for (int i = 0; i < B; ++i) v |= uint64_t(__ldg(p + i)) << (8 * i);
    r.v0 = uint32_t(v), r.v1 = uint32_t(v >> 32);
  }
  const int gi = c >> chunk_shift;
  r.s = __ldg(rp.s + gi);  // kMlxBf16: scale and bias
  if constexpr (KIND == kMlxF32) r.b = __ldg(rp.b + gi);
  return r;
}

// On the device, each 32-bit word of a 4-bit weight holds value i of its 8 at nibble nibble_of(i), so that
// one shift and one mask give a bf16 pair of consecutive values (reordered at upload; same bytes).
__host__ __device__ constexpr int nibble_of(int i) {
  return i / 2 + 4 * (i % 2);
}

__device__ __forceinline__ uint32_t bits_of(__nv_bfloat162 v) {
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ __nv_bfloat162 bf2_of(uint32_t v) {
  return *reinterpret_cast<__nv_bfloat162*>(&v);
}

// (a & b) | c as one LOP3 (the compiler emits two when b and c are both immediates).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The 8 values as bf16 pairs (value 2j in the low half of word j), as linear.cu loads 8 bf16 weights.
template <int KIND, int B>
__device__ __forceinline__ uint4 dequant(const Raw& r) {
  uint32_t o[4];
  if constexpr (KIND == kFp8) {
    const float s = __uint_as_float(r.s);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = j < 2 ? r.v0 : r.v1;
      const __half2_raw h =
          __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t((word >> (16 * (j & 1))) & 0xFFFFu), __NV_E4M3);
      const float lo = __half2float(__ushort_as_half(h.x)), hi = __half2float(__ushort_as_half(h.y));
      o[j] = bits_of(__floats2bfloat162_rn(__fmul_rn(lo, s), __fmul_rn(hi, s)));
    }
  } else if constexpr (KIND == kMlxBf16 && B <= 6) {
    // q < 128 written into the mantissa of bf16 128.0 (0x4300) is exactly 128 + q; minus 128 is q; one
    // bf16 fma then gives scale*q + bias rounded once.
    if constexpr (B == 4) {  // nibbles j and j+4 hold values 2j and 2j+1 (nibble_of)
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = and_or(r.v0 >> (4 * j), 0x000F000Fu, 0x43004300u);
    } else {
      const uint64_t v = uint64_t(r.v0) | (uint64_t(r.v1) << 32);
      constexpr uint32_t mask = (1u << B) - 1u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t lo = uint32_t(v >> (2 * j * B)) & mask, hi = uint32_t(v >> ((2 * j + 1) * B)) & mask;
        o[j] = lo | (hi << 16) | 0x43004300u;
      }
    }
    // (scale, scale) and (bias, bias) as halves of the one word: ptxas reads them as the fma's .H0_H0 and
    // .H1_H1 operand selectors (no PRMT; the same operands).
    const __nv_bfloat162 sb = bf2_of(r.s), s2 = __low2bfloat162(sb), b2 = __high2bfloat162(sb);
    const __nv_bfloat162 magic = bf2_of(0x43004300u);
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = bits_of(__hfma2(__hsub2(bf2_of(o[j]), magic), s2, b2));
  } else if constexpr (KIND == kMlxBf16Sub) {
    // q < 16 masked into the mantissa of a bf16 whose exponent bits are 0 is the subnormal q * 2^-133; the
    // stored scale is scale * 2^133 (exact: prescale_mlx4 takes only scales where it is finite), so the fma's
    // exact product is scale * q and the result scale*q + bias rounded once: kMlxBf16's bits, without its
    // subtraction of the magic number (the fma takes subnormal bf16 operands as they are: no ftz for bf16).
    // Nibbles 1, 3, 5, 7 are taken where they stand, 4 bits up: the 8-bit code 16 q as bf16 bits is 16 q *
    // 2^-133 = q * 2^-129 (codes below 256 are c * 2^-133, subnormal or not), so their fma takes the scale
    // times 2^-4 (exact: the stored scale is at least 2^-133 * 2^133 = 1 or zero) and gives the same product
    // scale * q. One shift a word instead of three (pairs 2 and 3 from v >> 8), one multiply a scale word.
    static_assert(B == 4, "subnormal codes: MLX 4-bit only");
    const __nv_bfloat162 sb = bf2_of(r.s), s2 = __low2bfloat162(sb), b2 = __high2bfloat162(sb);
    const __nv_bfloat162 s2h = __low2bfloat162(__hmul2(sb, bf2_of(0x3F803D80u)));  // (scale * 2^-4, bias)
    const uint32_t hi = r.v0 >> 8;
    o[0] = bits_of(__hfma2(bf2_of(r.v0 & 0x000F000Fu), s2, b2));
    o[1] = bits_of(__hfma2(bf2_of(r.v0 & 0x00F000F0u), s2h, b2));
    o[2] = bits_of(__hfma2(bf2_of(hi & 0x000F000Fu), s2, b2));
    o[3] = bits_of(__hfma2(bf2_of(hi & 0x00F000F0u), s2h, b2));
  } else {  // MLX 8-bit, or f32 scales: scale*q + bias in f32 (one fma), rounded to bf16
    const float s = KIND == kMlxBf16 ? __uint_as_float(r.s << 16) : __uint_as_float(r.s);
    const float b = KIND == kMlxBf16 ? __uint_as_float(r.s & 0xFFFF0000u) : __uint_as_float(r.b);
    const uint64_t v = uint64_t(r.v0) | (uint64_t(r.v1) << 32);
    constexpr uint32_t mask = (1u << B) - 1u;
    auto val = [&](int i) {  // 2^23 + q, minus 2^23: q as a float without an int conversion
      // 8-bit: one PRMT a value puts byte i under the exponent bits (bytes: q, 0x00, 0x00, 0x4B), the same
      // word as the shift and the two masks (~2 instructions a value fewer, cuobjdump).
      const uint32_t bits = B == 8
                                ? __byte_perm(i < 4 ? r.v0 : r.v1, 0x4B000000u, 0x7540u | uint32_t(i % 4))
                                : 0x4B000000u | (uint32_t(v >> (B == 4 ? 4 * nibble_of(i) : i * B)) & mask);
      return __fmaf_rn(s, __fsub_rn(__uint_as_float(bits), 8388608.f), b);
    };
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = bits_of(__floats2bfloat162_rn(val(2 * j), val(2 * j + 1)));
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// 4-bit quads (q4_decode_kernel, q4_row2_kernel, q4_pair_kernel).
// Word offsets of two rows' lane-t words (rows ra, rb of q) and of their scales (32-bit: the weight has <
// 2^32 words, checked at launch).
struct QuadRows {
  uint32_t wa, wb, sa, sb;
};
__device__ __forceinline__ QuadRows quad_rows(const QArgs& q, int ra, int rb, int t) {
  const uint32_t words = uint32_t(q.row_bytes / 4), groups = uint32_t(q.groups);
  return QuadRows{uint32_t(ra) * words + 4 * t, uint32_t(rb) * words + 4 * t, uint32_t(ra) * groups,
                  uint32_t(rb) * groups};
}
// Quad qd of rows p (4-bit device layout, word_of): lane t's 4 words of each row in one 16-byte load, and
// each row's scale words of the quad's chunks 0-1 and 2-3 (groups >= 64: sh >= 1). A quad's two scale words a
// row: groups of 64 (sh = 1) are words 2qd and 2qd + 1, one 8-byte load when a row's words start 8-byte
// aligned (spair: an even group count): the same words, half the loads, each of which touches 8 rows' lines
// (run 350: the 8B linears of a decode step at M = 1 / 8 / 16 -4.7 / -4.1 / -2.2%). (A third case, one load
// for groups of 128 or more, spilled q4_decode_kernel's 16-row variant.)
__device__ __forceinline__ void load_quad(const QArgs& q, const QuadRows& p, int qd, int sh, bool spair,
                                          uint4& wa, uint4& wb, uint32_t (&sa)[2], uint32_t (&sb)[2]) {
  const auto* w32 = reinterpret_cast<const uint32_t*>(q.w);
  const auto* s32 = static_cast<const uint32_t*>(q.scales);
  const uint32_t c = 4 * qd, g0 = c >> sh, g1 = (c + 2) >> sh;
  wa = load_stream(w32 + (p.wa + 16 * uint32_t(qd)));
  wb = load_stream(w32 + (p.wb + 16 * uint32_t(qd)));
  if (spair) {
    const uint2 va = __ldg(reinterpret_cast<const uint2*>(s32 + (p.sa + g0)));
    const uint2 vb = __ldg(reinterpret_cast<const uint2*>(s32 + (p.sb + g0)));
    sa[0] = va.x, sa[1] = va.y, sb[0] = vb.x, sb[1] = vb.y;
  } else {
    sa[0] = __ldg(s32 + (p.sa + g0)), sa[1] = __ldg(s32 + (p.sa + g1));
    sb[0] = __ldg(s32 + (p.sb + g0)), sb[1] = __ldg(s32 + (p.sb + g1));
  }
}
// Chunk e's word (0..3) of a quad's 16 bytes.
__device__ __forceinline__ uint32_t quad_word(const uint4& v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

}  // namespace tf::cuda
