#pragma once
// A small tensor: shape, strides (in elements), dtype, device and a shared buffer that is either owned
// (allocated here) or borrowed (an mmap'd checkpoint, a CUDA pool). Not a framework: ops live in ops/.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tf {

enum class Device : uint8_t { CPU, CUDA };

class Tensor {
 public:
  Tensor() = default;

  // Owning CPU tensor, zero-initialised.
  static Tensor zeros(std::vector<int64_t> shape, DType dtype);
  // Owning tensor on `device` (CUDA memory through the registered allocator), contents undefined.
  static Tensor empty(std::vector<int64_t> shape, DType dtype, Device device = Device::CPU);
  // Borrowed view of memory someone else keeps alive; `keepalive` (may be null) is held by the tensor.
  static Tensor borrow(void* data, std::vector<int64_t> shape, DType dtype, Device device,
                       std::shared_ptr<void> keepalive = nullptr);

  bool defined() const { return data_ != nullptr || !shape_.empty(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <class T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  // Views sharing the buffer.
  Tensor view(std::vector<int64_t> shape) const;        // contiguous only; one dim may be -1
  Tensor slice_rows(int64_t begin, int64_t end) const;  // along dim 0
  Tensor row(int64_t i) const { return slice_rows(i, i + 1).view(drop_first(shape_)); }

  // Host copy converted to f32 (CPU tensors of float dtypes).
  std::vector<float> to_f32_vector() const;
  std::string describe() const;  // "bf16[4096, 128] cpu"

 private:
  static std::vector<int64_t> drop_first(const std::vector<int64_t>& s) {
    return std::vector<int64_t>(s.begin() + 1, s.end());
  }
  std::vector<int64_t> shape_, strides_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  void* data_ = nullptr;
  std::shared_ptr<void> buffer_;  // keeps the memory alive
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);

// The CUDA backend registers its allocator here so core stays free of CUDA.
struct DeviceAllocator {
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> free;
};
void set_device_allocator(Device d, DeviceAllocator a);

}  // namespace tf
