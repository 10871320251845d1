// tf_bench_cuda: the CUDA backend at real model shapes with random weights generated on the GPU (the
// benchmark itself is tf_shape_bench, shape_bench.h; `tensorfold bench --shape` runs the same).
// Flags: --quick (512 context, prefill 512 only), --prefill (prefill 512 and 4k only), --decode (the M = 1/8
// linears and the decode rows only), --small (Qwen3-0.6B only), --shape ID (that shape only), --linears (the
// per-shape linear table alone), --verify (the verify-cost sweep), --profile-forward (one eager decode
// forward between cudaProfilerStart/Stop, for ncu --profile-from-start off),
// --profile-prefill N (the same for a prefill of N tokens), --format LIST (weight formats of the linears,
// comma-separated: bf16, mlx4, mlx8, fp8; shape_bench.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>

#include "shape_bench.h"

int main(int argc, char** argv) {
  tf::bench::ShapeBenchOptions opt;
  bool linears = false, profile = false, verify = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--profile-forward")) profile = true;
    if (!std::strcmp(argv[i], "--profile-prefill") && i + 1 < argc) {
      profile = true;
      opt.profile_prefill = std::atoi(argv[++i]);
    }
    if (!std::strcmp(argv[i], "--quick")) opt.quick = true;
    if (!std::strcmp(argv[i], "--prefill")) opt.prefill_only = true;
    if (!std::strcmp(argv[i], "--small")) opt.shapes = {"qwen3-0.6b"};
    if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) opt.shapes = {argv[++i]};
    if (!std::strcmp(argv[i], "--decode")) opt.decode_only = true;
    if (!std::strcmp(argv[i], "--verify")) verify = true;
    if (!std::strcmp(argv[i], "--linears")) linears = true;
    if (!std::strcmp(argv[i], "--format") && i + 1 < argc) {
      opt.formats.clear();
      std::istringstream list(argv[++i]);
      for (std::string f; std::getline(list, f, ',');) opt.formats.push_back(f);
    }
  }
  // One mode, in this order of precedence; --verify and --profile-forward measure the first shape.
  using Mode = tf::bench::ShapeBenchMode;
  opt.mode = linears ? Mode::Linears : profile ? Mode::ProfileForward : verify ? Mode::Verify : Mode::Full;
  try {
    return tf::bench::run_shape_bench(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf_bench_cuda: %s\n", e.what());
    return 1;
  }
}
