#pragma once
// The MoE shape benchmark (moe_shape.cpp; tf_bench_moe and `tensorfold bench --shape qwen3-30b-a3b`): a
// random-weight Qwen3-30B-A3B on the CUDA backend, in bf16 and as an mlx-lm 4-bit conversion: decode tok/s
// at batch 1/8/32 (context 512) against the roofline on the bytes a step reads, the one-kernel decode step
// at batch 1 next to the op chain's (its logits checked bit for bit, timed alike; TF_MOE_BENCH_STEP=0 skips
// it), timing ablations of the batch-1 step, the host-routed MoE path at batch 1, and prefill 4k
// (docs/moe.md).
// This header has no CUDA dependency: a CPU-only build reads the shape id to validate `--shape`.
#include <string>
#include <vector>

namespace tf::bench {

inline constexpr const char* kMoeShapeId = "qwen3-30b-a3b";

struct MoeShapeOptions {
  bool quick = false;                                   // batch 1 and 8 only, no prefill
  std::vector<std::string> formats = {"bf16", "mlx4"};  // in this order whatever the list's
  int device = 0;
  std::string program = "tf_bench_moe";  // prefix of the no-device message
};

// Prints the report to stdout. Returns 0, or 2 when there is no usable CUDA device (stderr says why).
// Throws tf::InvalidRequest for a format other than bf16 and mlx4.
int run_moe_shape_bench(const MoeShapeOptions& opt);

}  // namespace tf::bench
