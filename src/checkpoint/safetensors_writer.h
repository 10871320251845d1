#pragma once
// Writes .safetensors files (tests, prompt-cache snapshots). Tensors are laid out in the given order,
// each at an offset aligned to 8 bytes within the data area, and the header is padded with spaces so the
// data area starts 8-byte aligned, as the reference implementation does.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tf {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Serialises CPU tensors (any strides are made contiguous) into the bytes of a safetensors file.
std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});
// Writes atomically: a temporary file in the same directory, then rename.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tf
