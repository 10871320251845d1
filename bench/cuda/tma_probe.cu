// How fast can one producer lane an SM stream weights into shared memory through TMA, by the shape of its
// stages and boxes? (docs/cuda-notes.md "Session 65".) The MLX 4-bit MoE step takes ~60 us a layer for 32 MB
// (the bf16 one the same for 3.5x the bytes): its expert stages are 4.5 KB of four boxes -- codes as 64-byte
// rows (a 3D map [quad][row][16 words]) and scale words as 32-byte rows -- and its down stages 2.5 KB of
// four. Does the TMA unit take such boxes as fast as their bytes?
//
// A [rows, 256] u32 "codes" matrix (1 KB rows: a gate_up expert row at hidden 2048) and a [rows, 32] "scales"
// matrix (128-byte rows: groups of 64), 1 GB + 128 MB, L2 flushed by the sizes. A tile is 16 rows of both
// (18 KB); each case splits a tile into stages of boxes. One CTA an SM: lane 0 of warp 0 issues each stage
// onto its slot's full mbarrier when the slot is free; lane 0 of warp 1 waits for it, reads one word and
// frees the slot (no arithmetic: the stream alone). The CTAs take tiles b, b + G, ...; bytes moved / time.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/linear_wgmma.h"  // tma_load_2d / 3d
#include "ops/cuda/mbarrier.cuh"

