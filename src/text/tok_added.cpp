#include "text/tok_added.h"

#include "text/tok_text.h"

namespace tf::tok {

void AddedTokenMatcher::add(const std::string& pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (unsigned char b : pattern) {
    int32_t c = child(node, b);
    if (c < 0) {
      c = static_cast<int32_t>(terminal_.size());
      terminal_.push_back(nullptr);
      edges_.emplace((static_cast<uint64_t>(node) << 8) | b, c);
    }
    node = c;
  }
  if (!terminal_[node]) terminal_[node] = token;
  tokens_.push_back(token);
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
}

namespace {
// Code point ending right before byte offset `end` (end > 0).
char32_t char_before(std::string_view s, size_t end) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  int len;
  return decode_utf8(s, p, &len);
}
}  // namespace

void AddedTokenMatcher::split(Segment seg, std::vector<Segment>& out, bool skip_special) const {
  const std::string& s = seg.text;
  if (tokens_.empty() || s.empty()) {
    if (!s.empty()) out.push_back(std::move(seg));
    return;
  }
  size_t emitted = 0;  // start of the text not yet emitted
  auto emit_text = [&](size_t b, size_t e) {
    if (e > b) out.push_back({s.substr(b, e - b), -1, seg.at_start && b == 0});
  };
  for (size_t i = 0; i < s.size();) {
    if (!first_byte_[static_cast<unsigned char>(s[i])]) {
      ++i;
      continue;
    }
    const AddedToken* best = nullptr;
    size_t best_end = 0;
    int32_t node = 0;
    for (size_t j = i; j < s.size(); ++j) {
      node = child(node, static_cast<unsigned char>(s[j]));
      if (node < 0) break;
      if (terminal_[node]) best = terminal_[node], best_end = j + 1;
    }
    if (!best) {
      ++i;
      continue;
    }
    size_t start = i, stop = best_end;
    i = best_end;  // matches never overlap, as with Aho-Corasick find_iter
    if (skip_special && best->special) continue;
    if (best->single_word) {
      bool start_ok = start == 0 || !is_word_char(char_before(s, start));
      int len;
      bool stop_ok = stop == s.size() || !is_word_char(decode_utf8(s, stop, &len));
      if (!start_ok || !stop_ok) continue;
    }
    if (best->lstrip) {
      size_t b = start;
      while (b > emitted && is_whitespace(char_before(s, b))) {
        --b;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
      }
      start = b;
    }
    if (best->rstrip) {
      while (stop < s.size()) {
        int len;
        if (!is_whitespace(decode_utf8(s, stop, &len))) break;
        stop += len;
      }
      i = stop;
    }
    emit_text(emitted, start);
    out.push_back({s.substr(start, stop - start), best->id, seg.at_start && start == 0});
    emitted = stop;
  }
  emit_text(emitted, s.size());
}

}  // namespace tf::tok
