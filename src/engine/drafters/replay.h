#pragma once
// Replay: proposes the tokens a recorded serial run produced for the same prompt. Every draft is then
// accepted (the engine's sampling is keyed, so a rerun samples the same tokens), which makes this the
// ceiling of drafting: the speed a perfect drafter would reach. For benchmarks (`tensorfold bench
// --drafter replay`) and tests, installed through EngineOptions::drafter_factory.
#include <atomic>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/drafters/drafter.h"

namespace tf {

class ReplayDrafter final : public Drafter {
 public:
  // (sampling seed, prompt token ids) -> the tokens the serial run generated for them; the seed is the
  // stream's (the request's, else the one derived from the prompt), so that streams sharing a prompt
  // at a temperature keep their own replies. The caller fills it while the engine is idle (between
  // runs); the drafter only reads it.
  using Key = std::pair<uint64_t, std::vector<int32_t>>;
  using Recording = std::map<Key, std::vector<int32_t>>;

  explicit ReplayDrafter(std::shared_ptr<const Recording> recording) : rec_(std::move(recording)) {}
  const char* name() const override { return "replay"; }
  void propose(std::vector<DraftSlot>& slots) override;

  // Proposes at most k tokens per step (below the engine's max_draft), so that one engine can sweep k.
  void set_max_k(int k) { max_k_.store(k); }
  // The proposal for one stream (exposed for tests): the recorded continuation of `tokens`, empty when
  // the prompt was not recorded or the stream has left the recording.
  std::vector<int32_t> lookup(uint64_t seed, const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& tokens, int max_k) const;

 private:
  std::shared_ptr<const Recording> rec_;
  std::atomic<int> max_k_{1 << 20};
};

}  // namespace tf