namespace {

using namespace tf::cuda;

constexpr int64_t kRows = 1 << 20;  // 1 GB of codes, 128 MB of scales
constexpr int kCodeWords = 256, kScaleWords = 32;
constexpr int kRingBytes = 160 << 10;
constexpr int kMaxSlots = 64;

// The cases: how a tile (16 rows) becomes stages of boxes.
enum Case : int {
  kNowGateUp,     // 4 stages: codes {16 w, 8 rows, 4 quads} x 2 (rows 0-7, 8-15), scales {8 w, 8 rows} x 2
  kNowGateUpL2,   // the same, the scale map with L2 promotion 256 B (the product's: none)
  kCodesOnly,     // 4 stages: the codes boxes alone (2 boxes, 4 KB)
  kScalesOnly,    // 4 stages: the scale boxes alone (2 boxes, 512 B)
  kNowDown,       // 8 stages: codes {16 w, 8 rows, 2 quads} x 2, scales {8 w, 8 rows} x 2 (2.5 KB)
  kRows16Quads4,  // 4 stages: codes {16 w, 16 rows, 4 quads} (one box), scales {8 w, 16 rows}
  kHalfTile,      // 2 stages: codes {16 w, 16 rows, 8 quads}, scales {16 w, 16 rows} (9 KB, 2 boxes)
  kWholeTile,     // 1 stage: codes {16 w, 16 rows, 16 quads}, scales {32 w, 16 rows} (18 KB, 2 boxes)
  kCodes2d,       // 4 stages: codes as a 2D map {64 w (256 B), 16 rows}, scales {8 w, 16 rows} (2 boxes)
  kSwz128,        // 4 stages: codes as a 3D map {32 w (128 B), rows, 8} in the 128-byte swizzle, box {32, 16,
                  // 2}, scales {8 w, 16 rows} (2 boxes)
  kBulk4608,      // 4 stages: one contiguous bulk copy of 4608 bytes (a packed stage)
  kBulk18k,       // 1 stage: one contiguous bulk copy of 18 KB
  kRowCopies,     // 4 stages: 16 bulk copies of a row's 256 bytes (session 60's row copies; no scales)
  kCases
};
const char* const kNames[kCases] = {
    "gate_up now: 4 x 4.5 KB stages, 4 boxes (codes 64 B rows, scales 32 B rows)",
    "gate_up now, scale map L2 promotion 256 B",
    "gate_up codes boxes only: 4 x 4 KB, 2 boxes",
    "gate_up scale boxes only: 4 x 512 B, 2 boxes",
    "down now: 8 x 2.5 KB stages, 4 boxes",
    "4 x 4.5 KB stages, 2 boxes (16-row codes box, 16-row scales box)",
    "2 x 9 KB stages, 2 boxes",
    "1 x 18 KB stage, 2 boxes (a whole tile)",
    "4 x 4.5 KB stages, 2 boxes, codes 2D (256 B rows)",
    "4 x 4.5 KB stages, 2 boxes, codes 128 B rows swizzled",
    "4 x 4.5 KB stages, one contiguous bulk copy each",
    "1 x 18 KB stage, one contiguous bulk copy",
    "4 x 4 KB stages, 16 row copies of 256 B each",
};
const char* const kModes[6] = {"try_wait",      "test_wait spins",     "no consumer",
                               "two producers", "four producer lanes", "try_wait, counted"};
__host__ __device__ constexpr int stages_of(int c) {
  return c == kNowDown ? 8 : c == kHalfTile ? 2 : c == kWholeTile || c == kBulk18k ? 1 : 4;
}
__host__ __device__ constexpr int stage_bytes(int c) {
  switch (c) {
    case kCodesOnly:
    case kRowCopies:
      return 4096;
    case kScalesOnly:
      return 512;
    case kNowDown:
      return 2560;
    case kHalfTile:
      return 9216;
    case kWholeTile:
    case kBulk18k:
      return 18432;
    default:
      return 4608;
  }
}

struct Maps {
  CUtensorMap quads8, quads8x2, quads16, quads16x8, quads16x16, codes2d, swz;  // codes: rows x quads a box
  CUtensorMap scales8, scales8l2, scales16, scales16x16, scales16x32;          // scales: rows x words a box
};

__global__ void __launch_bounds__(128)
    stream_kernel(const __grid_constant__ Maps m, const uint32_t* codes, const uint32_t* scales, int c,
                  int tiles_per_cta, int nslots, int slot_bytes, int mode, unsigned* sink,
                  unsigned long long* prof) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[kMaxSlots], empty[kMaxSlots];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned char* ring = smem + (1024 - saddr(smem) % 1024) % 1024;
  if (threadIdx.x == 0) {
    for (int i = 0; i < nslots; ++i) mbar_init(saddr(&full[i]), 1), mbar_init(saddr(&empty[i]), 1);
    mbar_init_fence();
  }
  __syncthreads();
  // mode 0: one producer lane, one consumer lane, mbarrier.try_wait; 1: the same waits by test_wait spins;
  // 2: no consumer (the producer reuses a slot once its bytes landed); 3: two producer / consumer pairs
  // (warps 0 / 1 and 2 / 3), each every other stage in half the slots; 4: four producer lanes of one warp
  // (and four consumer lanes), lane l every fourth stage from l, in a quarter of the slots each; 5: mode 0
  // with the producer's cycles counted (waiting for a slot, arming its barrier, issuing its copies).
  const int spt = stages_of(c), n = tiles_per_cta * spt, bytes = stage_bytes(c);
  const int pairs = mode == 3 ? 2 : 1, lanes = mode == 4 ? 4 : 1, pr = warp / 2, id = pr * lanes + lane;
  const int S = pairs * lanes, ns = nslots / S, s0 = id * ns;
  unsigned long long cw = 0, ca = 0, ci = 0;
  const bool spin = mode == 1;
  auto wait = [&](uint32_t bar, uint32_t parity) {
    if (spin) {
      while (!mbar_test_wait(bar, parity)) {
      }
    } else {
      mbar_wait(bar, parity);
    }
  };
  if (pr >= pairs) return;
  if (warp % 2 == 0) {
    if (lane >= lanes) return;
    for (int j = id, jj = 0; j < n; j += S, ++jj) {
      const int slot = s0 + jj % ns, wj = jj / ns;
      const uint32_t dst = saddr(ring + slot * slot_bytes), bar = saddr(&full[slot]);
      const int tile = blockIdx.x + gridDim.x * (j / spt), s = j % spt, r0 = 16 * tile;
      // (mode 5: the index arithmetic done before the first clock read, so that "slot wait" is the wait)
      if (mode == 5) asm volatile("" ::"r"(dst), "r"(bar), "r"(tile), "r"(s), "r"(slot), "r"(wj));
      const unsigned long long t0 = mode == 5 ? clock64() : 0;
      if (jj >= ns)
        wait(saddr(mode == 2 ? &full[slot] : &empty[slot]), mode == 2 ? (wj - 1) & 1 : (wj & 1) ^ 1);
      const unsigned long long t1 = mode == 5 ? clock64() : 0;
      mbar_arrive_expect_tx(bar, uint32_t(bytes));
      const unsigned long long t2 = mode == 5 ? clock64() : 0;
      if (mode == 5) cw += t1 - t0, ca += t2 - t1, ci -= t2;
      switch (c) {
        case kNowGateUp:
        case kNowGateUpL2: {
          const CUtensorMap* sm = c == kNowGateUp ? &m.scales8 : &m.scales8l2;
          tma_load_3d(dst, &m.quads8, 0, r0, 4 * s, bar);
          tma_load_3d(dst + 2048, &m.quads8, 0, r0 + 8, 4 * s, bar);
          tma_load_2d(dst + 4096, sm, 8 * s, r0, bar);
          tma_load_2d(dst + 4096 + 256, sm, 8 * s, r0 + 8, bar);
          break;
        }
        case kCodesOnly:
          tma_load_3d(dst, &m.quads8, 0, r0, 4 * s, bar);
          tma_load_3d(dst + 2048, &m.quads8, 0, r0 + 8, 4 * s, bar);
          break;
        case kScalesOnly:
          tma_load_2d(dst, &m.scales8, 8 * s, r0, bar);
          tma_load_2d(dst + 256, &m.scales8, 8 * s, r0 + 8, bar);
          break;
        case kNowDown:  // two quads of codes; 2 KB of them
          tma_load_3d(dst, &m.quads8x2, 0, r0, 2 * s, bar);
          tma_load_3d(dst + 1024, &m.quads8x2, 0, r0 + 8, 2 * s, bar);
          tma_load_2d(dst + 2048, &m.scales8, 4 * s, r0, bar);
          tma_load_2d(dst + 2048 + 256, &m.scales8, 4 * s, r0 + 8, bar);
          break;
        case kRows16Quads4:
          tma_load_3d(dst, &m.quads16, 0, r0, 4 * s, bar);  // (the 16-row map's box: 4 quads)
          tma_load_2d(dst + 4096, &m.scales16, 8 * s, r0, bar);
          break;
        case kHalfTile:
          tma_load_3d(dst, &m.quads16x8, 0, r0, 8 * s, bar);
          tma_load_2d(dst + 8192, &m.scales16x16, 16 * s, r0, bar);
          break;
        case kWholeTile:
          tma_load_3d(dst, &m.quads16x16, 0, r0, 0, bar);
          tma_load_2d(dst + 16384, &m.scales16x32, 0, r0, bar);
          break;
        case kCodes2d:
          tma_load_2d(dst, &m.codes2d, 64 * s, r0, bar);
          tma_load_2d(dst + 4096, &m.scales16, 8 * s, r0, bar);
          break;
        case kSwz128:
          tma_load_3d(dst, &m.swz, 0, r0, 2 * s, bar);
          tma_load_2d(dst + 4096, &m.scales16, 8 * s, r0, bar);
          break;
        case kBulk4608:
        case kBulk18k:
          bulk_copy_g2s(dst,
                        reinterpret_cast<const unsigned char*>(codes) + (int64_t(tile) * spt + s) * bytes,
                        uint32_t(bytes), bar);
          break;
        case kRowCopies:
          for (int r = 0; r < 16; ++r)
            bulk_copy_g2s(dst + 256 * r, codes + int64_t(r0 + r) * kCodeWords + 64 * s, 256, bar);
          break;
      }
      if (mode == 5) ci += clock64();
    }
    if (mode == 5 && blockIdx.x == 0) prof[0] = cw, prof[1] = ca, prof[2] = ci, prof[3] = n;
    return;
  }
  if (lane >= lanes || mode == 2) return;
  unsigned acc = 0;
  for (int j = id, jj = 0; j < n; j += S, ++jj) {
    const int slot = s0 + jj % ns, wj = jj / ns;
    wait(saddr(&full[slot]), wj & 1);
    acc += *reinterpret_cast<volatile const unsigned*>(ring + slot * slot_bytes + 4 * (j % 64));
    mbar_arrive(saddr(&empty[slot]));
  }
  if (acc == 0x12345678u) *sink = acc;  // (keeps the reads)
}

