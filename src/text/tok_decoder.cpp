#include "text/tok_decoder.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "text/tok_regex.h"
#include "text/tok_text.h"

namespace tf::tok {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

class ReplaceStep : public DecodeStep {
 public:
  ReplaceStep(std::string literal, std::shared_ptr<const Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  void push(std::string piece, std::vector<std::string>& out) override {
    std::string r;
    size_t pos = 0;
    if (re_) {
      for (auto [b, e] : re_->find_all(piece)) {
        r.append(piece, pos, b - pos);
        r += content_;
        pos = e;
      }
    } else if (!literal_.empty()) {
      for (size_t hit; (hit = piece.find(literal_, pos)) != std::string::npos; pos = hit + literal_.size()) {
        r.append(piece, pos, hit - pos);
        r += content_;
      }
    }
    r.append(piece, pos);
    out.push_back(std::move(r));
  }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> re_;
  std::string content_;
};

// <0xXX> tokens are gathered into byte groups; a group becomes its UTF-8 text, or one U+FFFD per byte
// when it is not valid UTF-8 (Hugging Face's ByteFallback). A group is open until a non-byte token.
class ByteFallbackStep : public DecodeStep {
 public:
  void push(std::string piece, std::vector<std::string>& out) override {
    int byte = parse_byte(piece);
    if (byte >= 0) {
      bytes_ += static_cast<char>(byte);
      return;
    }
    flush(out);
    out.push_back(std::move(piece));
  }
  void flush(std::vector<std::string>& out) override {
    if (bytes_.empty()) return;
    if (is_valid_utf8(bytes_)) {
      out.push_back(bytes_);
    } else {
      std::string r;
      for (size_t i = 0; i < bytes_.size(); ++i) r += kReplacementChar;
      out.push_back(std::move(r));
    }
    bytes_.clear();
  }

  static int parse_byte(const std::string& s) {
    if (s.size() != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = hex(s[3]), lo = hex(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }

 private:
  std::string bytes_;
};

// Token text in the GPT-2 byte alphabet back to bytes; bytes become text once they form complete
// UTF-8 (invalid sequences: U+FFFD like Rust's from_utf8_lossy on the whole output).
class ByteLevelStep : public DecodeStep {
 public:
  void push(std::string piece, std::vector<std::string>& out) override {
    std::string raw;
    raw.reserve(piece.size());
    bool mapped = true;
    for (size_t i = 0; i < piece.size();) {
      int len;
      int b = char_to_byte(decode_utf8(piece, i, &len));
      if (b < 0) {
        mapped = false;
        break;
      }
      raw += static_cast<char>(b);
      i += len;
    }
    pending_ += mapped ? raw : piece;
    size_t keep = incomplete_utf8_tail(pending_);
    if (keep == pending_.size()) return;
    out.push_back(utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep)));
    pending_.erase(0, pending_.size() - keep);
  }
  void flush(std::vector<std::string>& out) override {
    if (!pending_.empty()) out.push_back(utf8_lossy(pending_));
    pending_.clear();
  }

 private:
  std::string pending_;
};

// Strip `start` leading / `stop` trailing `content` characters. Per token, or (after Fuse) once at
// the start and end of the whole text, holding back a trailing run that the end strip may remove.
class StripStep : public DecodeStep {
 public:
  StripStep(std::string content, size_t start, size_t stop, bool fused)
      : content_(std::move(content)), start_(start), stop_(stop), fused_(fused) {}
  void push(std::string piece, std::vector<std::string>& out) override {
    if (!fused_) {
      out.push_back(strip(piece, start_, stop_));
      return;
    }
    if (!started_) {
      size_t before = piece.size();
      piece = strip(piece, start_left_, 0);
      start_left_ -= (before - piece.size()) / content_.size();
      if (!piece.empty()) started_ = true;
    }
    if (stop_ == 0) {
      out.push_back(std::move(piece));
      return;
    }
    tail_ += piece;
    size_t run = trailing_run(tail_);
    out.push_back(tail_.substr(0, tail_.size() - run));
    tail_.erase(0, tail_.size() - run);
  }
  void flush(std::vector<std::string>& out) override {
    if (!tail_.empty()) out.push_back(strip(tail_, 0, stop_));
    tail_.clear();
  }

