// tf_q4_loop_probe: what the one-kernel decode step's MLX 4-bit tile loop computes an SM a cycle, alone.
// decode_step_kernel.cuh's q4_pair (a consumer warp's two K slices of one stage: two interleaved MMA chains,
// codes, scale words and x read from shared memory in the stage's layout, dequant<kMlxBf16Sub, 4>) run over
// and over on a stage of its own a warp, with nothing to wait for, at 1-16 warps an SM (one block an SM on
// every SM):
//   - plain;
//   - beside warps spinning on a shared-memory word (the 4-bit teams' stage-counter spin: `*meta != jj`),
//     with and without a __nanosleep a round;
//   - without the dequantisation (the probe instance's ablation 2: the codes and scale words go to the MMAs
//     as they are).
// The step needs its consumers to keep pace with the weight stream: ~18.5 weights a cycle an SM at the H100's
// ~3 TB/s (0.5625 bytes a weight at groups of 64, 132 SMs, 1.98 GHz), and to catch up after each op's x
// hop. Timing only: the sums are stored so the chains are kept, never checked. docs/cuda-notes.md, Session
// 67.
//   tf_q4_loop_probe [reps, default 200]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/decode_step_kernel.cuh"

namespace {

using namespace tf::cuda;
using namespace tf::cuda::step;

constexpr int kPSW = 2, kPGS = 1;                    // the H100 Qwen3-8B step's stages; groups of 64
constexpr int kStage = q_stage_bytes(kPSW, 64);      // 9 KB: 16 rows x 1024 k-values, their scale words
constexpr int kXBytes = 2 * (kQStageK / 2) * 2 * 2;  // a warp's two slices' x (bf16), 2 KB
constexpr int kWeights = 16 * kPSW * kQStageK;       // a q4_pair call: 16 rows x SW pieces

template <bool kRaw>
__global__ void __launch_bounds__(512, 1)
    loop_kernel(int reps, int ncw, int spin_ns, unsigned long long* cycles, float* out) {
  extern __shared__ __align__(1024) unsigned char sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned* w = reinterpret_cast<unsigned*>(sm);
  const int code_words = q_code_bytes(kPSW) / 4, stage_words = kStage / 4;
  for (int i = threadIdx.x; i < ncw * stage_words; i += blockDim.x)  // codes random; scale words finite
    w[i] = i % stage_words < code_words ? 0x9E3779B9u * unsigned(i + 1) : 0x3C003C00u + unsigned(i % 7);
  unsigned* xw = w + ncw * stage_words;
  for (int i = threadIdx.x; i < ncw * kXBytes / 4; i += blockDim.x) xw[i] = 0x3F803F80u;  // x = 1
  int* count = reinterpret_cast<int*>(xw + ncw * kXBytes / 4);                            // warps done
  if (threadIdx.x == 0) *count = 0;
  __syncthreads();
  if (warp >= ncw) {  // a spinner, until every computing warp is done
    const volatile int* v = count;
    while (*v < ncw)
      if (spin_ns > 0) __nanosleep(spin_ns);
    return;
  }
  const int g = lane / 4, t = lane % 4;
  const uint32_t st = saddr(sm + warp * kStage);
  const int ng = kQStageK >> (5 + kPGS);  // groups a piece
  const uint32_t cb = st + 16 * t, sb = st + q_code_bytes(kPSW);
  const uint32_t xb0 = saddr(xw) + warp * kXBytes + 16 * t, xb1 = xb0 + kXBytes / 2;
  float a0[4] = {0.f, 0.f, 0.f, 0.f}, a1[4] = {0.f, 0.f, 0.f, 0.f};
  __syncwarp();
  const unsigned long long t0 = clock64();
  for (int r = 0; r < reps; ++r) q4_pair<kPSW, kMlxBf16Sub, kPGS, kRaw>(a0, a1, cb, sb, ng * 64, xb0, xb1, g);
  const unsigned long long t1 = clock64();
  __syncwarp();
  if (lane == 0) atomicAdd(count, 1);
  out[(blockIdx.x * 32 + warp) * 32 + lane] = a0[0] + a0[1] + a0[2] + a0[3] + a1[0] + a1[1] + a1[2] + a1[3];
  if (lane == 0) cycles[blockIdx.x * 32 + warp] = t1 - t0;
}

}  // namespace

int main(int argc, char** argv) try {
  const int reps = argc > 1 ? std::max(10, std::atoi(argv[1])) : 200;
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* out = nullptr;
  unsigned long long* cyc = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&out, size_t(sms) * 32 * 32 * 4));
  TF_CUDA_CHECK(cudaMalloc(&cyc, size_t(sms) * 32 * 8));
  const int smem_max = 16 * (kStage + kXBytes) + 16;
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(loop_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(loop_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  std::printf("q4_pair (SW %d, groups of 64: %d weights a call), %d calls a warp, %d blocks; median warp\n",
              kPSW, kWeights, reps, sms);
  std::printf(
      "| computing warps | spinning warps | spin sleep ns | dequant | cycles a call | weights a cycle an SM "
      "|\n");
  std::printf("|---|---|---|---|---|---|\n");
  struct Case {
    int ncw, nspin, ns;
    bool raw;
  };
  const Case cases[] = {{1, 0, 0, false},  {2, 0, 0, false},   {4, 0, 0, false}, {8, 0, 0, false},
                        {12, 0, 0, false}, {16, 0, 0, false},  {4, 4, 0, false}, {4, 4, 100, false},
                        {8, 4, 0, false},  {8, 4, 100, false}, {8, 1, 0, false}, {8, 8, 0, false},
                        {4, 0, 0, true},   {8, 0, 0, true},    {16, 0, 0, true}};
  for (const Case& c : cases) {
    const int smem = c.ncw * (kStage + kXBytes) + 16;
    auto launch = [&] {
      const dim3 grid(sms), block((c.ncw + c.nspin) * 32);
      if (c.raw)
        loop_kernel<true><<<grid, block, smem>>>(reps, c.ncw, c.ns, cyc, out);
      else
        loop_kernel<false><<<grid, block, smem>>>(reps, c.ncw, c.ns, cyc, out);
      TF_CUDA_CHECK(cudaGetLastError());
    };
    launch();  // (warm: instruction cache, clocks)
    launch();
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> all(size_t(sms) * 32);
    TF_CUDA_CHECK(cudaMemcpy(all.data(), cyc, all.size() * 8, cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> v;
    for (int b = 0; b < sms; ++b)
      for (int k = 0; k < c.ncw; ++k) v.push_back(all[size_t(b) * 32 + k]);
    std::sort(v.begin(), v.end());
    const double per = double(v[v.size() / 2]) / reps;
    std::printf("| %d | %d | %d | %s | %.0f | %.1f |\n", c.ncw, c.nspin, c.ns, c.raw ? "no" : "yes", per,
                c.ncw * double(kWeights) / per);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
