// Pull against a fake Hub on 127.0.0.1 (fake_hub.h): the cache layout huggingface_hub writes, resume
// after a dropped connection, the check hook refusing before weights move, gated/not-found/offline
// messages, mirrors without blob ids, checksum failures and the header-only remote inspection.
// Nothing here contacts anything but the loopback interface.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/locate.h"
#include "checkpoint/progress.h"
#include "checkpoint/pull.h"
#include "checkpoint/safetensors_writer.h"
#include "fake_hub.h"
#include "test_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::FakeHub;
using testing::read_file;
using testing::ScopedEnv;
using testing::TempDir;

Tensor ramp(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::zeros(std::move(shape), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + 0.25f * float(i);
  return t;
}

const json kConfig = {{"model_type", "qwen3"}, {"hidden_size", 8}};

class PullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.set("HF_HUB_CACHE", cache_.path().c_str());
    env_.set("HF_HOME", (cache_ / "home").c_str());
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT",
                          "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE"})
      env_.set(v, nullptr);
    env_.set("NO_PROXY", "*");  // loopback only, even where a proxy is configured
    env_.set("no_proxy", "*");
    weights_ = encode_safetensors({{"model.embed", ramp({64, 512}, 0)}, {"model.norm", ramp({512}, 7)}});
    hub_.add_file("config.json", kConfig.dump(), false);
    hub_.add_file("generation_config.json", R"({"eos_token_id": 2})", false);
    hub_.add_file("tokenizer.json", R"({"model": {}})", false);
    hub_.add_file("tokenizer_config.json", "{}", false);
    hub_.add_file("README.md", "# tiny", false);
    hub_.add_file("pytorch_model.bin", std::string(1000, 'b'), true);
    hub_.add_file("model.safetensors", weights_, true);
    opts_.endpoint = hub_.endpoint();
    opts_.log = &log_;
    opts_.retry_delay_ms = 1;
  }

  std::string repo_dir() const { return cache_ / "models--org--tiny"; }
  std::string snapshot() const { return repo_dir() + "/snapshots/" + hub_.commit; }
  std::string blob(const std::string& file) const { return repo_dir() + "/blobs/" + hub_.blob_id(file); }
  // GETs of a file's bytes (LFS content is fetched from /cdn/ after the Hub's redirect).
  std::vector<FakeHub::Request> content_gets(const std::string& file) const {
    std::vector<FakeHub::Request> out;
    for (const auto& r : hub_.requests_for(file))
      if (r.path.rfind("/cdn/", 0) == 0 || file.find(".safetensors") == std::string::npos) out.push_back(r);
    return out;
  }

  TempDir cache_;
  ScopedEnv env_;
  FakeHub hub_;
  PullOptions opts_;
  std::ostringstream log_;
  std::string weights_;
};

TEST_F(PullTest, WritesTheHubCacheLayoutAndTheCheckpointOpens) {
  PullResult r = pull_model("org/tiny", opts_);
  EXPECT_EQ(r.commit, hub_.commit);
  EXPECT_EQ(r.snapshot_dir, snapshot());
  EXPECT_EQ(r.downloaded_bytes, weights_.size() + kConfig.dump().size() + 19 + 13 + 2);
  EXPECT_EQ(testing::read_file(repo_dir() + "/refs/main"), hub_.commit);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "model.safetensors"}) {
    SCOPED_TRACE(f);
    fs::path link = fs::path(snapshot()) / f;
    ASSERT_TRUE(fs::is_symlink(link));
    EXPECT_EQ(fs::read_symlink(link).string(),
              "../../blobs/" + hub_.blob_id(f));  // relative, as huggingface_hub
  }
  EXPECT_EQ(hub_.blob_id("model.safetensors"), testing::sha256_hex(weights_));  // LFS blobs named by sha256
  EXPECT_EQ(read_file(blob("model.safetensors")), weights_);
  EXPECT_FALSE(fs::exists(fs::path(snapshot()) / "README.md"));
  EXPECT_TRUE(hub_.requests_for("pytorch_model.bin").empty());

  Checkpoint c = Checkpoint::open(resolve_model("org/tiny"));
  EXPECT_EQ(c.config(), kConfig);
  EXPECT_EQ(c.get("model.norm").to_f32_vector(), ramp({512}, 7).to_f32_vector());
  EXPECT_NE(log_.str().find("org/tiny: ready in " + snapshot()), std::string::npos) << log_.str();

  // A second pull finds everything cached: only the listing is asked for.
  hub_.clear_requests();
  EXPECT_EQ(pull_model("org/tiny", opts_).downloaded_bytes, 0u);
  ASSERT_EQ(hub_.requests().size(), 1u);
  EXPECT_EQ(hub_.requests()[0].path, "/api/models/org/tiny/revision/main?blobs=true");
  EXPECT_NE(log_.str().find("already up to date"), std::string::npos);
}