 private:
  size_t trailing_run(const std::string& s) const {
    size_t n = 0;
    while (n + content_.size() <= s.size() &&
           s.compare(s.size() - n - content_.size(), content_.size(), content_) == 0)
      n += content_.size();
    return n;
  }
  std::string strip(const std::string& s, size_t start, size_t stop) const {
    size_t b = 0, e = s.size();
    for (size_t k = 0; k < start && b + content_.size() <= e && s.compare(b, content_.size(), content_) == 0;
         ++k)
      b += content_.size();
    for (size_t k = 0; k < stop && e >= b + content_.size() &&
                       s.compare(e - content_.size(), content_.size(), content_) == 0;
         ++k)
      e -= content_.size();
    return s.substr(b, e - b);
  }
  std::string content_;
  size_t start_, stop_;
  bool fused_;
  bool started_ = false;
  size_t start_left_ = start_;
  std::string tail_;
};

// Metaspace: the replacement character becomes a space; in the first token (when a prefix space was
// prepended at encode time) every replacement character is dropped, as Hugging Face does.
class MetaspaceStep : public DecodeStep {
 public:
  MetaspaceStep(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_first_(strip_first) {}
  void push(std::string piece, std::vector<std::string>& out) override {
    bool first = index_++ == 0;
    std::string r;
    size_t pos = 0;
    for (size_t hit; (hit = piece.find(rep_, pos)) != std::string::npos; pos = hit + rep_.size()) {
      r.append(piece, pos, hit - pos);
      if (!(first && strip_first_)) r += ' ';
    }
    r.append(piece, pos);
    out.push_back(std::move(r));
  }

 private:
  std::string rep_;
  bool strip_first_;
  size_t index_ = 0;
};

class JoinStep : public DecodeStep {
 public:
  void push(std::string piece, std::vector<std::string>& out) override {
    if (!first_) out.push_back(" ");
    first_ = false;
    out.push_back(std::move(piece));
  }

 private:
  bool first_ = true;
};

// transformers' clean_up_tokenization: " ." -> "." etc., applied rule by rule to the whole text.
// Streaming releases text up to the last cut that no rule occurrence can straddle: every rule starts
// with a space and is at most 4 bytes, so only the last few bytes need checking.
class CleanupStep : public DecodeStep {
 public:
  void push(std::string piece, std::vector<std::string>& out) override {
    pending_ += piece;
    size_t cut = safe_cut(pending_);
    if (cut == 0) return;
    out.push_back(clean(pending_.substr(0, cut)));
    pending_.erase(0, cut);
  }
  void flush(std::vector<std::string>& out) override {
    if (!pending_.empty()) out.push_back(clean(pending_));
    pending_.clear();
  }

 private:
  static constexpr std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};

