#pragma once
// The prompt cache: an index of retained KV blocks by chained hashes of their token ids from the start of
// the sequence. A new prompt shares the blocks of its longest cached prefix (whole blocks only, and never
// the block its first computed token falls in, so shared blocks are never written); a finished stream's
// blocks are retained; least-recently-used prefixes are evicted (spilled to disk when a store is set)
// when memory is needed, so retained prefixes never block a request. Hits are bitwise equal to misses
// because every kernel computes a row the same way whatever else is in the batch.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/kv_store.h"

namespace tf {

struct PrefixCacheOptions {
  int max_blocks = 0;            // retained blocks in memory; 0 disables the cache
  int max_prefixes = 0;          // retained prefixes (chains ending in a leaf); 0 = no limit
  KvDiskStore* store = nullptr;  // spill / snapshots, or null
};

class PrefixCache {
 public:
  PrefixCache(KvBlockPool& pool, PrefixCacheOptions o) : pool_(pool), o_(o) {}
  bool enabled() const { return o_.max_blocks > 0; }

  // Appends to `table` the blocks of the longest cached prefix of tokens[0, limit) (the caller holds a
  // reference on each) and returns how many tokens they cover.
  int acquire(const std::vector<int32_t>& tokens, int limit, std::vector<int32_t>& table);
  // A stream ended: retain the whole blocks of its first `valid` tokens, then drop the table's references.
  void retain(const std::vector<int32_t>& tokens, int valid, std::vector<int32_t>& table);
  // Evicts retained blocks (least recently used leaves first) until `need` blocks are free.
  bool make_room(int need);
  // Writes every retained block to the store (persistent snapshot at shutdown).
  void save_all();

  int retained_blocks() const { return int(entries_.size()); }
  int idle_blocks() const;  // retained blocks no stream is using (reclaimable)
  int64_t hits() const { return hits_; }
  int64_t disk_hits() const { return disk_hits_; }

 private:
  struct Entry {
    int32_t block;
    uint64_t parent;
    std::vector<int32_t> tokens;
    int children = 0;
    uint64_t tick = 0;
    bool from_disk = false;  // read back (and verified); else computed here, its stored copy unverified
  };
  static uint64_t chain(uint64_t parent, const int32_t* tokens, int n);
  bool evict_one();
  void add_entry(uint64_t hash, uint64_t parent, int32_t block, std::vector<int32_t> tokens,
                 bool from_disk = false);
  void store_block(uint64_t hash, const Entry& e, std::vector<uint8_t>& scratch);
  void enforce_limits();
  int leaves() const;

  KvBlockPool& pool_;
  PrefixCacheOptions o_;
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t clock_ = 0;
  int64_t hits_ = 0, disk_hits_ = 0;
};

}  // namespace tf
