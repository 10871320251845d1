#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/mapped_file.h"
#include "core/error.h"

namespace tf {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error(path + ": " + problem);
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

uint64_t safetensors_header_length(const uint8_t* prefix, uint64_t file_size, const std::string& path) {
  if (file_size < 8)
    fail(path, "file is " + std::to_string(file_size) +
                   " bytes, too short for a safetensors header (truncated or not safetensors)");
  uint64_t n = read_le64(prefix);
  if (n > kMaxSafetensorsHeaderBytes)
    fail(path,
         "header length " + std::to_string(n) + " is implausibly large (corrupt file or not safetensors)");
  if (n > file_size - 8)
    fail(path, "header length " + std::to_string(n) + " exceeds the file size of " +
                   std::to_string(file_size) + " bytes (corrupt or truncated file)");
  return n;
}

namespace {

std::string quoted(const std::string& name) {
  return "tensor '" + name + "'";
}

std::string offsets_str(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

// A JSON value that is a non-negative integer that fits in int64.
bool as_count(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    if (v.get<int64_t>() < 0) return false;
    *out = uint64_t(v.get<int64_t>());
  } else {
    return false;
  }
  return *out <= uint64_t(INT64_MAX);
}

TensorInfo parse_entry(const std::string& name, const json& e, uint64_t data_size, const std::string& path) {
  if (!e.is_object()) fail(path, quoted(name) + " is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) fail(path, quoted(name) + " has no \"" + key + "\"");
  TensorInfo t;
  t.file = path;
  const json& dt = e["dtype"];
  if (!dt.is_string() || !dtype_from_name(dt.get<std::string>(), &t.dtype))
    fail(path, quoted(name) + " has unknown dtype " + dt.dump());
  const json& sh = e["shape"];
  if (!sh.is_array()) fail(path, quoted(name) + " shape " + sh.dump() + " is not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : sh) {
    uint64_t v;
    if (!as_count(d, &v)) fail(path, quoted(name) + " shape " + sh.dump() + " is not non-negative integers");
    t.shape.push_back(int64_t(v));
    if (v != 0 && numel > uint64_t(INT64_MAX) / v) overflow = true;
    numel *= v;
  }
  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !as_count(off[0], &t.data_begin) ||
      !as_count(off[1], &t.data_end))
    fail(path, quoted(name) + " data_offsets " + off.dump() + " are not two non-negative integers");
  if (t.data_end < t.data_begin)
    fail(path, quoted(name) + " data_offsets " + off.dump() + " end before they begin");
  if (t.data_end > data_size)
    fail(path, quoted(name) + " data_offsets " + offsets_str(t.data_begin, t.data_end) +
                   " exceed the data area of " + std::to_string(data_size) + " bytes");
  uint64_t esize = dtype_size(t.dtype);
  if (overflow || (numel != 0 && numel > uint64_t(INT64_MAX) / esize) ||
      numel * esize != t.data_end - t.data_begin)
    fail(path, quoted(name) + " is " + dtype_name(t.dtype) + shape_str(t.shape) + " but data_offsets " +
                   offsets_str(t.data_begin, t.data_end) + " hold " +
                   std::to_string(t.data_end - t.data_begin) + " bytes");
  return t;
}

void check_no_overlap(const std::map<std::string, TensorInfo>& tensors, const std::string& path) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> byoff;
  for (const auto& [n, t] : tensors)
    if (t.nbytes() > 0) byoff.push_back({&n, &t});
  std::sort(byoff.begin(), byoff.end(),
            [](const auto& a, const auto& b) { return a.second->data_begin < b.second->data_begin; });
  for (size_t i = 1; i < byoff.size(); ++i) {
    const TensorInfo &a = *byoff[i - 1].second, &b = *byoff[i].second;
    if (b.data_begin < a.data_end)
      fail(path, "tensors '" + *byoff[i - 1].first + "' " + offsets_str(a.data_begin, a.data_end) + " and '" +
                     *byoff[i].first + "' " + offsets_str(b.data_begin, b.data_end) + " overlap");
  }
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t data_size,
                                           const std::string& path) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path, "header is not valid JSON (corrupt file or not safetensors)");
  if (!j.is_object()) fail(path, "header is not a JSON object");
  SafetensorsHeader h;
  h.path = path;
  h.header_bytes = text.size();
  h.data_size = data_size;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(path, "\"__metadata__\" is not a JSON object");
      for (const auto& [mk, mv] : value.items())
        h.metadata[mk] = mv.is_string() ? mv.get<std::string>() : mv.dump();
      continue;
    }
    h.tensors.emplace(key, parse_entry(key, value, data_size, path));
  }
  check_no_overlap(h.tensors, path);
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  uint64_t file_size = uint64_t(st.st_size);
  uint8_t prefix[8] = {};
  if (file_size >= 8 && ::pread(fd, prefix, 8, 0) != 8) fail(path, "cannot read the header length");
  uint64_t n = safetensors_header_length(prefix, file_size, path);
  std::string text(n, '\0');
  if (n > 0 && ::pread(fd, text.data(), n, 8) != ssize_t(n)) fail(path, "cannot read the header");
  return parse_safetensors_header(text, file_size - 8 - n, path);
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.map_ = MappedFile::open(path);
  uint64_t n = safetensors_header_length(f.map_->data(), f.map_->size(), path);
  std::string_view text(reinterpret_cast<const char*>(f.map_->data()) + 8, n);
  f.header_ = parse_safetensors_header(text, f.map_->size() - 8 - n, path);
  return f;
}

const TensorInfo* SafetensorsFile::info(const std::string& name) const {
  auto it = header_.tensors.find(name);
  return it == header_.tensors.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.tensors.size());
  for (const auto& [n, t] : header_.tensors) out.push_back(n);
  return out;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo* t = info(name);
  if (!t) fail(path(), "has no tensor '" + name + "'");
  const uint8_t* p = map_->data() + 8 + header_.header_bytes + t->data_begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(t->dtype) == 0)
    return Tensor::borrow(const_cast<uint8_t*>(p), t->shape, t->dtype, Device::CPU, map_);
  Tensor copy = Tensor::empty(t->shape, t->dtype);
  if (t->nbytes()) std::memcpy(copy.raw(), p, t->nbytes());
  return copy;
}

}  // namespace tf