TEST_F(PullTest, ResumesAfterADroppedConnection) {
  hub_.cut_after["model.safetensors"] = 50000;
  opts_.max_retries = 2;
  PullResult r = pull_model("org/tiny", opts_);
  std::vector<FakeHub::Request> gets = content_gets("model.safetensors");
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_EQ(gets[0].range, "");
  EXPECT_EQ(gets[1].range, "bytes=50000-");
  EXPECT_EQ(read_file(r.snapshot_dir + "/model.safetensors"), weights_);
  EXPECT_NE(log_.str().find("model.safetensors: transfer interrupted"), std::string::npos) << log_.str();
  EXPECT_FALSE(fs::exists(blob("model.safetensors") + ".incomplete"));
}

TEST_F(PullTest, ABrokenPullResumesOnTheNextRun) {
  hub_.cut_after["model.safetensors"] = 50000;
  opts_.max_retries = 0;
  std::string m = error_of([&] { pull_model("org/tiny", opts_); });
  EXPECT_ONE_LINE_ERROR(m, "model.safetensors", "run the pull again to resume");
  EXPECT_EQ(fs::file_size(blob("model.safetensors") + ".incomplete"), 50000u);
  EXPECT_FALSE(fs::exists(repo_dir() + "/refs/main"));  // the revision is not usable yet

  hub_.clear_requests();
  PullResult r = pull_model("org/tiny", opts_);
  ASSERT_EQ(content_gets("model.safetensors").size(), 1u);
  EXPECT_EQ(content_gets("model.safetensors")[0].range, "bytes=50000-");
  EXPECT_EQ(r.downloaded_bytes, weights_.size() - 50000);
  EXPECT_EQ(read_file(blob("model.safetensors")), weights_);
}

TEST_F(PullTest, AServerIgnoringRangeRestartsTheFile) {
  testing::write_file(blob("model.safetensors") + ".incomplete", std::string(1000, 'z'));
  hub_.ignore_range = true;
  pull_model("org/tiny", opts_);
  EXPECT_EQ(content_gets("model.safetensors")[0].range, "bytes=1000-");
  EXPECT_EQ(read_file(blob("model.safetensors")), weights_);
}

TEST_F(PullTest, CheckHookRefusesBeforeAnyWeightMoves) {
  PullPlan seen;
  opts_.check = [&](const PullPlan& plan) {
    seen = plan;
    throw Error("model_type '" + plan.config["model_type"].get<std::string>() + "' is not supported");
  };
  EXPECT_EQ(error_of([&] { pull_model("org/tiny", opts_); }), "model_type 'qwen3' is not supported");
  EXPECT_TRUE(content_gets("model.safetensors").empty());
  EXPECT_EQ(seen.config, kConfig);
  EXPECT_TRUE(seen.index.is_null());
  EXPECT_EQ(seen.commit, hub_.commit);
  EXPECT_EQ(seen.weight_files, (std::vector<std::string>{"model.safetensors"}));
  EXPECT_EQ(seen.weight_bytes, weights_.size());
  EXPECT_EQ(seen.files.size(), 5u);  // four small files and the weights
  EXPECT_TRUE(fs::exists(snapshot() + "/config.json"));
}

