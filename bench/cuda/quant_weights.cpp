#include "quant_weights.h"

#include <cmath>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/quant_linear.h"

namespace tf::bench {

LinearWeight rand_linear_weight(Backend& be, WeightFormat f, int64_t n, int64_t k, uint64_t seed) {
  cudaStream_t s = cuda::stream_of(be);
  LinearWeight w;
  w.in_features = k, w.out_features = n;
  const float a = std::sqrt(3.f / float(k));  // unit-variance outputs for unit-variance inputs
  if (f == WeightFormat::Bf16) {
    w.weight = be.alloc({n, k}, DType::BF16);
    cuda::fill_uniform(be, w.weight, seed, -a, a);
  } else if (f == WeightFormat::Fp8) {
    w.format = LinearWeight::Format::Fp8Block;
    w.bits = 8, w.group_size = 128;
    w.weight = be.alloc({n, k}, DType::F8_E4M3);
    cuda::fill_random_bytes(w.weight.raw(), w.weight.nbytes(), seed, 0xBF, s);  // no NaN bytes
    w.scales = be.alloc({n, k / 128}, DType::F32);
    cuda::fill_uniform(be, w.scales, seed + 1, 0.5f * a, a);
  } else {
    const int bits = f == WeightFormat::Mlx4 ? 4 : 8;
    w.format = LinearWeight::Format::MlxAffine;
    w.bits = bits, w.group_size = 64;
    w.weight = be.alloc({n, k * bits / 32}, DType::U32);
    cuda::fill_random_bytes(w.weight.raw(), w.weight.nbytes(), seed, 0xFF, s);
    // The device layout of bf16 scales and biases (quant_linear.h): one U32 per group, bf16 scale | bf16
    // bias << 16. Random bytes masked with 0x3B are finite bf16 values in [0, 2^-7): fine for timing, and
    // 4-bit scales small enough to be stored as upload_linear stores them (prescale_mlx4).
    w.scales = be.alloc({n, k / 64}, DType::U32);
    cuda::fill_random_bytes(w.scales.raw(), w.scales.nbytes(), seed + 1, 0x3B, s);
    if (bits == 4) cuda::prescale_mlx4(w, s);
    if (bits == 4) cuda::reserve_q4_ks_workspace(be);  // (upload_linear would make it)
  }
  return w;
}

int64_t linear_weight_bytes(const LinearWeight& w) {
  int64_t bytes = 0;
  for (const Tensor* t : {&w.weight, &w.scales, &w.biases})
    if (t->defined()) bytes += int64_t(t->nbytes());
  return bytes;
}

}  // namespace tf::bench
