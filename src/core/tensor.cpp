#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace tf {

namespace {
DeviceAllocator& cuda_allocator() {
  static DeviceAllocator a;
  return a;
}
}  // namespace

void set_device_allocator(Device d, DeviceAllocator a) {
  TF_CHECK(d == Device::CUDA, "only the CUDA allocator can be registered");
  cuda_allocator() = std::move(a);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < shape.size(); ++i) o << (i ? ", " : "") << shape[i];
  o << ']';
  return o.str();
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto d : shape_) n *= d;
  return n;
}

bool Tensor::is_contiguous() const {
  return strides_ == contiguous_strides(shape_);
}

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  size_t bytes = std::max<size_t>(t.nbytes(), 1);
  if (device == Device::CPU) {
    bytes = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    TF_CHECK(p, "out of host memory allocating " + std::to_string(bytes) + " bytes");
    t.buffer_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  } else {
    auto& a = cuda_allocator();
    TF_CHECK(a.alloc, "CUDA tensor requested but no CUDA backend is initialised");
    void* p = a.alloc(bytes);
    auto f = a.free;
    t.buffer_ = std::shared_ptr<void>(p, [f](void* q) { f(q); });
  }
  t.data_ = t.buffer_.get();
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype, Device::CPU);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::borrow(void* data, std::vector<int64_t> shape, DType dtype, Device device,
                      std::shared_ptr<void> keepalive) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  t.data_ = data;
  t.buffer_ = std::move(keepalive);
  return t;
}

Tensor Tensor::view(std::vector<int64_t> shape) const {
  TF_CHECK(is_contiguous(), "view of a non-contiguous tensor " + describe());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TF_CHECK(infer < 0, "view: more than one -1");
      infer = int(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = known ? numel() / known : 0;
  Tensor t = *this;
  t.shape_ = std::move(shape);
  TF_CHECK(t.numel() == numel(), "view " + shape_str(t.shape_) + " does not fit " + describe());
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TF_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
           "slice_rows out of range on " + describe());
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * int64_t(dtype_size(dtype_));
  return t;
}

std::vector<float> Tensor::to_f32_vector() const {
  TF_CHECK(device_ == Device::CPU && is_contiguous(), "to_f32_vector needs a contiguous CPU tensor");
  std::vector<float> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) {
    switch (dtype_) {
      case DType::F32:
        out[i] = data<float>()[i];
        break;
      case DType::BF16:
        out[i] = bf16_to_f32(data<uint16_t>()[i]);
        break;
      case DType::F16:
        out[i] = f16_to_f32(data<uint16_t>()[i]);
        break;
      case DType::F64:
        out[i] = float(data<double>()[i]);
        break;
      case DType::I32:
        out[i] = float(data<int32_t>()[i]);
        break;
      case DType::I64:
        out[i] = float(data<int64_t>()[i]);
        break;
      default:
        throw Error(std::string("to_f32_vector: unsupported dtype ") + dtype_name(dtype_));
    }
  }
  return out;
}

std::string Tensor::describe() const {
  std::string d = dtype_name(dtype_);
  for (auto& c : d) c = char(std::tolower(c));
  return d + shape_str(shape_) + (device_ == Device::CPU ? " cpu" : " cuda");
}

}  // namespace tf
