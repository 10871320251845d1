#include "engine/drafters/mtp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engine/drafters/draft_token.h"
#include "engine/sequence.h"

namespace tf {

namespace {
constexpr int kMaxCatchup = 64;          // hidden rows kept for the head's next catch-up
constexpr int kMaxPromptCatchup = 8192;  // ... before its first one (the prompt)
}  // namespace

MtpDrafter::MtpDrafter(Model& model, Backend& be, int context, int streams, MtpOptions o)
    : model_(model), be_(be), o_(o) {
  const ModelSpec& s = model.spec();
  row_bytes_ = size_t(s.hidden) * dtype_size(be.act_dtype());
  pool_ = std::make_unique<KvBlockPool>(be, 1, s.kv_heads, s.head_dim, kDrafterKvBlock,
                                        KvBlockPool::blocks_for(context, kDrafterKvBlock) * streams);
}

void MtpDrafter::observe_hidden(Sequence& s, int first_position, const Tensor& rows, int first_row,
                                int count) {
  State& st = states_[&s];
  // Keep the states the head has not consumed yet: positions [st.computed, first_position + count).
  const int end = first_position + count;
  // A gap (rounds ran without hidden states: the drafter was switched off, or the stream did not draft):
  // what came before it can never be consumed, so only the states from here on are kept, and the head's
  // catch-up restarts here rather than replaying the stretch.
  if (st.hidden.empty() || first_position > st.hidden_base + int(st.hidden.size() / row_bytes_)) {
    st.hidden.clear();
    st.hidden_base = first_position;
  }
  if (first_position < st.hidden_base) {  // rows the head skipped already
    const int skip = std::min(count, st.hidden_base - first_position);
    first_position += skip, first_row += skip, count -= skip;
  }
  st.hidden.resize(size_t(first_position - st.hidden_base) * row_bytes_);
  const auto* src = static_cast<const uint8_t*>(rows.raw()) + size_t(first_row) * row_bytes_;
  st.hidden.insert(st.hidden.end(), src, src + size_t(count) * row_bytes_);
  // Drop rows the head already consumed, and rows beyond what one catch-up replays: a stream that drafts
  // from context copies for a long stretch would otherwise make the head replay all of it (and hold it).
  // Skipped positions cost draft quality only. The prompt (before the head's first catch-up) is kept up
  // to a larger cap, so that the head reads it.
  int drop = st.computed > st.hidden_base ? std::min(st.computed, end) - st.hidden_base : 0;
  const int keep = st.computed > 0 ? kMaxCatchup : kMaxPromptCatchup;
  drop = std::max(drop, int(st.hidden.size() / row_bytes_) - keep);
  if (drop > 0) {
    st.hidden.erase(st.hidden.begin(), st.hidden.begin() + size_t(drop) * row_bytes_);
    st.hidden_base += drop;
  }
}

void MtpDrafter::propose(std::vector<DraftSlot>& slots) {
  const ModelSpec& spec = model_.spec();
  const int V = spec.vocab;
  struct Live {
    DraftSlot* slot;
    int k;
    std::vector<uint8_t> chain_hidden;  // the head's last output state (for chaining)
  };
  std::vector<Live> live;
  for (auto& slot : slots) {
    slot.tokens.clear();
    State& st = states_[slot.seq];
    const int k = std::min(slot.max_k, o_.max_drafts);
    const int capacity = slot.seq->prompt_len + slot.seq->req.max_tokens + 1;
    if (k <= 0 || !pool_->reserve(st.blocks, capacity)) continue;
    // Positions the head never saw (a prompt-cache hit skipped them) are skipped: only draft quality
    // suffers, never the output.
    if (!st.hidden.empty() && st.hidden_base > st.computed) st.computed = st.hidden_base;
    // Catch-up rows need the model's hidden state at every position from st.computed to the last verified.
    const int last = slot.seq->computed - 1;  // the model's last computed position
    if (st.computed > last || st.hidden_base > st.computed ||
        st.hidden_base + int(st.hidden.size() / row_bytes_) <= last)
      continue;
    live.push_back({&slot, k, {}});
  }
  int kmax = 0;
  for (auto& l : live) kmax = std::max(kmax, l.k);
  for (int step = 0; step < kmax; ++step) {
    BatchMeta m;
    m.block_size = kDrafterKvBlock;
    std::vector<Live*> in;
    std::vector<int32_t> logit_rows;
    std::vector<uint8_t> hidden;
    for (auto& l : live) {
      if (step >= l.k || int(l.slot->tokens.size()) < step) continue;
      Sequence& s = *l.slot->seq;
      State& st = states_[&s];
      const int seq_index = int(m.block_tables.size());
      m.block_tables.push_back(st.blocks);
      auto add_row = [&](int p, int32_t next_token, const uint8_t* h) {
        m.tokens.push_back(next_token);
        m.positions.push_back(p);
        m.row_seq.push_back(seq_index);
        m.slots.push_back(st.blocks[p / kDrafterKvBlock] * kDrafterKvBlock + p % kDrafterKvBlock);
        hidden.insert(hidden.end(), h, h + row_bytes_);
      };
      if (step == 0) {
        // Positions with true hidden states: the head's K/V there stays valid.
        const int last = s.computed - 1;
        for (int p = st.computed; p <= last; ++p)
          add_row(p, s.tokens[p + 1], st.hidden.data() + size_t(p - st.hidden_base) * row_bytes_);
        st.computed = last + 1;
      } else {
        const int p = s.computed - 1 + step;  // speculative: the head's own state stands in for h[p]
        add_row(p, l.slot->tokens.back(), l.chain_hidden.data());
      }
      logit_rows.push_back(m.rows() - 1);
      in.push_back(&l);
    }
    if (in.empty()) break;
    Tensor hin = Tensor::empty({int64_t(m.rows()), int64_t(spec.hidden)}, be_.act_dtype());
    std::memcpy(hin.raw(), hidden.data(), hidden.size());
    std::vector<float> logits;
    Tensor hout;
    model_.forward_mtp(m, pool_->layers()[0], hin, logit_rows, logits, &hout);
    for (size_t i = 0; i < in.size(); ++i) {
      Live& l = *in[i];
      Sequence& s = *l.slot->seq;
      const float* row = logits.data() + i * size_t(V);
      const int64_t position = int64_t(s.tokens.size()) + step;
      SampleResult r;
      r.token = draft_token(row, V, s.req.sampling, s.seed, position);
      if (o_.min_confidence > 0) {
        float mx = row[0];
        for (int t = 1; t < V; ++t) mx = std::max(mx, row[t]);
        double z = 0;
        for (int t = 0; t < V; ++t) z += std::exp(double(row[t] - mx));
        if (std::exp(double(row[r.token] - mx)) / z < o_.min_confidence) {
          l.k = step;  // end the chain here
          continue;
        }
      }
      l.slot->tokens.push_back(r.token);
      const auto* h = static_cast<const uint8_t*>(hout.raw()) + size_t(logit_rows[i]) * row_bytes_;
      l.chain_hidden.assign(h, h + row_bytes_);
    }
  }
}

void MtpDrafter::sync(Sequence& s) {
  auto it = states_.find(&s);
  if (it != states_.end()) it->second.computed = std::min(it->second.computed, s.computed);
}

void MtpDrafter::release(Sequence& s) {
  auto it = states_.find(&s);
  if (it == states_.end()) return;
  pool_->release(it->second.blocks);
  states_.erase(it);
}

}  // namespace tf
