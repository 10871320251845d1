// The host logic of CUDA-graph replay (ops/graph_cache.h): the attention chunk bucket, the bounded LRU
// map of captured graphs and the use counter that delays a key's capture until it recurs. The GPU side
// (capture, replay, exact bits) is tests/ops/gpu/test_cuda_graphs.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/graph_cache.h"

namespace tf {
namespace {

TEST(AttentionChunkBucket, CoversTheExactCountAndIsStableWithinABucket) {
  EXPECT_EQ(attention_chunk_bucket(0), 1);
  EXPECT_EQ(attention_chunk_bucket(1), 1);
  EXPECT_EQ(attention_chunk_bucket(2), 2);
  EXPECT_EQ(attention_chunk_bucket(3), 4);
  EXPECT_EQ(attention_chunk_bucket(5), 8);
  EXPECT_EQ(attention_chunk_bucket(17), 32);
  EXPECT_EQ(attention_chunk_bucket(32), 32);
  EXPECT_EQ(attention_chunk_bucket(33), 64);
  EXPECT_EQ(attention_chunk_bucket(65), 96);
  EXPECT_EQ(attention_chunk_bucket(256), 256);
  int previous = 1, changes = 0;
  for (int c = 1; c <= 1024; ++c) {
    const int b = attention_chunk_bucket(c);
    EXPECT_GE(b, c);
    EXPECT_GE(b, previous);                      // monotone
    EXPECT_EQ(attention_chunk_bucket(b), b);     // a bucket is its own bucket
    EXPECT_LE(b, c <= 32 ? 2 * c - 1 : c + 31);  // at most 2x (short) or 31 chunks (long) of waste
    changes += b != previous;
    previous = b;
  }
  EXPECT_EQ(changes, 5 + (1024 - 32) / 32);  // 2, 4, 8, 16, 32, then every 32 chunks
}

struct Counted {
  static int live;
  std::string name;
  explicit Counted(std::string n) : name(std::move(n)) { ++live; }
  ~Counted() { --live; }
};
int Counted::live = 0;

TEST(LruMap, KeepsTheMostRecentlyUsedWithinCapacity) {
  {
    LruMap<Counted> m(3);
    EXPECT_EQ(m.capacity(), 3u);
    for (int64_t i = 0; i < 3; ++i) m.put({i, 7}, std::make_unique<Counted>("e" + std::to_string(i)));
    EXPECT_EQ(m.size(), 3u);
    ASSERT_NE(m.find({0, 7}), nullptr);  // 0 becomes the most recently used; 1 is now the oldest
    EXPECT_EQ(m.find({0, 7})->name, "e0");
    m.put({3, 7}, std::make_unique<Counted>("e3"));
    EXPECT_EQ(m.size(), 3u);
    EXPECT_EQ(Counted::live, 3);  // the dropped entry was destroyed
    EXPECT_EQ(m.find({1, 7}), nullptr);
    EXPECT_NE(m.find({0, 7}), nullptr);
    EXPECT_NE(m.find({2, 7}), nullptr);
    EXPECT_NE(m.find({3, 7}), nullptr);
    EXPECT_EQ(m.find({0}), nullptr);                  // keys compare whole
    m.put({2, 7}, std::make_unique<Counted>("e2b"));  // replacing keeps one entry per key
    EXPECT_EQ(m.size(), 3u);
    EXPECT_EQ(m.find({2, 7})->name, "e2b");
    EXPECT_EQ(Counted::live, 3);
    m.erase({2, 7});
    EXPECT_EQ(m.find({2, 7}), nullptr);
    EXPECT_EQ(m.size(), 2u);
    m.clear();
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(Counted::live, 0);
    for (int64_t i = 0; i < 100; ++i) m.put({i}, std::make_unique<Counted>("x"));
    EXPECT_EQ(m.size(), 3u);
    EXPECT_EQ(Counted::live, 3);
    EXPECT_NE(m.find({99}), nullptr);
    EXPECT_EQ(m.find({96}), nullptr);
  }
  EXPECT_EQ(Counted::live, 0);
  LruMap<Counted> one(0);  // a capacity below 1 keeps one entry
  one.put({1}, std::make_unique<Counted>("a"));
  one.put({2}, std::make_unique<Counted>("b"));
  EXPECT_EQ(one.size(), 1u);
  EXPECT_NE(one.find({2}), nullptr);
}

TEST(GraphUseCounter, AKeyIsCapturedOnItsNthUse) {
  static_assert(kGraphCaptureAfterUses >= 2, "one-off shapes must not pay a capture");
  GraphUseCounter c;
  EXPECT_EQ(c.capture_after(), kGraphCaptureAfterUses);
  const std::vector<int64_t> decode = {2, 2, -1, 7}, verify = {9, 2, -1, 7};
  for (int i = 1; i < kGraphCaptureAfterUses; ++i) {
    EXPECT_FALSE(c.use(decode)) << "use " << i;
    EXPECT_FALSE(c.use(verify)) << "use " << i;  // keys count apart
  }
  EXPECT_TRUE(c.use(decode));
  EXPECT_TRUE(c.use(decode));  // and on every later use (a graph evicted or gone stale is recaptured)
  EXPECT_TRUE(c.use(verify));
  EXPECT_FALSE(c.use({2, 2, -1}));  // keys compare whole
  EXPECT_EQ(c.size(), 3u);
  c.clear();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.use(decode), kGraphCaptureAfterUses == 1);
}

TEST(GraphUseCounter, OneOffKeysNeverReachTheThresholdAndTheCountIsBounded) {
  GraphUseCounter c(3, 4);
  for (int64_t i = 0; i < 100; ++i) EXPECT_FALSE(c.use({i}));  // one-off shapes: all eager
  EXPECT_EQ(c.size(), 4u);                                     // the least recently used are forgotten
  // A recurring key keeps its count among one-offs while it is among the 4 most recently used ...
  EXPECT_FALSE(c.use({1000}));
  EXPECT_FALSE(c.use({1001}));
  EXPECT_FALSE(c.use({1000}));
  EXPECT_TRUE(c.use({1000}));
  // ... and starts over once forgotten.
  for (int64_t i = 0; i < 4; ++i) c.use({2000 + i});
  EXPECT_FALSE(c.use({1000}));
  GraphUseCounter first(1);  // 1: capture on first use (tests of the capture itself)
  EXPECT_TRUE(first.use({5}));
  GraphUseCounter clamped(0);
  EXPECT_EQ(clamped.capture_after(), 1);
}

}  // namespace
}  // namespace tf
