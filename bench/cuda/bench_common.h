#pragma once
// Helpers shared by the GPU benchmarks (tf_bench_cuda, tf_bench_quant, tf_bench_moe): timing and the
// batch metadata of decode and prefill steps.
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

#include "ops/backend.h"

namespace tf::bench {

// Median of `reps` timings (ms) of fn() on stream s, after `warm` untimed calls.
double time_ms(cudaStream_t s, const std::function<void()>& fn, int warm = 2, int reps = 7);

// fn() captured once into a CUDA graph and timed by replays (median of 11 after 3 warm-ups); eager
// timing when the capture fails. `captured` (optional) tells which.
double time_graph_ms(cudaStream_t s, const std::function<void()>& fn, bool* captured = nullptr);

// Device-to-device copy bandwidth (GB/s, read + write) of 2 GiB of bf16, timed by time_ms(warm, reps): the
// decode roofline's denominator.
double copy_bandwidth_gbs(Backend& be, int warm = 2, int reps = 7);

// The CUDA backend of `device`, or null after "PROGRAM: the shape benchmark needs the CUDA backend: WHY" on
// stderr (the shape benchmarks then exit 2).
std::unique_ptr<Backend> shape_bench_backend(int device, const std::string& program);

// Blocks of 16 positions; tokens are arbitrary ids below 151,936 (the Qwen3 vocabulary every bench uses).
constexpr int kBenchBlock = 16;
// `batch` sequences, each verifying k drafts: k+1 rows at positions ctx-1-k .. ctx-1 (the number that turns
// acceptance into speed), distinct blocks per sequence; decode_meta is the k = 0 case.
BatchMeta verify_meta(int batch, int k, int ctx);
BatchMeta decode_meta(int batch, int ctx);
// One prompt of n tokens in one forward.
BatchMeta prefill_meta(int n);

}  // namespace tf::bench