TEST_F(PullTest, ShardedRepoPullsOnlyTheIndexedShards) {
  std::string s1 = encode_safetensors({{"a", ramp({4}, 0)}}), s2 = encode_safetensors({{"b", ramp({4}, 1)}});
  hub_.add_file("model-00001-of-00002.safetensors", s1, true);
  hub_.add_file("model-00002-of-00002.safetensors", s2, true);
  hub_.add_file("consolidated.safetensors", weights_, true);
  json index = {
      {"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  hub_.add_file(kSafetensorsIndexFile, index.dump(), false);
  PullResult r = pull_model("org/tiny", opts_);
  EXPECT_TRUE(content_gets("model.safetensors").empty());
  EXPECT_TRUE(content_gets("consolidated.safetensors").empty());
  Checkpoint c = Checkpoint::open(r.snapshot_dir);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.get("b").to_f32_vector(), ramp({4}, 1).to_f32_vector());
}

TEST_F(PullTest, ParallelShardsResumeIndependently) {
  std::vector<std::string> shards;
  json index = {{"weight_map", json::object()}};
  for (int i = 1; i <= 5; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-00005.safetensors", i);
    std::string t = "t" + std::to_string(i);
    shards.push_back(encode_safetensors({{t, ramp({1000 + i}, float(i))}}));
    hub_.add_file(name, shards.back(), true);
    index["weight_map"][t] = name;
  }
  hub_.add_file(kSafetensorsIndexFile, index.dump(), false);
  hub_.cut_after["model-00002-of-00005.safetensors"] = 1000;
  hub_.cut_after["model-00004-of-00005.safetensors"] = 3000;
  opts_.parallel_files = 3;
  opts_.max_retries = 1;
  opts_.progress = ProgressStyle::Lines;
  PullResult r = pull_model("org/tiny", opts_);
  Checkpoint c = Checkpoint::open(r.snapshot_dir);
  for (int i = 1; i <= 5; ++i)
    EXPECT_EQ(c.get("t" + std::to_string(i)).to_f32_vector(), ramp({1000 + i}, float(i)).to_f32_vector());
  EXPECT_EQ(content_gets("model-00004-of-00005.safetensors").back().range, "bytes=3000-");
  EXPECT_TRUE(content_gets("model.safetensors").empty());  // the index decides
  EXPECT_NE(log_.str().find("org/tiny: downloading"), std::string::npos) << log_.str();
}

TEST_F(PullTest, OneFailingShardFailsThePullWithItsOwnMessage) {
  for (int i = 1; i <= 3; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-00003.safetensors", i);
    hub_.add_file(name, encode_safetensors({{"t" + std::to_string(i), ramp({4000}, 0)}}), true);
  }
  hub_.add_file(kSafetensorsIndexFile,
                json{{"weight_map",
                      {{"t1", "model-00001-of-00003.safetensors"},
                       {"t2", "model-00002-of-00003.safetensors"},
                       {"t3", "model-00003-of-00003.safetensors"}}}}
                    .dump(),
                false);
  hub_.bad_sha.insert("model-00002-of-00003.safetensors");
  std::string m = error_of([&] { pull_model("org/tiny", opts_); });
  EXPECT_ONE_LINE_ERROR(m, "model-00002-of-00003.safetensors", "downloaded file is corrupt");
  EXPECT_FALSE(fs::exists(repo_dir() + "/refs/main"));
}

TEST_F(PullTest, GatedModelSaysToSetHfToken) {
  hub_.required_token = "hf_secret";
  std::string m = error_of([&] { pull_model("org/tiny", opts_); });
  EXPECT_ONE_LINE_ERROR(m, "org/tiny: access denied", "set HF_TOKEN");
  EXPECT_NE(m.find("HTTP 401"), std::string::npos) << m;
  EXPECT_NE(m.find("restricted"), std::string::npos) << m;  // the Hub's own words are kept

  env_.set("HF_TOKEN", "hf_secret");
  EXPECT_EQ(hf_token(), "hf_secret");
  hub_.clear_requests();
  pull_model("org/tiny", opts_);
  for (const auto& r : hub_.requests()) {
    if (r.path.rfind("/api/", 0) == 0 || r.path.find("/resolve/") != std::string::npos) {
      EXPECT_EQ(r.authorization, "Bearer hf_secret") << r.path;
    } else {
      EXPECT_EQ(r.authorization, "") << r.path;  // the token never leaves the Hub for its CDN
    }
  }
  EXPECT_FALSE(content_gets("model.safetensors").empty());
}

TEST_F(PullTest, GatedFilesBehindAPublicListing) {
  // The Hub shows a gated model's listing to anyone and refuses its files.
  hub_.required_token = "hf_secret";
  hub_.gate_listing = false;
  std::string m = error_of([&] { pull_model("org/tiny", opts_); });
  EXPECT_ONE_LINE_ERROR(m, "org/tiny: config.json: access denied", "set HF_TOKEN");
  opts_.token = "hf_secret";
  EXPECT_EQ(read_file(pull_model("org/tiny", opts_).snapshot_dir + "/model.safetensors"), weights_);
}

TEST_F(PullTest, TokenFileIsRead) {
  testing::write_file(cache_ / "home/token", "hf_fromfile\n");
  EXPECT_EQ(hf_token(), "hf_fromfile");
  env_.set("HF_TOKEN", "hf_env");
  EXPECT_EQ(hf_token(), "hf_env");
}

TEST_F(PullTest, NotFoundRepoAndRevision) {
  EXPECT_ONE_LINE_ERROR(error_of([&] { pull_model("org/absent", opts_); }),
                        "org/absent: not found on " + hub_.endpoint(), "Repository not found");
  EXPECT_ONE_LINE_ERROR(error_of([&] { pull_model("org/tiny@v9", opts_); }), "org/tiny@v9: not found",
                        "Revision Not Found");
  EXPECT_ONE_LINE_ERROR(error_of([&] { pull_model("not an id", opts_); }), "not an id",
                        "not a model id of the form org/name");
}

TEST_F(PullTest, OfflineGivesOneClearLine) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);  // a loopback port nobody listens on
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  std::string endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  env_.set("HF_ENDPOINT", endpoint.c_str());  // the environment picks the endpoint
  opts_.endpoint.clear();
  EXPECT_EQ(hf_endpoint(), endpoint);
  std::string m = error_of([&] { pull_model("org/tiny", opts_); });
  EXPECT_ONE_LINE_ERROR(m, "cannot reach " + endpoint, "offline?");
  EXPECT_ONE_LINE_ERROR(error_of([&] { inspect_remote("org/tiny", opts_); }), "cannot reach", "offline?");
}

