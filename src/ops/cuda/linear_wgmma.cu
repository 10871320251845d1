// Prefill linear on Hopper warpgroup MMAs (wgmma, sm_90a) for issue #6: the per-element arithmetic of
// linear.cu (read its header) on m64nNk16 instead of m16n8k16. bench/cuda/wgmma_probe.cu showed that one
// wgmma k16 step rounds bit for bit like one mma.sync m16n8k16 step on the same 16 k-values, and that the
// order of the 16 values inside a step does not matter, only which 16 a step gets.
//
// What a step gets (linear.cu's in-chunk permutation): step h (0/1) of 32-chunk c takes, per row, the
// k-values c*32 + 8u + 4h + j (u, j = 0..3), i.e. the 8-byte pieces at byte 0, 16, 32, 48 (h = 0) or
// 8, 24, 40, 56 (h = 1) of the row's 64-byte chunk. The producer copies them with 8-byte cp.async straight
// into the no-swizzle core-matrix layout wgmma reads (a core matrix: 8 rows x 16 bytes): logical k of
// step h = the four pieces u = 0..3 in order, so core-matrix K half kh holds pieces u = 2kh, 2kh + 1. One
// warp instruction moves 8 rows x 32 bytes (one K half of the chunk, both steps): 8 fully used global
// sectors, and in shared memory two whole 128-byte core matrices (one per step), no bank conflict.
// TMA cannot do this (its global strides are multiples of 16 bytes), and a 128B-swizzled layout would
// only change where the same pieces land; the core matrices here are 128 contiguous bytes each, which
// wgmma reads conflict-free without a swizzle.
//
// CTA: WGS consumer warpgroups (64 weight rows each: the M = 64 operand A) x BN tokens (operand B, shared
// by the consumers), plus one producer warpgroup. The stages are 32-chunks (2 k16 steps); the producer
// fills a ring of kStages of them with cp.async, each completion tracked by its `full` mbarrier
// (cp.async.mbarrier.arrive.noinc); a consumer warp releases a stage (`empty` mbarrier) once
// wgmma.wait_group shows its MMAs done. The consumers keep one wgmma group in flight while they wait for
// the next stage, so loads, MMAs and the next issue overlap; no __syncthreads in the main loop.
//
// Per element, as in linear.cu: slice si of 8 covers chunks [si*C/8, (si+1)*C/8) (C = K/32), its chain
// starts from +0 (zeroed accumulator, scale-d = 1, like mma.sync from a zeroed accumulator), and the
// slice partials are folded in slice order into `tot` (assigned for slice 0, added after; an empty slice
// adds +0), then the bias, then the rounding. Slices are a function of K only, so slice ends are stage
// ends. With BN = 256 the 128 accumulators leave no room for 128 more `tot` registers: tot lives in
// shared memory then (each thread its own 128 words, touched 8 times a tile).
//
// Tiles (WgmmaTile): 64/128 weight rows x 64/128/192/256 tokens; 2-CTA cluster variants that share the
// x tile between two weight tiles (CL = 2, produce()) or split one tile's slices 4 + 4 (SP = 2,
// consume()). Every tile gives every element the same arithmetic; Auto picks by the grid size.
//
// The pipeline's device code (Cfg, the producers, consume) is in wgmma_pipeline.cuh, shared with
// moe_wgmma.cu; this file holds the kernel, the tensor maps, the per-call permutations and the dispatch. MLX
// 4-bit weights (linear_wgmma_mlx4) take the 128-row tiles with produce_q4 (W dequantized into the stages).
#include <cuda.h>  // CUtensorMap (the encoder comes through cudaGetDriverEntryPointByVersion)
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/error.h"
#include "ops/cuda/activation.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/wgmma_pipeline.cuh"

