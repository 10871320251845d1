#include "core/dtype.h"

#include <cmath>

namespace tf {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
    case DType::U32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
      return 2;
    case DType::I8:
    case DType::U8:
    case DType::F8_E4M3:
    case DType::BOOL:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F64:
      return "F64";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::I16:
      return "I16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::U32:
      return "U32";
    case DType::F8_E4M3:
      return "F8_E4M3";
    case DType::BOOL:
      return "BOOL";
  }
  return "?";
}

bool dtype_from_name(std::string_view n, DType* out) {
  static const struct {
    const char* name;
    DType t;
  } table[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},       {"F64", DType::F64},
               {"I8", DType::I8},   {"U8", DType::U8},   {"I16", DType::I16},         {"I32", DType::I32},
               {"I64", DType::I64}, {"U32", DType::U32}, {"F8_E4M3", DType::F8_E4M3}, {"BOOL", DType::BOOL}};
  for (const auto& e : table)
    if (n == e.name) {
      *out = e.t;
      return true;
    }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(float(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(float(man | 0x400), int(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t exp = (u >> 23) & 0xff;
  uint32_t man = u & 0x7fffff;
  if (exp == 0xff) return uint16_t(sign | 0x7c00 | (man ? 0x200 : 0));
  int e = int(exp) - 127 + 15;
  if (e >= 31) return uint16_t(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    man |= 0x800000;
    int shift = 14 - e;
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(e) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return uint16_t(half);
}

float f8e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
  float r;
  if (exp == 15 && man == 7)
    r = NAN;
  else if (exp == 0)
    r = std::ldexp(float(man), -9);
  else
    r = std::ldexp(float(8 | man), int(exp) - 10);
  return sign ? -r : r;
}

}  // namespace tf
