#pragma once
// A separate small model with the same tokenizer proposes k tokens, its own KV cache kept in step with
// each stream. It samples with the stream's own key (seed, position), so where its distribution is close
// to the target's it picks the same token even at temperature > 0.
#include <map>
#include <memory>

#include "checkpoint/checkpoint.h"
#include "engine/drafters/drafter.h"
#include "engine/kv_cache.h"
#include "models/model.h"

namespace tf {

class DraftModelDrafter final : public Drafter {
 public:
  DraftModelDrafter(const std::string& dir, Backend& backend, int context, int streams, int target_vocab);
  const char* name() const override { return "draft-model"; }
  void propose(std::vector<DraftSlot>& slots) override;
  void sync(Sequence& s) override;
  void release(Sequence& s) override;
  const ModelSpec& spec() const { return model_->spec(); }

 private:
  struct State {
    std::vector<int32_t> blocks;
    int computed = 0;
  };
  Checkpoint ckpt_;
  Backend& be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvBlockPool> pool_;
  std::map<const Sequence*, State> states_;
  int context_;
};

}  // namespace tf
