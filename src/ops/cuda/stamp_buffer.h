#pragma once
// Benches: a device buffer of timestamps (globaltimer ns or clock64 cycles, 64-bit words) for the kernels'
// stamps switches (set_attention_stamps, set_moe_decode_stamps, set_q4_stamps): zeroed when allocated, freed
// when turned off. Host code only; a kernel writes through get().
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "ops/cuda/cuda_check.h"

namespace tf::cuda {

class StampBuffer {
 public:
  // On: `words` zeroed words (kept if already allocated); off: freed once the device is idle.
  void set(bool on, size_t words) {
    if (on && !p_) {
      TF_CUDA_CHECK(cudaMalloc(&p_, words * 8));
      TF_CUDA_CHECK(cudaMemset(p_, 0, words * 8));
    } else if (!on && p_) {
      TF_CUDA_CHECK(cudaDeviceSynchronize());
      TF_CUDA_CHECK(cudaFree(p_));
      p_ = nullptr;
    }
  }
  unsigned long long* get() const { return p_; }
  // Words [offset, offset + n) once the device is idle (n zeros when off).
  std::vector<unsigned long long> read(size_t offset, size_t n) const {
    std::vector<unsigned long long> v(n);
    if (p_ && n) {
      TF_CUDA_CHECK(cudaDeviceSynchronize());
      TF_CUDA_CHECK(cudaMemcpy(v.data(), p_ + offset, n * 8, cudaMemcpyDeviceToHost));
    }
    return v;
  }

 private:
  unsigned long long* p_ = nullptr;
};

}  // namespace tf::cuda
