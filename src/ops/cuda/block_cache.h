#pragma once
// A cache of freed device blocks keyed by rounded size, in front of cudaMalloc/cudaFree: per-forward
// activations then cost no allocation calls (cudaFree also synchronises the whole device). Reuse is
// safe because all of the backend's device work runs on one stream: a block freed while queued
// kernels still use it is handed only to work queued after them on that stream. Plain C++ (the raw
// allocator is injected), so the bookkeeping is testable without a GPU.
#include <cstddef>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tf::cuda {

class BlockCache {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns null when out of memory
  using RawFree = std::function<void(void*)>;
  // Blocks of `max_cached` bytes or more go straight back to the raw allocator when freed.
  BlockCache(RawAlloc alloc, RawFree free, size_t max_cached = size_t(1) << 30)
      : raw_alloc_(std::move(alloc)), raw_free_(std::move(free)), max_cached_(max_cached) {}
  ~BlockCache() { trim(); }

  // Small sizes round to a power of two (>= 512 bytes), large ones to 2 MiB multiples.
  static size_t rounded(size_t n) {
    if (n <= (size_t(1) << 20)) {
      size_t r = 512;
      while (r < n) r <<= 1;
      return r;
    }
    const size_t g = size_t(2) << 20;
    return (n + g - 1) / g * g;
  }

  // Null only when the raw allocator fails even after the cache is emptied.
  void* alloc(size_t n) {
    const size_t r = rounded(n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(r);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= r;
        return p;
      }
    }
    void* p = raw_alloc_(r);
    if (!p) {
      trim();
      p = raw_alloc_(r);
    }
    if (p) {
      std::lock_guard<std::mutex> lock(mu_);
      size_of_[p] = r;
    }
    return p;
  }

  void free(void* p) {
    if (!p) return;
    std::unique_lock<std::mutex> lock(mu_);
    auto it = size_of_.find(p);
    if (it == size_of_.end()) return;  // not ours
    const size_t r = it->second;
    if (r >= max_cached_) {
      size_of_.erase(it);
      lock.unlock();
      raw_free_(p);
      return;
    }
    free_[r].push_back(p);
    cached_bytes_ += r;
  }

  // Returns every cached block to the raw allocator.
  void trim() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [size, list] : free_)
        for (void* p : list) blocks.push_back(p), size_of_.erase(p);
      free_.clear();
      cached_bytes_ = 0;
    }
    for (void* p : blocks) raw_free_(p);
  }

  size_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_bytes_;
  }

 private:
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  size_t max_cached_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> size_of_;
  size_t cached_bytes_ = 0;
};

}  // namespace tf::cuda
