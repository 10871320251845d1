#include "ops/backend.h"

#include <cstring>

#include "core/error.h"

namespace tf {

void Backend::read_raw(const Tensor& src, size_t offset, size_t bytes, void* dst) {
  TF_CHECK(src.device() == Device::CPU, name() + ": read_raw is not implemented for device tensors");
  TF_CHECK(offset + bytes <= src.nbytes(), "read_raw out of range");
  std::memcpy(dst, static_cast<const char*>(src.raw()) + offset, bytes);
}

void Backend::write_raw(Tensor& dst, size_t offset, const void* src, size_t bytes) {
  TF_CHECK(dst.device() == Device::CPU, name() + ": write_raw is not implemented for device tensors");
  TF_CHECK(offset + bytes <= dst.nbytes(), "write_raw out of range");
  std::memcpy(static_cast<char*>(dst.raw()) + offset, src, bytes);
}

}  // namespace tf
