// Prompt cache: hits, spill read-backs and snapshots after a restart give bitwise the same reply as no
// cache at all; corrupt or truncated cache files are detected, deleted and recomputed.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine/kv_store.h"
#include "text/tokenizer.h"

extern char** environ;

using namespace tf;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string tiny(const std::string& name) {
  return std::string(TF_SOURCE_DIR) + "/tests/data/tiny/" + name;
}

struct Out {
  std::vector<int32_t> tokens;
  std::string text;
  Usage usage;
};

Out run(Engine& e, const std::vector<int32_t>& prompt, float temperature = 0.8f, int max_tokens = 24) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = temperature;
  r.sampling.seed = 99;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  Out o;
  auto h = e.submit(r);
  StreamEvent ev;
  while (h->next(ev, 60s)) {
    if (ev.kind == StreamEvent::Kind::Tokens) {
      for (auto& t : ev.tokens) o.tokens.push_back(t.token);
      o.text += ev.text;
    } else {
      EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
      o.usage = ev.usage;
      break;
    }
  }
  return o;
}

std::unique_ptr<Engine> make(double cache_gib, double spill_gib = 0, std::string snapshot_dir = "",
                             int parallel = 2) {
  EngineOptions o;
  o.model_path = tiny("qwen3");
  o.backend = "cpu";
  o.parallel = parallel;
  o.drafts = false;
  o.prompt_cache_gib = cache_gib;
  o.spill_gib = spill_gib;
  o.snapshot_dir = std::move(snapshot_dir);
  return create_engine(o);
}

std::vector<int32_t> text_tokens(Engine& e, int n, int salt) {
  std::string s;
  const char* words[] = {"Well, ", "Prince, ", "so ",  "Genoa ", "and ",
                         "Lucca ", "are ",     "now ", "just ",  "family "};
  for (int i = 0; s.size() < size_t(n) * 3; ++i) s += words[(i * 7 + salt) % 10];
  auto t = e.tokenizer().encode(s, false);
  t.resize(size_t(n));
  return t;
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tf-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

TEST(PromptCache, MultiTurnReusesThePrefixAndMatchesNoCache) {
  auto cached = make(0.01), plain = make(0);
  auto p1 = text_tokens(*cached, 70, 1);
  Out a1 = run(*cached, p1), b1 = run(*plain, p1);
  EXPECT_EQ(a1.tokens, b1.tokens);
  EXPECT_EQ(a1.usage.cached_tokens, 0);
  // Turn 2 resends turn 1 and its reply, plus a new message; turn 3 likewise.
  auto p2 = p1;
  p2.insert(p2.end(), a1.tokens.begin(), a1.tokens.end());
  auto extra = text_tokens(*cached, 20, 5);
  p2.insert(p2.end(), extra.begin(), extra.end());
  Out a2 = run(*cached, p2), b2 = run(*plain, p2);
  EXPECT_EQ(a2.tokens, b2.tokens);
  EXPECT_EQ(a2.text, b2.text);
  EXPECT_GE(a2.usage.cached_tokens, 80);  // the whole blocks of turn 1 + reply
  EXPECT_EQ(b2.usage.cached_tokens, 0);
  auto p3 = p2;
  p3.insert(p3.end(), a2.tokens.begin(), a2.tokens.end());
  Out a3 = run(*cached, p3), b3 = run(*plain, p3);
  EXPECT_EQ(a3.tokens, b3.tokens);
  EXPECT_GT(a3.usage.cached_tokens, a2.usage.cached_tokens);
  // Same prompt again: everything but the last block is a hit.
  Out a4 = run(*cached, p3);
  EXPECT_EQ(a4.tokens, a3.tokens);
  EXPECT_EQ(cached->stats().kv_blocks_used, 0);
  EXPECT_GT(cached->stats().kv_blocks_cached, 0);
}

TEST(PromptCache, EvictionUnderATinyBudgetKeepsServing) {
  auto cached = make(4e-5), plain = make(0);  // ~2 blocks retained
  for (int round = 0; round < 2; ++round)
    for (int salt = 0; salt < 4; ++salt) {
      auto p = text_tokens(*cached, 40 + salt * 9, salt);
      Out a = run(*cached, p), b = run(*plain, p);
      EXPECT_EQ(a.tokens, b.tokens) << salt;
    }
  EXPECT_LE(cached->stats().kv_blocks_cached, 3);
}

TEST(PromptCache, SpilledPrefixIsReadBackAndMatches) {
  auto cached = make(4e-5, 0.01), plain = make(0);
  auto first = text_tokens(*cached, 50, 3);
  Out a = run(*cached, first);
  for (int salt = 4; salt < 8; ++salt)
    run(*cached, text_tokens(*cached, 50, salt));  // evicts (and spills) `first`
  Out again = run(*cached, first), b = run(*plain, first);
  EXPECT_EQ(again.tokens, b.tokens);
  EXPECT_EQ(again.tokens, a.tokens);
  EXPECT_EQ(again.usage.cached_tokens, 48);
  EXPECT_GT(cached->stats().prompt_cache_disk_hits, 0);
}

TEST(PromptCache, SnapshotSurvivesRestartAndCorruptFilesAreRecomputed) {
  const fs::path dir = temp_dir("snap");
  std::vector<int32_t> prompt;
  Out first;
  {
    auto e = make(0.01, 0, dir.string());
    prompt = text_tokens(*e, 60, 2);
    first = run(*e, prompt);
    e->shutdown();
  }
  std::vector<fs::path> files;
  for (auto& f : fs::directory_iterator(dir)) files.push_back(f.path());
  ASSERT_GE(files.size(), 3u);
  {
    auto e = make(0.01, 0, dir.string());
    Out again = run(*e, prompt);
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.usage.cached_tokens, 48);
    EXPECT_GT(e->stats().prompt_cache_disk_hits, 0);
    e->shutdown();
  }
  // Corrupt one byte of every file and truncate one: all are rejected, deleted, and the reply is the same.
  std::sort(files.begin(), files.end());
  for (auto& f : fs::directory_iterator(dir)) {
    std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(100);
    s.put(char(0x5a));
  }
  fs::resize_file(*fs::directory_iterator(dir), 64);
  {
    auto e = make(0.01, 0, dir.string());
    Out again = run(*e, prompt);
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.usage.cached_tokens, 0);
    EXPECT_EQ(e->stats().prompt_cache_disk_hits, 0);
    e->shutdown();
  }
  // The bad files were deleted and the recomputed blocks saved in their place: the next start reuses them.
  {
    auto e = make(0.01, 0, dir.string());
    Out again = run(*e, prompt);
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.usage.cached_tokens, 48);
    e->shutdown();
  }
  fs::remove_all(dir);
}