TEST_F(PullTest, UnwritableCacheIsOneLine) {
  testing::write_file(cache_ / "not-a-dir", "x");
  opts_.cache_dir = cache_ / "not-a-dir";
  std::string m = error_of([&] { pull_model("org/tiny", opts_); });
  EXPECT_ONE_LINE_ERROR(m, "org/tiny: ", "not-a-dir");
}

TEST_F(PullTest, HubOfflineModeRefusesBeforeAnyRequest) {
  env_.set("HF_HUB_OFFLINE", "1");
  EXPECT_ONE_LINE_ERROR(error_of([&] { pull_model("org/tiny", opts_); }), "org/tiny",
                        "HF_HUB_OFFLINE is set");
  EXPECT_TRUE(hub_.requests().empty());
}

TEST_F(PullTest, MirrorWithoutBlobIdsUsesEtags) {
  hub_.list_blob_ids = false;
  PullResult r = pull_model("org/tiny", opts_);
  EXPECT_EQ(fs::read_symlink(r.snapshot_dir + "/model.safetensors").string(),
            "../../blobs/" + testing::sha256_hex(weights_));
  EXPECT_EQ(fs::read_symlink(r.snapshot_dir + "/config.json").string(),
            "../../blobs/" + testing::git_blob_id(kConfig.dump()));
  EXPECT_EQ(Checkpoint::open(r.snapshot_dir).names().size(), 2u);
}

