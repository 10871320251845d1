#include "engine/kv_store.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace tf {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'F', 'K', 'V', 'B', 'L', 'K', '1'};

struct Header {
  char magic[8];
  uint64_t identity, hash, parent;
  uint32_t ntokens, reserved;
  uint64_t data_bytes;
};

uint32_t crc(uint32_t c, const void* p, size_t n) {
  return uint32_t(crc32(c, static_cast<const Bytef*>(p), uInt(n)));
}

}  // namespace

KvDiskStore::KvDiskStore(std::string dir, uint64_t identity, uint64_t max_bytes, bool persistent,
                         size_t max_files)
    : dir_(std::move(dir)),
      identity_(identity),
      max_bytes_(max_bytes),
      max_files_(max_files),
      persistent_(persistent) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error("cannot create the KV cache directory " + dir_ + ": " + ec.message());
  if (!persistent_) return;
  // Index existing snapshot files; foreign ones (another model, build or block size) are left alone.
  std::vector<std::pair<fs::file_time_type, uint64_t>> found;
  size_t foreign = 0;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".tfkv") {
      if (e.path().string().find(".tfkv.tmp") != std::string::npos)
        fs::remove(e.path(), ec);  // a crash's leftover
      continue;
    }
    std::ifstream f(e.path(), std::ios::binary);
    Header h{};
    if (!f.read(reinterpret_cast<char*>(&h), sizeof h) || std::memcmp(h.magic, kMagic, 8) != 0) {
      ++foreign;
      continue;
    }
    if (h.identity != identity_) {
      ++foreign;
      continue;
    }
    found.push_back({fs::last_write_time(e.path(), ec), h.hash});
    index_[h.hash] = {uint64_t(fs::file_size(e.path(), ec)), {}};
  }
  std::sort(found.begin(), found.end());  // oldest first; push_front leaves the newest at the front
  for (auto& [t, h] : found) {
    lru_.push_front(h);
    index_[h].lru = lru_.begin();
    bytes_ += index_[h].bytes;
  }
  if (foreign)
    log_info("prompt cache: ignored " + std::to_string(foreign) + " snapshot file(s) in " + dir_ +
             " written for another model, weights, dtype, kernel version or block size");
  if (!index_.empty())
    log_info("prompt cache: " + std::to_string(index_.size()) + " snapshot block(s) in " + dir_);
  enforce_budget();
}

KvDiskStore::~KvDiskStore() {
  if (!persistent_) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string KvDiskStore::path_for(uint64_t hash) const {
  std::ostringstream o;
  o << dir_ << "/" << std::hex << std::setw(16) << std::setfill('0') << hash << ".tfkv";
  return o.str();
}

void KvDiskStore::drop(uint64_t hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  std::error_code ec;
  fs::remove(path_for(hash), ec);
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

void KvDiskStore::enforce_budget() {
  while (!lru_.empty() && (bytes_ > max_bytes_ || (max_files_ && index_.size() > max_files_)))
    drop(lru_.back());
}

bool KvDiskStore::put(uint64_t hash, uint64_t parent, const std::vector<int32_t>& tokens,
                      const std::vector<uint8_t>& data, bool replace) {
  if (!usable_) return false;
  if (index_.count(hash) && !replace) return true;
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.identity = identity_;
  h.hash = hash;
  h.parent = parent;
  h.ntokens = uint32_t(tokens.size());
  h.data_bytes = data.size();
  uint32_t c = crc(0, &h, sizeof h);
  c = crc(c, tokens.data(), tokens.size() * 4);
  c = crc(c, data.data(), data.size());
  const std::string path = path_for(hash), tmp = path + ".tmp." + std::to_string(getpid());
  bool ok;
  errno = 0;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 4));
    f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    f.write(reinterpret_cast<const char*>(&c), 4);
    f.flush();
    ok = bool(f);
  }
  // A failed write (ENOSPC, EFBIG, EIO, ...) turns the spill off for good: one warning, no retries that
  // would slow every eviction down, and the half-written temporary file is removed.
  const int err = errno;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    const std::string why = ec ? ec.message() : err ? std::strerror(err) : "write error";
    fs::remove(tmp, ec);
    usable_ = false;
    log_warning("prompt cache: writing to " + dir_ + " failed (" + why + "); KV spill is off from now on");
    return false;
  }
  const uint64_t size = sizeof h + tokens.size() * 4 + data.size() + 4;
  if (auto old = index_.find(hash); old != index_.end()) {  // replaced: the rename overwrote its file
    bytes_ -= old->second.bytes;
    lru_.erase(old->second.lru);
    index_.erase(old);
  }
  lru_.push_front(hash);
  index_[hash] = {size, lru_.begin()};
  bytes_ += size;
  enforce_budget();
  return index_.count(hash) != 0;
}

bool KvDiskStore::get(uint64_t hash, const std::vector<int32_t>& tokens, std::vector<uint8_t>& data) {
  auto it = index_.find(hash);
  if (it == index_.end()) return false;
  std::ifstream f(path_for(hash), std::ios::binary);
  Header h{};
  std::vector<int32_t> stored;
  bool ok = bool(f.read(reinterpret_cast<char*>(&h), sizeof h)) && std::memcmp(h.magic, kMagic, 8) == 0 &&
            h.identity == identity_ && h.hash == hash && h.ntokens == tokens.size() &&
            h.data_bytes == data.size();
  uint32_t want = 0, c = 0;
  if (ok) {
    stored.resize(h.ntokens);
    ok = bool(f.read(reinterpret_cast<char*>(stored.data()), std::streamsize(stored.size() * 4))) &&
         stored == tokens &&
         bool(f.read(reinterpret_cast<char*>(data.data()), std::streamsize(data.size()))) &&
         bool(f.read(reinterpret_cast<char*>(&want), 4));
  }
  if (ok) {
    c = crc(0, &h, sizeof h);
    c = crc(c, stored.data(), stored.size() * 4);
    c = crc(c, data.data(), data.size());
    ok = c == want && f.peek() == std::char_traits<char>::eof();
  }
  if (!ok) {
    log_warning("prompt cache: " + path_for(hash) +
                " is corrupt, truncated or stale; deleted, the prefix is recomputed");
    drop(hash);
    return false;
  }
  lru_.erase(it->second.lru);
  lru_.push_front(hash);
  it->second.lru = lru_.begin();
  return true;
}

}  // namespace tf
