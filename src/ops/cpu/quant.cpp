#include "ops/cpu/quant.h"

#include <vector>

#include "core/error.h"

namespace tf {

namespace {

float load_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      throw Error(std::string("quantized weight: scales must be F32, BF16 or F16, got ") + dtype_name(t));
  }
}

// Rounds an f32 to dtype `t` and back. The volatile keeps the compiler from fusing the product and the sum
// of the caller into one fma, which would skip a rounding mx.dequantize performs.
inline float round_to(float x, DType t) {
  volatile float v = x;
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) v[i] = f8e4m3_to_f32(uint8_t(i));
  }
};
const Fp8Table& fp8_table() {
  static const Fp8Table t;
  return t;
}

}  // namespace

void check_quantized_linear(const LinearWeight& w) {
  const int64_t out = w.out_features, in = w.in_features, g = w.group_size;
  auto fail = [&](const std::string& why) {
    throw Error("quantized weight [" + std::to_string(out) + ", " + std::to_string(in) + "]: " + why);
  };
  if (g <= 0) fail("group size must be positive");
  if (w.format == LinearWeight::Format::MlxAffine) {
    if (w.bits < 2 || w.bits > 8 || w.bits == 7)
      fail(std::to_string(w.bits) + "-bit is not an MLX affine width");
    if (in % g != 0) fail("input size is not a multiple of the group size " + std::to_string(g));
    if (w.weight.dtype() != DType::U32 || w.weight.shape() != std::vector<int64_t>{out, in * w.bits / 32})
      fail("packed weight must be U32 [out, in*bits/32], got " + w.weight.describe());
    for (const Tensor* t : {&w.scales, &w.biases})
      if (t->shape() != std::vector<int64_t>{out, in / g})
        fail("scales/biases must be [out, in/group], got " + t->describe());
    if (w.scales.dtype() != w.biases.dtype()) fail("scales and biases differ in dtype");
  } else if (w.format == LinearWeight::Format::Fp8Block) {
    if (w.weight.dtype() != DType::F8_E4M3 || w.weight.shape() != std::vector<int64_t>{out, in})
      fail("FP8 weight must be F8_E4M3 [out, in], got " + w.weight.describe());
    if (w.scales.dtype() != DType::F32 || w.scales.shape() != std::vector<int64_t>{out, ceil_div(in, g)})
      fail("FP8 scales must be F32 [out, ceil(in/group)], got " + w.scales.describe());
  } else {
    fail("not a quantized format");
  }
  for (const Tensor* t : {&w.weight, &w.scales})
    if (t->device() != Device::CPU || !t->is_contiguous()) fail("tensors must be contiguous host tensors");
}

namespace {

// One MLX row with the product and sum rounded in dtype `t`.
void mlx_row(const LinearWeight& w, int64_t row, DType t, float* out) {
  const int64_t in = w.in_features, g = w.group_size, groups = in / g;
  const uint32_t* q = w.weight.data<uint32_t>() + row * (in * w.bits / 32);
  const DType st = w.scales.dtype();
  for (int64_t gi = 0; gi < groups; ++gi) {
    const float s = load_float(w.scales.raw(), st, row * groups + gi);
    const float b = load_float(w.biases.raw(), st, row * groups + gi);
    for (int64_t i = gi * g; i < (gi + 1) * g; ++i)
      out[i] = round_to(round_to(s * float(mlx_unpack(q, w.bits, i)), t) + b, t);
  }
}

}  // namespace

void dequantize_row(const LinearWeight& w, int64_t row, float* out) {
  const int64_t in = w.in_features, g = w.group_size, groups = ceil_div(in, g);
  if (w.format == LinearWeight::Format::MlxAffine) {
    mlx_row(w, row, DType::F32, out);
    return;
  }
  const uint8_t* q = w.weight.data<uint8_t>() + row * in;
  const float* sc = w.scales.data<float>() + row * groups;
  const float* lut = fp8_table().v;
  for (int64_t i = 0; i < in; ++i) out[i] = lut[q[i]] * sc[i / g];
}

Tensor dequantize(const LinearWeight& w, DType dtype) {
  check_quantized_linear(w);
  TF_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
           "dequantize: target dtype must be F32, BF16 or F16");
  const int64_t out = w.out_features, in = w.in_features;
  Tensor t = Tensor::empty({out, in}, dtype);
  std::vector<float> row(static_cast<size_t>(in));
  const bool mlx = w.format == LinearWeight::Format::MlxAffine;
  for (int64_t r = 0; r < out; ++r) {
    if (mlx)
      mlx_row(w, r, w.scales.dtype(), row.data());
    else
      dequantize_row(w, r, row.data());
    if (dtype == DType::F32) {
      std::copy(row.begin(), row.end(), t.data<float>() + r * in);
      continue;
    }
    uint16_t* d = t.data<uint16_t>() + r * in;
    for (int64_t i = 0; i < in; ++i) d[i] = dtype == DType::BF16 ? f32_to_bf16(row[i]) : f32_to_f16(row[i]);
  }
  return t;
}

Tensor dequantize_linear(const LinearWeight& w) {
  check_quantized_linear(w);
  Tensor t = Tensor::empty({w.out_features, w.in_features}, DType::F32);
  for (int64_t r = 0; r < w.out_features; ++r) dequantize_row(w, r, t.data<float>() + r * w.in_features);
  return t;
}

}  // namespace tf
