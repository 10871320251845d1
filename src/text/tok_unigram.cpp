// Unigram model: Viterbi over all vocabulary pieces that start at each character, unknown characters
// scored min_score - 10 (SentencePiece's kUnkPenalty), runs of unknowns fused, as Hugging Face does.
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/tok_model.h"
#include "text/tok_text.h"

namespace tf::tok {
namespace {

class Unigram : public Model {
 public:
  explicit Unigram(const nlohmann::json& cfg);
  void tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const override;

 private:
  // Byte trie: node -> (byte -> child); terminal nodes carry the piece id.
  int32_t child(int32_t node, unsigned char b) const {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | b);
    return it == edges_.end() ? -1 : it->second;
  }
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_;  // per node: piece id or -1
  std::vector<double> scores_;
  std::optional<int32_t> unk_id_;
  double min_score_ = 0;
  std::array<int32_t, 256> byte_ids_{};
};

Unigram::Unigram(const nlohmann::json& cfg) {
  const auto& vocab = cfg.at("vocab");
  terminal_.push_back(-1);
  min_score_ = std::numeric_limits<double>::max();
  for (const auto& entry : vocab) {
    int32_t id = static_cast<int32_t>(pieces_.size());
    std::string piece = entry.at(0).get<std::string>();
    double score = entry.at(1).get<double>();
    pieces_.push_back(piece);
    scores_.push_back(score);
    vocab_.emplace(piece, id);
    min_score_ = std::min(min_score_, score);
    int32_t node = 0;
    for (unsigned char b : piece) {
      int32_t c = child(node, b);
      if (c < 0) {
        c = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
        edges_.emplace((static_cast<uint64_t>(node) << 8) | b, c);
      }
      node = c;
    }
    if (terminal_[node] < 0) terminal_[node] = id;
  }
  if (cfg.contains("unk_id") && cfg["unk_id"].is_number_integer()) unk_id_ = cfg["unk_id"].get<int32_t>();
  byte_fallback_ = cfg.value("byte_fallback", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

void Unigram::tokenize(std::string_view s, std::vector<int32_t>& out, WordCache*) const {
  if (s.empty()) return;
  struct Node {
    double score = 0;
    int32_t start = -1;  // -1: unreached
    int32_t id = -1;
  };
  const size_t n = s.size();
  const double unk_score = min_score_ - 10.0;
  std::vector<Node> best(n + 1);
  best[0].start = 0;
  for (size_t at = 0; at < n;) {
    const double base = best[at].score;
    int mblen;
    decode_utf8(s, at, &mblen);
    bool has_single = false;
    int32_t node = 0;
    for (size_t e = at; e < n; ++e) {
      node = child(node, static_cast<unsigned char>(s[e]));
      if (node < 0) break;
      int32_t id = terminal_[node];
      if (id < 0) continue;
      size_t end = e + 1;
      double cand = base + scores_[id];
      if (best[end].start < 0 || cand > best[end].score) best[end] = {cand, static_cast<int32_t>(at), id};
      if (end - at == static_cast<size_t>(mblen)) has_single = true;
    }
    if (!has_single) {
      size_t end = at + mblen;
      double cand = base + unk_score;
      if (best[end].start < 0 || cand > best[end].score)
        best[end] = {cand, static_cast<int32_t>(at), unk_id_.value_or(-1)};
    }
    at += mblen;
  }
  // Backtrack into strings, fusing consecutive unknown pieces.
  std::vector<std::pair<size_t, size_t>> spans;  // reversed
  std::optional<std::pair<size_t, size_t>> unk_run;
  for (size_t end = n; end > 0;) {
    const Node& nd = best[end];
    size_t start = static_cast<size_t>(nd.start);
    if (unk_id_ && nd.id == *unk_id_) {
      unk_run = unk_run ? std::make_pair(start, unk_run->second) : std::make_pair(start, end);
    } else {
      if (unk_run) spans.push_back(*unk_run), unk_run.reset();
      spans.push_back({start, end});
    }
    end = start;
  }
  if (unk_run) spans.push_back(*unk_run);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    std::string_view piece = s.substr(it->first, it->second - it->first);
    auto v = vocab_.find(piece);
    if (v != vocab_.end()) {
      out.push_back(v->second);
    } else if (byte_fallback_) {
      for (unsigned char b : piece)
        if (byte_ids_[b] >= 0) out.push_back(byte_ids_[b]);
    } else if (unk_id_) {
      out.push_back(*unk_id_);
    }
  }
}

}  // namespace

std::unique_ptr<Model> make_bpe(const nlohmann::json& cfg);

std::unique_ptr<Model> make_model(const nlohmann::json& cfg) {
  std::string type = cfg.value("type", "");
  if (type.empty()) {  // old serialisation without "type": infer as Hugging Face does
    if (cfg.contains("unk_id") || (cfg.contains("vocab") && cfg["vocab"].is_array()))
      type = "Unigram";
    else if (cfg.contains("merges"))
      type = "BPE";
  }
  if (type == "BPE") return make_bpe(cfg);
  if (type == "Unigram") return std::make_unique<Unigram>(cfg);
  throw Error("tokenizer.json: unsupported model type '" + type + "' (supported: BPE, Unigram)");
}

}  // namespace tf::tok
