#pragma once
// Drafters propose tokens that a stream is likely to produce next; the engine verifies them in one
// forward over k+1 rows and keeps a drafted token only when it equals the token serial decoding would
// have sampled at that position (keyed sampling makes that a plain equality). A drafter can therefore
// change speed, never output.
#include <cstdint>
#include <string>
#include <vector>

namespace tf {

struct Sequence;
class Tensor;

// Positions per block of the KV pool a model drafter (MTP head, draft model) keeps for its own layers.
constexpr int kDrafterKvBlock = 16;

struct DraftSlot {
  Sequence* seq = nullptr;
  int max_k = 0;                // propose at most this many
  std::vector<int32_t> tokens;  // filled by the drafter
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // Proposes for every slot at once (model drafters batch their forwards across streams). Each slot's
  // sequence is decoding: all its tokens but the last have K/V in the target's cache.
  virtual void propose(std::vector<DraftSlot>& slots) = 0;
  // The stream's tokens changed after verification (drafts accepted or rejected): drop stale state.
  virtual void sync(Sequence&) {}
  // The stream ended: free what the drafter holds for it.
  virtual void release(Sequence&) {}
  // Drafters that read the target model's final hidden states (MTP heads) get, after each forward, the
  // states of the rows whose inputs are now the stream's tokens: `count` rows of `rows` from `first_row`,
  // at positions first_position...
  virtual bool wants_hidden() const { return false; }
  virtual void observe_hidden(Sequence&, int /*first_position*/, const Tensor& /*rows*/, int /*first_row*/,
                              int /*count*/) {}
};

}  // namespace tf
