// tensorfold and huggingface_hub share one cache: what `pull_model` writes, huggingface_hub resolves offline
// and scans without warnings; what huggingface_hub downloads (from the same fake Hub on 127.0.0.1),
// `resolve_model` finds and `Checkpoint` opens. Needs TF_PYTHON with huggingface_hub.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/locate.h"
#include "checkpoint/pull.h"
#include "checkpoint/safetensors_writer.h"
#include "fake_hub.h"
#include "test_util.h"

namespace tf {
namespace {

using nlohmann::json;
using testing::FakeHub;
using testing::ScopedEnv;
using testing::TempDir;

json run_hub(const std::string& env, const std::string& args) {
  std::string cmd = env + " " + TF_PYTHON + " " + TF_SOURCE_DIR + "/tests/checkpoint/hub_interop.py " + args;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  return json::parse(out);
}

class HubInterop : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                          "HF_ENDPOINT", "HUGGINGFACE_HUB_CACHE"})
      env_.set(v, nullptr);
    env_.set("HF_HOME", (dir_ / "home").c_str());
    env_.set("HF_HUB_CACHE", (dir_ / "cache").c_str());
    env_.set("NO_PROXY", "*");
    env_.set("no_proxy", "*");
    env_.set("HF_HUB_DISABLE_TELEMETRY", "1");
    env_.set("HF_HUB_DISABLE_PROGRESS_BARS", "1");
    Tensor w = Tensor::zeros({16, 8}, DType::F32);
    for (int i = 0; i < 128; ++i) w.data<float>()[i] = float(i) / 8;
    hub_.add_file("config.json", R"({"model_type": "llama"})", false);
    hub_.add_file("model.safetensors", encode_safetensors({{"w", w}}), true);
  }
  TempDir dir_;
  ScopedEnv env_;
  FakeHub hub_;
};

TEST_F(HubInterop, HuggingfaceHubReadsWhatWePulled) {
  PullOptions o;
  o.endpoint = hub_.endpoint();
  o.progress = ProgressStyle::None;
  PullResult r = pull_model("org/tiny", o);
  json got = run_hub("", "read " + dir_ / "cache" + " org/tiny config.json model.safetensors");
  EXPECT_EQ(got["paths"]["model.safetensors"],
            std::filesystem::canonical(r.snapshot_dir + "/model.safetensors").string());
  ASSERT_EQ(got["repos"].size(), 1u);
  const json& repo = got["repos"][0];
  EXPECT_EQ(repo["repo_id"], "org/tiny");
  EXPECT_EQ(repo["refs"], json::array({"main"}));
  EXPECT_EQ(repo["commits"], json::array({hub_.commit}));
  EXPECT_EQ(repo["files"], json::array({"config.json", "model.safetensors"}));
  EXPECT_EQ(repo["size_on_disk"], list_cached_models().at(0).size_bytes);
  EXPECT_EQ(got["warnings"], json::array());
}

TEST_F(HubInterop, WeOpenWhatHuggingfaceHubDownloaded) {
  json got = run_hub("HF_ENDPOINT=" + hub_.endpoint(), "download " + dir_ / "cache" + " org/tiny");
  std::string snapshot = resolve_model("org/tiny");
  EXPECT_EQ(std::filesystem::canonical(snapshot),
            std::filesystem::canonical(got["snapshot"].get<std::string>()));
  Checkpoint c = Checkpoint::open(snapshot);
  EXPECT_EQ(c.config()["model_type"], "llama");
  EXPECT_EQ(c.get("w").to_f32_vector()[127], 127.0f / 8);
  // Pulling over it finds every blob in place: huggingface_hub named them as we do.
  PullOptions o;
  o.endpoint = hub_.endpoint();
  o.progress = ProgressStyle::None;
  EXPECT_EQ(pull_model("org/tiny", o).downloaded_bytes, 0u);
}

}  // namespace
}  // namespace tf
