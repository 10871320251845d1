#pragma once
// The real-shape benchmark of the CUDA backend (tf_bench_cuda, `tensorfold bench --shape`): random bf16
// weights of a model shape made on the GPU (no checkpoint, no download); decode tok/s at batch 1/8/32 and
// 512/8k context, prefill 512/4k/32k, a cuBLAS-linear baseline of the same forward, and each as a fraction
// of the rooflines measured in the same run (device copy bandwidth, cuBLAS GEMM rate). With quantized
// formats (`--format mlx4,..`), the same forward with random quantized linears: decode tok/s, roofline
// fraction on each format's own bytes, and the ratio to the bf16 forward timed the same way in the run.
// This header has no CUDA dependency: a CPU-only build reads the shape and format tables to validate
// `--shape` and `--format`.
#include <string>
#include <vector>

#include "moe_shape.h"
#include "weight_format.h"

namespace tf::bench {

// A dense decoder's dimensions, by the id `--shape` takes.
struct ModelShape {
  const char* id;    // qwen3-8b
  const char* name;  // Qwen3-8B, as the report prints it
  int layers, hidden, inter, heads, kv_heads, head_dim, vocab;
  bool tied;  // the lm_head is the embedding
};
inline constexpr ModelShape kModelShapes[] = {
    {"qwen3-8b", "Qwen3-8B", 36, 4096, 12288, 32, 8, 128, 151936, false},
    {"qwen3-0.6b", "Qwen3-0.6B", 28, 1024, 3072, 16, 8, 128, 151936, true},
};

// The values `tensorfold bench --shape` accepts: every dense id, the MoE shape (moe_shape.h), then "all".
inline std::vector<std::string> shape_bench_choices() {
  std::vector<std::string> c;
  for (const ModelShape& s : kModelShapes) c.push_back(s.id);
  c.push_back(kMoeShapeId);
  c.push_back("all");
  return c;
}

enum class ShapeBenchMode {
  Full,            // ceilings, linear table, decode, prefill, the summary table
  Linears,         // ceilings and the per-shape linear table only
  Verify,          // the verify-cost sweep (k drafts over a decode step) at 512 and 8k context
  ProfileForward,  // one eager decode forward between cudaProfilerStart/Stop (ncu --profile-from-start off)
};

struct ShapeBenchOptions {
  std::vector<std::string> shapes;  // ids of kModelShapes in run order; empty: all (Verify and
                                    // ProfileForward use the first)
  ShapeBenchMode mode = ShapeBenchMode::Full;
  bool quick = false;         // 512 context and prefill 512 only (no 8k decode, no 4k/32k prefill)
  int profile_prefill = 0;    // ProfileForward: a prefill of this many tokens instead of a b=1 decode step
  bool prefill_only = false;  // Full mode: the prefill rows of 512 and 4k only (no linear table, no decode)
  bool decode_only = false;   // Full mode: the M = 1 and 8 linears and the decode rows only (no prefill)
  // Ids of kWeightFormats. "bf16": the full report above. Each quantized format (Full mode): decode
  // b=1/8/16/32 at 512 (and 8k unless quick) context and prefill 512 (and 4k unless quick) of the forward
  // with that format's linears (qkv, o, gate_up, down, lm_head; embeddings bf16), next to the bf16 forward
  // timed the same way. Verify: a sweep per format; ProfileForward: the first format; Linears: bf16 only.
  std::vector<std::string> formats = {"bf16"};
  int device = 0;
  std::string program = "tf_bench_cuda";  // prefix of the no-device message
};

// Runs the benchmark and prints its report to stdout. Returns 0, or 2 when there is no usable CUDA
// device (stderr says why). Throws tf::InvalidRequest for an unknown shape or format id (or a quantized
// format with Linears), tf::Error on failure.
int run_shape_bench(const ShapeBenchOptions& opt);

}  // namespace tf::bench