// One thread: SM cycles of a wait on an mbarrier phase that has completed (try_wait, test_wait), of an
// arrive, and of the clock reads themselves; n of each, back to back (out: cycles per operation).
__global__ void barrier_cost_kernel(int n, unsigned long long* out) {
  __shared__ __align__(8) unsigned long long bar[2];
  if (threadIdx.x != 0) return;
  const uint32_t b0 = saddr(&bar[0]), b1 = saddr(&bar[1]);
  mbar_init(b0, 1), mbar_init(b1, (1 << 20) - 1);
  mbar_init_fence();
  mbar_arrive(b0);  // phase 0 of b0 completes
  uint32_t acc = 0;
  unsigned long long t = clock64();
  for (int i = 0; i < n; ++i) acc += mbar_try_wait(b0, 0);
  out[0] = clock64() - t;
  t = clock64();
  for (int i = 0; i < n; ++i) acc += mbar_test_wait(b0, 0);
  out[1] = clock64() - t;
  t = clock64();
  for (int i = 0; i < n; ++i) mbar_arrive(b1);  // (count 2^20 - 1: no phase completes)
  out[2] = clock64() - t;
  t = clock64();
  for (int i = 0; i < n; ++i) acc += uint32_t(clock64());
  out[3] = clock64() - t;
  out[4] = acc;
}