TEST(PromptCache, SnapshotsOfAnotherModelAreIgnored) {
  const fs::path dir = temp_dir("foreign");
  {
    EngineOptions o;
    o.model_path = tiny("qwen3-yarn");  // same tokenizer, other weights
    o.backend = "cpu";
    o.drafts = false;
    o.prompt_cache_gib = 0.01;
    o.snapshot_dir = dir.string();
    auto e = create_engine(o);
    run(*e, text_tokens(*e, 60, 2));
    e->shutdown();
  }
  auto e = make(0.01, 0, dir.string());
  Out o = run(*e, text_tokens(*e, 60, 2));
  EXPECT_EQ(o.usage.cached_tokens, 0);
  e->shutdown();
  fs::remove_all(dir);
}

fs::path block_file(const fs::path& dir, uint64_t hash) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.tfkv", static_cast<unsigned long long>(hash));
  return dir / name;
}

TEST(KvDiskStore, CorruptTruncatedAndPaddedFilesAreDeletedNeverServed) {
  const fs::path dir = temp_dir("store");
  std::vector<int32_t> toks(16);
  std::vector<uint8_t> data(512);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 31 + 7);
  {
    KvDiskStore s(dir.string(), 42, 1 << 20, true);
    for (uint64_t h = 1; h <= 4; ++h) {
      toks.assign(16, int32_t(h));
      ASSERT_TRUE(s.put(h, 0, toks, data));
    }
    EXPECT_EQ(s.files(), 4u);
    std::vector<uint8_t> back(data.size());
    toks.assign(16, 1);
    EXPECT_TRUE(s.get(1, toks, back));
    EXPECT_EQ(back, data);
    // One flipped bit in the K/V bytes (the checksum catches it), a file one byte short, one byte too long.
    {
      std::fstream f(block_file(dir, 2), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(std::streamoff(fs::file_size(block_file(dir, 2)) - 4 - 10));
      f.put(char(data[data.size() - 10] ^ 1));
    }
    fs::resize_file(block_file(dir, 3), fs::file_size(block_file(dir, 3)) - 1);
    std::ofstream(block_file(dir, 4), std::ios::binary | std::ios::app).put('x');
    for (uint64_t h = 2; h <= 4; ++h) {
      toks.assign(16, int32_t(h));
      EXPECT_FALSE(s.get(h, toks, back)) << h;
      EXPECT_FALSE(s.contains(h)) << h;
      EXPECT_FALSE(fs::exists(block_file(dir, h))) << h;
    }
    // Asked for other tokens under the same hash (a collision): refused too, and dropped.
    toks.assign(16, 9);
    EXPECT_FALSE(s.get(1, toks, back));
    EXPECT_FALSE(fs::exists(block_file(dir, 1)));
    toks.assign(16, 5);
    ASSERT_TRUE(s.put(5, 0, toks, data));
    // A block recomputed over an unverified (here: damaged) copy is rewritten only when asked to.
    fs::resize_file(block_file(dir, 5), 100);
    EXPECT_TRUE(s.put(5, 0, toks, data));
    EXPECT_EQ(fs::file_size(block_file(dir, 5)), 100u);
    EXPECT_TRUE(s.put(5, 0, toks, data, /*replace=*/true));
    EXPECT_EQ(s.files(), 1u);
    EXPECT_EQ(s.bytes(), fs::file_size(block_file(dir, 5)));
  }
  // A crash's temporary file is removed when the store opens; another identity's files are not indexed.
  std::ofstream(dir / "0000000000000006.tfkv.tmp.123") << "half";
  {
    KvDiskStore foreign(dir.string(), 43, 1 << 20, true);
    EXPECT_EQ(foreign.files(), 0u);
  }
  EXPECT_FALSE(fs::exists(dir / "0000000000000006.tfkv.tmp.123"));
  KvDiskStore again(dir.string(), 42, 1 << 20, true);
  EXPECT_EQ(again.files(), 1u);
  EXPECT_TRUE(again.contains(5));
  fs::remove_all(dir);
}

