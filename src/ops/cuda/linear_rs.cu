// Streaming linear for M = 17..256 on Hopper (issue #8): wgmma with the weights as the *register* operand A
// (linear_rs_bf16, linear_wgmma.h). Same per-element arithmetic as linear.cu (read its header and
// linear_wgmma.cu's): 8 fixed K slices, an in-order chain of k16 steps per slice from a zeroed accumulator,
// step h of 32-chunk c taking the k-values c*32 + 8u + 4h + j (u, j = 0..3), the slice partials folded in
// slice order, then the bias and the rounding. bench/cuda/wgmma_probe.cu showed one wgmma k16 step rounds
// like one mma.sync m16n8k16 step and that the order of the 16 values inside a step does not matter.
//
// Why another kernel. At M <= 256 a linear is a stream of weight bytes (q/o 16.8 MB, down 50 MB, gate_up
// 201 MB, lm_head 1.24 GB; 4 TB/s is the floor), and the mma.sync / smem-A wgmma kernels lose there for
// two reasons (run 40): linear_mid keeps 8 copies of a tile's accumulators (one per K-slice warp), so
// tiles stay small and x is re-read from L2 once per 32-64 features; linear_wgmma moves every weight byte
// global -> shared -> registers -> shared (the in-chunk permutation hop) and N = 4096 gives it only 64
// CTAs of 64 rows (q M = 64: 37 us, 0.5 TB/s). Here:
// - W goes global -> shared by TMA in its raw layout (64-byte rows, no permutation), and each consumer
//   thread loads its A fragment with two 16-byte ld.shared: lane (g, t) of warp w reads bytes 16t..16t+15
//   of rows 16w+g and 16w+g+8 of the chunk, i.e. k 8t..8t+7 -- exactly linear.cu's fragment: words 0-1
//   (k 8t..8t+3) are step 0's a0a1 / a4a5, words 2-3 step 1's (a2a3 / a6a7 from row g+8). A quarter warp
//   reads two whole rows (128 contiguous bytes): conflict-free.
// - x (tokens, wgmma's B from shared memory) comes raw by TMA too; the consumers permute it (one 16-byte
//   unit a thread for BN = 32) into a 64-byte-swizzled row whose step h half holds, at logical k 2t+e and
//   2t+8+e, the values k 8t+4h+e and 8t+4h+2+e -- the k the A fragment's lane t holds. 4x4 transpose of the
//   chunk's 4-byte words: permuted word 8h+4s+t = raw word 4t+2h+s.
// - The 8 K slices may be split over a cluster of SP = 1, 2 or 4 CTAs (rank r walks slices [8r/SP,
//   8(r+1)/SP)); ranks > 0 leave each slice partial in their shared memory and rank 0 adds them in slice
//   order through distributed shared memory after its own (the SP = 2 wgmma tiles' fold, generalised): a
//   64-row weight tile of a 4096-wide linear becomes 2-4 CTAs, so q/o/down fill the 132 SMs.
// - One producer lane issues the tensor-map loads into a ring of up to 16 stages (weights of the first
//   stages before griddepcontrol.wait); a stage is released as soon as every consumer has read it (the
//   A fragments are in registers, x is in the permuted buffer), so the ring holds only unread bytes.
//   ptxas serialises register-A wgmmas whose fragments are loaded while others are in flight, so the
//   consumers take 2 chunks a step (one wgmma group, one barrier, one wait) and 2 CTAs share an SM where
//   they fit (RsCfg::kTwo): one CTA's loads and barriers overlap the other's MMAs.
//
// Prediction (written before any run; H200, kernel time -- the bench tables add ~7 us of launch + sync;
// today's numbers from run 40 minus those 7 us). Model: DRAM 3.6-3.9 TB/s for W when >= ~40 KB of W is
// in flight per SM (here 56-128 KB: stages x 4 KB x CTAs an SM); L2 -> SM ~8 TB/s for W * m_tiles +
// x * n_tiles; a consumer step of 2 chunks ~250-300 clocks (waits, x permute, 4 A loads, barrier, 4 wgmmas
// and their latency) = 4 KB of W per ~80 ns per CTA, under the ~140 ns per 4 KB an SM (280 ns a CTA with
// two an SM) that 3.8 TB/s over 132 SMs asks for; MMA binds only at M = 256 of the wide shapes.
//   q/o 4096x4096 (16.8 MB):  M = 32 64x32s4 ~6 us (mid 11), M = 64 64x64s4 ~7 (mid 17), M = 128 64x64s2
//                             on two token tiles ~8 (mid 27), M = 256 64x128 ~12 (wgmma 35)
//   gate_up 24576x4096 (201 MB): M = 32 64x32 ~54 us (mid 61), M = 64 128x64 ~56 (mid 84), M = 128 128x128
//                             ~60 (wgmma 103), M = 256 ~95 (wgmma 142; MMA + L2: W twice, x by 192 tiles)
//   down 4096x12288 (50 MB):  M = 32 64x32s4 ~15 us (mid 36), M = 64 ~16 (mid 48), M = 128 ~20 (mid 73)
//   lm_head 151936x4096 (1.24 GB): M = 32 ~330 us (mid 355), M = 128 128x128 ~345 (wgmma 477)
// So M = 64-160 at about the M = 32 cost (what issue #8's mixed rounds need) and M = 32 10-60% faster.
// If a run shows the 64x32 tiles far from ~3.6 TB/s, compare 64x32 / 64x32s2 / 64x32s4 on q: equal and slow
// means the consumer step binds (then 4-chunk steps for BN = 32); s4 much faster than s1 means too few
// bytes in flight per SM (then deeper rings: 4-chunk stages of 128-byte rows).

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/mma.cuh"

