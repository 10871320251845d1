#include "text/tok_pretokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "text/tok_regex.h"
#include "text/tok_text.h"

namespace tf::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const std::string& b) {
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  throw Error("tokenizer.json: unknown split behavior '" + b + "'");
}

using Range = std::pair<size_t, size_t>;

// Applies a split behaviour to the match ranges of one piece (Hugging Face's NormalizedString::split).
void split_piece(const Piece& p, const std::vector<Range>& matches, Behavior behavior, bool invert,
                 std::vector<Piece>& out) {
  std::vector<std::pair<Range, bool>> segs;  // covering segments, flagged when they are a match
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) segs.push_back({{prev, b}, false});
    segs.push_back({{b, e}, true});
    prev = e;
  }
  if (prev < p.text.size()) segs.push_back({{prev, p.text.size()}, false});
  if (invert)
    for (auto& s : segs) s.second = !s.second;

  std::vector<Range> keep;
  bool prev_match = false;
  switch (behavior) {
    case Behavior::Removed:
      for (auto& [r, m] : segs)
        if (!m) keep.push_back(r);
      break;
    case Behavior::Isolated:
      for (auto& [r, m] : segs) keep.push_back(r);
      break;
    case Behavior::MergedWithPrevious:
      for (auto& [r, m] : segs) {
        if (m && !prev_match && !keep.empty()) {
          keep.back().second = r.second;
        } else {
          keep.push_back(r);
        }
        prev_match = m;
      }
      break;
    case Behavior::MergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->second && !prev_match && !keep.empty()) {
          keep.back().first = it->first.first;
        } else {
          keep.push_back(it->first);
        }
        prev_match = it->second;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    case Behavior::Contiguous:
      for (size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].second == prev_match) {
          keep.back().second = segs[i].first.second;
        } else {
          keep.push_back(segs[i].first);
        }
        prev_match = segs[i].second;
      }
      break;
  }
  for (auto [b, e] : keep) {
    if (e > b) out.push_back({p.text.substr(b, e - b), p.at_start && b == 0});
  }
}

class SplitPre : public PreTokenizer {
 public:
  SplitPre(const nlohmann::json& pattern, Behavior behavior, bool invert)
      : behavior_(behavior), invert_(invert) {
    if (pattern.contains("String")) {
      literal_ = pattern["String"].get<std::string>();
    } else {
      regex_.emplace(pattern.at("Regex").get<std::string>());
    }
  }
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (const auto& p : pieces) split_piece(p, find(p.text), behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  std::vector<Range> find(const std::string& s) const {
    if (regex_) return regex_->find_all(s);
    std::vector<Range> m;
    if (literal_.empty()) return m;
    for (size_t pos = 0; (pos = s.find(literal_, pos)) != std::string::npos; pos += literal_.size())
      m.push_back({pos, pos + literal_.size()});
    return m;
  }
  std::string literal_;
  std::optional<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

// Splits where `pred(code point)` holds, each matching code point being one match.
template <typename Pred>
std::vector<Range> char_matches(const std::string& s, Pred pred) {
  std::vector<Range> m;
  for (size_t i = 0; i < s.size();) {
    int len;
    char32_t c = decode_utf8(s, i, &len);
    if (pred(c)) m.push_back({i, i + len});
    i += len;
  }
  return m;
}

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_.emplace(kGpt2Pattern);
  }
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (auto& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (regex_) {
        split_piece(p, regex_->find_all(p.text), Behavior::Isolated, false, out);
      } else {
        out.push_back(std::move(p));
      }
    }
    for (auto& p : out) p.text = to_byte_chars(p.text);
    pieces = std::move(out);
  }

  static std::string to_byte_chars(const std::string& s) {
    std::string r;
    r.reserve(s.size() * 2);
    for (unsigned char b : s) append_utf8(r, byte_to_char(b));
    return r;
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, std::string scheme, bool split)
      : rep_(std::move(replacement)), scheme_(std::move(scheme)), split_(split) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (auto& p : pieces) {
      std::string t;
      for (char c : p.text) {
        if (c == ' ') {
          t += rep_;
        } else {
          t += c;
        }
      }
      bool prepend = scheme_ == "always" || (scheme_ == "first" && p.at_start);
      if (prepend && t.compare(0, rep_.size(), rep_) != 0) t.insert(0, rep_);
      Piece q{std::move(t), p.at_start};
      if (!split_) {
        out.push_back(std::move(q));
        continue;
      }
      std::vector<Range> m;
      for (size_t pos = 0; (pos = q.text.find(rep_, pos)) != std::string::npos; pos += rep_.size())
        m.push_back({pos, pos + rep_.size()});
      split_piece(q, m, Behavior::MergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string rep_, scheme_;
  bool split_;
};

class DigitsPre : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) {
      auto m = char_matches(p.text, [](char32_t c) { return c >= '0' && c <= '9'; });
      split_piece(p, m, individual_ ? Behavior::Isolated : Behavior::Contiguous, false, out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

class WhitespaceSplitPre : public PreTokenizer {
 public:
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces)
      split_piece(p, char_matches(p.text, is_whitespace), Behavior::Removed, false, out);
    pieces = std::move(out);
  }
};

class WhitespacePre : public PreTokenizer {
 public:
  WhitespacePre() : regex_(R"(\w+|[^\w\s]+)") {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& p : pieces) split_piece(p, regex_.find_all(p.text), Behavior::Removed, true, out);
    pieces = std::move(out);
  }

 private:
  Regex regex_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::string metaspace_scheme(const nlohmann::json& cfg) {
  if (cfg.contains("prepend_scheme")) return cfg["prepend_scheme"].get<std::string>();
  return cfg.value("add_prefix_space", true) ? "always" : "never";  // legacy format
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& cfg) {
  if (cfg.is_null()) return nullptr;
  const std::string type = cfg.value("type", "");
  if (type == "Split")
    return std::make_unique<SplitPre>(
        cfg.at("pattern"), parse_behavior(cfg.at("behavior").get<std::string>()), cfg.value("invert", false));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(cfg.value("add_prefix_space", true), cfg.value("use_regex", true));
  if (type == "Metaspace")
    return std::make_unique<MetaspacePre>(cfg.value("replacement", "\u2581"), metaspace_scheme(cfg),
                                          cfg.value("split", true));
  if (type == "Digits") return std::make_unique<DigitsPre>(cfg.value("individual_digits", false));
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& c : cfg.at("pretokenizers"))
      if (auto p = make_pre_tokenizer(c)) parts.push_back(std::move(p));
    return std::make_unique<SequencePre>(std::move(parts));
  }
  throw Error("tokenizer.json: unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace tf::tok