// A full disk during a spill, for real: the child process below may not write files past 2 KiB
// (RLIMIT_FSIZE; a KV block file of the tiny model is larger) and ignores SIGXFSZ, so the spill's write
// fails with EFBIG as it would with ENOSPC. The store must warn once, turn the spill off, leave no file
// behind, and serving must go on with outputs equal to an uncached engine.
constexpr const char* kDiskFullEnv = "TF_TEST_DISK_FULL_DIR";

void disk_full_child(const fs::path& dir) {
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &lim), 0);
  lim.rlim_cur = 2048;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  {
    KvDiskStore store((dir / "store").string(), 1, 1 << 20, true);
    std::vector<int32_t> toks(16, 3);
    EXPECT_FALSE(store.put(1, 0, toks, std::vector<uint8_t>(8192, 7)));
    EXPECT_FALSE(store.usable());
    EXPECT_FALSE(store.put(2, 0, toks, std::vector<uint8_t>(64, 7)));  // would fit: the spill stays off
    EXPECT_EQ(store.files(), 0u);
    EXPECT_TRUE(fs::is_empty(dir / "store"));
  }
  EngineOptions o;
  o.model_path = tiny("qwen3");
  o.backend = "cpu";
  o.parallel = 2;
  o.drafts = false;
  o.prompt_cache_gib = 4e-5;  // ~2 blocks retained: every new prompt evicts (spills) older blocks
  o.spill_gib = 0.01;
  o.spill_dir = (dir / "spill").string();
  auto cached = create_engine(o);
  auto plain = make(0);
  for (int round = 0; round < 2; ++round)
    for (int salt = 3; salt < 8; ++salt) {
      auto p = text_tokens(*cached, 50, salt);
      Out a = run(*cached, p), b = run(*plain, p);
      EXPECT_EQ(a.tokens, b.tokens) << round << " " << salt;
      if (round == 1) {
        EXPECT_EQ(a.usage.cached_tokens, 0) << salt;  // evicted, and nothing on disk
      }
    }
  EXPECT_EQ(cached->stats().prompt_cache_disk_hits, 0);
  EXPECT_TRUE(fs::is_empty(dir / "spill"));
  cached->shutdown();
  plain->shutdown();
  // Snapshots saved at shutdown onto the full disk: one warning, nothing left, the next start is clean.
  auto snap = make(0.01, 0, (dir / "snap").string());
  auto p = text_tokens(*snap, 60, 2);
  Out first = run(*snap, p);
  snap->shutdown();
  EXPECT_TRUE(fs::is_empty(dir / "snap"));
  snap = make(0.01, 0, (dir / "snap").string());
  Out again = run(*snap, p);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.usage.cached_tokens, 0);
  snap->shutdown();
}

TEST(PromptCache, FullDiskDegradesToNoSpillWithOneWarning) {
  if (const char* child = std::getenv(kDiskFullEnv)) return disk_full_child(child);
  const fs::path dir = temp_dir("diskfull");
  fs::create_directories(dir);
  // Rerun this test alone in a child process, its stdout and stderr into a pipe.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::string filter = "--gtest_filter=PromptCache.FullDiskDegradesToNoSpillWithOneWarning";
  std::string env = std::string(kDiskFullEnv) + "=" + dir.string();
  std::vector<char*> argv{const_cast<char*>("test_prompt_cache"), filter.data(), nullptr};
  std::vector<char*> envp{env.data()};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind(std::string(kDiskFullEnv) + "=", 0) != 0) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  ASSERT_EQ(rc, 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;)
    if (n > 0)
      out.append(buf, size_t(n));
    else if (errno != EINTR)
      break;
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  auto count = [&](const std::string& what) {
    int n = 0;
    for (size_t p = out.find(what); p != std::string::npos; p = out.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("writing to " + (dir / "spill").string() + " failed"), 1) << out;
  EXPECT_EQ(count("writing to " + (dir / "store").string() + " failed"), 1) << out;
  EXPECT_EQ(count("writing to " + (dir / "snap").string() + " failed"), 2) << out;  // one per engine
  EXPECT_EQ(count("KV spill is off"), 4) << out;
  EXPECT_EQ(count("failed (File too large)"), 4) << out;  // the OS's reason is in the warning
  EXPECT_EQ(count("[  PASSED  ] 1 test"), 1) << out;      // the child ran the test (and did not skip it)
  for (const auto& f : fs::recursive_directory_iterator(dir))
    EXPECT_FALSE(f.is_regular_file()) << "left behind: " << f.path();
  fs::remove_all(dir);
}

}  // namespace