namespace tf::cuda {
namespace {

constexpr int kSlices = 8;  // linear.cu's kWarps: part of the arithmetic
// Whether linear_bf16's Auto dispatch runs this kernel for M = 17..256: -1 where the policy says it is
// faster (default), 1 always, 0 never (set_linear_rs; TF_LINEAR_RS=0|1).
int g_rs = [] {
  const char* e = std::getenv("TF_LINEAR_RS");
  return e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : -1;
}();
RsTile g_rs_tile = RsTile::Auto;

// WG consumer warpgroups (64 weight rows each) x BN tokens, K slices split over SP CTAs of a cluster.
template <int WG, int BN, int SP>
struct RsCfg {
  static constexpr int kBM = 64 * WG;
  static constexpr int kConsumers = 128 * WG;
  static constexpr int kThreads = kConsumers + 32;  // + one producer warp (lane 0 issues the loads)
  static constexpr int kAcc = BN / 2;               // accumulator floats a consumer thread
  static constexpr int kWBytes = kBM * 64;          // one 32-chunk of W: kBM rows x 64 bytes
  static constexpr int kXBytes = BN * 64;
  static constexpr int kStage = kWBytes + kXBytes;  // multiples of 1024 (swizzle atoms, TMA boxes)
  // Chunks a consumer step (one wgmma group); one for 128x128, whose 168-register budget (3 warpgroups) the
  // second chunk's fragments would overflow.
  static constexpr int kGroup = WG == 2 && BN == 128 ? 1 : 2;
  static constexpr int kPerm = 2 * kGroup;  // permuted x buffers: two steps' worth (rs_consume)
  static constexpr int kPartBytes = SP > 1 ? kSlices / SP* kConsumers* kAcc * 4 : 0;
  static constexpr int kFixed = kPerm * kXBytes + kPartBytes + 1024;  // + 1 KB to align the stages
  // Two CTAs an SM when 6+ stages fit in half the shared memory and the registers allow it (ptxas budgets
  // whole warpgroups: 160 threads count as 256; a consumer needs ~BN + 56 registers).
  static constexpr bool kTwo =
      (112 * 1024 - kFixed) / kStage >= 6 && 2 * ((kThreads + 127) / 128 * 128) * (BN + 56) <= 65536;
  static constexpr int kStages = std::min(16, ((kTwo ? 112 : 225) * 1024 - kFixed) / kStage);
  static constexpr int kPermOff = kStages * kStage, kPartOff = kPermOff + kPerm * kXBytes;
  static constexpr int kSmem = kPartOff + kPartBytes + 1024;
  static_assert(kStages >= 4, "pipeline too shallow");
  static_assert(BN == 32 || BN == 64 || BN == 128, "wgmma_rs has these shapes");
  static_assert(SP == 1 || SP == 2 || SP == 4, "slices split evenly over the cluster");
};

// Producer (one lane): chunk i (of this CTA's chunks c_lo + i) into stage i % kStages: W's kBM rows and x's
// BN rows, 64 bytes each, rows past N / M zero-filled by the tensor maps. Weights of the first stages are
// constant and load before griddepcontrol.wait (they stream while the previous kernel drains), x after.
template <int WG, int BN, int SP>
__device__ __forceinline__ void rs_produce(const CUtensorMap* tmw, const CUtensorMap* tmx, int m0, int n0,
                                           int c_lo, int count, uint32_t sbase, uint32_t full,
                                           uint32_t empty) {
  using C = RsCfg<WG, BN, SP>;
  // The maps (kernel parameters) into the TMA unit's cache before the first loads need them.
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tmw)) : "memory");
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tmx)) : "memory");
  const int pre = min(count, C::kStages);
  for (int i = 0; i < pre; ++i) {
    mbar_arrive_expect_tx(full + 8 * i, C::kStage);
    tma_load_2d(sbase + i * C::kStage, tmw, (c_lo + i) * 32, n0, full + 8 * i);
  }
  pdl_wait();
  for (int i = 0; i < count; ++i) {
    const int s = i % C::kStages;
    const uint32_t st = sbase + s * C::kStage;
    if (i >= C::kStages) {
      mbar_wait(empty + 8 * s, ((i / C::kStages) & 1) ^ 1);
      mbar_arrive_expect_tx(full + 8 * s, C::kStage);
      tma_load_2d(st, tmw, (c_lo + i) * 32, n0, full + 8 * s);
    }
    tma_load_2d(st + C::kWBytes, tmx, (c_lo + i) * 32, m0, full + 8 * s);
  }
}

