#pragma once
// Error checking for CUDA runtime and cuBLAS calls: every call is checked and turned into tf::Error
// with the failing expression, so a bad launch surfaces at the op that caused it.
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace tf::cuda {

[[noreturn]] inline void fail(const char* what, const char* expr, const char* file, int line) {
  throw ::tf::Error(std::string("CUDA error: ") + what + " in `" + expr + "` at " + file + ":" +
                    std::to_string(line));
}

}  // namespace tf::cuda

#define TF_CUDA_CHECK(expr)                                                                               \
  do {                                                                                                    \
    cudaError_t tf_err_ = (expr);                                                                         \
    if (tf_err_ != cudaSuccess) ::tf::cuda::fail(cudaGetErrorString(tf_err_), #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately (not asynchronous faults).
#define TF_CUDA_LAUNCH_CHECK() TF_CUDA_CHECK(cudaGetLastError())