namespace tf::cuda {
namespace {

WgmmaTile g_tile = WgmmaTile::Auto;
WgmmaProducer g_producer = WgmmaProducer::Auto;
// Raw tiles: 64-byte swizzled stages (set_linear_wgmma_swizzle), on since run 31: with permute_row's lane
// order their permutation stores are conflict-free (the no-swizzle layout's are 2-way).
bool g_swizzle = true;
// Auto's producer for the raw tiles: TmaX (x permuted once, tensor-map loads; run 32: 1.2-1.4x Raw on every
// 8B shape from M = 512, e.g. 4096x24576x4096 2.38 -> 1.69 ms) or Raw (16-byte cp.async).
constexpr bool kAutoTmaX = true;
// Auto takes TmaXW (W permuted per call too) from this M on (0: never; TF_WGMMA_WPERM_MIN_M=<m>), for weights
// up to kWPermMaxBytes (the permuted copy lives in a per-stream buffer that only grows). Run 61 (8B shapes,
// permute included): at M = 4096 q/o 347 -> 319 us, gate_up 1,703 -> 1,619, down 945 -> 909; at M = 1024 it
// lost (485 -> 569 us for gate_up): the per-call permute of W is paid back by 4 tiles of 1,024 rows.
int g_wperm_min_m = [] {
  const char* v = std::getenv("TF_WGMMA_WPERM_MIN_M");
  return v ? std::atoi(v) : 4096;
}();
constexpr size_t kWPermMaxBytes = size_t(256) << 20;
bool g_clusters = false;  // Auto considers the cluster tiles (off until the device run confirms them)
// The TmaXW 128x128 / 128x192 tiles stage 128-byte rows (Cfg WP = 2); TF_WGMMA_ROWS128=0: 64-byte rows.
bool g_rows128 = [] {
  const char* v = std::getenv("TF_WGMMA_ROWS128");
  return !v || std::atoi(v) != 0;
}();

using namespace wgp;  // the pipeline's device code (wgmma_pipeline.cuh)

template <int WGS, int BN, int CL, int SP, bool TMA, bool SWZ, int WP = 0>
__global__ void __launch_bounds__(Cfg<WGS, BN, CL, SP>::kThreads, 1)
    linear_wgmma_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                        const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m,
                        int n, int k, int m_tiles, const __grid_constant__ CUtensorMap tmw,
                        const __grid_constant__ CUtensorMap tmx, int xp, const uint32_t* __restrict__ qs,
                        int qshift) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Cfg<WGS, BN, CL, SP, WP>;
  static_assert(!TMA || C::kRaw, "TMA feeds the raw-staging producer");
  static_assert(!SWZ || C::kRaw, "only the raw-staging producer writes the swizzled layout");
  constexpr bool kCluster = CL == 2 || SP == 2;
  // CL = 2: half[s]; TMA: raw[slot] then raw_free[slot].
  constexpr int kAux = C::kStages > 2 * C::kRawSlots ? C::kStages : 2 * C::kRawSlots;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // full[s], empty[s], then half[s] (CL = 2) or raw[slot] (TMA)
  __shared__ __align__(8) uint64_t bars[2 * C::kStages + kAux];
  // Stages 1024-byte aligned (swizzle atoms, TMA boxes) whatever the static shared memory before them.
  unsigned char* smem = smem_raw + smem_pad1k(smem_raw);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
  const uint32_t empty = full + 8 * C::kStages, half = empty + 8 * C::kStages;
  const uint32_t rank = kCluster ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      // producer threads' arrives (+ the expect_tx for the peer's bytes; TMA: the 64 permuters)
      // xp 1: + x's expect_tx arrive; xp 2: only the loading thread's expect_tx arrive
      // WP >= kWpQ4: the 128 producer threads' arrives + thread 0's expect_tx arrive for x
      mbar_init(full + 8 * s, C::kQ4 ? 129 : TMA ? (xp == 2 ? 1 : 64 + (xp ? 1 : 0)) : 128 + (CL == 2));
      mbar_init(empty + 8 * s, 4 * WGS * CL);  // lane 0 of every consumer warp (of both CTAs)
      if constexpr (CL == 2) mbar_init(half + 8 * s, 128);
    }
    if constexpr (TMA)
      for (int r = 0; r < C::kRawSlots; ++r) {
        mbar_init(half + 8 * r, 1);                    // thread 0's arrive.expect_tx
        mbar_init(half + 8 * (C::kRawSlots + r), 64);  // the permuters' release
      }
    if constexpr (kCluster) mbar_init_fence();
  }
  if constexpr (kCluster)
    cluster_sync();  // the peer's barriers exist before anyone arrives on them
  else
    __syncthreads();
  pdl_launch_dependents();
  // Token tiles vary fastest: the CTAs that share a weight tile run together (L2 reuse of W). A cluster
  // is two neighbouring weight tiles of one token tile.
  // With SP = 2 both CTAs of a cluster take the same tile (and half of K's slices each).
  const int tile = kCluster ? int(blockIdx.x) / 2 : int(blockIdx.x);
  const int m0 = (tile % m_tiles) * BN, n0 = ((tile / m_tiles) * CL + (CL == 2 ? int(rank) : 0)) * C::kBM;
  const int chunks = k / 32, c_lo = SP == 2 ? 4 * int(rank) * chunks / kSlices : 0;
  const int c_hi = SP == 2 ? (4 * int(rank) + 4) * chunks / kSlices : chunks;
  if (threadIdx.x / 128 == WGS) {
    if constexpr (WGS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
    if constexpr (C::kQ4)
      produce_q4<WGS, BN, WP>(reinterpret_cast<const uint8_t*>(w), qs, qshift, n, k, m0, n0, sbase, full,
                              empty, &tmx);
    else if constexpr (C::kRaw)
      produce_raw<WGS, BN, SP, TMA, SWZ, WP>(x, w, m, n, k, m0, n0, sbase, full, empty, c_lo, c_hi - c_lo,
                                             half, &tmw, &tmx, xp);
    else
      produce<WGS, BN, CL, SP>(x, w, m, n, k, m0, n0, sbase, full, empty, half, rank, c_lo, c_hi - c_lo);
    if constexpr (SP == 2) cluster_sync();  // pairs with the consumers' barrier before the fold
  } else {
    if constexpr (WGS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    float* tot_smem = reinterpret_cast<float*>(smem + C::kTotOff);
    float* part = reinterpret_cast<float*>(smem + C::kPartOff);
    consume<WGS, BN, CL, SP, SWZ, WP>(bias, bias_kind, y, y_f32, m, n, k, m0, n0, sbase, tot_smem, part, full,
                                      empty, rank);
  }
  if constexpr (kCluster) cluster_sync();  // no CTA leaves while its peer may still signal, copy or read
#else
  __trap();  // built for another architecture: linear_wgmma_supported() keeps callers away
#endif
}

// cuTensorMapEncodeTiled through the runtime (no libcuda link); null when the driver lacks it.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return EncodeTiled(nullptr);
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A [rows, k] bf16 row-major matrix as 2D tensor map with boxes of box_cols elements (32: one chunk, 64: the
// 128-byte rows of two) x box_rows.
bool make_map(CUtensorMap* map, const void* base, int rows, int k, int box_rows,
              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE, int box_cols = 32) {
  const EncodeTiled fn = encode_tiled();
  if (!fn || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)}, strides[1] = {cuuint64_t(k) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)}, elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// x with each 32-chunk's 8-byte pieces in stage order: P0 P2 P4 P6 | P1 P3 P5 P7 (piece i = k 4i..4i+3), i.e.
// step 0's k-values (unit t's first 8 bytes, t = 0..3) then step 1's: the raw producer's permutation done
// once for the whole x instead of in every CTA that reads the tile (WgmmaProducer::TmaX).
// One thread a 16-byte unit (unit u = idx % 4 of chunk idx / 4), so that a warp loads and stores 512
// contiguous bytes an instruction (run 125: the thread-a-chunk version moved 2.4 TB/s, 16.5 ms of a 4k
// prefill); the four units of a chunk are in one quad, and thread u makes output unit u from the 8-byte
// halves of two of them by shuffles: out0 = in0.lo in1.lo, out1 = in2.lo in3.lo, out2 = in0.hi in1.hi,
// out3 = in2.hi in3.hi. SILU: x is the MLP's gate_up [m, 2k] and the permuted rows are bf16(silu(g) * u)
// (activation.cuh: silu_mul's values), so the down projection's x never goes through memory unpermuted.
// GATHER: output row r is input row rows[r] (the grouped experts' slots).
template <bool SILU, bool GATHER = false>
__global__ void permute_x_kernel(const uint4* x, uint4* xp, int64_t units, int k_units,
                                 const int32_t* __restrict__ rows = nullptr) {
  pdl_enter();
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const bool live = idx < units;
  uint4 in = make_uint4(0, 0, 0, 0);
  if (live) {
    if constexpr (SILU || GATHER) {
      int64_t row = idx / k_units;  // unit j of the row's k / 8
      const int64_t j = idx % k_units;
      if constexpr (GATHER) row = rows[row];
      if constexpr (SILU)
        in =
            silu_mul_unit(ld_act16(x + row * 2 * k_units + j), ld_act16(x + row * 2 * k_units + k_units + j));
      else
        in = ld_act16(x + row * k_units + j);
    } else {
      in = ld_act16(x + idx);
    }
  }
  // Units a and a + 1 of the quad (a = 0 for u = 0, 2; 2 for u = 1, 3); their low halves for u < 2.
  const int lane = threadIdx.x % 32, u = lane % 4, a = lane - u + 2 * (u % 2);
  constexpr unsigned kAll = 0xffffffffu;
  const uint32_t ax = __shfl_sync(kAll, in.x, a), ay = __shfl_sync(kAll, in.y, a),
                 az = __shfl_sync(kAll, in.z, a), aw = __shfl_sync(kAll, in.w, a),
                 bx = __shfl_sync(kAll, in.x, a + 1), by = __shfl_sync(kAll, in.y, a + 1),
                 bz = __shfl_sync(kAll, in.z, a + 1), bw = __shfl_sync(kAll, in.w, a + 1);
  if (live) xp[idx] = u < 2 ? make_uint4(ax, ay, bx, by) : make_uint4(az, aw, bz, bw);
}

// Whether permuted_rows can copy p on s: not while s captures a graph (no allocation there), and p 16-byte
// aligned.
bool can_permute(const void* p, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone &&
         reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The permuted copy of x (or of W: which = 1), in a buffer per (device, stream, which) that only grows: calls
// on one stream reuse it in stream order; two streams (two backends, a draft model's and the target's) never
// share one. Null while the stream is capturing a graph (no allocation there) or when x is not 16-byte
// aligned. which: 0 = x's buffer, 1 = W's (WgmmaProducer::TmaXW: the weight permuted the same way, per call).
// silu: x is a gate_up [m, 2k] and the rows permuted are silu_mul's (permute_x_kernel<true>). rows: output
// row r is x's row rows[r] (not with silu).
const void* permuted_rows(const void* x, int m, int k, cudaStream_t s, int which = 0, bool silu = false,
                          const int32_t* rows = nullptr) {
  if (!can_permute(x, s)) return nullptr;
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
  };
  static std::mutex mu;
  static std::map<std::tuple<int, cudaStream_t, int>, Buf> bufs;
  int dev = 0;
  TF_CUDA_CHECK(cudaGetDevice(&dev));
  const size_t bytes = size_t(m) * k * 2;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    Buf& b = bufs[{dev, s, which}];
    if (bytes > b.cap) {
      if (b.p) TF_CUDA_CHECK(cudaFree(b.p));  // waits for the work that may still read it
      b.cap = bytes + bytes / 4;
      TF_CUDA_CHECK(cudaMalloc(&b.p, b.cap));
    }
    p = b.p;
  }
  const int64_t units = int64_t(m) * (k / 8);
  TF_CHECK(!(silu && rows), "permuted_rows: silu rows are not gathered");
  launch_pdl(silu   ? permute_x_kernel<true>
             : rows ? permute_x_kernel<false, true>
                    : permute_x_kernel<false>,
             unsigned((units + 255) / 256), 256, 0, s, static_cast<const uint4*>(x), static_cast<uint4*>(p),
             units, k / 8, rows);
  return p;
}

