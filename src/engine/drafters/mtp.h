#pragma once
// The checkpoint's own multi-token-prediction head as a drafter. The head at position p reads token p+1
// and the model's final hidden state at p, so it lags the model by one token: every round it first
// catches up over the positions the model verified (true hidden states), whose last row proposes the
// first draft; further drafts chain on the head's own output state in place of the model's. Chained
// rows are speculative and recomputed from true states once the model has verified those positions.
#include <map>
#include <memory>

#include "engine/drafters/drafter.h"
#include "engine/kv_cache.h"
#include "models/model.h"

namespace tf {

struct MtpOptions {
  int max_drafts = 3;        // chain length (--mtp-drafts)
  float min_confidence = 0;  // stop the chain when the head's own probability falls below this
};

class MtpDrafter final : public Drafter {
 public:
  MtpDrafter(Model& model, Backend& be, int context, int streams, MtpOptions o);
  const char* name() const override { return "mtp"; }
  bool wants_hidden() const override { return true; }
  void observe_hidden(Sequence& s, int first_position, const Tensor& rows, int first_row, int count) override;
  void propose(std::vector<DraftSlot>& slots) override;
  void sync(Sequence& s) override;
  void release(Sequence& s) override;

 private:
  struct State {
    std::vector<int32_t> blocks;
    int computed = 0;             // head K/V valid for positions < computed (true hidden states)
    int hidden_base = 0;          // position of hidden row 0
    std::vector<uint8_t> hidden;  // model hidden states for positions hidden_base.. (act dtype rows)
  };
  Model& model_;
  Backend& be_;
  MtpOptions o_;
  size_t row_bytes_;
  std::unique_ptr<KvBlockPool> pool_;
  std::map<const Sequence*, State> states_;
};

}  // namespace tf
