// Checkpoint directories: single file, sharded through the index, fallback *.safetensors, and one-line
// errors for a missing config, missing shard, missing tensor, duplicate tensors and damaged shards.
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "test_util.h"

namespace tf {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::TempDir;
using testing::write_file;

Tensor filled(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::zeros(std::move(shape), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + float(i);
  return t;
}

const json kConfig = {{"model_type", "llama"}, {"hidden_size", 4}, {"num_hidden_layers", 2}};

void write_config(const TempDir& d) {
  write_file(d / "config.json", kConfig.dump());
}

// Two numbered shards and their index: embed + layer 0 in shard 1, layer 1 + norm in shard 2.
void write_sharded(const TempDir& d) {
  write_config(d);
  write_safetensors(d / "model-00001-of-00002.safetensors",
                    {{"embed", filled({3, 4}, 0)}, {"layers.0.w", filled({4, 4}, 100)}});
  write_safetensors(d / "model-00002-of-00002.safetensors",
                    {{"layers.1.w", filled({4, 4}, 200)}, {"norm", filled({4}, 300)}});
  json index = {{"metadata", {{"total_size", 4 * (12 + 16 + 16 + 4)}}},
                {"weight_map",
                 {{"embed", "model-00001-of-00002.safetensors"},
                  {"layers.0.w", "model-00001-of-00002.safetensors"},
                  {"layers.1.w", "model-00002-of-00002.safetensors"},
                  {"norm", "model-00002-of-00002.safetensors"}}}};
  write_file(d / kSafetensorsIndexFile, index.dump(2));
}

TEST(Checkpoint, SingleFileWithConfigAndGenerationConfig) {
  TempDir d;
  write_config(d);
  write_file(d / "generation_config.json", R"({"eos_token_id": [1, 2], "temperature": 0.6})");
  write_safetensors(d / "model.safetensors", {{"w", filled({2, 3}, 1)}, {"b", filled({3}, -1)}});
  Checkpoint c = Checkpoint::open(d.path());
  EXPECT_EQ(c.dir(), d.path());
  EXPECT_EQ(c.config(), kConfig);
  EXPECT_EQ(c.generation_config()["temperature"], 0.6);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"b", "w"}));
  EXPECT_TRUE(c.has("w"));
  EXPECT_FALSE(c.has("x"));
  EXPECT_EQ(c.get("w").to_f32_vector(), filled({2, 3}, 1).to_f32_vector());
  std::optional<TensorInfo> info = c.info("b");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(info->dtype, DType::F32);
  EXPECT_EQ(info->file, d / "model.safetensors");
  EXPECT_FALSE(c.info("x"));
  EXPECT_EQ(c.total_bytes(), 4 * (6 + 3));
  EXPECT_EQ(c.summary().bytes_by_dtype, (std::map<std::string, uint64_t>{{"F32", 36}}));
  EXPECT_EQ(c.find_file("generation_config.json"), d / "generation_config.json");
  EXPECT_EQ(c.find_file("tokenizer.json"), std::nullopt);
  EXPECT_ONE_LINE_ERROR(error_of([&] { c.get("lm_head.weight"); }), d.path(), "no tensor 'lm_head.weight'");
}

TEST(Checkpoint, GenerationConfigDefaultsToEmptyObject) {
  TempDir d;
  write_config(d);
  write_safetensors(d / "model.safetensors", {{"w", filled({1}, 0)}});
  Checkpoint c = Checkpoint::open(d.path());
  EXPECT_TRUE(c.generation_config().is_object());
  EXPECT_TRUE(c.generation_config().empty());
}

TEST(Checkpoint, ShardedThroughIndex) {
  TempDir d;
  write_sharded(d);
  Checkpoint c = Checkpoint::open(d.path());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"embed", "layers.0.w", "layers.1.w", "norm"}));
  EXPECT_EQ(c.weight_files().size(), 2u);
  EXPECT_EQ(c.get("norm").to_f32_vector(), filled({4}, 300).to_f32_vector());
  EXPECT_EQ(c.get("layers.0.w").to_f32_vector(), filled({4, 4}, 100).to_f32_vector());
  EXPECT_EQ(c.info("layers.1.w")->file, d / "model-00002-of-00002.safetensors");
  EXPECT_EQ(c.total_bytes(), 4 * (12 + 16 + 16 + 4));

  // The cheap path sees the same tensors without mapping anything.
  CheckpointSummary s = inspect_checkpoint(d.path());
  EXPECT_EQ(s.tensors.size(), 4u);
  EXPECT_EQ(s.total_bytes, uint64_t(c.total_bytes()));
  EXPECT_EQ(s.tensors.at("norm").file, "model-00002-of-00002.safetensors");
  EXPECT_EQ(s.config["model_type"], "llama");
}