// Consumers: slices [si_lo, si_hi) of this tile, kGroup chunks a step (one chunk at a slice's odd end). Per
// chunk: wait for its stage, permute this thread's x units into the chunk's permuted buffer, load the A
// fragments. Then fence (own st.shared -> wgmma's async proxy), a barrier over the consumers (all of x is
// permuted; every read of the stages is done, so lane 0 of each warp releases them), the wgmmas of the
// step, commit, wait for them. ptxas serialises wgmmas whose register A is written while others are in
// flight (C7513), so each step waits for its own group; the step's chunks amortise that latency.
template <int WG, int BN, int SP>
__device__ __forceinline__ void rs_consume(float* acc, float* tot, float* part, int chunks, int si_lo,
                                           int si_hi, uint32_t sbase, uint32_t full, uint32_t empty) {
  using C = RsCfg<WG, BN, SP>;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4,
            t = lane % 4;
  const int c_lo = si_lo * chunks / kSlices;
  const uint32_t a_off = (64 * wg + 16 * warp + g) * 64 + 16 * t;  // row g of this warp's 16, k 8t..8t+7
  constexpr int kUnits = BN * 4, kPerThread = (kUnits + C::kConsumers - 1) / C::kConsumers;
  int step_no = 0;
  auto step = [&](int c, auto nc) {
    constexpr int NC = decltype(nc)::value;
    uint4 v[NC], u[NC];  // A fragments: rows g and g+8, k 8t..8t+7 of each chunk
    uint32_t pb[NC];
#pragma unroll
    for (int q = 0; q < NC; ++q) {
      const int i = c + q - c_lo, s = i % C::kStages;
      mbar_wait(full + 8 * s, (i / C::kStages) & 1);
      const uint32_t st = sbase + s * C::kStage;
      // Buffers of step parity: a step's buffers were last read two steps ago, whose wgmmas every warpgroup
      // finished before the previous step's barrier.
      pb[q] = sbase + C::kPermOff + ((step_no & 1) * C::kGroup + q) * C::kXBytes;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int unit = tid + j * C::kConsumers;
        if (kUnits % C::kConsumers == 0 || unit < kUnits) {
          const int row = unit / 4, tt = unit % 4, sw = (row >> 1) & 3;  // raw words 4tt..4tt+3 of the row
          const uint4 r = lds128(st + C::kWBytes + row * 64 + tt * 16);
          // raw word 4tt + e -> permuted word 4e + tt: unit e (swizzled: e ^ sw) of the 64-byte row
          const uint32_t d = pb[q] + row * 64 + tt * 4;
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(d + ((0 ^ sw) << 4)), "r"(r.x) : "memory");
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(d + ((1 ^ sw) << 4)), "r"(r.y) : "memory");
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(d + ((2 ^ sw) << 4)), "r"(r.z) : "memory");
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(d + ((3 ^ sw) << 4)), "r"(r.w) : "memory");
        }
      }
      v[q] = lds128(st + a_off);
      u[q] = lds128(st + a_off + 8 * 64);
    }
    fence_proxy_async();
    asm volatile("bar.sync 1, %0;" ::"n"(C::kConsumers) : "memory");
    if (lane == 0)
