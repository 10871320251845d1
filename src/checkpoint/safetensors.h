#pragma once
// Safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
// data area. The header is validated completely before any tensor is handed out, so a corrupt or
// truncated file fails at open with one line naming the file and the problem, never later in a kernel.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tf {

class MappedFile;

// Where one tensor lives, known from a header alone (nothing loaded).
struct TensorInfo {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0, data_end = 0;  // byte offsets within the file's data area
  std::string file;                       // path of the .safetensors file holding it

  int64_t numel() const;
  uint64_t nbytes() const { return data_end - data_begin; }
};

struct SafetensorsHeader {
  std::string path;
  uint64_t header_bytes = 0;                    // N, the JSON length
  uint64_t data_size = 0;                       // bytes after the header
  std::map<std::string, std::string> metadata;  // "__metadata__" (non-string values as JSON text)
  std::map<std::string, TensorInfo> tensors;    // sorted by name
};

// Largest header we accept (the reference implementation's limit): a bigger length is corruption.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Checks the 8-byte little-endian length prefix against the file size and returns it.
uint64_t safetensors_header_length(const uint8_t* prefix8, uint64_t file_size, const std::string& path);
// Parses and validates a header's JSON against a data area of `data_size` bytes. `path` names the file
// in errors and is recorded in each TensorInfo.
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_size,
                                           const std::string& path);
// Reads and validates only the header of a file (a few KB), without mapping the data.
SafetensorsHeader read_safetensors_header(const std::string& path);

class SafetensorsFile {
 public:
  // Maps the file and validates its header; throws tf::Error with one line naming the file.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return header_.path; }
  const SafetensorsHeader& header() const { return header_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool has(const std::string& name) const { return header_.tensors.count(name) != 0; }
  const TensorInfo* info(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // A CPU tensor borrowing the mapping (which it keeps alive). A tensor whose data is not aligned to its
  // element size (legal in the format, rare in practice) is copied into an aligned owned buffer.
  Tensor get(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> map_;
  SafetensorsHeader header_;
};

}  // namespace tf