TEST(Checkpoint, IndexWinsOverStrayFiles) {
  // Mistral-style repos ship consolidated.safetensors next to the shards; the index decides.
  TempDir d;
  write_sharded(d);
  write_safetensors(d / "consolidated.safetensors", {{"embed", filled({3, 4}, 9)}});
  Checkpoint c = Checkpoint::open(d.path());
  EXPECT_EQ(c.get("embed").to_f32_vector(), filled({3, 4}, 0).to_f32_vector());
}

TEST(Checkpoint, FallsBackToAnySafetensorsFiles) {
  TempDir d;
  write_config(d);
  write_safetensors(d / "consolidated.safetensors", {{"a", filled({2}, 5)}});
  write_safetensors(d / "extra.safetensors", {{"b", filled({2}, 7)}});
  Checkpoint c = Checkpoint::open(d.path());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.get("b").to_f32_vector(), (std::vector<float>{7, 8}));
}

TEST(Checkpoint, DuplicateTensorWithoutIndexIsRefused) {
  TempDir d;
  write_config(d);
  write_safetensors(d / "a.safetensors", {{"w", filled({2}, 0)}});
  write_safetensors(d / "b.safetensors", {{"w", filled({2}, 1)}});
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d / "b.safetensors",
                        "tensor 'w' is also defined in " + d / "a.safetensors");
}

TEST(Checkpoint, MissingShardNamesTheShard) {
  TempDir d;
  write_sharded(d);
  std::filesystem::remove(d / "model-00002-of-00002.safetensors");
  for (auto open : {+[](const std::string& p) { Checkpoint::open(p); },
                    +[](const std::string& p) { inspect_checkpoint(p); }})
    EXPECT_ONE_LINE_ERROR(error_of([&] { open(d.path()); }), d / "model-00002-of-00002.safetensors",
                          "missing shard");
}

TEST(Checkpoint, IndexThatForgetsAShardOfANumberedSet) {
  TempDir d;
  write_sharded(d);
  std::filesystem::remove(d / "model-00002-of-00002.safetensors");
  json index = {{"weight_map", {{"embed", "model-00001-of-00002.safetensors"}}}};
  write_file(d / kSafetensorsIndexFile, index.dump());
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), "model-00002-of-00002.safetensors",
                        "missing shard (model.safetensors.index.json expects 2 shards)");
}

TEST(Checkpoint, IndexEntryMissingFromItsShard) {
  TempDir d;
  write_sharded(d);
  json index = json::parse(testing::read_file(d / kSafetensorsIndexFile));
  index["weight_map"]["lm_head.weight"] = "model-00002-of-00002.safetensors";
  write_file(d / kSafetensorsIndexFile, index.dump());
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d / "model-00002-of-00002.safetensors",
                        "has no tensor 'lm_head.weight', which model.safetensors.index.json places there");
}

TEST(Checkpoint, MalformedIndex) {
  TempDir d;
  write_sharded(d);
  write_file(d / kSafetensorsIndexFile, R"({"metadata": {}})");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d / kSafetensorsIndexFile,
                        "has no \"weight_map\" object");
  write_file(d / kSafetensorsIndexFile, "{not json");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d / kSafetensorsIndexFile,
                        "not valid JSON");
}

TEST(Checkpoint, DamagedShardNamesTheShard) {
  TempDir d;
  write_sharded(d);
  std::string shard = d / "model-00002-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 4);
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), shard, "exceed the data area");
}

TEST(Checkpoint, ConfigProblems) {
  TempDir d;
  write_safetensors(d / "model.safetensors", {{"w", filled({1}, 0)}});
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d.path(), "no config.json");
  write_file(d / "config.json", "{\"model_type\": ");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d / "config.json", "not valid JSON");
  write_file(d / "config.json", "[]");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d / "config.json",
                        "not a JSON object");
  write_config(d);
  write_file(d / "generation_config.json", "nope");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d / "generation_config.json",
                        "not valid JSON");
}

TEST(Checkpoint, NoWeightsOrNoDirectory) {
  TempDir d;
  write_config(d);
  write_file(d / "pytorch_model.bin", "x");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d.path()); }), d.path(), "no weights");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d / "absent"); }), d / "absent", "not a directory");
}

TEST(Checkpoint, SymlinkedFilesAsInTheHubCache) {
  // Snapshots hold relative symlinks into blobs/; a dangling one reads as a missing file.
  TempDir d;
  write_sharded(d);
  std::filesystem::create_directories(d / "snap");
  for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"})
    std::filesystem::create_symlink(std::string("../") + f, d / (std::string("snap/") + f));
  EXPECT_EQ(Checkpoint::open(d / "snap").names().size(), 4u);
  std::filesystem::remove(d / "model-00001-of-00002.safetensors");
  EXPECT_ONE_LINE_ERROR(error_of([&] { Checkpoint::open(d / "snap"); }), "model-00001-of-00002.safetensors",
                        "missing shard");
}

}  // namespace
}  // namespace tf
