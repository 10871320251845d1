#pragma once
// Host-side pieces of CUDA-graph replay (Backend::run_graph) that need no GPU: the bucketing of the
// attention chunk count that keeps one graph valid for many decode steps, the bounded LRU map from a
// graph's key to its entry, and the use counter that delays a key's capture until the key recurs. Tested
// on the CPU (tests/ops/test_graph_cache.cpp).
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace tf {

// The chunk count a captured attention launch is sized for: `chunks` rounded up to a power of two up to
// 32, then to a multiple of 32. Blocks for chunks past a row's own do nothing and the combine reads only the
// row's chunks, so the bits are the same for any count >= the exact one (tests/ops/gpu/test_cuda_graphs.cpp);
// the bucket only lets a graph serve every step until the longest row crosses the bucket's end.
inline int attention_chunk_bucket(int chunks) {
  if (chunks <= 1) return 1;
  if (chunks <= 32) {
    int b = 1;
    while (b < chunks) b *= 2;
    return b;
  }
  return (chunks + 31) / 32 * 32;
}

// A map from key to entry that keeps at most `capacity` entries, dropping the least recently used.
template <typename Entry>
class LruMap {
 public:
  using Key = std::vector<int64_t>;
  explicit LruMap(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The entry under `key` (now the most recently used), or null.
  Entry* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second.get();
  }
  // Stores `e` under `key` (replacing any entry there) as the most recently used; drops the least
  // recently used entries beyond the capacity. Returns the stored entry.
  Entry* put(const Key& key, std::unique_ptr<Entry> e) {
    erase(key);
    order_.emplace_front(key, std::move(e));
    index_[key] = order_.begin();
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second.get();
  }
  void erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }
  void clear() {
    index_.clear();
    order_.clear();
  }
  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::list<std::pair<Key, std::unique_ptr<Entry>>> order_;  // most recently used first
  std::map<Key, typename std::list<std::pair<Key, std::unique_ptr<Entry>>>::iterator> index_;
};

// A key is captured on its kGraphCaptureAfterUses-th run_graph call; the calls before run eagerly. A
// capture (stream capture + cudaGraphInstantiate) costs milliseconds while a replay saves tens of
// microseconds, and verify rounds produce many shapes (row counts and tile counts follow the draft
// lengths) that occur once or twice: those never pay a capture. Decode keys recur every step, so they
// pay only this many - 1 eager steps per attention bucket (docs/cuda-notes.md, session 4).
constexpr int kGraphCaptureAfterUses = 3;
// Keys whose uses are counted at most (least recently used dropped): a bound on the counter's memory
// (a key is ~100 integers) well above the graph cache's capacity, so a key still in use keeps its count.
constexpr size_t kGraphUseCounterCapacity = 1024;

// Counts run_graph calls per key (bounded, least recently used keys forgotten) and says when a key has
// been used often enough to be captured.
class GraphUseCounter {
 public:
  explicit GraphUseCounter(int capture_after = kGraphCaptureAfterUses,
                           size_t capacity = kGraphUseCounterCapacity)
      : capture_after_(capture_after < 1 ? 1 : capture_after), counts_(capacity) {}
  // Counts one more use of `key`; true when this use is at least the capture_after-th (counting this one).
  bool use(const LruMap<int64_t>::Key& key) {
    int64_t* n = counts_.find(key);
    if (!n) n = counts_.put(key, std::make_unique<int64_t>(0));
    ++*n;
    return *n >= capture_after_;
  }
  int capture_after() const { return capture_after_; }
  size_t size() const { return counts_.size(); }
  void clear() { counts_.clear(); }

 private:
  int capture_after_;
  LruMap<int64_t> counts_;
};

}  // namespace tf
