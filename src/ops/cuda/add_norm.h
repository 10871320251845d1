#pragma once
// What a consumer kernel needs to make its own input as add_rms_norm would (norm.cuh's add_norm_row):
// h = rms_norm(res + x) with the new residual stored out of place (other blocks still read res). Host and
// device code alike.
#include "core/dtype.h"

namespace tf::cuda {

struct AddNormArgs {
  const void* res = nullptr;  // [cols] bf16 residual (one row); null: the kernel's x is its input as given
  void* res_out = nullptr;    // [cols] bf16: res + x
  const void* w = nullptr;    // [cols] norm weight, `wt`
  DType wt = DType::BF16;
  float eps = 0.f, offset = 0.f;
};

}  // namespace tf::cuda
