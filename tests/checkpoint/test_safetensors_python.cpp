// Interoperability with the reference implementation (the Python `safetensors` package): files it
// writes load here with the same dtypes, shapes and bytes, and files written here pass its validation.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "test_util.h"

namespace tf {
namespace {

using nlohmann::json;
using testing::TempDir;

json run_reference(const std::string& mode, const std::string& path) {
  std::string cmd = std::string(TF_PYTHON) + " " + TF_SOURCE_DIR +
                    "/tests/checkpoint/safetensors_reference.py " + mode + " " + path;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  return json::parse(out);
}

std::string hex(const Tensor& t) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) s += {digits[p[i] >> 4], digits[p[i] & 15]};
  return s;
}

json describe(const SafetensorsFile& f) {
  json out = {{"__metadata__", f.metadata()}};
  for (const std::string& n : f.names()) {
    Tensor t = f.get(n);
    out[n] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"hex", hex(t)}};
  }
  return out;
}

TEST(SafetensorsReference, FilesWrittenByTheReferenceLoadIdentically) {
  TempDir dir;
  std::string path = dir / "ref.safetensors";
  json want = run_reference("write", path);
  EXPECT_EQ(describe(SafetensorsFile::open(path)), want);
}

TEST(SafetensorsReference, FilesWrittenHereLoadInTheReference) {
  TempDir dir;
  Tensor f32 = Tensor::zeros({3, 2}, DType::F32);
  for (int i = 0; i < 6; ++i) f32.data<float>()[i] = float(i) * -0.75f;
  Tensor f16 = Tensor::zeros({4}, DType::F16);
  for (int i = 0; i < 4; ++i) f16.data<uint16_t>()[i] = f32_to_f16(float(i) / 3);
  Tensor i64 = Tensor::zeros({2}, DType::I64);
  i64.data<int64_t>()[0] = -5;
  Tensor b = Tensor::zeros({3}, DType::BOOL);
  b.data<uint8_t>()[2] = 1;
  Tensor i8 = Tensor::zeros({5}, DType::I8);  // odd sizes before wider types test the packing order
  i8.data<int8_t>()[4] = -7;
  std::string path = dir / "ours.safetensors";
  write_safetensors(path, {{"i8", i8}, {"f16", f16}, {"f32", f32}, {"i64", i64}, {"mask", b}},
                    {{"format", "pt"}});
  EXPECT_EQ(run_reference("read", path), describe(SafetensorsFile::open(path)));
}

}  // namespace
}  // namespace tf
