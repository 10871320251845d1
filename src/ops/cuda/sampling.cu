// Keyed sampling on the GPU (Backend::sample_rows). A row's ids are split into fixed spans of kSpan ids,
// one block each: each thread scores its ids and keeps its best (score, id), the block merges its threads'
// bests, and the row's last block to finish (a ticket a row) merges the spans' bests. The best is the
// highest score, the lowest id on exact ties, never a NaN score (the reference's strict '>' never picks
// one), and id 0 when id 0's score is NaN (the reference starts from id 0, and nothing compares greater
// than a NaN). That is a total order, so the merge order cannot change the pick. The score of an id is the
// host reference's arithmetic (core/keyed_random.h: float division by T, then double Gumbel noise), so the
// token does not depend on the launch shape, on other rows, or on whether the host or the device sampled it.
//
// Before (one 1024-thread block a row scanning all 151,936 ids) the product's b=1 forward of the 8B shape
// took 4.248 ms at T = 0 and 4.378 ms at T = 0.7 (run 291: ~0.13 ms of double logs on one SM); with spans,
// 4.206 and 4.239 ms (run 292).
#include <cuda_runtime.h>

#include "core/keyed_random.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/sampling.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr int kSpan = kThreads * kPerThread;  // ids a block
constexpr int32_t kNone = INT32_MAX;          // no id yet: every score so far -inf or NaN

// A start of (-inf, kNone) and strict '>' keep -inf and NaN scores out (neither compares greater than
// -inf), so a best is kNone only where every id's score is -inf or NaN -- where the reference answers 0.
__device__ __forceinline__ bool better(const SampleBest& a, const SampleBest& b) {
  return a.score > b.score || (a.score == b.score && a.id < b.id);
}

__device__ __forceinline__ SampleBest shfl_best(const SampleBest& b, int mask) {
  return {__shfl_xor_sync(0xffffffffu, b.score, mask), __shfl_xor_sync(0xffffffffu, b.id, mask)};
}

// The block's best of each thread's `best` (every thread gets it).
__device__ SampleBest block_best(SampleBest best, SampleBest* warp_best) {
  for (int m = 16; m > 0; m >>= 1) {
    const SampleBest o = shfl_best(best, m);
    if (better(o, best)) best = o;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // warp_best's earlier readers are done
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  best = warp_best[0];
  for (int w = 1; w < kThreads / 32; ++w)
    if (better(warp_best[w], best)) best = warp_best[w];
  return best;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* __restrict__ logits, int64_t vocab, const DeviceRowSampling* __restrict__ rows,
                  int32_t* __restrict__ out, SampleBest* __restrict__ spans, int* __restrict__ tickets) {
  const int r = blockIdx.y, span = blockIdx.x, nspans = gridDim.x;
  const float* row = logits + int64_t(r) * vocab;
  const DeviceRowSampling p = rows[r];
  const int64_t base = int64_t(span) * kSpan + threadIdx.x;
  float v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * kThreads;
    v[k] = i < vocab ? row[i] : 0.f;
  }
  SampleBest best{-INFINITY, kNone};
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {  // ids rise along the thread's walk: strict '>' keeps the lowest
    const int64_t i = base + int64_t(k) * kThreads;
    if (i >= vocab) break;
    const double s = p.temperature <= 0.f
                         ? double(v[k])
                         : double(v[k] / p.temperature) + gumbel_noise(p.seed, p.position, int32_t(i));
    if (s > best.score) best = {s, int32_t(i)};
  }
  __shared__ SampleBest warp_best[kThreads / 32];
  __shared__ bool last;
  best = block_best(best, warp_best);
  if (threadIdx.x == 0) {
    spans[int64_t(r) * nspans + span] = best;
    __threadfence();  // the span's best before the ticket
    last = atomicAdd(&tickets[r], 1) == nspans - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other spans' bests after their tickets
  SampleBest b{-INFINITY, kNone};
  for (int s = threadIdx.x; s < nspans; s += kThreads) {
    const SampleBest* src = spans + int64_t(r) * nspans + s;
    const SampleBest o{__ldcg(&src->score), __ldcg(&src->id)};
    if (better(o, b)) b = o;
  }
  b = block_best(b, warp_best);
  if (threadIdx.x == 0) {
    out[r] = isnan(row[0]) || b.id == kNone ? 0 : b.id;
    tickets[r] = 0;  // ready for the next call
  }
}

}  // namespace

int sample_spans(int64_t vocab) {
  return int((vocab + kSpan - 1) / kSpan);
}

void sample_rows(const float* logits, int64_t vocab, const DeviceRowSampling* rows, int n, int32_t* out,
                 SampleBest* spans, int* tickets, cudaStream_t s) {
  if (n == 0) return;
  TF_CHECK(n <= 65535, "sample_rows: at most 65535 rows a call (a grid dimension), got " + std::to_string(n));
  sample_kernel<<<dim3(unsigned(sample_spans(vocab)), unsigned(n)), kThreads, 0, s>>>(logits, vocab, rows,
                                                                                      out, spans, tickets);
  TF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tf::cuda
