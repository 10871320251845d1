// tf_bench_moe: the MoE shape benchmark (moe_shape.h), also `tensorfold bench --shape qwen3-30b-a3b`.
// Flags: --quick (batch 1 and 8 only, no prefill), --format bf16|mlx4 (one format only).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "moe_shape.h"

int main(int argc, char** argv) {
  tf::bench::MoeShapeOptions opt;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) opt.quick = true;
    if (std::strcmp(argv[i], "--format") == 0 && i + 1 < argc) opt.formats = {argv[++i]};
  }
  try {
    return tf::bench::run_moe_shape_bench(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
