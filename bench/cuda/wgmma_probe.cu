// Probe for issue #6: can Hopper's warpgroup MMA (wgmma) reproduce the bits of linear.cu's mma.sync
// chain? The row-invariant linear fixes, per output element, an in-order chain of m16n8k16 steps with a
// fixed set of 16 K indices per step (docs/cuda-notes.md "Design"). wgmma may replace mma.sync only if
// one m64nNk16 step rounds D = A*B + C exactly like one m16n8k16 step on the same 16 k-values.
// Cases: (a) one step, wgmma vs mma.sync, N = 8/64/128, data with wide exponent spreads, subnormals,
// exact cancellations, signed zeros, huge values, nonzero C; (b) the same 16 k-values in another order
// inside the instruction (both operands permuted alike), against the unpermuted mma.sync; (c) chains of
// K/16 steps; (d) wgmma's scale-d = 0 (D = A*B) against mma.sync from C = +0. Exact bit comparisons.
// Then timing of linear_wgmma_bf16 (every tile) against the mma.sync kernels and cuBLAS at the Qwen3-8B
// linear shapes, M = 64..4096, with a bit check (--no-timing skips it).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/mma.cuh"

namespace {

void check_cuda(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "wgmma_probe.cu:%d %s: %s\n", line, what, cudaGetErrorString(e));
  std::exit(2);
}
#define CK(x) check_cuda((x), #x, __LINE__)

constexpr int kBatch = 32;  // independent 64 x N problems per case (one CTA each)

// ---------------------------------------------------------------- device side

__device__ __forceinline__ uint32_t pack(const uint16_t* row, int c0, int c1) {
  return uint32_t(row[c0]) | (uint32_t(row[c1]) << 16);
}

using tf::cuda::mma_bf16;  // the linear kernels' one MMA (mma.cuh)

// Reference: D = chain of mma.sync m16n8k16 over `steps` k16 steps from C. Step s, logical k index L
// (the MMA's fragment position) reads column s*16 + perm[L] of A [64][K] and B [N][K].
__global__ void mma_chain_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d, int n, int k,
                                 const int* perm) {
  const int p = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint16_t* ap = a + int64_t(p) * 64 * k;
  const uint16_t* bp = b + int64_t(p) * n * k;
  const float* cp = c + int64_t(p) * 64 * n;
  float* dp = d + int64_t(p) * 64 * n;
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  int pm[16];
  for (int i = 0; i < 16; ++i) pm[i] = perm[i];
  for (int j = 0; j < n / 8; ++j) {
    const int col = 8 * j + g, oc = 8 * j + 2 * t;
    float acc[4] = {cp[r0 * n + oc], cp[r0 * n + oc + 1], cp[r1 * n + oc], cp[r1 * n + oc + 1]};
    for (int s = 0; s < k / 16; ++s) {
      const uint16_t* a0 = ap + int64_t(r0) * k + s * 16;
      const uint16_t* a1 = ap + int64_t(r1) * k + s * 16;
      const uint16_t* b0 = bp + int64_t(col) * k + s * 16;
      mma_bf16(acc, pack(a0, pm[2 * t], pm[2 * t + 1]), pack(a1, pm[2 * t], pm[2 * t + 1]),
               pack(a0, pm[2 * t + 8], pm[2 * t + 9]), pack(a1, pm[2 * t + 8], pm[2 * t + 9]),
               pack(b0, pm[2 * t], pm[2 * t + 1]), pack(b0, pm[2 * t + 8], pm[2 * t + 9]));
    }
    dp[r0 * n + oc] = acc[0], dp[r0 * n + oc + 1] = acc[1];
    dp[r1 * n + oc] = acc[2], dp[r1 * n + oc + 1] = acc[3];
  }
}

// Byte offset of (row r, logical k L) of a 16-wide K-major operand, no swizzle: 8x8 core matrices of
// 128 contiguous bytes, the two K halves 128 bytes apart (LBO), 8-row groups 256 bytes apart (SBO).
__device__ __forceinline__ int core_off(int r, int l) {
  return (r / 8) * 256 + (l / 8) * 128 + (r % 8) * 16 + (l % 8) * 2;
}