#pragma unroll
      for (int q = 0; q < NC; ++q) mbar_arrive(empty + 8 * ((c + q - c_lo) % C::kStages));
    wgmma_fence_operands<C::kAcc>(acc);
    wgmma_fence();
#pragma unroll
    for (int q = 0; q < NC; ++q) {  // step h of the chunk: words 2h, 2h + 1 of rows g and g + 8
      const uint32_t a_h0[4] = {v[q].x, u[q].x, v[q].y, u[q].y}, a_h1[4] = {v[q].z, u[q].z, v[q].w, u[q].w};
      wgmma_rs<BN>(acc, a_h0, desc_sw64(pb[q]));
      wgmma_rs<BN>(acc, a_h1, desc_sw64(pb[q] + 32));
    }
    wgmma_commit();
    wgmma_fence_operands<C::kAcc>(acc);
    wgmma_wait<0>();
    wgmma_fence_operands<C::kAcc>(acc);
    ++step_no;
  };
  int c = c_lo;
  for (int si = si_lo; si < si_hi; ++si) {
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.f;
    const int c_end = (si + 1) * chunks / kSlices;
    for (; c + C::kGroup <= c_end; c += C::kGroup) step(c, std::integral_constant<int, C::kGroup>{});
    for (; c < c_end; ++c) step(c, std::integral_constant<int, 1>{});
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) {
      if (si_lo == 0)  // rank 0 (or no split): the running fold, assigned at slice 0 like linear.cu's red[0]
        tot[i] = si == 0 ? acc[i] : tot[i] + acc[i];
    }
    if (si_lo != 0)  // ranks > 0: each slice partial for rank 0's fold, 4 elements a 16-byte word
#pragma unroll
      for (int i4 = 0; i4 < C::kAcc / 4; ++i4)
        reinterpret_cast<float4*>(part)[((si - si_lo) * (C::kAcc / 4) + i4) * C::kConsumers + tid] =
            make_float4(acc[4 * i4], acc[4 * i4 + 1], acc[4 * i4 + 2], acc[4 * i4 + 3]);
  }
}