template <int WGS, int BN, int CL, int SP, bool TMA, bool SWZ, int WP = 0>
void launch_with(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m,
                 int n, int k, cudaStream_t s, const CUtensorMap& tmw, const CUtensorMap& tmx, int xp = 0,
                 const uint32_t* qs = nullptr, int qshift = 0) {
  using C = Cfg<WGS, BN, CL, SP, WP>;
  static const bool configured = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(linear_wgmma_kernel<WGS, BN, CL, SP, TMA, SWZ, WP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    return true;
  }();
  (void)configured;
  const int m_tiles = (m + BN - 1) / BN, n_tiles = (n + C::kBM - 1) / C::kBM;
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  if constexpr (CL == 1 && SP == 1) {
    launch_pdl(linear_wgmma_kernel<WGS, BN, 1, 1, TMA, SWZ, WP>, dim3(m_tiles * n_tiles), dim3(C::kThreads),
               C::kSmem, s, xb, wb, bias, bias_kind, y, y_f32, m, n, k, m_tiles, tmw, tmx, xp, qs, qshift);
  } else {  // clusters: two weight tiles (CL; an odd last one computes clamped rows, all masked) or one
            // tile twice (SP)
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(CL == 2 ? m_tiles * ((n_tiles + 1) / 2) * 2 : m_tiles * n_tiles * 2);
    cfg.blockDim = dim3(C::kThreads);
    cfg.dynamicSmemBytes = C::kSmem, cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_wgmma_kernel<WGS, BN, CL, SP, TMA, SWZ, WP>, xb, wb, bias,
                                     bias_kind, y, y_f32, m, n, k, m_tiles, tmw, tmx, xp, qs, qshift));
  }
}

