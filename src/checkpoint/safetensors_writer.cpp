#include "checkpoint/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace tf {
namespace {

// Copies a (possibly strided) CPU tensor's elements in row-major order.
void append_contiguous(const Tensor& t, std::string* out) {
  size_t es = dtype_size(t.dtype());
  if (t.numel() == 0) return;
  if (t.is_contiguous()) {
    out->append(static_cast<const char*>(t.raw()), t.nbytes());
    return;
  }
  std::vector<int64_t> idx(t.ndim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim(); ++d) off += idx[d] * t.strides()[d];
    out->append(static_cast<const char*>(t.raw()) + off * es, es);
    for (int d = t.ndim() - 1; d >= 0 && ++idx[d] == t.dim(d); --d) idx[d] = 0;
  }
}

}  // namespace

std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  std::set<std::string> seen;
  // Larger elements first, packed without gaps: every tensor stays aligned to its element size and the
  // file passes the reference loader, which rejects holes between tensors.
  std::vector<const std::pair<std::string, Tensor>*> order;
  for (const auto& e : tensors) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype()) > dtype_size(b->second.dtype());
  });
  for (const auto* entry : order) {
    const auto& [name, t] = *entry;
    if (name == "__metadata__" || !seen.insert(name).second)
      throw Error("safetensors writer: duplicate or reserved tensor name '" + name + "'");
    if (t.device() != Device::CPU) throw Error("safetensors writer: tensor '" + name + "' is not on the CPU");
    uint64_t begin = data.size();
    append_contiguous(t, &data);
    header[name] = {{"dtype", dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {begin, uint64_t(data.size())}}};
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + text + data;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string bytes = encode_safetensors(tensors, metadata);
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f.good()) throw Error(tmp + ": cannot write " + std::to_string(bytes.size()) + " bytes");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot rename from " + tmp + ": " + std::strerror(errno));
}

}  // namespace tf