// The same chain on wgmma m64nNk16, one warpgroup per problem, both operands staged per step.
// swap_desc: LBO and SBO exchanged in the descriptors (the layout check: only one order is right).
// zero_first: the first step uses scale-d = 0 (D = A*B, C ignored).
template <int N>
__global__ void __launch_bounds__(128)
    wgmma_chain_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d, int k, const int* perm,
                       bool swap_desc, bool zero_first) {
  __shared__ __align__(128) uint16_t sa[64 * 16];
  __shared__ __align__(128) uint16_t sb[N * 16];
  const int p = blockIdx.x, tid = threadIdx.x, warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
  const uint16_t* ap = a + int64_t(p) * 64 * k;
  const uint16_t* bp = b + int64_t(p) * N * k;
  const float* cp = c + int64_t(p) * 64 * N;
  float* dp = d + int64_t(p) * 64 * N;
  float acc[N / 2];
  auto at = [&](int i, int& row, int& col) {
    const int j = i / 4, e = i % 4;
    row = 16 * warp + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
  };
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    int row, col;
    at(i, row, col);
    acc[i] = cp[row * N + col];
  }
  const uint32_t sa_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sa));
  const uint32_t sb_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sb));
  const uint32_t lbo = swap_desc ? 256 : 128, sbo = swap_desc ? 128 : 256;
  for (int s = 0; s < k / 16; ++s) {
    for (int i = tid; i < 64 * 16; i += 128)
      sa[core_off(i / 16, i % 16) / 2] = ap[int64_t(i / 16) * k + s * 16 + perm[i % 16]];
    for (int i = tid; i < N * 16; i += 128)
      sb[core_off(i / 16, i % 16) / 2] = bp[int64_t(i / 16) * k + s * 16 + perm[i % 16]];
    tf::cuda::fence_proxy_async();
    __syncthreads();
    tf::cuda::wgmma_fence_operands<N / 2>(acc);
    tf::cuda::wgmma_fence();
    const uint64_t da = tf::cuda::wgmma_desc(sa_addr, lbo, sbo), db = tf::cuda::wgmma_desc(sb_addr, lbo, sbo);
    const int scale_d = (zero_first && s == 0) ? 0 : 1;
    if constexpr (N == 8) tf::cuda::wgmma_m64n8(acc, da, db, scale_d);
    if constexpr (N == 64) tf::cuda::wgmma_m64n64(acc, da, db, scale_d);
    if constexpr (N == 128) tf::cuda::wgmma_m64n128(acc, da, db, scale_d);
    tf::cuda::wgmma_commit();
    tf::cuda::wgmma_wait<0>();
    tf::cuda::wgmma_fence_operands<N / 2>(acc);
    __syncthreads();  // the next step overwrites the operands
  }
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    int row, col;
    at(i, row, col);
    dp[row * N + col] = acc[i];
  }
}

// ---------------------------------------------------------------- data

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
  int range(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }  // inclusive
  double uniform() { return double(next() >> 11) / double(1ULL << 53); }
};