// The producer: TMA raw rows where the tile stages raw rows and Tma is set (the maps must encode); else
// 16-byte cp.async (raw tiles; Auto until the TMA path is measured) or the tile's 8-byte path.
// silu: x is a gate_up [m, 2k] whose silu_mul is the input (only the permuted-x producers, which
// linear_wgmma_silu_bf16 makes sure of).
template <int WGS, int BN, int CL = 1, int SP = 1>
void launch(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m, int n,
            int k, cudaStream_t s, bool silu = false) {
  using C = Cfg<WGS, BN, CL, SP>;
  CUtensorMap tmw{}, tmx{};
  if constexpr (C::kRaw && SP == 2) {  // the split tiles: 16-byte cp.async, swizzled (fewer kernels)
    return launch_with<WGS, BN, CL, SP, false, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
  } else if constexpr (C::kRaw) {
    if (g_producer == WgmmaProducer::TmaX || g_producer == WgmmaProducer::TmaXW ||
        (g_producer == WgmmaProducer::Auto && kAutoTmaX)) {
      // TmaXW: W permuted per call as well (its bytes read and written once more: pays for large M only).
      const bool wperm =
          g_producer == WgmmaProducer::TmaXW || (g_producer == WgmmaProducer::Auto && g_wperm_min_m > 0 &&
                                                 m >= g_wperm_min_m && size_t(n) * k * 2 <= kWPermMaxBytes);
      const void* wpp = wperm ? permuted_rows(w, n, k, s, 1) : nullptr;  // null: capture, or W unaligned
      // W's map first (permuted for TmaXW, raw rows for TmaX): x is permuted (a kernel launch), once, only
      // when a tensor-map launch can follow.
      const bool wmap = wpp ? make_map(&tmw, wpp, n, k, C::kBM, CU_TENSOR_MAP_SWIZZLE_64B)
                            : make_map(&tmw, w, n, k, C::kBM);
      const void* xp = wmap ? permuted_rows(x, m, k, s, 0, silu) : nullptr;  // null: capture
      const bool xmap = xp && make_map(&tmx, xp, m, k, BN, CU_TENSOR_MAP_SWIZZLE_64B);
      TF_CHECK(!silu || xmap, "wgmma linear: the silu input needs the permuted-x producer");
      TF_CHECK(
          g_producer != WgmmaProducer::TmaXW || (wpp && xmap) || !can_permute(w, s) || !can_permute(x, s),
          "wgmma linear: TmaXW producer forced but W's or x's tensor map could not be made");
      // Two-warpgroup 128- and 192-token tiles: 128-byte rows (WP = 2; TF_WGMMA_ROWS128=0 keeps 64-byte
      // ones).
      if constexpr (WGS == 2 && (BN == 128 || BN == 192) && CL == 1 && SP == 1) {
        CUtensorMap tmw2{}, tmx2{};
        if (xmap && wpp && g_rows128 && make_map(&tmw2, wpp, n, k, C::kBM, CU_TENSOR_MAP_SWIZZLE_128B, 64) &&
            make_map(&tmx2, xp, m, k, BN, CU_TENSOR_MAP_SWIZZLE_128B, 64))
          return launch_with<WGS, BN, CL, SP, true, true, 2>(x, w, bias, bias_kind, y, y_f32, m, n, k, s,
                                                             tmw2, tmx2, 2);
      }
      if (xmap && wpp)
        return launch_with<WGS, BN, CL, SP, true, true, 1>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw,
                                                           tmx, 2);
      if (xmap)
        return launch_with<WGS, BN, CL, SP, true, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx,
                                                        1);
    }
    if (g_swizzle && g_producer == WgmmaProducer::Tma && make_map(&tmw, w, n, k, C::kBM) &&
        make_map(&tmx, x, m, k, BN))
      return launch_with<WGS, BN, CL, SP, true, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
    TF_CHECK(g_producer != WgmmaProducer::Tma || !g_swizzle,
             "wgmma linear: TMA producer forced but no tensor map");
    if (g_swizzle)
      return launch_with<WGS, BN, CL, SP, false, true>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
    launch_with<WGS, BN, CL, SP, false, false>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
  } else {
    launch_with<WGS, BN, CL, SP, false, false>(x, w, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx);
  }
}

