#include "engine/drafters/draft_model.h"

#include "core/error.h"
#include "engine/drafters/draft_token.h"
#include "engine/sequence.h"

namespace tf {

DraftModelDrafter::DraftModelDrafter(const std::string& dir, Backend& backend, int context, int streams,
                                     int target_vocab)
    : ckpt_(Checkpoint::open(dir)), be_(backend), context_(context) {
  model_ = load_model(ckpt_, be_, context);
  const ModelSpec& s = model_->spec();
  if (s.vocab > target_vocab)
    throw Error("draft model " + dir + " has a vocabulary of " + std::to_string(s.vocab) +
                ", larger than the target's " + std::to_string(target_vocab) +
                ": it must share the target's tokenizer");
  pool_ = std::make_unique<KvBlockPool>(be_, s.layers, s.kv_heads, s.head_dim, kDrafterKvBlock,
                                        KvBlockPool::blocks_for(context, kDrafterKvBlock) * streams);
}

void DraftModelDrafter::propose(std::vector<DraftSlot>& slots) {
  // Streams that can draft: blocks reserved for their whole capacity.
  std::vector<DraftSlot*> live;
  for (auto& slot : slots) {
    slot.tokens.clear();
    if (slot.max_k <= 0) continue;
    State& st = states_[slot.seq];
    const int capacity = slot.seq->prompt_len + slot.seq->req.max_tokens;
    if (!pool_->reserve(st.blocks, capacity)) continue;
    live.push_back(&slot);
  }
  if (live.empty()) return;
  int kmax = 0;
  for (auto* s : live) kmax = std::max(kmax, s->max_k);
  const int V = model_->spec().vocab;
  // Step 0 feeds every token the draft cache lacks (catch-up); step i > 0 feeds the previous draft.
  for (int step = 0; step < kmax; ++step) {
    BatchMeta m;
    m.block_size = kDrafterKvBlock;
    std::vector<DraftSlot*> in;
    std::vector<int32_t> logit_rows;
    for (auto* slot : live) {
      if (step >= slot->max_k) continue;
      State& st = states_[slot->seq];
      const auto& toks = slot->seq->tokens;
      const int len = int(toks.size()) + step;  // history length including drafts so far
      const int seq_index = int(m.block_tables.size());
      m.block_tables.push_back(st.blocks);
      for (int p = st.computed; p < len; ++p) {
        const int32_t t = p < int(toks.size()) ? toks[p] : slot->tokens[p - int(toks.size())];
        m.tokens.push_back(t);
        m.positions.push_back(p);
        m.row_seq.push_back(seq_index);
        m.slots.push_back(st.blocks[p / kDrafterKvBlock] * kDrafterKvBlock + p % kDrafterKvBlock);
      }
      st.computed = len;
      logit_rows.push_back(m.rows() - 1);
      in.push_back(slot);
    }
    if (in.empty()) break;
    std::vector<float> logits;
    model_->forward(m, pool_->layers(), logit_rows, logits);
    for (size_t i = 0; i < in.size(); ++i) {
      Sequence& s = *in[i]->seq;
      const int64_t position = int64_t(s.tokens.size()) + step;
      in[i]->tokens.push_back(
          draft_token(logits.data() + i * size_t(V), V, s.req.sampling, s.seed, position));
    }
  }
}

void DraftModelDrafter::sync(Sequence& s) {
  auto it = states_.find(&s);
  if (it == states_.end()) return;
  // Draft K/V at position p is valid when its input is still the stream's token at p: positions up to
  // (and excluding) the last token, which verification just sampled.
  it->second.computed = std::min(it->second.computed, int(s.tokens.size()) - 1);
}

void DraftModelDrafter::release(Sequence& s) {
  auto it = states_.find(&s);
  if (it == states_.end()) return;
  pool_->release(it->second.blocks);
  states_.erase(it);
}

}  // namespace tf
