#include "text/tok_normalizer.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/error.h"
#include "text/tok_precompiled.h"
#include "text/tok_regex.h"
#include "text/tok_text.h"

namespace tf::tok {
namespace {

class UnicodeNorm : public Normalizer {
 public:
  explicit UnicodeNorm(NormForm f) : form_(f) {}
  void normalize(std::string& s) const override { s = unicode_normalize(s, form_); }

 private:
  NormForm form_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& s) const override { s = unicode_lowercase(s); }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        int len;
        if (!is_whitespace(decode_utf8(s, b, &len))) break;
        b += len;
      }
    }
    if (right_) {
      while (e > b) {
        size_t p = e - 1;
        while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        int len;
        if (!is_whitespace(decode_utf8(s, p, &len))) break;
        e = p;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prefix_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(const nlohmann::json& pattern, std::string content) : content_(std::move(content)) {
    if (pattern.contains("String")) {
      literal_ = pattern["String"].get<std::string>();
    } else {
      regex_.emplace(pattern.at("Regex").get<std::string>());
    }
  }
  void normalize(std::string& s) const override {
    if (literal_) {
      if (literal_->empty() || s.find(*literal_) == std::string::npos) return;
      std::string out;
      out.reserve(s.size() + s.size() / 4);
      size_t pos = 0;
      for (size_t hit; (hit = s.find(*literal_, pos)) != std::string::npos; pos = hit + literal_->size()) {
        out.append(s, pos, hit - pos);
        out += content_;
      }
      out.append(s, pos);
      s = std::move(out);
      return;
    }
    std::string out;
    size_t pos = 0;
    for (auto [b, e] : regex_->find_all(s)) {
      out.append(s, pos, b - pos);
      out += content_;
      pos = e;
    }
    out.append(s, pos);
    s = std::move(out);
  }

 private:
  std::optional<std::string> literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrecompiledNorm : public Normalizer {
 public:
  explicit PrecompiledNorm(const std::string& b64) : map_(b64) {}
  void normalize(std::string& s) const override { s = map_.normalize(s); }

 private:
  PrecompiledCharsMap map_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& cfg) {
  if (cfg.is_null()) return nullptr;
  const std::string type = cfg.value("type", "");
  if (type == "NFC") return std::make_unique<UnicodeNorm>(NormForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNorm>(NormForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNorm>(NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNorm>(NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(cfg.value("strip_left", true), cfg.value("strip_right", true));
  if (type == "Prepend") return std::make_unique<Prepend>(cfg.at("prepend").get<std::string>());
  if (type == "Replace")
    return std::make_unique<Replace>(cfg.at("pattern"), cfg.at("content").get<std::string>());
  if (type == "Precompiled") {
    const auto& map = cfg.at("precompiled_charsmap");
    if (map.is_null()) return nullptr;
    return std::make_unique<PrecompiledNorm>(map.get<std::string>());
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& c : cfg.at("normalizers")) {
      if (auto n = make_normalizer(c)) parts.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  throw Error("tokenizer.json: unsupported normalizer type '" + type + "'");
}

}  // namespace tf::tok
