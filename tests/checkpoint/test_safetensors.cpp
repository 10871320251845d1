// Safetensors: writer/reader round trip, and one-line errors naming the file for each kind of damage,
// through both the mmap path (SafetensorsFile::open) and the header-only path (read_safetensors_header).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "test_util.h"

namespace tf {
namespace {

using testing::error_of;
using testing::raw_safetensors;
using testing::TempDir;
using testing::write_file;

Tensor iota_f32(std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros(std::move(shape), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.5f * float(i) - 3.0f;
  return t;
}

TEST(Safetensors, RoundTripKeepsDtypesShapesBytesAndMetadata) {
  TempDir dir;
  Tensor a = iota_f32({2, 3});
  Tensor b = Tensor::zeros({5}, DType::BF16);
  for (int i = 0; i < 5; ++i) b.data<uint16_t>()[i] = f32_to_bf16(float(i) * 1.25f);
  Tensor c = Tensor::zeros({}, DType::I64);
  c.data<int64_t>()[0] = -42;
  Tensor empty = Tensor::zeros({0, 4}, DType::I32);
  Tensor bytes = Tensor::zeros({3}, DType::U8);
  bytes.data<uint8_t>()[1] = 7;
  std::string path = dir / "model.safetensors";
  write_safetensors(path, {{"b.bf16", b}, {"a.f32", a}, {"c", c}, {"empty", empty}, {"u8", bytes}},
                    {{"format", "pt"}});

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.f32", "b.bf16", "c", "empty", "u8"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  Tensor ra = f.get("a.f32");
  EXPECT_EQ(ra.dtype(), DType::F32);
  EXPECT_EQ(ra.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ra.to_f32_vector(), a.to_f32_vector());
  Tensor rb = f.get("b.bf16");
  EXPECT_EQ(rb.dtype(), DType::BF16);
  EXPECT_EQ(rb.to_f32_vector(), (std::vector<float>{0, 1.25f, 2.5f, 3.75f, 5}));
  EXPECT_EQ(f.get("c").data<int64_t>()[0], -42);
  EXPECT_EQ(f.get("c").ndim(), 0);
  EXPECT_EQ(f.get("empty").shape(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(f.get("u8").data<uint8_t>()[1], 7);
  // Every tensor is aligned to its element size, so kernels may read it in place.
  for (const std::string& n : f.names())
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.get(n).raw()) % dtype_size(f.get(n).dtype()), 0u) << n;
  const TensorInfo* info = f.info("a.f32");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->nbytes(), 24u);
  EXPECT_EQ(info->file, path);
  EXPECT_EQ(f.info("nope"), nullptr);

  // The header-only path agrees with the mapping.
  SafetensorsHeader h = read_safetensors_header(path);
  EXPECT_EQ(h.tensors.size(), 5u);
  EXPECT_EQ(h.tensors.at("b.bf16").data_begin, f.info("b.bf16")->data_begin);
  EXPECT_EQ(h.header_bytes % 8, 0u);  // data area 8-byte aligned, as the reference writer pads it
}

TEST(Safetensors, BorrowedTensorKeepsTheMappingAlive) {
  TempDir dir;
  std::string path = dir / "x.safetensors";
  write_safetensors(path, {{"w", iota_f32({4, 4})}});
  Tensor t;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    t = f.get("w");
  }
  std::filesystem::remove(path);  // the mapping outlives both the file object and the directory entry
  EXPECT_EQ(t.to_f32_vector(), iota_f32({4, 4}).to_f32_vector());
}

TEST(Safetensors, RowSliceIsWrittenFromItsOffset) {
  Tensor t = iota_f32({3, 4});
  Tensor rows = t.slice_rows(1, 3);  // contiguous view, offset into the buffer
  std::string bytes = encode_safetensors({{"rows", rows}});
  TempDir dir;
  write_file(dir / "r.safetensors", bytes);
  std::vector<float> all = t.to_f32_vector();
  std::vector<float> want(all.begin() + 4, all.end());
  EXPECT_EQ(SafetensorsFile::open(dir / "r.safetensors").get("rows").to_f32_vector(), want);
}

TEST(Safetensors, MisalignedDataIsCopiedToAnAlignedBuffer) {
  // A legal file whose F32 tensor starts at data offset 1 (the format does not require alignment).
  std::string header = R"({"pad":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("x":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string file = raw_safetensors(header, 0);
  float vals[2] = {1.5f, -2.0f};
  file += '\x09';
  file.append(reinterpret_cast<const char*>(vals), sizeof vals);
  TempDir dir;
  write_file(dir / "m.safetensors", file);
  Tensor x = SafetensorsFile::open(dir / "m.safetensors").get("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.raw()) % 4, 0u);
  EXPECT_EQ(x.to_f32_vector(), (std::vector<float>{1.5f, -2.0f}));
}

// Each damaged file gives one line naming the file and the problem, on both read paths.
struct Damage {
  const char* name;
  std::string bytes;
  const char* problem;
};

std::vector<Damage> damages() {
  const std::string ok_entry = R"("x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})";
  return {
      {"too_short", std::string("\x05\x00\x00", 3), "too short for a safetensors header"},
      {"length_past_end", raw_safetensors("{}", 0, 1000), "header length 1000 exceeds the file size of 10"},
      {"length_huge", raw_safetensors("{}", 0, uint64_t(1) << 40), "implausibly large"},
      {"not_json", raw_safetensors("{\"x\": [1, 2", 0), "header is not valid JSON"},
      {"not_object", raw_safetensors("[1, 2, 3]", 0), "header is not a JSON object"},
      {"entry_not_object", raw_safetensors(R"({"x": 3})", 0), "tensor 'x' is not a JSON object"},
      {"no_dtype", raw_safetensors(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4),
       "tensor 'x' has no \"dtype\""},
      {"unknown_dtype", raw_safetensors(R"({"x":{"dtype":"F4","shape":[1],"data_offsets":[0,4]}})", 4),
       "tensor 'x' has unknown dtype \"F4\""},
      {"negative_shape", raw_safetensors(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "tensor 'x' shape [-1] is not non-negative integers"},
      {"float_shape", raw_safetensors(R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
       "is not non-negative integers"},
      {"offsets_out_of_bounds",
       raw_safetensors(R"({"x":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}})", 64),
       "tensor 'x' data_offsets [0, 100] exceed the data area of 64 bytes"},
      {"offsets_reversed", raw_safetensors(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", 8),
       "end before they begin"},
      {"offsets_malformed", raw_safetensors(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[0]}})", 8),
       "are not two non-negative integers"},
      {"size_mismatch", raw_safetensors(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24),
       "tensor 'x' is F32[2, 3] but data_offsets [0, 20] hold 20 bytes"},
      {"numel_overflow",
       raw_safetensors(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16),
       "hold 16 bytes"},
      {"overlap",
       raw_safetensors("{" + ok_entry + R"(,"y":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
       "tensors 'x' [0, 16] and 'y' [8, 16] overlap"},
      {"bad_metadata", raw_safetensors(R"({"__metadata__": [1]})", 0),
       "\"__metadata__\" is not a JSON object"},
  };
}

TEST(Safetensors, EachDamageGivesOneLineNamingFileAndProblem) {
  TempDir dir;
  for (const Damage& d : damages()) {
    SCOPED_TRACE(d.name);
    std::string path = dir / (std::string(d.name) + ".safetensors");
    write_file(path, d.bytes);
    EXPECT_ONE_LINE_ERROR(error_of([&] { SafetensorsFile::open(path); }), path, d.problem);
    EXPECT_ONE_LINE_ERROR(error_of([&] { read_safetensors_header(path); }), path, d.problem);
  }
}

TEST(Safetensors, TruncatedFileIsRefusedAtOpen) {
  TempDir dir;
  std::string path = dir / "model.safetensors";
  write_safetensors(path, {{"a", iota_f32({8})}, {"b", iota_f32({8})}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);  // an interrupted copy
  EXPECT_ONE_LINE_ERROR(error_of([&] { SafetensorsFile::open(path); }), path,
                        "exceed the data area of 59 bytes");
  std::filesystem::resize_file(path, 20);  // cut inside the header
  EXPECT_ONE_LINE_ERROR(error_of([&] { SafetensorsFile::open(path); }), path,
                        "exceeds the file size of 20 bytes");
}

TEST(Safetensors, MissingFileAndMissingTensor) {
  TempDir dir;
  std::string path = dir / "absent.safetensors";
  EXPECT_ONE_LINE_ERROR(error_of([&] { SafetensorsFile::open(path); }), path, "cannot open");
  write_safetensors(dir / "m.safetensors", {{"a", iota_f32({2})}});
  SafetensorsFile f = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_FALSE(f.has("b"));
  EXPECT_ONE_LINE_ERROR(error_of([&] { f.get("b"); }), dir / "m.safetensors", "has no tensor 'b'");
}

TEST(Safetensors, WriterRefusesDuplicateNames) {
  EXPECT_NE(error_of([] { encode_safetensors({{"a", iota_f32({1})}, {"a", iota_f32({1})}}); }), "");
  EXPECT_NE(error_of([] { encode_safetensors({{"__metadata__", iota_f32({1})}}); }), "");
}

}  // namespace
}  // namespace tf