// The tiles whose producers permute x once per call (the raw tiles), so that a silu input can ride along.
bool reads_permuted_x(WgmmaTile tile) {
  return tile == WgmmaTile::W64T64 || tile == WgmmaTile::W64T128 || tile == WgmmaTile::W128T64 ||
         tile == WgmmaTile::W128T128 || tile == WgmmaTile::W128T192;
}

// One call on `tile`; silu (only for reads_permuted_x tiles): x is a gate_up whose silu_mul is the input.
void launch_tile(WgmmaTile tile, const void* x, const void* w, const void* bias, int bias_kind, void* y,
                 bool f32, int m, int n, int k, cudaStream_t s, bool silu = false) {
  switch (tile) {
    case WgmmaTile::W64T64:
      return launch<1, 64>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W64T128:
      return launch<1, 128>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T64:
      return launch<2, 64>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T128:
      return launch<2, 128>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T192:
      return launch<2, 192>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T128C2:
      return launch<2, 128, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T192C2:
      return launch<2, 192, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W64T64S2:
      return launch<1, 64, 1, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W64T128S2:
      return launch<1, 128, 1, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    case WgmmaTile::W128T64S2:
      return launch<2, 64, 1, 2>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
    default:
      return launch<2, 256>(x, w, bias, bias_kind, y, f32, m, n, k, s, silu);
  }
}

}  // namespace

bool make_linear_tensor_map(CUtensorMap* map, const void* base, int rows, int k, int box_rows,
                            bool swizzle_64b) {
  return make_map(map, base, rows, k, box_rows,
                  swizzle_64b ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE);
}

