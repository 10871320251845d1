// tf_mma_probe: what one K chunk (mma_chunk: two dependent m16n8k16 bf16 HMMAs) costs a warp in a dependent
// chain, at 1 .. 16 warps an SM (one block an SM on every SM), with the operands
//   0 in registers (the bare accumulator chain),
//   1 in registers, two chains side by side (each chunk alternates; the same chunks in all),
//   2 dequantized from 4-bit words in registers each chunk (dequant<kMlxBf16Sub, 4>, the decode kernels'),
//   3 as 2, the words, scale words and x loaded from shared memory each chunk (the kernels' chunk loop),
//   4 as 2 at 16 tokens: the same weights into two chains, one a token group of 8 (four HMMAs a chunk),
//   5 as 4, the two token groups' x loaded from shared memory each chunk (the 16-row kernels' loop).
// Each warp's clock64 over the chain, divided by its chunks; medians over warps. Timing only (the values are
// stored so the chains are kept, never checked). Docs: docs/cuda-notes.md, Session 40.
//   tf_mma_probe [chunks, default 256]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/quant_common.cuh"

namespace {

using namespace tf::cuda;

constexpr int kSmemWords = 4096;  // 16 KB of words a block (mode 3)

template <int MODE>
__global__ void chain_kernel(int chunks, const unsigned* init, float* out, unsigned long long* cycles) {
  __shared__ unsigned sw[kSmemWords];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = threadIdx.x; i < kSmemWords; i += blockDim.x) sw[i] = init[i % 256] ^ unsigned(i);
  __syncthreads();
  // Operands from memory (not constants the compiler could fold).
  const unsigned w0 = init[lane], w1 = init[lane + 32], sc = (init[64] & 0x00FF00FFu) | 0x3c003c00u;
  uint4 a = make_uint4(w0, w1, w0 ^ w1, w0 + w1), b = make_uint4(w1, w0, w1 ^ 3u, w0 ^ 5u);
  const uint4 x = make_uint4(init[lane + 64], init[lane + 96], init[lane + 128], init[lane + 160]);
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, acc2[4] = {0.f, 0.f, 0.f, 0.f};
  __syncwarp();
  const unsigned long long t0 = clock64();
  if constexpr (MODE == 0) {
    for (int c = 0; c < chunks; ++c) mma_chunk(acc, a, b, x);
  } else if constexpr (MODE == 1) {
    for (int c = 0; c < chunks; c += 2) mma_chunk(acc, a, b, x), mma_chunk(acc2, b, a, x);
  } else if constexpr (MODE == 2) {
#pragma unroll 8
    for (int c = 0; c < chunks; ++c) {
      const unsigned va = w0 ^ unsigned(c), vb = w1 + unsigned(c);
      mma_chunk(acc, dequant<kMlxBf16Sub, 4>(Raw{va, 0, sc, 0}), dequant<kMlxBf16Sub, 4>(Raw{vb, 0, sc, 0}),
                x);
    }
  } else if constexpr (MODE == 4 || MODE == 5) {
    const int t = lane % 4;
    const uint4 x2 = make_uint4(x.y, x.x, x.w, x.z);
#pragma unroll 8
    for (int c = 0; c < chunks; ++c) {
      const unsigned va = w0 ^ unsigned(c), vb = w1 + unsigned(c);
      const uint4 da = dequant<kMlxBf16Sub, 4>(Raw{va, 0, sc, 0}),
                  db = dequant<kMlxBf16Sub, 4>(Raw{vb, 0, sc, 0});
      if constexpr (MODE == 4) {
        mma_chunk(acc, da, db, x);
        mma_chunk(acc2, da, db, x2);
      } else {
        // token rows 48 words apart (the kernels' padded rows: alternate halves of the banks)
        const int base = (c * 64) % (kSmemWords - 1024), g = lane / 4;
        mma_chunk(acc, da, db, *reinterpret_cast<const uint4*>(&sw[base + g * 48 + 4 * t]));
        mma_chunk(acc2, da, db, *reinterpret_cast<const uint4*>(&sw[base + (g + 8) * 48 + 4 * t]));
      }
    }
  } else {
    const int g = lane / 4, t = lane % 4;
#pragma unroll 8
    for (int c = 0; c < chunks; ++c) {
      const int base = (c * 64) % (kSmemWords - 512);
      const unsigned va = sw[base + g * 32 + t], vb = sw[base + (g + 8) * 32 + t];
      const unsigned sa = sw[base + 256 + g] | 0x3c003c00u, sb = sw[base + 264 + g] | 0x3c003c00u;
      const uint4 xv = *reinterpret_cast<const uint4*>(&sw[base + 4 * t]);
      mma_chunk(acc, dequant<kMlxBf16Sub, 4>(Raw{va, 0, sa, 0}), dequant<kMlxBf16Sub, 4>(Raw{vb, 0, sb, 0}),
                xv);
    }
  }
  asm volatile("" ::"f"(acc[0]), "f"(acc[1]), "f"(acc[2]), "f"(acc[3]), "f"(acc2[0]));
  const unsigned long long t1 = clock64();
  const int gw = blockIdx.x * (blockDim.x / 32) + warp;
  out[gw * 32 + lane] = acc[0] + acc[1] + acc[2] + acc[3] + acc2[0] + acc2[1] + acc2[2] + acc2[3];
  if (lane == 0) cycles[gw] = t1 - t0;
}

}  // namespace