// Rank 0 (or the only CTA): tot (its slices folded) + the other ranks' slice partials in slice order
// (linear.cu's `s += red[q]` sequence), then the bias and the store. Element i = 4j + e: weight row
// 64wg + 16warp + g + 8(e/2), token 8j + 2t + e%2. The partials come as 16-byte distributed-shared-memory
// loads, kBatch groups of 4 elements' worth issued together (one remote latency a batch, not one an add).
template <int WG, int BN, int SP>
__device__ __forceinline__ void rs_store(const float* tot, uint32_t part, const void* __restrict__ bias,
                                         int bias_kind, void* __restrict__ y, bool y_f32, int m, int n,
                                         int m0, int n0) {
  using C = RsCfg<WG, BN, SP>;
  constexpr int kPeers = SP - 1, kQ = kSlices / SP, kBatch = SP == 2 ? 2 : 1;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4,
            t = lane % 4;
  uint32_t peer[kPeers > 0 ? kPeers : 1] = {};
#pragma unroll
  for (int r = 0; r < kPeers; ++r) peer[r] = peer_addr(part, r + 1);
#pragma unroll
  for (int i0 = 0; i0 < C::kAcc; i0 += 4 * kBatch) {
    float4 p[kBatch][kPeers > 0 ? kPeers : 1][kQ];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
#pragma unroll
      for (int r = 0; r < kPeers; ++r)
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
          const uint32_t a = peer[r] + ((q * (C::kAcc / 4) + i0 / 4 + b) * C::kConsumers + tid) * 16;
          asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                       : "=f"(p[b][r][q].x), "=f"(p[b][r][q].y), "=f"(p[b][r][q].z), "=f"(p[b][r][q].w)
                       : "r"(a)
                       : "memory");
        }
#pragma unroll
    for (int ii = 0; ii < 4 * kBatch; ++ii) {
      const int i = i0 + ii, j = i / 4, e = i % 4;
      const int col = n0 + 64 * wg + 16 * warp + g + 8 * (e / 2), row = m0 + 8 * j + 2 * t + e % 2;
      float s = tot[i];
#pragma unroll
      for (int r = 0; r < kPeers; ++r)
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
          const float4& v = p[ii / 4][r][q];
          s += e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
        }
      if (row < m && col < n) store_biased(s, bias, bias_kind, y, y_f32, row, col, n);
    }
  }
}

template <int WG, int BN, int SP>
__global__ void __launch_bounds__(RsCfg<WG, BN, SP>::kThreads, RsCfg<WG, BN, SP>::kTwo ? 2 : 1)
    linear_rs_kernel(const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m,
                     int n, int k, int m_tiles, const __grid_constant__ CUtensorMap tmw,
                     const __grid_constant__ CUtensorMap tmx) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = RsCfg<WG, BN, SP>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[2 * C::kStages];  // full[s], empty[s]
  const uint32_t pad = smem_pad1k(smem_raw);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + pad;
  const uint32_t full = static_cast<uint32_t>(__cvta_generic_to_shared(bars)), empty = full + 8 * C::kStages;
  const uint32_t rank = SP > 1 ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(full + 8 * s, 1);        // the producer's arrive.expect_tx (+ the stage's bytes)
      mbar_init(empty + 8 * s, 4 * WG);  // lane 0 of every consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();
  pdl_launch_dependents();
  // Token tiles vary fastest: the CTAs that share a weight tile run together (W from DRAM once). A cluster
  // is the SP slice ranges of one tile.
  const int tile = int(blockIdx.x) / SP;
  const int m0 = (tile % m_tiles) * BN, n0 = (tile / m_tiles) * C::kBM;
  const int chunks = k / 32, si_lo = int(rank) * (kSlices / SP), si_hi = si_lo + kSlices / SP;
  const int c_lo = si_lo * chunks / kSlices, c_hi = si_hi * chunks / kSlices;
  float* part = reinterpret_cast<float*>(smem_raw + pad + C::kPartOff);
  float tot[C::kAcc];
  if (threadIdx.x >= C::kConsumers) {
    if (threadIdx.x == C::kConsumers)
      rs_produce<WG, BN, SP>(&tmw, &tmx, m0, n0, c_lo, c_hi - c_lo, sbase, full, empty);
  } else {
    float acc[C::kAcc];
    rs_consume<WG, BN, SP>(acc, tot, part, chunks, si_lo, si_hi, sbase, full, empty);
  }
  if constexpr (SP > 1) cluster_sync();  // the partials of ranks > 0 are in their shared memory
  if (rank == 0 && threadIdx.x < C::kConsumers)
    rs_store<WG, BN, SP>(tot, static_cast<uint32_t>(__cvta_generic_to_shared(part)), bias, bias_kind, y,
                         y_f32, m, n, m0, n0);
  if constexpr (SP > 1) cluster_sync();  // no CTA leaves while rank 0 may still read its partials
#else
  __trap();  // built for another architecture: linear_wgmma_supported() keeps callers away
