#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tf {

enum class DType : uint8_t { F32, F16, BF16, F64, I8, U8, I16, I32, I64, U32, F8_E4M3, BOOL };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
bool dtype_from_name(std::string_view name, DType* out);

// bf16 <-> f32 with round-to-nearest-even, NaN preserved (as torch does).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f8e4m3_to_f32(uint8_t v);

}  // namespace tf
