#pragma once
// Error checking for CUDA runtime and cuBLAS calls: every call is checked and turned into tf::Error
// with the failing expression, so a bad launch surfaces at the op that caused it.
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace tf::cuda {

[[noreturn]] inline void fail(cudaError_t err, const char* expr, const char* file, int line) {
  const std::string msg = std::string("CUDA error: ") + cudaGetErrorString(err) + " in `" + expr + "` at " +
                          file + ":" + std::to_string(line);
  if (err == cudaErrorMemoryAllocation) throw ::tf::DeviceOutOfMemory(msg);
  throw ::tf::Error(msg);
}

}  // namespace tf::cuda

#define TF_CUDA_CHECK(expr)                                                           \
  do {                                                                                \
    cudaError_t tf_err_ = (expr);                                                     \
    if (tf_err_ != cudaSuccess) ::tf::cuda::fail(tf_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately (not asynchronous faults).
#define TF_CUDA_LAUNCH_CHECK() TF_CUDA_CHECK(cudaGetLastError())