  // True if some rule occurrence starting before `c` could extend past it.
  static bool straddled(const std::string& s, size_t c) {
    for (size_t p = c >= 3 ? c - 3 : 0; p < c; ++p) {
      if (s[p] != ' ') continue;
      std::string_view t(s.data() + p, c - p);
      for (auto [from, to] : kRules) {
        std::string_view f(from);
        if (f.size() > t.size() && f.substr(0, t.size()) == t) return true;
      }
    }
    return false;
  }
  static size_t safe_cut(const std::string& s) {
    size_t lo = s.size() >= 8 ? s.size() - 8 : 0;
    for (size_t c = s.size(); c > lo; --c) {
      if (c < s.size() && (static_cast<unsigned char>(s[c]) & 0xC0) == 0x80) continue;
      if (!straddled(s, c)) return c;
    }
    return 0;
  }
  static std::string clean(std::string s) {
    for (auto [from, to] : kRules) {
      std::string_view f(from);
      std::string r;
      size_t pos = 0;
      for (size_t hit; (hit = s.find(f, pos)) != std::string::npos; pos = hit + f.size()) {
        r.append(s, pos, hit - pos);
        r += to;
      }
      r.append(s, pos);
      s = std::move(r);
    }
    return s;
  }
  std::string pending_;
};

}  // namespace

Decoder::Decoder(const nlohmann::json& cfg, bool cleanup) {
  if (cfg.is_null()) {
    factories_.push_back([] { return std::make_unique<JoinStep>(); });
  } else {
    bool fused = false;
    add(cfg, fused);
  }
  if (cleanup) factories_.push_back([] { return std::make_unique<CleanupStep>(); });
}

void Decoder::add(const nlohmann::json& cfg, bool& fused) {
  const std::string type = cfg.value("type", "");
  if (type == "Sequence") {
    for (const auto& d : cfg.at("decoders")) add(d, fused);
  } else if (type == "ByteLevel") {
    factories_.push_back([] { return std::make_unique<ByteLevelStep>(); });
    byte_maps_.push_back([](std::string piece) {
      std::string raw;
      for (size_t i = 0; i < piece.size();) {
        int len;
        const int b = char_to_byte(decode_utf8(piece, i, &len));
        if (b < 0) return piece;  // outside the alphabet: kept as text, as ByteLevelStep does
        raw += static_cast<char>(b);
        i += len;
      }
      return raw;
    });
    fused = true;  // Hugging Face's ByteLevel decoder outputs a single string
  } else if (type == "ByteFallback") {
    factories_.push_back([] { return std::make_unique<ByteFallbackStep>(); });
    byte_maps_.push_back([](std::string piece) {
      const int b = ByteFallbackStep::parse_byte(piece);
      return b < 0 ? piece : std::string(1, static_cast<char>(b));
    });
  } else if (type == "Fuse") {
    fused = true;
  } else if (type == "Strip") {
    std::string content = cfg.at("content").get<std::string>();
    size_t start = cfg.value("start", 0), stop = cfg.value("stop", 0);
    bool f = fused;
    factories_.push_back([=] { return std::make_unique<StripStep>(content, start, stop, f); });
  } else if (type == "Replace") {
    const auto& pat = cfg.at("pattern");
    std::string content = cfg.at("content").get<std::string>();
    std::string literal;
    std::shared_ptr<const Regex> re;
    if (pat.contains("String")) {
      literal = pat["String"].get<std::string>();
    } else {
      re = std::make_shared<const Regex>(pat.at("Regex").get<std::string>());
    }
    factories_.push_back([=] { return std::make_unique<ReplaceStep>(literal, re, content); });
    byte_maps_.push_back([=](std::string piece) {
      std::vector<std::string> out;
      ReplaceStep(literal, re, content).push(std::move(piece), out);
      return out.at(0);
    });
  } else if (type == "Metaspace") {
    std::string rep = cfg.value("replacement", "\u2581");
    bool strip = cfg.contains("prepend_scheme") ? cfg["prepend_scheme"].get<std::string>() != "never"
                                                : cfg.value("add_prefix_space", true);
    if (fused) throw Error("tokenizer.json: Metaspace decoder after Fuse is not supported");
    factories_.push_back([=] { return std::make_unique<MetaspaceStep>(rep, strip); });
    byte_maps_.push_back([=](std::string piece) {
      std::vector<std::string> out;
      MetaspaceStep(rep, false).push(std::move(piece), out);
      return out.at(0);
    });
  } else {
    throw Error("tokenizer.json: unsupported decoder type '" + type + "'");
  }
}

std::string Decoder::token_bytes(std::string_view piece) const {
  std::string s(piece);
  for (const auto& map : byte_maps_) s = map(std::move(s));
  return s;
}

Decoder::Stream Decoder::stream() const {
  Stream s;
  for (const auto& f : factories_) s.steps_.push_back(f());
  return s;
}

void Decoder::Stream::run(size_t from, std::vector<std::string> pieces, bool flushing, std::string& text) {
  for (size_t k = from; k < steps_.size(); ++k) {
    std::vector<std::string> next;
    for (auto& p : pieces) steps_[k]->push(std::move(p), next);
    if (flushing) steps_[k]->flush(next);
    pieces = std::move(next);
  }
  for (auto& p : pieces) text += p;
}

std::string Decoder::Stream::push(std::string_view token) {
  std::string text;
  run(0, {std::string(token)}, false, text);
  return text;
}

std::string Decoder::Stream::flush() {
  std::string text;
  run(0, {}, true, text);
  return text;
}

std::string Decoder::decode(const std::vector<std::string_view>& tokens) const {
  Stream s = stream();
  std::string text;
  for (auto t : tokens) text += s.push(t);
  text += s.flush();
  return text;
}

}  // namespace tf::tok
