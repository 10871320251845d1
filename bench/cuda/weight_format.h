#pragma once
// The weight formats the GPU benches time the linears in (`tensorfold bench --shape --format`,
// tf_bench_quant): bf16, MLX affine 4-bit and 8-bit with groups of 64, FP8 e4m3 with 128x128 block scales.
// No CUDA dependency: a CPU-only build reads the table to validate `--format`; quant_weights.h makes the
// random weights.
#include <string>
#include <vector>

namespace tf::bench {

enum class WeightFormat { Bf16, Mlx4, Mlx8, Fp8 };

struct WeightFormatInfo {
  WeightFormat format;
  const char* id;    // what `--format` takes
  const char* name;  // as the reports print it
};
inline constexpr WeightFormatInfo kWeightFormats[] = {
    {WeightFormat::Bf16, "bf16", "bf16"},
    {WeightFormat::Mlx4, "mlx4", "mlx 4-bit g64"},
    {WeightFormat::Mlx8, "mlx8", "mlx 8-bit g64"},
    {WeightFormat::Fp8, "fp8", "fp8 block 128"},
};

inline const WeightFormatInfo& weight_format_info(WeightFormat f) {
  for (const WeightFormatInfo& i : kWeightFormats)
    if (i.format == f) return i;
  return kWeightFormats[0];
}

// `items` joined by `sep` (the accepted values of an option, for its help and its errors).
inline std::string join_choices(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

// The values `--format` accepts, in table order.
inline std::vector<std::string> weight_format_choices() {
  std::vector<std::string> c;
  for (const WeightFormatInfo& i : kWeightFormats) c.push_back(i.id);
  return c;
}

}  // namespace tf::bench