bool make_kv_tensor_map(CUtensorMap* map, const void* pool, int64_t slots, int heads, int head_dim,
                        int box_cols, int box_rows, bool swizzle_128b) {
  const EncodeTiled fn = encode_tiled();
  if (!fn || reinterpret_cast<uintptr_t>(pool) % 16 != 0) return false;
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(slots)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim) * 2, cuuint64_t(heads) * head_dim * 2};
  const cuuint32_t box[3] = {cuuint32_t(box_cols), 1, cuuint32_t(box_rows)}, elem[3] = {1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(pool), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool make_rows8_tensor_map(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int box_blocks) {
  const EncodeTiled fn = encode_tiled();
  if (!fn || reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows % 2 != 0 || k % 64 != 0 || box_blocks < 1 ||
      box_blocks > 256)
    return false;
  // dims: 64 columns of a block, row pairs (2 rows apart), the row's parity (1 row apart), blocks (128 bytes)
  const cuuint64_t dims[4] = {64, cuuint64_t(rows / 2), 2, cuuint64_t(k / 64)};
  const cuuint64_t strides[3] = {cuuint64_t(k) * 4, cuuint64_t(k) * 2, 128};
  const cuuint32_t box[4] = {64, 4, 2, cuuint32_t(box_blocks)}, elem[4] = {1, 1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool make_quads_tensor_map(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int box_quads) {
  const EncodeTiled fn = encode_tiled();
  if (!fn || reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows < 8 || k % 128 != 0 || box_quads < 1 ||
      box_quads > 256)
    return false;
  const cuuint64_t dims[3] = {16, cuuint64_t(rows), cuuint64_t(k / 128)};
  const cuuint64_t strides[2] = {cuuint64_t(k / 2), 64};  // a row's bytes, a quad's
  const cuuint32_t box[3] = {16, 8, cuuint32_t(box_quads)}, elem[3] = {1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool make_words_tensor_map(CUtensorMap* map, const void* base, int64_t rows, int64_t words, int box_words) {
  const EncodeTiled fn = encode_tiled();
  if (!fn || reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows < 8 || (words * 4) % 16 != 0 ||
      box_words < 4 || box_words > 256 || box_words % 4 != 0)
    return false;
  const cuuint64_t dims[2] = {cuuint64_t(words), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(words) * 4};
  const cuuint32_t box[2] = {cuuint32_t(box_words), 8}, elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Auto: the tile with the least estimated time on an H200 (132 SMs): waves x the slower of a tile's MMA
// time (989 TFLOP/s / 132 SMs, times an efficiency: the shared-memory traffic a chunk costs against its
// MMA time, and for 128x256 the `tot` round trips through shared memory) and its load time (the tile's
// bytes at the producer's rate an SM: 8-byte cp.async measured ~24 GB/s (run 16), the raw-staging path
// guessed at ~55), or all CTAs' bytes at ~10 TB/s of L2 if slower. All scale with K, so K drops out.
// Guesses to be replaced by measured tables (docs/cuda-notes.md v10); any tile gives the same bits.
WgmmaTile linear_wgmma_auto_tile(int m, int n) {
  struct Option {
    WgmmaTile tile;
    int bm, bn;
    double eff;
    int cl, sp;  // cluster kinds: x shared (cl = 2: half of x's bytes), slices split (sp = 2)
  };
  static constexpr Option kOptions[] = {
      {WgmmaTile::W128T192, 128, 192, 1.0, 1, 1},   {WgmmaTile::W128T256, 128, 256, 0.75, 1, 1},
      {WgmmaTile::W128T128, 128, 128, 0.82, 1, 1},  {WgmmaTile::W64T128, 64, 128, 0.68, 1, 1},
      {WgmmaTile::W128T64, 128, 64, 0.58, 1, 1},    {WgmmaTile::W64T64, 64, 64, 0.5, 1, 1},
      {WgmmaTile::W128T192C2, 128, 192, 1.0, 2, 1}, {WgmmaTile::W128T128C2, 128, 128, 0.82, 2, 1},
      {WgmmaTile::W64T128S2, 64, 128, 0.68, 1, 2},  {WgmmaTile::W128T64S2, 128, 64, 0.58, 1, 2},
      {WgmmaTile::W64T64S2, 64, 64, 0.5, 1, 2}};
  constexpr double kFlopsPerSm = 989e12 / 132, kL2Bytes = 10e12;
  constexpr double kRawBytesPerSm = 55e9, kCpAsync8BytesPerSm = 24e9;
  WgmmaTile best = WgmmaTile::W64T64;
  double best_t = 1e300;
  for (const Option& o : kOptions) {
    if ((o.cl > 1 || o.sp > 1) && !g_clusters) continue;
    const bool raw = o.cl == 1 && o.bn != 256;  // Cfg::kRaw
    const double rate = raw ? kRawBytesPerSm : kCpAsync8BytesPerSm;
    const long ctas = long((m + o.bn - 1) / o.bn) * ((n + o.bm - 1) / o.bm) * o.sp;
    const long waves = (ctas + 131) / 132;
    const double mma = 2.0 * o.bm * o.bn / (kFlopsPerSm * o.eff) / o.sp;
    const double bytes = 2.0 * (o.bm + o.bn / o.cl) / o.sp;
    // All CTAs' bytes through L2 at ~10 TB/s (binds large tiles at large M).
    const double t = std::max(double(waves) * std::max(mma, bytes / rate), double(ctas) * bytes / kL2Bytes);
    if (t < best_t) best_t = t, best = o.tile;
  }
  return best;
}

void set_linear_wgmma_rows128(bool on) {
  g_rows128 = on;
}

void set_linear_wgmma_clusters(bool on) {
  g_clusters = on;
}

void set_linear_wgmma_producer(WgmmaProducer producer) {
  g_producer = producer;
}

void set_linear_wgmma_swizzle(bool on) {
  g_swizzle = on;
}

const char* wgmma_producer_name(WgmmaProducer producer) {
  switch (producer) {
    case WgmmaProducer::Auto:
      return "auto";
    case WgmmaProducer::Raw:
      return "cp16";
    case WgmmaProducer::Tma:
      return "tma";
    case WgmmaProducer::TmaX:
      return "tmax";
    case WgmmaProducer::TmaXW:
      return "tmaxw";
  }
  return "?";
}

bool linear_wgmma_supported() {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaFuncAttributes attr{};
    // The kernels are only compiled for sm_90a; a build without it has no binary for them.
    return major == 9 && minor == 0 &&
           cudaFuncGetAttributes(&attr, linear_wgmma_kernel<1, 64, 1, 1, false, false>) == cudaSuccess &&
           attr.binaryVersion == 90;
  }();
  return ok;
}

void set_linear_wgmma_tile(WgmmaTile tile) {
  g_tile = tile;
}

const char* wgmma_tile_name(WgmmaTile tile) {
  switch (tile) {
    case WgmmaTile::Auto:
      return "auto";
    case WgmmaTile::W64T64:
      return "64x64";
    case WgmmaTile::W64T128:
      return "64x128";
    case WgmmaTile::W128T64:
      return "128x64";
    case WgmmaTile::W128T128:
      return "128x128";
    case WgmmaTile::W128T192:
      return "128x192";
    case WgmmaTile::W128T256:
      return "128x256";
    case WgmmaTile::W128T128C2:
      return "128x128c2";
    case WgmmaTile::W128T192C2:
      return "128x192c2";
    case WgmmaTile::W64T64S2:
      return "64x64s2";
    case WgmmaTile::W64T128S2:
      return "64x128s2";
    case WgmmaTile::W128T64S2:
      return "128x64s2";
  }
  return "?";
}

void linear_wgmma_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y,
                       DType y_dtype, int m, int n, int k, cudaStream_t s) {
  TF_CHECK(k % 32 == 0, "CUDA linear needs in_features divisible by 32, got " + std::to_string(k));
  TF_CHECK(linear_wgmma_supported(),
           "the wgmma linear needs an sm_90 GPU (H100/H200) and a build with CUDA architecture 90a");
  if (m <= 0 || n <= 0) return;
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool f32 = y_dtype == DType::F32;
  // M = 17..256 with the streaming kernel switched on (linear_rs.cu; same bits).
  if (g_tile == WgmmaTile::Auto && linear_rs_takes(m, n) &&
      linear_rs_bf16(x, w, bias, bias_dtype, y, y_dtype, m, n, k, s))
    return;
  launch_tile(g_tile == WgmmaTile::Auto ? linear_wgmma_auto_tile(m, n) : g_tile, x, w, bias, bias_kind, y,
              f32, m, n, k, s);
}

bool linear_wgmma_silu_bf16(const void* gate_up, const void* w, const void* bias, DType bias_dtype, void* y,
                            DType y_dtype, int m, int n, int k, cudaStream_t s) {
  // Only where linear_wgmma_bf16 would take a permuted-x producer: Auto tile, not the streaming kernel's M,
  // tensor maps encodable, gate_up and W 16-byte aligned, the stream not capturing (no buffer allocation).
  if (k % 32 != 0 || m <= 0 || n <= 0 || !linear_wgmma_supported() || g_tile != WgmmaTile::Auto ||
      !kAutoTmaX || g_producer == WgmmaProducer::Raw || g_producer == WgmmaProducer::Tma ||
      linear_rs_takes(m, n) || !encode_tiled() || !can_permute(gate_up, s) ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return false;
  const WgmmaTile tile = linear_wgmma_auto_tile(m, n);
  if (!reads_permuted_x(tile)) return false;  // 128x256 and the cluster tiles read x as it is
  launch_tile(tile, gate_up, w, bias,
              !bias                      ? 0
              : bias_dtype == DType::F32 ? 1
                                         : 2,
              y, y_dtype == DType::F32, m, n, k, s, true);
  return true;
}

namespace {

std::atomic<uint64_t> g_mlx4_launches{0};
int g_mlx4_bn = [] {  // set_linear_wgmma_mlx4_tokens
  const char* v = std::getenv("TF_Q4_PREFILL_BN");
  return v ? std::atoi(v) : 0;
}();

// One MLX 4-bit call on the 128-row tile of BN tokens (WP: plain or subnormal codes); false, launching
// nothing but perhaps x's permutation, where x's permuted copy or its tensor map cannot be made.
template <int BN, int WP>
bool launch_mlx4(const void* x, const void* words, const uint32_t* scales, int chunk_shift, const void* bias,
                 int bias_kind, void* y, bool y_f32, int m, int n, int k, bool silu, cudaStream_t s) {
  CUtensorMap tmw{}, tmx{};
  const void* xp = permuted_rows(x, m, k, s, 0, silu);  // null: capture, or x unaligned
  if (!xp || !make_map(&tmx, xp, m, k, BN, CU_TENSOR_MAP_SWIZZLE_64B)) return false;
  launch_with<2, BN, 1, 1, true, true, WP>(x, words, bias, bias_kind, y, y_f32, m, n, k, s, tmw, tmx, 1,
                                           scales, chunk_shift);
  g_mlx4_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

const void* wgp::wgmma_permuted_x(const void* x, const int32_t* rows, int m, int k, bool silu,
                                  cudaStream_t s) {
  return permuted_rows(x, m, k, s, 0, silu, rows);
}

bool wgp::wgmma_can_permute(const void* x, cudaStream_t s) {
  return can_permute(x, s);
}

void set_linear_wgmma_mlx4_tokens(int bn) {
  g_mlx4_bn = bn;
}

uint64_t linear_wgmma_mlx4_launches() {
  return g_mlx4_launches.load(std::memory_order_relaxed);
}

bool linear_wgmma_mlx4(const void* x, const void* words, const void* scales, int chunk_shift, bool subnormal,
                       const void* bias, DType bias_dtype, void* y, DType y_dtype, int m, int n, int k,
                       cudaStream_t s, bool silu) {
  if (m <= 0 || n <= 0 || k % 128 != 0 || (chunk_shift != 1 && chunk_shift != 2) ||
      int64_t(n) * (k / 2) >= (int64_t(1) << 32) ||  // produce_q4's 32-bit offsets
      !linear_wgmma_supported() || !encode_tiled() || !can_permute(x, s) ||
      reinterpret_cast<uintptr_t>(words) % 16 != 0 || reinterpret_cast<uintptr_t>(scales) % 8 != 0)
    return false;
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const bool f32 = y_dtype == DType::F32;
  const auto* sc = static_cast<const uint32_t*>(scales);
  // 128 x 192, 128 x 128 or 128 x 64 by linear_wgmma_auto_tile's estimate (waves x a tile's MMA time at its
  // efficiency), or set_linear_wgmma_mlx4_tokens's.
  const int forced = g_mlx4_bn;
  const long n_tiles = (n + 127) / 128;
  auto cost = [&](int bn, double eff) {
    return double(((m + bn - 1) / bn * n_tiles + 131) / 132) * bn / eff;
  };
  const int bn = forced == 64 || forced == 128 || forced == 192                ? forced
                 : cost(192, 1.0) <= std::min(cost(128, 0.82), cost(64, 0.58)) ? 192
                 : cost(128, 0.82) <= cost(64, 0.58)                           ? 128
                                                                               : 64;
  auto go = [&](auto bn_c) {
    constexpr int BN = decltype(bn_c)::value;
    return subnormal
               ? launch_mlx4<BN, kWpQ4Sub>(x, words, sc, chunk_shift, bias, bias_kind, y, f32, m, n, k, silu,
                                           s)
               : launch_mlx4<BN, kWpQ4>(x, words, sc, chunk_shift, bias, bias_kind, y, f32, m, n, k, silu, s);
  };
  if (bn == 192) return go(std::integral_constant<int, 192>{});
  if (bn == 128) return go(std::integral_constant<int, 128>{});
  return go(std::integral_constant<int, 64>{});
}

}  // namespace tf::cuda
