#include "engine/drafters/replay.h"

#include <algorithm>

#include "engine/sequence.h"

namespace tf {

std::vector<int32_t> ReplayDrafter::lookup(uint64_t seed, const std::vector<int32_t>& prompt,
                                           const std::vector<int32_t>& tokens, int max_k) const {
  auto it = rec_->find(Key{seed, prompt});
  if (it == rec_->end() || tokens.size() < prompt.size()) return {};
  const std::vector<int32_t>& reply = it->second;
  const size_t done = tokens.size() - prompt.size();
  // Only while the stream still follows the recording (it always does when outputs are exact).
  if (done > reply.size() ||
      !std::equal(tokens.begin() + std::ptrdiff_t(prompt.size()), tokens.end(), reply.begin()))
    return {};
  const size_t k = std::min(reply.size() - done, size_t(std::max(0, std::min(max_k, max_k_.load()))));
  return std::vector<int32_t>(reply.begin() + std::ptrdiff_t(done), reply.begin() + std::ptrdiff_t(done + k));
}

void ReplayDrafter::propose(std::vector<DraftSlot>& slots) {
  for (auto& s : slots) s.tokens = lookup(s.seq->seed, s.seq->req.prompt, s.seq->tokens, s.max_k);
}

}  // namespace tf
