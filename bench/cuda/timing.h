#pragma once
// Timing helpers shared by the GPU benchmarks (tf_bench_cuda, tf_bench_quant, tf_bench_moe).
#include <cuda_runtime.h>

#include <functional>

namespace tf::bench {

// Median of `reps` timings (ms) of fn() on stream s, after `warm` untimed calls.
double time_ms(cudaStream_t s, const std::function<void()>& fn, int warm = 2, int reps = 7);

// fn() captured once into a CUDA graph and timed by replays (median of 11 after 3 warm-ups); eager
// timing when the capture fails. `captured` (optional) tells which.
double time_graph_ms(cudaStream_t s, const std::function<void()>& fn, bool* captured = nullptr);

}  // namespace tf::bench
