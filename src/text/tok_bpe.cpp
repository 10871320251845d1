// BPE model. The merge loop mirrors Hugging Face's Word::merge_all: a min-heap of (rank, position)
// with lazy invalidation, so results match bit for bit, in O(n log n) per word.
#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_set>

#include "core/error.h"
#include "text/tok_model.h"
#include "text/tok_text.h"

namespace tf::tok {
namespace {

// Open-addressing hash map from a packed id pair to its merge (rank, result): the merge loop's hot
// lookup; std::unordered_map's node chasing costs about twice as much.
class MergeMap {
 public:
  struct Value {
    int32_t rank;
    int32_t new_id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, {});
  }
  void insert_or_assign(uint64_t key, Value v) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t i = slot(key);
    if (keys_[i] == kEmpty) ++size_;
    keys_[i] = key;
    values_[i] = v;
  }
  const Value* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    size_t i = slot(key);
    return keys_[i] == key ? &values_[i] : nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const {
    size_t mask = keys_.size() - 1;
    size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<Value> values = std::move(values_);
    reserve(std::max<size_t>(keys.size(), 8));
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != kEmpty) insert_or_assign(keys[i], values[i]);
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t size_ = 0;
};

class Bpe : public Model {
 public:
  explicit Bpe(const nlohmann::json& cfg);
  void tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const override;

