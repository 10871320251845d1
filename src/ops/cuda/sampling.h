#pragma once
// Launcher of the keyed sampling kernel (Backend::sample_rows on the CUDA backend).
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

struct DeviceRowSampling {  // RowSampling as the kernel reads it
  float temperature;
  uint64_t seed;
  int64_t position;
};

// out[r] = keyed sample of logits row r (F32 [n, vocab]) under rows[r]; rows and out are device memory.
void sample_rows(const float* logits, int64_t vocab, const DeviceRowSampling* rows, int n, int32_t* out,
                 cudaStream_t s);

}  // namespace tf::cuda
