#pragma once
// What a checkpoint's weights amount to, from its headers alone: parameters (MLX-packed weights counted
// unpacked, quantization scales not at all) and the weight format in words. Shared by `tensorfold info`
// and the engine's startup report.
#include <cstdint>
#include <string>

namespace tf {

struct CheckpointSummary;

struct WeightStats {
  int64_t parameters = 0;      // excluding an MTP head
  int64_t mtp_parameters = 0;  // mtp.* tensors
  std::string format;          // "BF16", "mlx affine 4-bit, group 64", ...
  bool mixed_dtypes = false;   // dense tensors of several dtypes
};

WeightStats weight_stats(const CheckpointSummary& s);

}  // namespace tf