// Every thread reads 16-byte vectors of the codes: the plain load's bandwidth for comparison.
__global__ void read_kernel(const uint4* p, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);

void encode(EncodeTiled fn, CUtensorMap* map, const void* base, int rank, const cuuint64_t* dims,
            const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swz,
            CUtensorMapL2promotion l2) {
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r =
      fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, cuuint32_t(rank), const_cast<void*>(base), dims, strides, box,
         elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swz, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", int(r));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (a line at a time: a hung case leaves the others)
  void* fp = nullptr;
  cudaDriverEntryPointQueryResult q{};
  TF_CUDA_CHECK(
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fp, 12000, cudaEnableDefault, &q));
  const auto fn = reinterpret_cast<EncodeTiled>(fp);
  uint32_t *codes = nullptr, *scales = nullptr;
  unsigned* sink = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&codes, kRows * kCodeWords * 5));  // (the bulk cases read 18 KB a tile: 1.2 GB)
  TF_CUDA_CHECK(cudaMalloc(&scales, kRows * kScaleWords * 4));
  TF_CUDA_CHECK(cudaMalloc(&sink, 4));
  unsigned long long* prof = nullptr;
  TF_CUDA_CHECK(cudaMallocManaged(&prof, 4 * sizeof(unsigned long long)));
  TF_CUDA_CHECK(cudaMemset(codes, 1, kRows * kCodeWords * 5));
  TF_CUDA_CHECK(cudaMemset(scales, 2, kRows * kScaleWords * 4));
  Maps m{};
  const auto N = CU_TENSOR_MAP_SWIZZLE_NONE;
  const auto L2N = CU_TENSOR_MAP_L2_PROMOTION_NONE, L2P = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  {  // codes as [quad][row][16 words] boxes (make_quads_tensor_map's view), 8 and 16 rows a box
    const cuuint64_t dims[3] = {16, cuuint64_t(kRows), kCodeWords / 16}, strides[2] = {kCodeWords * 4, 64};
    const cuuint32_t b8[3] = {16, 8, 4}, b16[3] = {16, 16, 4}, b16x8[3] = {16, 16, 8},
                     b16x16[3] = {16, 16, 16};
    const cuuint32_t b8x2[3] = {16, 8, 2};
    encode(fn, &m.quads8, codes, 3, dims, strides, b8, N, L2P);
    encode(fn, &m.quads8x2, codes, 3, dims, strides, b8x2, N, L2P);
    encode(fn, &m.quads16, codes, 3, dims, strides, b16, N, L2P);
    encode(fn, &m.quads16x8, codes, 3, dims, strides, b16x8, N, L2P);
    encode(fn, &m.quads16x16, codes, 3, dims, strides, b16x16, N, L2P);
  }
  {  // codes as 2D rows: a box of 64 words (256 bytes) x 16 rows
    const cuuint64_t dims[2] = {kCodeWords, cuuint64_t(kRows)}, strides[1] = {kCodeWords * 4};
    const cuuint32_t b[2] = {64, 16};
    encode(fn, &m.codes2d, codes, 2, dims, strides, b, N, L2P);
  }
  {  // codes as [128-byte piece][row][32 words], 128-byte swizzle, a box of 16 rows x 2 pieces
    const cuuint64_t dims[3] = {32, cuuint64_t(kRows), kCodeWords / 32}, strides[2] = {kCodeWords * 4, 128};
    const cuuint32_t b[3] = {32, 16, 2};
    encode(fn, &m.swz, codes, 3, dims, strides, b, CU_TENSOR_MAP_SWIZZLE_128B, L2P);
  }
  {  // scale words (make_words_tensor_map's view): 8 words x 8 rows; 8 x 16
    const cuuint64_t dims[2] = {kScaleWords, cuuint64_t(kRows)}, strides[1] = {kScaleWords * 4};
    const cuuint32_t b8[2] = {8, 8}, b16[2] = {8, 16}, b16x16[2] = {16, 16}, b16x32[2] = {32, 16};
    encode(fn, &m.scales8, scales, 2, dims, strides, b8, N, L2N);
    encode(fn, &m.scales8l2, scales, 2, dims, strides, b8, N, L2P);
    encode(fn, &m.scales16, scales, 2, dims, strides, b16, N, L2N);
    encode(fn, &m.scales16x16, scales, 2, dims, strides, b16x16, N, L2N);
    encode(fn, &m.scales16x32, scales, 2, dims, strides, b16x32, N, L2N);
  }
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; one CTA an SM, %d KB ring; median of %d\n", prop.name, sms, kRingBytes >> 10,
              reps);
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes + 1024));
  cudaEvent_t e0, e1;
  TF_CUDA_CHECK(cudaEventCreate(&e0));
  TF_CUDA_CHECK(cudaEventCreate(&e1));
  auto time_it = [&](auto&& launch) {
    std::vector<float> t;
    for (int r = 0; r < reps + 1; ++r) {
      TF_CUDA_CHECK(cudaEventRecord(e0));
      launch();
      TF_CUDA_CHECK(cudaEventRecord(e1));
      TF_CUDA_CHECK(cudaEventSynchronize(e1));
      TF_CUDA_CHECK(cudaGetLastError());
      float ms = 0;
      TF_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) t.push_back(ms);  // (the first: warm-up)
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const int64_t vecs = kRows * kCodeWords / 4;
  const float rd =
      time_it([&] { read_kernel<<<4 * sms, 512>>>(reinterpret_cast<const uint4*>(codes), vecs, sink); });
  std::printf("| plain 16-byte loads, every thread | %.3f ms | %.0f GB/s |\n", rd, vecs * 16 / rd / 1e6);
  {
    unsigned long long* bc = nullptr;
    TF_CUDA_CHECK(cudaMallocManaged(&bc, 5 * sizeof(unsigned long long)));
    const int n = 1000;
    barrier_cost_kernel<<<1, 32>>>(n, bc);
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf(
        "| one thread, cycles an operation: try_wait on a completed phase %.1f, test_wait %.1f, arrive %.1f, "
        "clock64 %.1f |\n",
        double(bc[0]) / n, double(bc[1]) / n, double(bc[2]) / n, double(bc[3]) / n);
  }
  const int tiles_per_cta = int(kRows / 16 / sms);
  for (int c = 0; c < kCases; ++c) {
    const int sb = (stage_bytes(c) + 1023) / 1024 * 1024;
    for (int mode = 0; mode < 6; ++mode)
      for (int depth : {0, 4}) {  // every slot the ring holds (even); 4 slots
        if (depth && mode) continue;
        const int nslots = depth ? depth : std::min(kMaxSlots, kRingBytes / sb) & ~1;
        const float ms = time_it([&] {
          stream_kernel<<<sms, 128, kRingBytes + 1024>>>(m, codes, scales, c, tiles_per_cta, nslots, sb, mode,
                                                         sink, prof);
        });
        const double bytes = double(sms) * tiles_per_cta * stages_of(c) * stage_bytes(c);
        std::printf("| %s | %s | %d slots | %.3f ms | %.0f GB/s | %.1f ns a stage an SM |\n", kNames[c],
                    kModes[mode], nslots, ms, bytes / ms / 1e6,
                    ms * 1e6 / (double(tiles_per_cta) * stages_of(c)));
        if (mode == 5)
          std::printf(
              "|   producer cycles a stage (CTA 0): slot wait %.0f, arming %.0f, copies issued %.0f |\n",
              double(prof[0]) / prof[3], double(prof[1]) / prof[3], double(prof[2]) / prof[3]);
      }
  }
  return 0;
}
