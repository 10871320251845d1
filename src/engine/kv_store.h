#pragma once
// KV blocks on disk, for the prompt cache's spill (evicted prefixes read back instead of prefilled again)
// and persistent snapshots (prefixes that survive a restart). One file per block, named by the block's
// chain hash, holding: magic, the engine identity (model, weights, dtype, kernel version, block size),
// the chain hash and its parent, the block's token ids, the K/V bytes, and a CRC-32 of all of it.
// Files are written to a temporary name and renamed, so a crash never leaves a half file under a real
// name; a corrupt, truncated or foreign file is detected on read, deleted and recomputed, never served.
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace tf {

class KvDiskStore {
 public:
  // `persistent`: files outlive the process (snapshots) and existing ones are indexed at start; else the
  // directory is private and removed at destruction. `max_bytes` bounds the files kept (oldest go first).
  KvDiskStore(std::string dir, uint64_t identity, uint64_t max_bytes, bool persistent, size_t max_files = 0);
  ~KvDiskStore();
  KvDiskStore(const KvDiskStore&) = delete;
  KvDiskStore& operator=(const KvDiskStore&) = delete;

  bool usable() const { return usable_; }  // false after a write failed (disk full): spill is off
  bool contains(uint64_t hash) const { return index_.count(hash) != 0; }
  size_t files() const { return index_.size(); }
  uint64_t bytes() const { return bytes_; }
  const std::string& dir() const { return dir_; }

  // Writes a block (temp file + rename). A block already stored is kept unless `replace`: the caller
  // computed it afresh while the stored file was never verified (it may be corrupt), so it is rewritten.
  bool put(uint64_t hash, uint64_t parent, const std::vector<int32_t>& tokens,
           const std::vector<uint8_t>& data, bool replace = false);
  // Reads and verifies; on any mismatch deletes the file and returns false.
  bool get(uint64_t hash, const std::vector<int32_t>& tokens, std::vector<uint8_t>& data);

 private:
  std::string path_for(uint64_t hash) const;
  void drop(uint64_t hash);
  void enforce_budget();
  struct Entry {
    uint64_t bytes;
    std::list<uint64_t>::iterator lru;
  };
  std::string dir_;
  uint64_t identity_, max_bytes_;
  size_t max_files_;
  bool persistent_, usable_ = true;
  uint64_t bytes_ = 0;
  std::unordered_map<uint64_t, Entry> index_;
  std::list<uint64_t> lru_;  // front = most recently used
};

}  // namespace tf