#endif
}

// Tensor maps by (base, rows, k, box rows): a map holds only those, so a cached one equals a fresh encoding;
// eager calls then skip the host-side encoder for the weights (fixed) and the reused activation buffers.
// False when the map cannot be encoded.
bool cached_map(CUtensorMap* out, const void* base, int rows, int k, int box_rows) {
  struct Key {
    const void* base;
    int rows, k, box;
    bool operator==(const Key& o) const {
      return std::tie(base, rows, k, box) == std::tie(o.base, o.rows, o.k, o.box);
    }
  };
  struct Hash {
    size_t operator()(const Key& key) const {
      return std::hash<const void*>()(key.base) ^ (size_t(key.rows) << 20) ^ (size_t(key.k) << 40) ^
             size_t(key.box);
    }
  };
  struct Entry {
    CUtensorMap map;
    bool ok;
  };
  static std::mutex mu;
  static std::unordered_map<Key, Entry, Hash> maps;
  std::lock_guard<std::mutex> lock(mu);
  const Key key{base, rows, k, box_rows};
  auto it = maps.find(key);
  if (it == maps.end()) {
    if (maps.size() >= 4096) maps.clear();  // bounded: activations may come from many buffers
    Entry e{};
    e.ok = make_linear_tensor_map(&e.map, base, rows, k, box_rows, false);
    it = maps.emplace(key, e).first;
  }
  *out = it->second.map;
  return it->second.ok;
}

template <int WG, int BN, int SP>
bool launch_rs(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m,
               int n, int k, cudaStream_t s) {
  using C = RsCfg<WG, BN, SP>;
  CUtensorMap tmw{}, tmx{};
  if (!cached_map(&tmw, w, n, k, C::kBM) || !cached_map(&tmx, x, m, k, BN)) return false;
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(linear_rs_kernel<WG, BN, SP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    return true;
  }();
  (void)configured;
  const int m_tiles = (m + BN - 1) / BN, n_tiles = (n + C::kBM - 1) / C::kBM;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(m_tiles * n_tiles * SP);
  cfg.blockDim = dim3(C::kThreads);
  cfg.dynamicSmemBytes = C::kSmem, cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int na = 0;
  if (pdl_enabled()) {
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (SP > 1) {
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = SP, attr[na].val.clusterDim.y = 1, attr[na++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr, cfg.numAttrs = na;
  TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_rs_kernel<WG, BN, SP>, bias, bias_kind, y, y_f32, m, n, k,
                                   m_tiles, tmw, tmx));
  return true;
}

}  // namespace

// Auto (a guess until the bench's rs rows are measured): tokens a CTA = 32 / 64 / 128 by M (M > 128: tiles of
// 128). Wide weights (gate_up, lm_head: N >= 16384) have tiles enough, and from 64 tokens on 128 weight rows
// a CTA halve x's L2 traffic (gate_up M = 128 with 64 rows: 403 MB of x against 201 MB of W). Narrow ones
// (q/o/down, N = 4096: 64 tiles of 64 rows) split the K slices over 2 or 4 CTAs so that every SM streams;
// at M = 65..128 as two 64-token tiles with the slices split in 2 (256 CTAs of 16 stages) rather than
// 64x128s2, whose partials leave room for only 5 stages.
RsTile linear_rs_auto_tile(int m, int n) {
  int bn = m <= 32 ? 32 : m <= 64 ? 64 : 128;
  if (n >= 16384) return bn == 32 ? RsTile::W64T32 : bn == 64 ? RsTile::W128T64 : RsTile::W128T128;
  const long n_tiles = (n + 63) / 64;
  if (bn == 128) {
    if ((m + 127) / 128 * n_tiles >= 100) return RsTile::W64T128;
    bn = 64;
  }
  const long tiles = (m + bn - 1) / bn * n_tiles;
  const int sp = tiles >= 200 ? 1 : tiles >= 100 ? 2 : 4;
  if (bn == 32) return sp == 1 ? RsTile::W64T32 : sp == 2 ? RsTile::W64T32S2 : RsTile::W64T32S4;
  return sp == 1 ? RsTile::W64T64 : sp == 2 ? RsTile::W64T64S2 : RsTile::W64T64S4;
}

