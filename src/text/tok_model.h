#pragma once
// Tokenization models of tokenizer.json ("model"): BPE (merge ranks, byte fallback, unk fusing,
// ignore_merges) and Unigram (Viterbi over the piece lattice, SentencePiece scoring).
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tf::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
// Per-encode memo of word -> ids (long inputs repeat words a lot).
using WordCache = std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const = 0;
  std::optional<int32_t> token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  // Empty when the id is not in the model's vocabulary.
  const std::string& id_to_token(int32_t id) const {
    static const std::string kEmpty;
    return id >= 0 && static_cast<size_t>(id) < pieces_.size() ? pieces_[id] : kEmpty;
  }
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  // The byte-fallback token ids <0x00>..<0xFF> if the model uses byte fallback, else empty.
  bool byte_fallback() const { return byte_fallback_; }

 protected:
  Vocab vocab_;
  std::vector<std::string> pieces_;  // by id
  bool byte_fallback_ = false;
};

std::unique_ptr<Model> make_model(const nlohmann::json& cfg);

}  // namespace tf::tok
