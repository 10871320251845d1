// Model ids and the Hugging Face cache layout, against a fake cache in a temporary directory.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "checkpoint/locate.h"
#include "test_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::ScopedEnv;
using testing::TempDir;
using testing::write_file;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOther = "fedcba9876543210fedcba9876543210fedcba98";

// models--org--name with blobs/, a snapshot per commit and refs pointing at them.
void add_repo(const std::string& cache, const std::string& folder, const std::string& commit,
              const std::string& ref, const std::string& blob_bytes) {
  fs::path repo = fs::path(cache) / folder;
  write_file((repo / "blobs" / ("blob" + commit)).string(), blob_bytes);
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_symlink("../../blobs/blob" + commit, repo / "snapshots" / commit / "config.json");
  if (!ref.empty()) write_file((repo / "refs" / ref).string(), commit + "\n");
}

TEST(Locate, ParsesModelIds) {
  auto id = parse_model_id("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->repo, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(id->revision, "main");
  id = parse_model_id("meta-llama/Llama-3.2-1B@v1.0");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->repo, "meta-llama/Llama-3.2-1B");
  EXPECT_EQ(id->revision, "v1.0");
  for (const char* bad :
       {"", "name-only", "/abs/path", "./rel/dir", "a/b/c", "org/..", "../x", "org/", "org/name@"})
    EXPECT_FALSE(parse_model_id(bad)) << bad;
}

TEST(Locate, CacheDirectoryPrecedence) {
  ScopedEnv env;
  env.set("HF_HUB_CACHE", nullptr);
  env.set("HUGGINGFACE_HUB_CACHE", nullptr);
  env.set("HF_HOME", nullptr);
  env.set("XDG_CACHE_HOME", nullptr);
  env.set("HOME", "/home/u");
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u/.cache/huggingface/hub");
  env.set("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(hf_hub_cache_dir(), "/xdg/huggingface/hub");
  env.set("HF_HOME", "/hf");
  EXPECT_EQ(hf_home_dir(), "/hf");
  EXPECT_EQ(hf_hub_cache_dir(), "/hf/hub");
  env.set("HF_HUB_CACHE", "/hub");
  EXPECT_EQ(hf_hub_cache_dir(), "/hub");
  EXPECT_EQ(repo_cache_dir("/hub", "org/name"), "/hub/models--org--name");
}

TEST(Locate, ResolvesIdsThroughRefsToSnapshots) {
  TempDir cache;
  ScopedEnv env;
  env.set("HF_HUB_CACHE", cache.path().c_str());
  add_repo(cache.path(), "models--org--tiny", kCommit, "main", "{}");
  add_repo(cache.path(), "models--org--tiny", kOther, "v2", "{}");
  std::string snap = cache / ("models--org--tiny/snapshots/" + kCommit);
  EXPECT_EQ(resolve_model("org/tiny"), snap);
  EXPECT_EQ(resolve_model("org/tiny@main"), snap);
  EXPECT_EQ(resolve_model("org/tiny@v2"), cache / ("models--org--tiny/snapshots/" + kOther));
  EXPECT_EQ(resolve_model("org/tiny@" + kOther), cache / ("models--org--tiny/snapshots/" + kOther));
  // A local directory wins and is used as given, even when it looks like an id.
  EXPECT_EQ(resolve_model(cache.path()), cache.path());
}

TEST(Locate, NotFoundSaysHowToPull) {
  TempDir cache;
  ScopedEnv env;
  env.set("HF_HUB_CACHE", cache.path().c_str());
  std::string m = error_of([] { resolve_model("org/absent"); });
  EXPECT_ONE_LINE_ERROR(m, "org/absent not found locally", "run `tensorfold pull org/absent`");
  EXPECT_NE(m.find(cache.path()), std::string::npos) << m;
  add_repo(cache.path(), "models--org--tiny", kCommit, "main", "{}");
  EXPECT_ONE_LINE_ERROR(error_of([] { resolve_model("org/tiny@v9"); }), "org/tiny@v9 not found locally",
                        "tensorfold pull org/tiny@v9");
  // A ref whose snapshot was deleted is not found either.
  fs::remove_all(cache / ("models--org--tiny/snapshots/" + kCommit));
  EXPECT_NE(error_of([] { resolve_model("org/tiny"); }).find("not found locally"), std::string::npos);
  EXPECT_ONE_LINE_ERROR(error_of([] { resolve_model("/no/such/dir"); }), "/no/such/dir", "no such directory");
}

TEST(Locate, ListsCachedModelsWithSizes) {
  TempDir cache;
  ScopedEnv env;
  env.set("HF_HUB_CACHE", cache.path().c_str());
  add_repo(cache.path(), "models--zeta--b", kCommit, "main", std::string(100, 'x'));
  add_repo(cache.path(), "models--alpha--a", kOther, "", std::string(7, 'y'));  // no refs/main
  write_file(cache / "models--alpha--a/blobs/partial.incomplete", std::string(50, 'z'));
  fs::create_directories(cache / "datasets--org--data/snapshots/x");  // not a model
  fs::create_directories(cache / "models--org--empty/blobs");         // no snapshot yet
  std::vector<CachedModel> models = list_cached_models();
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].id, "alpha/a");
  EXPECT_EQ(models[0].revision, kOther);
  EXPECT_EQ(models[0].size_bytes, 7u);
  EXPECT_EQ(models[0].path, cache / ("models--alpha--a/snapshots/" + kOther));
  EXPECT_EQ(models[1].id, "zeta/b");
  EXPECT_EQ(models[1].revision, "main");
  EXPECT_EQ(models[1].size_bytes, 100u);
}

}  // namespace
}  // namespace tf
