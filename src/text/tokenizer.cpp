#include "text/tokenizer.h"

#include <zlib.h>

#include <filesystem>
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"
#include "text/tok_added.h"
#include "text/tok_decoder.h"
#include "text/tok_model.h"
#include "text/tok_normalizer.h"
#include "text/tok_pretokenizer.h"
#include "text/tok_text.h"

namespace tf {
namespace tok {

// What add_special_tokens wraps around the encoded sequence (post_processor), applied in order.
struct Wrap {
  std::vector<int32_t> before, after;
};

struct TokenizerImpl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<Decoder> decoder;
  std::vector<Wrap> post;
  std::vector<AddedToken> added;  // stable storage for the matchers
  std::unordered_map<int32_t, const AddedToken*> added_by_id;
  Vocab added_by_content;
  AddedTokenMatcher raw_matcher, normalized_matcher;
  int32_t vocab_size = 0;
  nlohmann::json config = nlohmann::json::object();
  std::string bos, eos, pad, unk;

  const std::string* token_text(int32_t id) const {
    if (auto it = added_by_id.find(id); it != added_by_id.end()) return &it->second->content;
    const std::string& t = model->id_to_token(id);
    return t.empty() ? nullptr : &t;
  }
  bool is_special(int32_t id) const {
    auto it = added_by_id.find(id);
    return it != added_by_id.end() && it->second->special;
  }
};

namespace {

std::string read_gzip(const std::filesystem::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  if (!f) throw Error("cannot read " + p.string());
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  bool ok = n == 0;
  gzclose(f);
  if (!ok) throw Error("corrupt gzip file " + p.string());
  return out;
}

std::string config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return {};
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return {};
}

std::vector<int32_t> special_ids(const nlohmann::json& specials, const std::string& name) {
  if (!specials.contains(name))
    throw Error("tokenizer.json: post_processor refers to unknown special '" + name + "'");
  return specials[name].at("ids").get<std::vector<int32_t>>();
}

void add_post_processor(TokenizerImpl& t, const nlohmann::json& cfg) {
  if (cfg.is_null()) return;
  const std::string type = cfg.value("type", "");
  if (type == "Sequence") {
    for (const auto& p : cfg.at("processors")) add_post_processor(t, p);
  } else if (type == "ByteLevel") {
    // Only trims offsets: ids are unchanged.
  } else if (type == "TemplateProcessing") {
    Wrap w;
    bool seen_seq = false;
    for (const auto& item : cfg.at("single")) {
      if (item.contains("Sequence")) {
        seen_seq = true;
        continue;
      }
      auto ids = special_ids(cfg.at("special_tokens"), item.at("SpecialToken").at("id").get<std::string>());
      auto& dst = seen_seq ? w.after : w.before;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    t.post.push_back(std::move(w));
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    Wrap w;
    w.before.push_back(cfg.at("cls").at(1).get<int32_t>());
    w.after.push_back(cfg.at("sep").at(1).get<int32_t>());
    t.post.push_back(std::move(w));
  } else {
    throw Error("tokenizer.json: unsupported post_processor type '" + type + "'");
  }
}

void load_added_tokens(TokenizerImpl& t, const nlohmann::json& list) {
  t.added.reserve(list.size());
  for (const auto& a : list) {
    AddedToken tok;
    tok.id = a.at("id").get<int32_t>();
    tok.content = a.at("content").get<std::string>();
    tok.lstrip = a.value("lstrip", false);
    tok.rstrip = a.value("rstrip", false);
    tok.normalized = a.value("normalized", !a.value("special", false));
    tok.single_word = a.value("single_word", false);
    tok.special = a.value("special", false);
    t.added.push_back(std::move(tok));
  }
  for (const auto& tok : t.added) {
    t.added_by_id[tok.id] = &tok;
    t.added_by_content.emplace(tok.content, tok.id);
    if (tok.normalized) {
      std::string pattern = tok.content;
      if (t.normalizer) t.normalizer->normalize(pattern);
      t.normalized_matcher.add(pattern, &tok);
    } else {
      t.raw_matcher.add(tok.content, &tok);
    }
    t.vocab_size = std::max(t.vocab_size, tok.id + 1);
  }
}

}  // namespace
}  // namespace tok

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json) {
  auto t = std::make_shared<tok::TokenizerImpl>();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(tokenizer_json);
    if (!tokenizer_config_json.empty()) t->config = nlohmann::json::parse(tokenizer_config_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("tokenizer: invalid JSON: ") + e.what());
  }
  try {
    if (!j.contains("model")) throw Error("tokenizer.json has no \"model\"");
    static const nlohmann::json kNull;
    auto field = [&](const char* k) -> const nlohmann::json& { return j.contains(k) ? j[k] : kNull; };
    t->normalizer = tok::make_normalizer(field("normalizer"));
    t->pre_tokenizer = tok::make_pre_tokenizer(field("pre_tokenizer"));
    t->model = tok::make_model(j["model"]);
    t->vocab_size = t->model->size();
    tok::add_post_processor(*t, field("post_processor"));
    // transformers skips clean_up_tokenization for BPE models (it would corrupt their output).
    bool cleanup = t->config.value("clean_up_tokenization_spaces", false) &&
                   j["model"].value("type", "Unigram") != "BPE";
    t->decoder = std::make_unique<tok::Decoder>(field("decoder"), cleanup);
    if (j.contains("added_tokens")) tok::load_added_tokens(*t, j["added_tokens"]);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
  t->bos = tok::config_token(t->config, "bos_token");
  t->eos = tok::config_token(t->config, "eos_token");
  t->pad = tok::config_token(t->config, "pad_token");
  t->unk = tok::config_token(t->config, "unk_token");
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path d(dir);
  std::string json;
  if (fs::exists(d / "tokenizer.json")) {
    json = tf::read_file(d / "tokenizer.json");
  } else if (fs::exists(d / "tokenizer.json.gz")) {
    json = tok::read_gzip(d / "tokenizer.json.gz");
  } else {
    throw Error("no tokenizer.json in " + dir + " (only Hugging Face tokenizer.json files are supported)");
  }
  std::string config;
  if (fs::exists(d / "tokenizer_config.json")) config = tf::read_file(d / "tokenizer_config.json");
  return from_json(json, config);
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  return encode(input, add_special_tokens, false);
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens,
                                       bool split_special_tokens) const {
  const tok::TokenizerImpl& t = *impl_;
  std::string text = tok::is_valid_utf8(input) ? std::string(input) : tok::utf8_lossy(input);

  // Added tokens on the raw text, then normalization, then normalized added tokens.
  std::vector<tok::Segment> raw, segs;
  t.raw_matcher.split({std::move(text), -1, true}, raw, split_special_tokens);
  for (auto& s : raw) {
    if (s.id >= 0) {
      segs.push_back(std::move(s));
      continue;
    }
    if (t.normalizer) t.normalizer->normalize(s.text);
    t.normalized_matcher.split(std::move(s), segs, split_special_tokens);
  }

  std::vector<int32_t> ids;
  tok::WordCache cache;
  size_t total = 0;
  for (const auto& s : segs) total += s.text.size();
  tok::WordCache* cache_ptr = total > 256 ? &cache : nullptr;  // memo pays off on long inputs only
  std::vector<tok::Piece> pieces;
  for (auto& s : segs) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    pieces.clear();
    pieces.push_back({std::move(s.text), s.at_start});
    if (t.pre_tokenizer) t.pre_tokenizer->split(pieces);
    for (const auto& p : pieces) t.model->tokenize(p.text, ids, cache_ptr);
  }
  if (add_special_tokens) {
    for (const auto& w : t.post) {
      std::vector<int32_t> r(w.before);
      r.insert(r.end(), ids.begin(), ids.end());
      r.insert(r.end(), w.after.begin(), w.after.end());
      ids = std::move(r);
    }
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const tok::TokenizerImpl& t = *impl_;
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* s = t.token_text(id);
    if (!s || (skip_special_tokens && t.is_special(id))) continue;
    tokens.push_back(*s);
  }
  return t.decoder->decode(tokens);
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = impl_->token_text(id);
  return s ? *s : std::string();
}

bool Tokenizer::is_special(int32_t id) const {
  return impl_->is_special(id);
}
std::optional<std::string> Tokenizer::token_bytes(int32_t id) const {
  if (impl_->is_special(id)) return std::nullopt;
  const std::string* s = impl_->token_text(id);
  if (!s) return std::nullopt;
  return impl_->decoder->token_bytes(*s);
}
const std::string& Tokenizer::bos_token() const {
  return impl_->bos;
}
const std::string& Tokenizer::eos_token() const {
  return impl_->eos;
}
const std::string& Tokenizer::pad_token() const {
  return impl_->pad;
}
const std::string& Tokenizer::unk_token() const {
  return impl_->unk;
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos.empty() ? std::nullopt : token_to_id(impl_->bos);
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos.empty() ? std::nullopt : token_to_id(impl_->eos);
}
const nlohmann::json& Tokenizer::config() const {
  return impl_->config;
}

}  // namespace tf

namespace tf::tok {
const Decoder& decoder_of(const TokenizerImpl& t) {
  return *t.decoder;
}
const std::string* token_text_of(const TokenizerImpl& t, int32_t id, bool skip_special) {
  if (skip_special && t.is_special(id)) return nullptr;
  return t.token_text(id);
}
}  // namespace tf::tok
