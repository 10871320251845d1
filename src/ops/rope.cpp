// Rotary embedding frequencies from config, following transformers' ROPE_INIT_FUNCTIONS.
#include <cmath>

#include "core/error.h"
#include "ops/backend.h"

namespace tf {

namespace {

std::vector<float> default_inv_freq(int dim, float base) {
  // Computed as transformers does: base ** (arange(0, dim, 2).float() / dim), in fp32.
  std::vector<float> f(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    float e = float(2 * i) / float(dim);
    f[i] = 1.0f / std::pow(base, e);
  }
  return f;
}

float yarn_get_mscale(float scale, float mscale) {
  if (scale <= 1.f) return 1.f;
  return 0.1f * mscale * std::log(scale) + 1.f;
}

void apply_llama3(const RopeConfig& c, std::vector<float>& inv) {
  const float pi = 3.14159265358979323846f;
  float old_ctx = float(c.original_max_position);
  float low_wavelen = old_ctx / c.low_freq_factor;
  float high_wavelen = old_ctx / c.high_freq_factor;
  for (auto& f : inv) {
    float wavelen = 2 * pi / f;
    float scaled = wavelen > low_wavelen ? f / c.factor : f;
    float smooth = (old_ctx / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
    float smoothed = (1 - smooth) * scaled / c.factor + smooth * scaled;
    bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
}

void apply_yarn(const RopeConfig& c, int dim, float base, std::vector<float>& inv, float* attention_factor) {
  float factor = c.factor;
  float orig = float(c.original_max_position > 0 ? c.original_max_position : c.max_position);
  if (c.attention_factor > 0) {
    *attention_factor = c.attention_factor;
  } else if (c.mscale > 0 && c.mscale_all_dim > 0) {
    *attention_factor = yarn_get_mscale(factor, c.mscale) / yarn_get_mscale(factor, c.mscale_all_dim);
  } else {
    *attention_factor = yarn_get_mscale(factor, 1.f);
  }
  const double pi = 3.14159265358979323846;
  auto correction_dim = [&](float num_rot) {
    return (dim * std::log(orig / (num_rot * 2 * pi))) / (2 * std::log(base));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  std::vector<float> extrapolation = default_inv_freq(dim, base);
  for (int i = 0; i < dim / 2; ++i) {
    // As torch does it: float32 tensor arithmetic with the bounds as scalars.
    float ramp = (float(i) - float(low)) / float(high - low);
    ramp = std::min(1.f, std::max(0.f, ramp));
    float extrapolation_factor = 1.f - ramp;
    float interp = extrapolation[i] / factor;
    inv[i] = interp * (1 - extrapolation_factor) + extrapolation[i] * extrapolation_factor;
  }
}

}  // namespace

RopeParams make_rope(const RopeConfig& c, int context) {
  RopeParams p;
  p.head_dim = c.head_dim;
  p.rotary_dim = int(float(c.head_dim) * c.partial_rotary_factor);
  p.rotary_dim -= p.rotary_dim % 2;
  TF_CHECK(p.rotary_dim > 0, "rope: rotary dimension is zero");
  float base = c.theta;
  const std::string& t = c.scaling_type;
  if (t == "dynamic") {
    // transformers recomputes the base once the sequence passes the original length; we fix it at the
    // allocated context so a token's arithmetic never depends on how long the stream has become.
    int orig = c.original_max_position > 0 ? c.original_max_position : c.max_position;
    if (context > orig && orig > 0) {
      float seq = float(context);
      base = base * std::pow((c.factor * seq / float(orig)) - (c.factor - 1),
                             float(p.rotary_dim) / float(p.rotary_dim - 2));
    }
  }
  p.inv_freq = default_inv_freq(p.rotary_dim, base);
  if (t.empty() || t == "default" || t == "dynamic") {
  } else if (t == "linear") {
    for (auto& f : p.inv_freq) f /= c.factor;
  } else if (t == "llama3") {
    apply_llama3(c, p.inv_freq);
  } else if (t == "yarn") {
    apply_yarn(c, p.rotary_dim, base, p.inv_freq, &p.attention_factor);
  } else {
    throw Error("rope_scaling type '" + t + "' is not supported (supported: linear, dynamic, llama3, yarn)");
  }
  return p;
}

}  // namespace tf
