#include "engine/drafters/ngram.h"

#include <algorithm>

#include "engine/sequence.h"

namespace tf {

std::vector<int32_t> NgramDrafter::lookup(const std::vector<int32_t>& t, int max_k, int* match_len) const {
  const int len = int(t.size());
  if (match_len) *match_len = 0;
  for (int n = std::min(o_.max_n, len - 1); n >= o_.min_n; --n) {
    const int32_t* suffix = t.data() + len - n;
    // Most recent earlier occurrence of the suffix (not the suffix itself).
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, t.data() + start)) continue;
      const int from = start + n;
      const int k = std::min(max_k, len - from);
      if (k <= 0) continue;
      if (match_len) *match_len = n;
      return std::vector<int32_t>(t.begin() + from, t.begin() + from + k);
    }
  }
  return {};
}

void NgramDrafter::propose(std::vector<DraftSlot>& slots) {
  for (auto& s : slots) s.tokens = lookup(s.seq->tokens, s.max_k);
}

}  // namespace tf
