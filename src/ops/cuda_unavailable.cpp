// make_cuda_backend() for builds without nvcc: the CUDA backend is not compiled in.
#ifndef TF_HAVE_CUDA
#include "ops/backend.h"

namespace tf {
std::unique_ptr<Backend> make_cuda_backend(int, std::string* why) {
  if (why) *why = "this build of tensorfold has no CUDA backend (built without nvcc)";
  return nullptr;
}
}  // namespace tf
#endif