TEST_F(PullTest, ChecksumMismatchDeletesTheDownload) {
  hub_.bad_sha.insert("model.safetensors");
  std::string m = error_of([&] { pull_model("org/tiny", opts_); });
  EXPECT_ONE_LINE_ERROR(m, "model.safetensors", "downloaded file is corrupt (sha256");
  for (const auto& e : fs::directory_iterator(repo_dir() + "/blobs"))
    EXPECT_NE(fs::file_size(e.path()), weights_.size()) << e.path();
}

TEST_F(PullTest, PinnedCommitWritesNoRef) {
  PullResult r = pull_model("org/tiny@" + hub_.commit, opts_);
  EXPECT_EQ(r.commit, hub_.commit);
  EXPECT_FALSE(fs::exists(repo_dir() + "/refs"));
  EXPECT_EQ(resolve_model("org/tiny@" + hub_.commit), snapshot());
}

TEST_F(PullTest, RemoteInspectionReadsOnlyHeaders) {
  hub_.add_file("junk.bin", "x", false);
  CheckpointSummary s = inspect_remote("org/tiny", opts_);
  EXPECT_EQ(s.source, "org/tiny");
  EXPECT_EQ(s.config, kConfig);
  EXPECT_EQ(s.generation_config["eos_token_id"], 2);
  ASSERT_EQ(s.tensors.size(), 2u);
  EXPECT_EQ(s.tensors.at("model.embed").shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(s.total_bytes, 4u * (64 * 512 + 512));
  std::vector<FakeHub::Request> gets = content_gets("model.safetensors");
  ASSERT_EQ(gets.size(), 2u);  // the length, then the JSON
  EXPECT_EQ(gets[0].range, "bytes=0-7");
  for (const auto& g : gets) EXPECT_FALSE(g.range.empty());
  EXPECT_FALSE(fs::exists(repo_dir()));  // nothing written to the cache
}

TEST(Progress, FormatsBytesDurationsAndPlainLines) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1500000), "1.5 MB");
  EXPECT_EQ(format_bytes(16'060'000'000ull), "16.1 GB");
  EXPECT_EQ(format_duration(42), "0:42");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  std::ostringstream out;
  DownloadProgress p(&out, /*tty=*/false, "org/tiny", 4000000, 1000000);
  p.advance(1000000);  // plain mode prints at most every 10 s, so nothing here
  p.note("shard-2: transfer interrupted");
  p.advance(2000000);
  p.finish();
  EXPECT_EQ(
      out.str(),
      "org/tiny: resuming at 1.0 MB of 4.0 MB\nshard-2: transfer interrupted\norg/tiny: 3.0 MB in 0:00 (" +
          out.str().substr(out.str().rfind('(') + 1));
  EXPECT_EQ(out.str().find('\r'), std::string::npos);  // no terminal control in logs

  std::ostringstream tty;
  DownloadProgress bar(&tty, /*tty=*/true, "org/tiny", 1000, 0);
  bar.note("hello");
  EXPECT_EQ(tty.str().rfind("\r\x1b[Khello\n\r[", 0), 0u) << tty.str();  // the note, then the bar redrawn
  EXPECT_NE(tty.str().find("] org/tiny  0 B / 1.0 KB (0%)"), std::string::npos) << tty.str();
}

}  // namespace
}  // namespace tf