bool linear_rs_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y, DType y_dtype,
                    int m, int n, int k, cudaStream_t s) {
  TF_CHECK(k % 32 == 0, "CUDA linear needs in_features divisible by 32, got " + std::to_string(k));
  TF_CHECK(linear_wgmma_supported(),
           "the wgmma linear needs an sm_90 GPU (H100/H200) and a build with CUDA architecture 90a");
  if (m <= 0 || n <= 0) return true;
  const int bk = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool f = y_dtype == DType::F32;
  RsTile tile = g_rs_tile;
  if (tile == RsTile::Auto && g_rs < 0) tile = linear_rs_policy_tile(m, n);
  if (tile == RsTile::Auto) tile = linear_rs_auto_tile(m, n);
  switch (tile) {
    case RsTile::Auto:
    case RsTile::W64T32:
      return launch_rs<1, 32, 1>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T32S2:
      return launch_rs<1, 32, 2>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T32S4:
      return launch_rs<1, 32, 4>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T64:
      return launch_rs<1, 64, 1>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T64S2:
      return launch_rs<1, 64, 2>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T64S4:
      return launch_rs<1, 64, 4>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T128:
      return launch_rs<1, 128, 1>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T128S2:
      return launch_rs<1, 128, 2>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W64T128S4:
      return launch_rs<1, 128, 4>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W128T64:
      return launch_rs<2, 64, 1>(x, w, bias, bk, y, f, m, n, k, s);
    case RsTile::W128T128:
      return launch_rs<2, 128, 1>(x, w, bias, bk, y, f, m, n, k, s);
  }
  return false;
}

// Run 54 (tf_linear_once, 8B shapes, H200; bench/cuda/results/run54-rs-bench.log): the streaming kernel
// against the kernels linear_bf16 picks today, best tile: lm_head M = 32 315 vs 361 us (64x32), M = 64 346 vs
// 491 us (128x64); gate_up M = 64 80 vs 91 us (128x64); q/o M = 256 43 vs 60 us, down 103 vs 149 us (128x64).
// Everywhere else it lost (q/o/down at M = 32..128 by 20-45%, gate_up and lm_head at M = 128..256).
RsTile linear_rs_policy_tile(int m, int n) {
  if (n >= 100000 && m >= kRsMinM && m <= 32) return RsTile::W64T32;
  if (n >= 16384 && m >= 33 && m <= 64) return RsTile::W128T64;
  if (n < 16384 && m >= 192 && m <= kRsMaxM) return RsTile::W128T64;
  return RsTile::Auto;
}

void set_linear_rs(bool on) {
  g_rs = on ? 1 : 0;
}

void reset_linear_rs() {
  g_rs = -1;
}

bool linear_rs_enabled() {
  return g_rs == 1;
}

bool linear_rs_takes(int m, int n) {
  if (g_rs == 0 || m < kRsMinM || m > kRsMaxM || !linear_wgmma_supported()) return false;
  return g_rs == 1 || linear_rs_policy_tile(m, n) != RsTile::Auto;
}

void set_linear_rs_tile(RsTile tile) {
  g_rs_tile = tile;
}

const char* rs_tile_name(RsTile tile) {
  switch (tile) {
    case RsTile::Auto:
      return "auto";
    case RsTile::W64T32:
      return "64x32";
    case RsTile::W64T32S2:
      return "64x32s2";
    case RsTile::W64T32S4:
      return "64x32s4";
    case RsTile::W64T64:
      return "64x64";
    case RsTile::W64T64S2:
      return "64x64s2";
    case RsTile::W64T64S4:
      return "64x64s4";
    case RsTile::W64T128:
      return "64x128";
    case RsTile::W64T128S2:
      return "64x128s2";
    case RsTile::W64T128S4:
      return "64x128s4";
    case RsTile::W128T64:
      return "128x64";
    case RsTile::W128T128:
      return "128x128";
  }
  return "?";
}

}  // namespace tf::cuda