 private:
  using MergeInfo = MergeMap::Value;
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  }
  const MergeInfo* find_merge(int32_t a, int32_t b) const { return merges_.find(key(a, b)); }
  int32_t char_id(std::string_view ch, char32_t cp) const {
    if (cp < kSmall) return small_ids_[cp];
    auto it = vocab_.find(ch);
    return it == vocab_.end() ? -1 : it->second;
  }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_cached(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const;
  void find_metaspace_joiners();

  // SentencePiece-style BPE has no pre-tokenizer: the whole text is one "word". If no vocabulary
  // token contains character c followed by U+2581, no merge can cross the boundary between them,
  // so the word is cut there into independent pieces (same result, and cacheable). joiners_ holds
  // the characters that do precede U+2581 inside some token.
  bool split_before_metaspace_ = false;
  std::unordered_set<char32_t> joiners_;

  static constexpr char32_t kSmall = 0x800;
  MergeMap merges_;
  std::vector<int32_t> small_ids_;  // vocab id of each single code point below kSmall, -1 if absent
  std::array<int32_t, 256> byte_ids_{};
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

Bpe::Bpe(const nlohmann::json& cfg) {
  vocab_.reserve(cfg.at("vocab").size());
  for (const auto& [tok, id] : cfg.at("vocab").items()) {
    int32_t i = id.get<int32_t>();
    vocab_.emplace(tok, i);
    if (static_cast<size_t>(i) >= pieces_.size()) pieces_.resize(i + 1);
    pieces_[i] = tok;
  }
  const auto& prefix = cfg.value("continuing_subword_prefix", nlohmann::json());
  const auto& suffix = cfg.value("end_of_word_suffix", nlohmann::json());
  if ((prefix.is_string() && !prefix.get<std::string>().empty()) ||
      (suffix.is_string() && !suffix.get<std::string>().empty()))
    throw Error("tokenizer.json: BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  const auto& merges = cfg.at("merges");
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& m : merges) {
    std::string a, b;
    if (m.is_array()) {
      a = m.at(0).get<std::string>();
      b = m.at(1).get<std::string>();
    } else {
      const auto& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      // Hugging Face rejects lines that are not exactly two space-separated parts; we skip them.
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        ++rank;
        continue;
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end() || ib == vocab_.end()) {
      ++rank;
      continue;
    }
    a += b;
    auto inew = vocab_.find(a);
    if (inew != vocab_.end())
      merges_.insert_or_assign(key(ia->second, ib->second),
                               {rank, inew->second});  // later duplicates win, as in HF
    ++rank;
  }
  if (cfg.contains("unk_token") && cfg["unk_token"].is_string()) {
    auto it = vocab_.find(cfg["unk_token"].get<std::string>());
    if (it != vocab_.end()) unk_id_ = it->second;
  }
  fuse_unk_ = cfg.value("fuse_unk", false);
  byte_fallback_ = cfg.value("byte_fallback", false);
  ignore_merges_ = cfg.value("ignore_merges", false);
  small_ids_.assign(kSmall, -1);
  for (char32_t c = 0; c < kSmall; ++c) {
    std::string s;
    append_utf8(s, c);
    auto it = vocab_.find(s);
    if (it != vocab_.end()) small_ids_[c] = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  find_metaspace_joiners();
}

constexpr std::string_view kMeta = "\u2581";

void Bpe::find_metaspace_joiners() {
  if (vocab_.find(kMeta) == vocab_.end()) return;
  for (const auto& [tok, id] : vocab_) {
    for (size_t p = tok.find(kMeta, 1); p != std::string::npos; p = tok.find(kMeta, p + 1)) {
      size_t q = p - 1;
      while (q > 0 && (static_cast<unsigned char>(tok[q]) & 0xC0) == 0x80) --q;
      int len;
      joiners_.insert(decode_utf8(tok, q, &len));
    }
  }
  split_before_metaspace_ = true;
}

void Bpe::merge_cached(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const {
  if (!cache) {
    merge_word(word, out);
    return;
  }
  auto it = cache->find(word);
  if (it != cache->end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  cache->emplace(std::string(word), std::move(ids));
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (split_before_metaspace_ && word.size() > 64) {
    size_t start = 0;
    for (size_t p = word.find(kMeta, 1); p != std::string::npos; p = word.find(kMeta, p + kMeta.size())) {
      size_t q = p - 1;
      while (q > 0 && (static_cast<unsigned char>(word[q]) & 0xC0) == 0x80) --q;
      int len;
      if (joiners_.count(decode_utf8(word, q, &len))) continue;  // a token may span this boundary
      merge_cached(word.substr(start, p - start), out, cache);
      start = p;
    }
    merge_cached(word.substr(start), out, cache);
    return;
  }
  merge_cached(word, out, cache);
}

void Bpe::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1, true});
    if (n > 0) syms[n - 1].next = n;
  };
  int32_t pending_unk = -1;  // a run of unknown characters, fused when fuse_unk is set
  for (size_t i = 0; i < word.size();) {
    int len;
    char32_t cp = decode_utf8(word, i, &len);
    std::string_view ch = word.substr(i, len);
    i += len;
    int32_t id = char_id(ch, cp);
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all &= byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) add(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  struct Cand {
    int32_t rank, pos, new_id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap_storage;
  heap_storage.reserve(syms.size());
  std::priority_queue<Cand> heap(std::less<Cand>(), std::move(heap_storage));
  for (size_t i = 0; i + 1 < syms.size(); ++i)
    if (auto m = find_merge(syms[i].id, syms[i + 1].id))
      heap.push({m->rank, static_cast<int32_t>(i), m->new_id});
  while (!heap.empty()) {
    Cand top = heap.top();
    heap.pop();
    Sym& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Sym& right = syms[cur.next];
    auto m = find_merge(cur.id, right.id);
    if (!m || m->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0)
      if (auto pm = find_merge(syms[cur.prev].id, cur.id)) heap.push({pm->rank, cur.prev, pm->new_id});
    if (cur.next >= 0)
      if (auto nm = find_merge(cur.id, syms[cur.next].id)) heap.push({nm->rank, top.pos, nm->new_id});
  }
  for (const auto& s : syms)
    if (s.alive) out.push_back(s.id);
}

}  // namespace

std::unique_ptr<Model> make_bpe(const nlohmann::json& cfg) {
  return std::make_unique<Bpe>(cfg);
}

}  // namespace tf::tok
