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

struct SampleBest {  // a span's best: its score and id
  double score;
  int32_t id;
};

// Spans a row's ids are split into (blocks a row; `spans` below holds n * sample_spans(vocab) entries).
int sample_spans(int64_t vocab);

// out[r] = keyed sample of logits row r (F32 [n, vocab]) under rows[r]. rows, out, spans and tickets are
// device memory; tickets: n ints, zero before the call and zero again after it (the kernel resets them).
void sample_rows(const float* logits, int64_t vocab, const DeviceRowSampling* rows, int n, int32_t* out,
                 SampleBest* spans, int* tickets, cudaStream_t s);

}  // namespace tf::cuda
