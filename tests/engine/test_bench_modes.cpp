// The benchmark modes built on the replay drafter and the prompt cache: `tensorfold bench --drafter replay |
// --cache-check | --chat-turns N | --repeat N` on the demo model, run in process, must report token-identical
// outputs (and, for replay, every draft accepted). The demo model is too slow for the sanitizer build (as
// test_demo), so these run in the main build only; the engine paths under them run sanitized in test_replay,
// test_prompt_cache and test_drafting.
#include <gtest/gtest.h>

#include <iostream>
#include <regex>
#include <sstream>

#include "cli/commands.h"

using namespace tf;

namespace {

std::string bench(std::vector<const char*> args) {
  CLI::App app;
  cli::add_bench_command(app);
  args.insert(args.begin(), {"tensorfold", "bench"});
  std::ostringstream captured;
  auto* old = std::cout.rdbuf(captured.rdbuf());
  try {
    app.parse(int(args.size()), args.data());
  } catch (...) {
    std::cout.rdbuf(old);
    std::cerr << captured.str();
    throw;
  }
  std::cout.rdbuf(old);
  std::cout << captured.str();
  return captured.str();
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(BenchModes, ReplaySweepOnTheDemoModelAcceptsEverything) {
  const std::string out = bench({"--drafter", "replay", "--workload", "free", "--tokens", "40", "--max-draft",
                                 "3", "--sweep", "--backend", "cpu"});
  EXPECT_EQ(count(out, "| MATCH |"), 3);
  EXPECT_EQ(count(out, "MISMATCH"), 0);
  // Every row: accepted == drafted, and drafts were made.
  std::regex row(R"(\| free \| (\d) \|[^|]*\|[^|]*\|[^|]*\| (\d+)/(\d+) \|)");
  int rows = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), row), end; it != end; ++it, ++rows) {
    EXPECT_EQ((*it)[2], (*it)[3]) << it->str();
    EXPECT_GT(std::stoi((*it)[3]), 0) << it->str();
  }
  EXPECT_EQ(rows, 3);
}

TEST(BenchModes, CacheCheckReadsTheSpillBackAndMatches) {
  const std::string out =
      bench({"--cache-check", "--prompt-tokens", "100", "--tokens", "6", "--backend", "cpu"});
  EXPECT_NE(out.find("disk read-back"), std::string::npos);
  EXPECT_NE(out.find("outputs MATCH"), std::string::npos);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"((\d+) block\(s\) read back)")));
  EXPECT_EQ(std::stoi(m[1]), 6);  // the whole blocks of the 100-token prompt
}

TEST(BenchModes, ChatTurnTenReusesTheHistoryAndMatches) {
  const std::string out =
      bench({"--chat-turns", "10", "--prompt-tokens", "236", "--tokens", "4", "--backend", "cpu"});
  EXPECT_NE(out.find("turn 10 of a chat: 236 tokens of history (20 new)"), std::string::npos);
  EXPECT_NE(out.find("outputs MATCH"), std::string::npos);
}

// --repeat N: N serial/drafted pairs per workload, every pair token-identical (the run throws otherwise); the
// row gives the median rates and the range of the pairs' speedups, and the drafted counts sum over the pairs.
TEST(BenchModes, RepeatReportsMediansOverIdenticalPairs) {
  const char* pairs = "3";
  const std::string out = bench({"--workload", "repetitive", "--tokens", "24", "--repeat", pairs, "--backend",
                                 "cpu", "--drafter", "none"});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(R"(\| repetitive \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+)x \| (\d+)/(\d+) \| [0-9.]+ \| yes \| )"
                 R"(([0-9.]+)-([0-9.]+)x over )" +
                 std::string(pairs) + R"( pairs \|)")))
      << out;
  const double median = std::stod(m[1]), lo = std::stod(m[4]), hi = std::stod(m[5]);
  EXPECT_LE(lo, median + 0.005);
  EXPECT_LE(median, hi + 0.005);
  EXPECT_GT(std::stoi(m[3]), 0) << "context copies drafted nothing on the repetitive workload";
  EXPECT_LE(std::stoi(m[2]), std::stoi(m[3]));
  EXPECT_NE(out.find("| speedup range |"), std::string::npos);
}

}  // namespace
