#include "engine/json_tokens.h"

#include <algorithm>

namespace tf {

JsonTokenFilter::JsonTokenFilter(const Tokenizer& tok, int vocab, std::vector<int32_t> eos)
    : vocab_(vocab), index_of_(size_t(vocab), -1), eos_(std::move(eos)) {
  for (int32_t id = 0; id < vocab; ++id) {
    if (std::find(eos_.begin(), eos_.end(), id) != eos_.end()) continue;
    auto b = tok.token_bytes(id);
    if (b && !b->empty()) sorted_.push_back({std::move(*b), id, 0});  // empty: no progress, never allowed
  }
  std::sort(sorted_.begin(), sorted_.end(), [](const Entry& a, const Entry& b) {
    return a.bytes < b.bytes || (a.bytes == b.bytes && a.id < b.id);
  });
  for (size_t i = 0; i < sorted_.size(); ++i) {
    index_of_[size_t(sorted_[i].id)] = int32_t(i);
    longest_ = std::max<uint32_t>(longest_, uint32_t(sorted_[i].bytes.size()));
    if (i == 0) continue;
    const std::string &p = sorted_[i - 1].bytes, &s = sorted_[i].bytes;
    uint32_t n = 0;
    while (n < p.size() && n < s.size() && p[n] == s[n]) ++n;
    sorted_[i].lcp = n;
  }
}

void JsonTokenFilter::allowed(const JsonMatcher& m, std::vector<uint8_t>& mask) const {
  const std::string state = m.cache_key(longest_);
  ++clock_;
  for (Cached& c : cache_) {
    if (c.schema == m.schema() && c.state == state) {
      c.used = clock_;
      mask = c.mask;
      return;
    }
  }
  compute(m, mask);
  if (cache_.size() < kCacheEntries) cache_.emplace_back();
  Cached& slot = *std::min_element(cache_.begin(), cache_.end(),
                                   [](const Cached& a, const Cached& b) { return a.used < b.used; });
  slot.schema = m.schema();
  slot.state.assign(state);
  slot.mask = mask;
  slot.used = clock_;
}

void JsonTokenFilter::compute(const JsonMatcher& m, std::vector<uint8_t>& mask) const {
  mask.assign(size_t(vocab_), 0);
  bool any = false;
  if (!m.dead_end()) {
    // states[d]: the matcher after the first d bytes of the current entry (states[0] = m). An entry shares
    // `lcp` bytes with the previous one, so its walk resumes at depth lcp (when those were accepted).
    std::vector<JsonMatcher> states(1, m);
    size_t good = 0;  // states[0..good] are valid for the previous entry's first `good` bytes
    for (size_t i = 0; i < sorted_.size();) {
      const Entry& e = sorted_[i];
      size_t d = std::min<size_t>(e.lcp, good);
      bool ok = true;
      for (; d < e.bytes.size(); ++d) {
        if (states.size() < d + 2) states.resize(d + 2, m);
        states[d + 1] = states[d];
        if (!states[d + 1].feed(uint8_t(e.bytes[d]))) {
          ok = false;
          break;
        }
      }
      good = d;  // bytes [0, d) accepted
      if (ok) {
        mask[size_t(e.id)] = 1;
        any = true;
        ++i;
        continue;
      }
      // Byte d was refused: every following entry that shares bytes [0, d] is refused too.
      ++i;
      while (i < sorted_.size() && sorted_[i].lcp > d) ++i;
    }
  }
  if (m.complete() || !any)
    for (int32_t id : eos_)
      if (id >= 0 && id < vocab_) mask[size_t(id)] = 1;
}

bool JsonTokenFilter::advance(JsonMatcher& m, int32_t token) const {
  if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) return true;
  if (token < 0 || token >= vocab_ || index_of_[size_t(token)] < 0) return false;
  return m.feed(sorted_[size_t(index_of_[size_t(token)])].bytes);
}

}  // namespace tf