int main(int argc, char** argv) try {
  const int chunks = argc > 1 ? std::max(8, std::atoi(argv[1])) / 8 * 8 : 256;
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<unsigned> h(256);
  for (int i = 0; i < 256; ++i) h[i] = 0x9E3779B9u * unsigned(i + 1);
  unsigned* init = nullptr;
  float* out = nullptr;
  unsigned long long* cyc = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&init, 256 * 4));
  TF_CUDA_CHECK(cudaMalloc(&out, size_t(sms) * 16 * 32 * 4));
  TF_CUDA_CHECK(cudaMalloc(&cyc, size_t(sms) * 16 * 8));
  TF_CUDA_CHECK(cudaMemcpy(init, h.data(), 256 * 4, cudaMemcpyHostToDevice));
  const char* names[] = {"registers",
                         "registers, two chains",
                         "dequantized from registers",
                         "dequantized, words and x from shared memory",
                         "16 tokens: dequantized from registers, 4 HMMAs",
                         "16 tokens, x from shared memory"};
  std::printf(
      "cycles a chunk (two dependent m16n8k16 HMMAs), %d chunks a warp, %d blocks; medians over warps\n",
      chunks, sms);
  std::printf("| operands | 1 warp an SM | 4 warps | 8 warps | 16 warps |\n|---|---|---|---|---|\n");
  for (int mode = 0; mode < 6; ++mode) {
    std::printf("| %s |", names[mode]);
    for (int warps : {1, 4, 8, 16}) {
      auto launch = [&] {
        const dim3 grid(sms), block(warps * 32);
        if (mode == 0) chain_kernel<0><<<grid, block>>>(chunks, init, out, cyc);
        if (mode == 1) chain_kernel<1><<<grid, block>>>(chunks, init, out, cyc);
        if (mode == 2) chain_kernel<2><<<grid, block>>>(chunks, init, out, cyc);
        if (mode == 3) chain_kernel<3><<<grid, block>>>(chunks, init, out, cyc);
        if (mode == 4) chain_kernel<4><<<grid, block>>>(chunks, init, out, cyc);
        if (mode == 5) chain_kernel<5><<<grid, block>>>(chunks, init, out, cyc);
      };
      launch();  // (warm: instruction cache, clocks)
      launch();
      TF_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<unsigned long long> c(size_t(sms) * warps);
      TF_CUDA_CHECK(cudaMemcpy(c.data(), cyc, c.size() * 8, cudaMemcpyDeviceToHost));
      std::sort(c.begin(), c.end());
      std::printf(" %.1f |", double(c[c.size() / 2]) / chunks);
    }
    std::printf("\n");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
