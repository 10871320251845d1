#include "engine/prefix_cache.h"

namespace tf {

namespace {
constexpr uint64_t kRoot = 0x7466707265666978ULL;  // the empty prefix
}

uint64_t PrefixCache::chain(uint64_t parent, const int32_t* tokens, int n) {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < n; ++i) {
    h ^= uint64_t(uint32_t(tokens[i])) + 0x632be59bd9b4e019ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
  }
  return h;
}

int PrefixCache::acquire(const std::vector<int32_t>& tokens, int limit, std::vector<int32_t>& table) {
  if (!enabled()) return 0;
  const int bs = pool_.block_size();
  uint64_t h = kRoot;
  int covered = 0;
  std::vector<uint8_t> data;
  for (int b = 0; (b + 1) * bs <= limit; ++b) {
    const int32_t* t = tokens.data() + b * bs;
    const uint64_t next = chain(h, t, bs);
    auto it = entries_.find(next);
    if (it != entries_.end() && std::equal(t, t + bs, it->second.tokens.begin())) {
      pool_.ref(it->second.block);
      table.push_back(it->second.block);
      it->second.tick = ++clock_;
    } else if (o_.store && o_.store->contains(next)) {
      // Read a spilled block back into a fresh block instead of prefilling it again.
      std::vector<int32_t> want(t, t + bs), fresh;
      data.resize(pool_.block_bytes());
      if (pool_.free_blocks() == 0) make_room(1);
      if (!o_.store->get(next, want, data) || !pool_.reserve(fresh, bs)) break;
      pool_.write_block(fresh[0], data);
      add_entry(next, h, fresh[0], std::move(want), true);
      table.push_back(fresh[0]);  // the reserve's reference is the caller's; add_entry took the cache's
      ++disk_hits_;
    } else {
      break;
    }
    h = next;
    covered += bs;
  }
  if (covered) ++hits_;
  return covered;
}

void PrefixCache::add_entry(uint64_t hash, uint64_t parent, int32_t block, std::vector<int32_t> tokens,
                            bool from_disk) {
  pool_.ref(block);
  if (parent != kRoot) {
    auto p = entries_.find(parent);
    if (p != entries_.end()) ++p->second.children;
  }
  entries_[hash] = Entry{block, parent, std::move(tokens), 0, ++clock_, from_disk};
}

// Writes a block to the store. A stored copy of a block computed here was never read back (the lookup
// stopped before it, e.g. at a corrupt parent), so it is rewritten rather than trusted.
void PrefixCache::store_block(uint64_t hash, const Entry& e, std::vector<uint8_t>& scratch) {
  if (!o_.store->usable() || (e.from_disk && o_.store->contains(hash))) return;
  pool_.read_block(e.block, scratch);
  o_.store->put(hash, e.parent, e.tokens, scratch, !e.from_disk);
}

void PrefixCache::retain(const std::vector<int32_t>& tokens, int valid, std::vector<int32_t>& table) {
  if (enabled()) {
    const int bs = pool_.block_size();
    uint64_t h = kRoot;
    for (int b = 0; (b + 1) * bs <= valid && b < int(table.size()); ++b) {
      const int32_t* t = tokens.data() + b * bs;
      const uint64_t next = chain(h, t, bs);
      auto it = entries_.find(next);
      if (it == entries_.end())
        add_entry(next, h, table[b], std::vector<int32_t>(t, t + bs));
      else
        it->second.tick = ++clock_;
      h = next;
    }
  }
  pool_.release(table);
  enforce_limits();
}

int PrefixCache::idle_blocks() const {
  int n = 0;
  for (const auto& [h, e] : entries_) n += pool_.refs(e.block) == 1;
  return n;
}

int PrefixCache::leaves() const {
  int n = 0;
  for (const auto& [h, e] : entries_) n += e.children == 0;
  return n;
}

void PrefixCache::enforce_limits() {
  while (int(entries_.size()) > o_.max_blocks && evict_one()) {
  }
  while (o_.max_prefixes > 0 && leaves() > o_.max_prefixes && evict_one()) {
  }
}

// Evicts the least recently used leaf that no stream is using; spills it first when a store is set.
bool PrefixCache::evict_one() {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.children == 0 && pool_.refs(it->second.block) == 1 &&
        (victim == entries_.end() || it->second.tick < victim->second.tick))
      victim = it;
  if (victim == entries_.end()) return false;
  Entry& e = victim->second;
  if (o_.store) {
    std::vector<uint8_t> data;
    store_block(victim->first, e, data);
  }
  if (e.parent != kRoot) {
    auto p = entries_.find(e.parent);
    if (p != entries_.end()) --p->second.children;
  }
  pool_.unref(e.block);
  entries_.erase(victim);
  return true;
}

bool PrefixCache::make_room(int need) {
  while (pool_.free_blocks() < need)
    if (!evict_one()) return false;
  return true;
}

void PrefixCache::save_all() {
  if (!o_.store) return;
  std::vector<uint8_t> data;
  for (const auto& [h, e] : entries_) {
    store_block(h, e, data);
    if (!o_.store->usable()) return;
  }
}

}  // namespace tf
