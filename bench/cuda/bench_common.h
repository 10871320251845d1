#pragma once
// Helpers shared by the GPU benchmarks (tf_bench_cuda, tf_bench_quant, tf_bench_moe): timing and the
// batch metadata of decode and prefill steps.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace tf::bench {

// Median of `reps` timings (ms) of fn() on stream s, after `warm` untimed calls.
double time_ms(cudaStream_t s, const std::function<void()>& fn, int warm = 2, int reps = 7);

// fn() captured once into a CUDA graph and timed by replays (median of 11 after 3 warm-ups); eager
// timing when the capture fails. `captured` (optional) tells which.
double time_graph_ms(cudaStream_t s, const std::function<void()>& fn, bool* captured = nullptr);

// fn() captured into a CUDA graph and replayed, untimed, for `seconds` of wall time (eagerly where the
// capture fails): the GPU's steady state before a timing. On an H100 a latency-bound step ran ~2-3% faster
// after ~3-10 s of work than in its first second, across processes too, with the SM and memory clocks fixed
// (runs 485-486).
void warm_graph_for(cudaStream_t s, const std::function<void()>& fn, double seconds);

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

// Whether the benches time q4_ks_kernel's cluster-fold configurations (5-6) and the attention's two-team
// decode loop: TF_BENCH_KS_CLUSTER=0 / TF_BENCH_DECODE_TEAMS=0 skip them (the device scripts, after their
// tests failed or hung).
bool ks_cluster_benched();
bool decode_teams_benched();

// Stamps of `blocks` blocks, n a block (block b's stamp i at v[b * n + i]; 0 = not reached).
struct Stamps {
  std::vector<unsigned long long> v;
  int blocks = 0, n = 0;
  unsigned long long at(int b, int i) const { return v[size_t(b) * n + i]; }
  // Stamp j minus stamp i of each block that reached both.
  std::vector<double> deltas(int i, int j) const {
    std::vector<double> d;
    for (int b = 0; b < blocks; ++b)
      if (at(b, i) && at(b, j)) d.push_back(double(at(b, j)) - double(at(b, i)));
    return d;
  }
  // The earliest block's stamp i (~0 when no block reached it).
  unsigned long long first(int i) const {
    unsigned long long t = ~0ull;
    for (int b = 0; b < blocks; ++b)
      if (at(b, i)) t = std::min(t, at(b, i));
    return t;
  }
  // Stamp i's earliest, median and latest block in us after t0 (nothing where no block reached it).
  void print_one(int i, const char* name, unsigned long long t0) const {
    std::vector<double> d;
    for (int b = 0; b < blocks; ++b)
      if (at(b, i)) d.push_back((double(at(b, i)) - double(t0)) * 1e-3);  // (before t0: < 0)
    if (d.empty()) return;
    std::sort(d.begin(), d.end());
    std::printf(" | %s %.2f / %.2f / %.2f (%zu)", name, d.front(), d[d.size() / 2], d.back(), d.size());
  }
  // print_one of each stamp (the first `shown`; all when negative).
  void print(const char* what, const char* const* names, unsigned long long t0, int shown = -1) const {
    std::printf("%s stamps (us after the first block's wait; min / median / max over blocks):", what);
    for (int i = 0; i < (shown < 0 ? n : shown); ++i) print_one(i, names[i], t0);
  }
};

}  // namespace tf::bench