uint16_t bf16_bits(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float bf16_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// sign * 2^e * 1.m (e unbiased, -126..127) with a random 7-bit mantissa.
uint16_t pow2_bf16(Rng& r, int e) {
  return uint16_t(((r.next() & 1) << 15) | (uint32_t(e + 127) << 7) | (r.next() & 0x7F));
}

enum class Dist { Uniform, Wide, Subnormal, Cancel, Zeros, Huge };
const char* dist_name(Dist d) {
  static const char* n[] = {"uniform", "wide", "subnormal", "cancel", "zeros", "huge"};
  return n[int(d)];
}

// One 16-wide block of an A row (is_a) or a B row. Cancel: positions 0,1 cancel against 8,9 (across
// the two k8 halves) and 2 against 3, 10 against 11 (inside a half): A' = -A, B' = B, so those products
// sum to exactly zero and only the small products at 4..7, 12..15 remain.
void fill_block(Rng& r, Dist d, bool is_a, uint16_t* v) {
  for (int l = 0; l < 16; ++l) {
    switch (d) {
      case Dist::Uniform:
        v[l] = bf16_bits(float(2 * r.uniform() - 1));
        break;
      case Dist::Wide:
        v[l] = pow2_bf16(r, r.range(-40, 40));
        break;
      case Dist::Subnormal: {
        const int kind = r.range(0, 3);
        if (kind == 0)
          v[l] = uint16_t(((r.next() & 1) << 15) | r.range(1, 127));  // bf16 subnormal
        else if (kind == 1)
          v[l] = pow2_bf16(r, r.range(-126, -110));
        else
          v[l] = pow2_bf16(r, r.range(-12, 12));
        break;
      }
      case Dist::Cancel:
        v[l] = pow2_bf16(r, (l % 8) < 4 ? r.range(8, 20) : r.range(-24, -4));
        break;
      case Dist::Zeros: {
        const int kind = r.range(0, 3);
        v[l] = kind == 0 ? 0x0000 : kind == 1 ? 0x8000 : pow2_bf16(r, r.range(-8, 8));
        break;
      }
      case Dist::Huge:
        v[l] = pow2_bf16(r, r.range(40, 70));
        break;
    }
  }
  if (d == Dist::Cancel) {
    const int pairs[4][2] = {{0, 8}, {1, 9}, {2, 3}, {10, 11}};
    for (auto& pr : pairs) v[pr[1]] = is_a ? uint16_t(v[pr[0]] ^ 0x8000) : v[pr[0]];
  }
}

float c_value(Rng& r, Dist d) {
  switch (d) {
    case Dist::Uniform:
      return float(2 * r.uniform() - 1);
    case Dist::Wide:
      return bf16_float(pow2_bf16(r, r.range(-40, 40))) * float(1 + r.uniform());
    case Dist::Subnormal:
      return r.range(0, 1) ? std::ldexp(float(r.range(-1000, 1000)), -140) : 0.f;
    case Dist::Cancel:
      return r.range(0, 1) ? std::ldexp(float(2 * r.uniform() - 1), -20) : 0.f;
    case Dist::Zeros:
      return r.range(0, 1) ? 0.f : -0.f;
    case Dist::Huge:
      return std::ldexp(float(2 * r.uniform() - 1), r.range(80, 127));
  }
  return 0.f;
}

struct Problem {
  int n, k;
  std::vector<uint16_t> a, b;  // [batch][64][k], [batch][n][k]
  std::vector<float> c;        // [batch][64][n]
};

Problem make_problem(Dist d, int n, int k, bool c_zero, uint64_t seed) {
  Problem p{n, k, {}, {}, {}};
  Rng r{seed * 0x9E3779B97F4A7C15ULL + 12345};
  p.a.resize(size_t(kBatch) * 64 * k), p.b.resize(size_t(kBatch) * n * k),
      p.c.resize(size_t(kBatch) * 64 * n);
  for (size_t i = 0; i < p.a.size(); i += 16) fill_block(r, d, true, &p.a[i]);
  for (size_t i = 0; i < p.b.size(); i += 16) fill_block(r, d, false, &p.b[i]);
  for (auto& v : p.c) v = c_zero ? 0.f : c_value(r, d);
  return p;
}

// ---------------------------------------------------------------- runs

struct DevProblem {
  uint16_t *a = nullptr, *b = nullptr;
  float* c = nullptr;
  int n = 0, k = 0;
  explicit DevProblem(const Problem& p) : n(p.n), k(p.k) {
    CK(cudaMalloc(&a, p.a.size() * 2));
    CK(cudaMalloc(&b, p.b.size() * 2));
    CK(cudaMalloc(&c, p.c.size() * 4));
    CK(cudaMemcpy(a, p.a.data(), p.a.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, p.b.data(), p.b.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c, p.c.data(), p.c.size() * 4, cudaMemcpyHostToDevice));
  }
  ~DevProblem() { cudaFree(a), cudaFree(b), cudaFree(c); }
};

int* device_perm(const std::vector<int>& perm) {
  static int* d = nullptr;
  if (!d) CK(cudaMalloc(&d, 16 * sizeof(int)));
  CK(cudaMemcpy(d, perm.data(), 16 * sizeof(int), cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> run_mma(const DevProblem& p, const std::vector<int>& perm) {
  float* d;
  CK(cudaMalloc(&d, size_t(kBatch) * 64 * p.n * 4));
  mma_chain_kernel<<<kBatch, 128>>>(p.a, p.b, p.c, d, p.n, p.k, device_perm(perm));
  CK(cudaGetLastError());
  std::vector<float> out(size_t(kBatch) * 64 * p.n);
  CK(cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return out;
}

std::vector<float> run_wgmma(const DevProblem& p, const std::vector<int>& perm, bool swap_desc,
                             bool zero_first) {
  float* d;
  CK(cudaMalloc(&d, size_t(kBatch) * 64 * p.n * 4));
  const int* pm = device_perm(perm);
  if (p.n == 8) wgmma_chain_kernel<8><<<kBatch, 128>>>(p.a, p.b, p.c, d, p.k, pm, swap_desc, zero_first);
  if (p.n == 64) wgmma_chain_kernel<64><<<kBatch, 128>>>(p.a, p.b, p.c, d, p.k, pm, swap_desc, zero_first);
  if (p.n == 128) wgmma_chain_kernel<128><<<kBatch, 128>>>(p.a, p.b, p.c, d, p.k, pm, swap_desc, zero_first);
  CK(cudaGetLastError());
  std::vector<float> out(size_t(kBatch) * 64 * p.n);
  CK(cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return out;
}

// Largest |got - exact| / (sum |a*b| + |c|) over finite elements (exact in double): small (~1e-6) when the
// operand layout is right, O(1) when the descriptors address the wrong elements.
double max_rel_err(const Problem& p, const std::vector<float>& got, const std::vector<int>& perm) {
  double worst = 0;
  for (int q = 0; q < kBatch; ++q)
    for (int r = 0; r < 64; ++r)
      for (int j = 0; j < p.n; ++j) {
        double exact = p.c[(size_t(q) * 64 + r) * p.n + j], mag = std::fabs(exact);
        for (int kk = 0; kk < p.k; ++kk) {
          const int col = kk / 16 * 16 + perm[kk % 16];
          const double prod = double(bf16_float(p.a[(size_t(q) * 64 + r) * p.k + col])) *
                              double(bf16_float(p.b[(size_t(q) * p.n + j) * p.k + col]));
          exact += prod, mag += std::fabs(prod);
        }
        const double v = got[(size_t(q) * 64 + r) * p.n + j];
        if (std::isfinite(v) && std::isfinite(exact) && mag > 0)
          worst = std::max(worst, std::fabs(v - exact) / mag);
      }
  return worst;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

int g_failures = 0;

// One table row: bitwise comparison of two outputs of the same problem (any NaN equals any NaN: the
// huge case overflows to inf - inf and payloads are not part of the contract).
void report(const char* part, const std::string& what, const Problem& p, const std::vector<float>& ref,
            const std::vector<float>& got, bool expect_equal = true) {
  size_t mism = 0, first = ref.size();
  for (size_t i = 0; i < ref.size(); ++i)
    if (float_bits(ref[i]) != float_bits(got[i]) && !(std::isnan(ref[i]) && std::isnan(got[i]))) {
      if (first == ref.size()) first = i;
      ++mism;
    }
  char where[160] = "-";
  if (mism) {
    const size_t q = first / (64 * p.n), r = first / p.n % 64, j = first % p.n;
    std::snprintf(where, sizeof where, "[%zu][%zu][%zu] ref %08x (%.9g) got %08x (%.9g)", q, r, j,
                  float_bits(ref[first]), ref[first], float_bits(got[first]), got[first]);
  }
  if (mism && expect_equal) ++g_failures;
  std::printf("| %-3s | %-52s | %8zu | %8zu | %s\n", part, what.c_str(), ref.size(), mism, where);
}

std::vector<int> identity_perm() {
  std::vector<int> p(16);
  for (int i = 0; i < 16; ++i) p[i] = i;
  return p;
}

struct NamedPerm {
  const char* name;
  std::vector<int> perm;
};

std::vector<NamedPerm> permutations() {
  std::vector<NamedPerm> out;
  std::vector<int> rev(16), halves(16), inter(16), rnd = identity_perm();
  for (int l = 0; l < 16; ++l) {
    rev[l] = 15 - l;
    halves[l] = l ^ 8;
    // linear.cu's in-chunk pattern on 16 values: fragment pairs 2t, 2t+1 <- 4t, 4t+1 and 2t+8, 2t+9 <-
    // 4t+2, 4t+3 (moves values between the two k8 halves).
    inter[l] = l < 8 ? 4 * (l / 2) + l % 2 : 4 * ((l - 8) / 2) + 2 + l % 2;
  }
  Rng r{777};
  for (int i = 15; i > 0; --i) std::swap(rnd[i], rnd[r.next() % uint64_t(i + 1)]);
  out.push_back({"reverse", rev});
  out.push_back({"swap-k8-halves", halves});
  out.push_back({"pair-interleave", inter});
  out.push_back({"random", rnd});
  return out;
}

bool g_swap_desc = false;

void layout_check() {
  const Problem p = make_problem(Dist::Uniform, 64, 16, false, 1);
  const DevProblem dp(p);
  const auto id = identity_perm();
  const double e0 = max_rel_err(p, run_wgmma(dp, id, false, false), id);
  const double e1 = max_rel_err(p, run_wgmma(dp, id, true, false), id);
  const double em = max_rel_err(p, run_mma(dp, id), id);
  std::printf(
      "layout check (max rel err vs exact, uniform, 1 step): mma.sync %.3g, wgmma LBO=K-step %.3g, "
      "wgmma LBO/SBO swapped %.3g\n",
      em, e0, e1);
  g_swap_desc = e1 < e0;
  if (std::min(e0, e1) > 1e-3) {
    std::printf("NEITHER descriptor order addresses the operands right: the wgmma rows below are invalid\n");
    ++g_failures;
  }
}

void part_a() {
  const auto id = identity_perm();
  for (Dist d : {Dist::Uniform, Dist::Wide, Dist::Subnormal, Dist::Cancel, Dist::Zeros, Dist::Huge})
    for (int n : {8, 64, 128}) {
      const Problem p = make_problem(d, n, 16, false, 100 + int(d) * 7 + n);
      const DevProblem dp(p);
      report("a", std::string("1 step m64n") + std::to_string(n) + " " + dist_name(d) + " vs m16n8k16", p,
             run_mma(dp, id), run_wgmma(dp, id, g_swap_desc, false));
    }
}

void part_b() {
  const auto id = identity_perm();
  for (const auto& np : permutations())
    for (Dist d : {Dist::Wide, Dist::Cancel, Dist::Subnormal}) {
      const Problem p = make_problem(d, 64, 16, false, 300 + int(d));
      const DevProblem dp(p);
      const auto ref = run_mma(dp, id);
      const std::string tag = std::string(dist_name(d)) + " k-order " + np.name;
      report("b", "mma.sync(perm) vs mma.sync(id) " + tag, p, ref, run_mma(dp, np.perm), false);
      report("b", "wgmma(perm) vs mma.sync(id) " + tag, p, ref, run_wgmma(dp, np.perm, g_swap_desc, false),
             false);
      report("b", "wgmma(perm) vs mma.sync(perm) " + tag, p, run_mma(dp, np.perm),
             run_wgmma(dp, np.perm, g_swap_desc, false));
    }
}

void part_c() {
  const auto id = identity_perm(), inter = permutations()[2].perm;
  for (Dist d : {Dist::Uniform, Dist::Wide, Dist::Cancel, Dist::Subnormal})
    for (int n : {8, 64, 128}) {
      const Problem p = make_problem(d, n, 4096, true, 500 + int(d) * 3 + n);
      const DevProblem dp(p);
      report("c", std::string("256-step chain (K=4096) m64n") + std::to_string(n) + " " + dist_name(d), p,
             run_mma(dp, id), run_wgmma(dp, id, g_swap_desc, false));
      if (n == 128)
        report("c", std::string("256-step chain, pair-interleave k-order ") + dist_name(d), p,
               run_mma(dp, inter), run_wgmma(dp, inter, g_swap_desc, false));
    }
}

void part_d() {
  const auto id = identity_perm();
  for (Dist d : {Dist::Zeros, Dist::Cancel, Dist::Subnormal}) {
    const Problem p = make_problem(d, 64, 64, true, 900 + int(d));
    const DevProblem dp(p);
    report("d", std::string("scale-d=0 first step vs mma.sync from C=+0, ") + dist_name(d), p,
           run_mma(dp, id), run_wgmma(dp, id, g_swap_desc, true), false);
  }
}

// ---------------------------------------------------------------- timing

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = __float2bfloat16(float(int(h % 2001) - 1000) / 1000.f);
  }
}

// Median of 9 timed calls (ms) after 3 warm-ups.
template <typename F>
float time_ms(F&& fn) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)), CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms;
  for (int i = 0; i < 9; ++i) {
    CK(cudaEventRecord(e0));
    fn();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float v;
    CK(cudaEventElapsedTime(&v, e0, e1));
    ms.push_back(v);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaEventDestroy(e0)), CK(cudaEventDestroy(e1));
  return ms[ms.size() / 2];
}

// Per-linear times at the Qwen3-8B shapes: the mma.sync kernel linear_bf16 used before wgmma (linear_mid.cu
// up to M = 512, linear_tiled.cu above, forced), linear_wgmma per CTA tile and by its Auto pick, cuBLAS;
// and whether the Auto wgmma output equals the mma.sync kernel's in every element.
void run_timing() {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(3);
  struct Lin {
    const char* name;
    int n, k;
  };
  const Lin lins[] = {
      {"q/o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}, {"lm_head", 151936, 4096}};
  const int ms[] = {64, 128, 256, 512, 1024, 4096};
  const tf::cuda::WgmmaTile tiles[] = {tf::cuda::WgmmaTile::W64T64,   tf::cuda::WgmmaTile::W64T128,
                                       tf::cuda::WgmmaTile::W128T64,  tf::cuda::WgmmaTile::W128T128,
                                       tf::cuda::WgmmaTile::W128T192, tf::cuda::WgmmaTile::W128T256};
  const size_t max_x = size_t(4096) * 12288, max_w = size_t(151936) * 4096, max_y = size_t(4096) * 151936;
  __nv_bfloat16 *x, *w, *y0, *y1, *y2;
  CK(cudaMalloc(&x, max_x * 2)), CK(cudaMalloc(&w, max_w * 2));
  CK(cudaMalloc(&y0, max_y * 2)), CK(cudaMalloc(&y1, max_y * 2)), CK(cudaMalloc(&y2, max_y * 2));
  fill_random_bf16<<<1024, 256>>>(x, max_x, 1);
  fill_random_bf16<<<1024, 256>>>(w, max_w, 2);
  std::printf(
      "| timing (us, TFLOP/s of the best): linear M N K | mma.sync (mid<=512, tiled) | wgmma 64x64 | 64x128 "
      "| "
      "128x64 | 128x128 | 128x192 | 128x256 | wgmma auto (tile) | cuBLAS | auto == mma.sync bits\n");
  for (const Lin& l : lins)
    for (int m : ms) {
      if (l.n > 100000 && m > 512) continue;  // lm_head runs on a prompt's last rows only
      const int n = l.n, k = l.k;
      const float alpha = 1.f, beta = 0.f;
      tf::cuda::set_linear_kernel(m <= 512 ? tf::cuda::LinearKernel::Mid : tf::cuda::LinearKernel::Tiled);
      const float t0 = time_ms(
          [&] { tf::cuda::linear_bf16(x, w, nullptr, tf::DType::BF16, y0, tf::DType::BF16, m, n, k, 0); });
      tf::cuda::set_linear_kernel(tf::cuda::LinearKernel::Auto);
      float tt[6];
      for (int i = 0; i < 6; ++i) {
        tf::cuda::set_linear_wgmma_tile(tiles[i]);
        tt[i] = time_ms([&] {
          tf::cuda::linear_wgmma_bf16(x, w, nullptr, tf::DType::BF16, y1, tf::DType::BF16, m, n, k, 0);
        });
      }
      tf::cuda::set_linear_wgmma_tile(tf::cuda::WgmmaTile::Auto);
      const float t1 = time_ms([&] {
        tf::cuda::linear_wgmma_bf16(x, w, nullptr, tf::DType::BF16, y1, tf::DType::BF16, m, n, k, 0);
      });
      const float t2 = time_ms([&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k,
                     &beta, y2, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
      CK(cudaDeviceSynchronize());
      std::vector<uint16_t> a(size_t(m) * n), b(a.size());
      CK(cudaMemcpy(a.data(), y0, a.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data(), y1, b.size() * 2, cudaMemcpyDeviceToHost));
      size_t mism = 0, first = a.size();
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i]) mism += 1, first = std::min(first, i);
      const double flop = 2.0 * m * n * k;
      auto tflops = [&](float ms) { return flop / (ms * 1e-3) / 1e12; };
      char bits[128];
      if (mism)
        std::snprintf(bits, sizeof bits, "NO: %zu differ, first y[%zu][%zu] %04x vs %04x", mism, first / n,
                      first % n, a[first], b[first]);
      else
        std::snprintf(bits, sizeof bits, "yes");
      if (mism) ++g_failures;
      const float best = *std::min_element(tt, tt + 6);
      std::printf(
          "| %-7s %4d %6d %5d | %8.1f (%3.0f) | %8.1f | %8.1f | %8.1f | %8.1f | %8.1f | %8.1f (best %3.0f) | "
          "%8.1f (%3.0f) %s "
          "| %8.1f (%3.0f) | %s\n",
          l.name, m, n, k, t0 * 1e3, tflops(t0), tt[0] * 1e3, tt[1] * 1e3, tt[2] * 1e3, tt[3] * 1e3,
          tt[4] * 1e3, tt[5] * 1e3, tflops(best), t1 * 1e3, tflops(t1),
          tf::cuda::wgmma_tile_name(tf::cuda::linear_wgmma_auto_tile(m, n)), t2 * 1e3, tflops(t2), bits);
      std::fflush(stdout);
    }
  // The mma.sync kernels' output (the bits every wgmma variant must give), and one timed wgmma run checked
  // against it: " | time (TFLOP/s)" printed, " yes" / " NO" appended to `bits`.
  auto reference = [&](int m, int n, int k) {
    tf::cuda::set_linear_kernel(m <= 512 ? tf::cuda::LinearKernel::Mid : tf::cuda::LinearKernel::Tiled);
    tf::cuda::linear_bf16(x, w, nullptr, tf::DType::BF16, y0, tf::DType::BF16, m, n, k, 0);
    tf::cuda::set_linear_kernel(tf::cuda::LinearKernel::Auto);
    std::vector<uint16_t> a(size_t(m) * n);
    CK(cudaMemcpy(a.data(), y0, a.size() * 2, cudaMemcpyDeviceToHost));
    return a;
  };
  auto timed_check = [&](const std::vector<uint16_t>& a, int m, int n, int k, std::string& bits) {
    const float t = time_ms([&] {
      tf::cuda::linear_wgmma_bf16(x, w, nullptr, tf::DType::BF16, y1, tf::DType::BF16, m, n, k, 0);
    });
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> b(a.size());
    CK(cudaMemcpy(b.data(), y1, b.size() * 2, cudaMemcpyDeviceToHost));
    const bool same = std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
    if (!same) ++g_failures;
    bits += same ? " yes" : " NO";
    std::printf(" | %8.1f (%3.0f)", t * 1e3, 2.0 * m * n * k / (t * 1e-3) / 1e12);
  };
  // The 2-CTA cluster tiles (x shared, or a tile's slices split; not in Auto yet), each output
  // memcmp'd against the mma.sync kernel's. Last, so that a fault here leaves the table above.
  std::printf(
      "| cluster tiles (us, TFLOP/s): linear M N K | 128x128c2 | 128x192c2 | 64x64s2 | 64x128s2 | 128x64s2 | "
      "bits == mma.sync\n");
  for (const Lin& l : lins)
    for (int m : {64, 128, 256, 512, 4096}) {
      if (l.n > 100000 && m > 512) continue;
      const int n = l.n, k = l.k;
      const std::vector<uint16_t> a = reference(m, n, k);
      std::printf("| %-7s %4d %6d %5d", l.name, m, n, k);
      std::string bits;
      for (tf::cuda::WgmmaTile tile :
           {tf::cuda::WgmmaTile::W128T128C2, tf::cuda::WgmmaTile::W128T192C2, tf::cuda::WgmmaTile::W64T64S2,
            tf::cuda::WgmmaTile::W64T128S2, tf::cuda::WgmmaTile::W128T64S2}) {
        tf::cuda::set_linear_wgmma_tile(tile);
        timed_check(a, m, n, k, bits);
      }
      tf::cuda::set_linear_wgmma_tile(tf::cuda::WgmmaTile::Auto);
      std::printf(" |%s\n", bits.c_str());
      std::fflush(stdout);
    }
  // Producers and stage layouts of the raw-staging tiles: 16-byte cp.async or TMA tensor maps, 64-byte
  // swizzled stages or the no-swizzle core-matrix layout (the default), bits checked. Last, so that a fault
  // in these paths leaves the tables above.
  struct Variant {
    tf::cuda::WgmmaTile tile;
    tf::cuda::WgmmaProducer producer;
    bool swizzle;
  };
  const Variant variants[] = {{tf::cuda::WgmmaTile::W64T64, tf::cuda::WgmmaProducer::Raw, false},
                              {tf::cuda::WgmmaTile::W64T64, tf::cuda::WgmmaProducer::Raw, true},
                              {tf::cuda::WgmmaTile::W64T64, tf::cuda::WgmmaProducer::Tma, true},
                              {tf::cuda::WgmmaTile::W128T128, tf::cuda::WgmmaProducer::Raw, true},
                              {tf::cuda::WgmmaTile::W128T128, tf::cuda::WgmmaProducer::Tma, true},
                              {tf::cuda::WgmmaTile::W128T192, tf::cuda::WgmmaProducer::Raw, false},
                              {tf::cuda::WgmmaTile::W128T192, tf::cuda::WgmmaProducer::Raw, true},
                              {tf::cuda::WgmmaTile::W128T192, tf::cuda::WgmmaProducer::Tma, true},
                              {tf::cuda::WgmmaTile::W128T128, tf::cuda::WgmmaProducer::TmaX, true},
                              {tf::cuda::WgmmaTile::W128T192, tf::cuda::WgmmaProducer::TmaX, true}};
  std::printf(
      "| producers (us, TFLOP/s): linear M N K | 64x64 cp16 noswz | cp16 | tma | 128x128 cp16 | tma | "
      "128x192 "
      "cp16 noswz | cp16 | tma | 128x128 tmax | 128x192 tmax | bits == mma.sync\n");
  for (const Lin& l : lins)
    for (int m : {64, 512, 4096}) {
      if (l.n > 100000 && m > 512) continue;
      const int n = l.n, k = l.k;
      const std::vector<uint16_t> a = reference(m, n, k);
      std::printf("| %-7s %4d %6d %5d", l.name, m, n, k);
      std::string bits;
      for (const Variant& v : variants) {
        tf::cuda::set_linear_wgmma_tile(v.tile);
        tf::cuda::set_linear_wgmma_producer(v.producer);
        tf::cuda::set_linear_wgmma_swizzle(v.swizzle);
        timed_check(a, m, n, k, bits);
      }
      tf::cuda::set_linear_wgmma_tile(tf::cuda::WgmmaTile::Auto);
      tf::cuda::set_linear_wgmma_producer(tf::cuda::WgmmaProducer::Auto);
      tf::cuda::set_linear_wgmma_swizzle(false);
      std::printf(" |%s\n", bits.c_str());
      std::fflush(stdout);
    }
  CK(cudaFree(x)), CK(cudaFree(w)), CK(cudaFree(y0)), CK(cudaFree(y1)), CK(cudaFree(y2));
  cublasDestroy(h);
}

}  // namespace

int main(int argc, char** argv) {
  bool timing = true;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--no-timing") == 0) timing = false;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("wgmma probe on %s (sm_%d%d), %d problems of 64 x N per case\n", prop.name, prop.major,
              prop.minor, kBatch);
  layout_check();
  std::printf("| part | case | elements | mismatch | first mismatch [problem][row][col] ref/got bits\n");
  part_a();
  part_b();
  part_c();
  part_d();
  std::printf(
      "bit-equality rows that must match and did not: %d (b: only 'wgmma(perm) vs mma.sync(perm)' "
      "must match; d is informative)\n",
      g_failures);
  if (timing) run_timing();
  std::printf("failures in all: %d\n", g_failures);
  return g_failures ? 1 : 0;
}
