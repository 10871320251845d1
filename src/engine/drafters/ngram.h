#pragma once
// Context copies: when the last n tokens of a stream occurred earlier in its prompt or reply, propose
// the tokens that followed that earlier occurrence (longest n first, most recent occurrence wins).
// Costs no forward; pays off on quoting, editing and repetitive output.
#include "engine/drafters/drafter.h"

namespace tf {

struct NgramOptions {
  int min_n = 2, max_n = 8;
};

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(NgramOptions o = {}) : o_(o) {}
  const char* name() const override { return "ngram"; }
  void propose(std::vector<DraftSlot>& slots) override;
  // The proposal for one token history (exposed for tests).
  std::vector<int32_t> lookup(const std::vector<int32_t>& tokens, int max_k, int* match_len = nullptr) const;

 private:
  NgramOptions o_;
};

}  // namespace tf
