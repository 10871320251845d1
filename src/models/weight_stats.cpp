#include "models/weight_stats.h"

#include <map>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "models/quant_config.h"

namespace tf {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Parameters a tensor stands for: MLX-packed weights count their unpacked values; their scales and biases,
// and FP8 scales, count none.
int64_t logical_params(const CheckpointSummary& s, const QuantConfig& q, const std::string& name,
                       const TensorInfo& t) {
  if (ends_with(name, ".scales") || ends_with(name, ".biases") || ends_with(name, ".weight_scale_inv") ||
      ends_with(name, ".weight_scale") || ends_with(name, ".input_scale"))
    return 0;
  if (ends_with(name, ".weight") && t.dtype == DType::U32 && t.shape.size() == 2) {
    const std::string base = name.substr(0, name.size() - 7);
    auto sc = s.tensors.find(base + ".scales");
    const int group = q.layer(base).group_size;
    if (sc != s.tensors.end() && sc->second.shape.size() == 2 && group > 0)
      return t.shape[0] * sc->second.shape[1] * group;
  }
  return t.numel();
}

}  // namespace

WeightStats weight_stats(const CheckpointSummary& s) {
  QuantConfig quant;
  try {
    quant = parse_quant_config(s.config);
  } catch (const Error&) {  // an unsupported variant: callers report parse_spec's reason
  }
  WeightStats w;
  std::map<std::string, int64_t> dtypes;
  for (const auto& [name, t] : s.tensors) {
    (name.rfind("mtp.", 0) == 0 ? w.mtp_parameters : w.parameters) += logical_params(s, quant, name, t);
    dtypes[dtype_name(t.dtype)] += t.numel();
  }
  int64_t best = -1;
  for (const auto& [d, n] : dtypes)
    if (n > best) best = n, w.format = d;
  w.mixed_dtypes = dtypes.size() > 1;
  if (quant.method != QuantConfig::Method::None) w.format = quant.describe(), w.mixed_dtypes = false;
  return w;
}

}  // namespace tf
