#include "server/output_parser.h"

#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "server/json_fields.h"
#include "server/tool_call_scan.h"

namespace tf::server {

namespace {

const std::string kThinkOpen = "<think>";
const std::string kThinkClose = "</think>";
const std::string kCallOpen = "<tool_call>";
const std::string kCallClose = "</tool_call>";

std::string lstrip(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return s.substr(i);
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

// `s` could still grow into `marker` (it is a prefix of it).
bool could_become(const std::string& s, const std::string& marker) {
  return s.size() < marker.size() && starts_with(marker, s);
}

std::string call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 12; ++i) id += hex[(a >> (4 * i)) & 15];
  for (int i = 0; i < 12; ++i) id += hex[(b >> (4 * i)) & 15];
  return id;
}

}  // namespace

void ParsedDelta::append(ParsedDelta d) {
  reasoning += d.reasoning;
  content += d.content;
  for (auto& c : d.tool_calls) add_call_piece(std::move(c));
}

void ParsedDelta::add_call_piece(ParsedToolCall c) {
  if (!tool_calls.empty() && tool_calls.back().index == c.index) {
    ParsedToolCall& last = tool_calls.back();
    if (last.id.empty()) last.id = c.id;
    if (last.name.empty()) last.name = c.name;
    last.arguments += c.arguments;
    return;
  }
  tool_calls.push_back(std::move(c));
}

size_t partial_marker_start(const std::string& text, const std::string& marker) {
  size_t longest = std::min(text.size(), marker.size() - 1);
  for (size_t n = longest; n > 0; --n) {
    if (text.compare(text.size() - n, n, marker, 0, n) == 0) return text.size() - n;
  }
  return text.size();
}

OutputParser::OutputParser(OutputParsing cfg) : cfg_(cfg) {
  if (!cfg_.reasoning) {
    phase_ = Phase::Content;
    content_started_ = true;
  } else {
    phase_ = cfg_.reasoning_starts_open ? Phase::Reasoning : Phase::Start;
  }
  if (!cfg_.prefill.empty()) prefill_out_ = feed(cfg_.prefill);  // an opened call, perhaps its name
}

ParsedDelta OutputParser::feed(const std::string& text) {
  ParsedDelta out = std::exchange(prefill_out_, {});
  if (phase_ == Phase::Content) {
    content_step(text, out, false);
  } else {
    pending_ += text;
    reasoning_step(out, false);
  }
  return out;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta out = std::exchange(prefill_out_, {});
  if (phase_ == Phase::Content) {
    content_step("", out, true);
  } else {
    reasoning_step(out, true);
    if (phase_ == Phase::Content) content_step("", out, true);
  }
  return out;
}

void OutputParser::reasoning_step(ParsedDelta& out, bool final) {
  if (phase_ == Phase::Start) {
    std::string s = lstrip(pending_);
    if (starts_with(s, kThinkOpen)) {
      phase_ = Phase::Reasoning;
      pending_ = s.substr(kThinkOpen.size());
    } else if ((s.empty() || could_become(s, kThinkOpen)) && !final) {
      return;  // maybe the start of <think>
    } else {
      phase_ = Phase::Content;
      content_started_ = true;  // a reply without reasoning is kept as it came
      std::string text = std::move(pending_);
      pending_.clear();
      content_step(text, out, final);
      return;
    }
  }
  if (!reasoning_started_) {
    pending_ = lstrip(pending_);  // "<think>\n" is markup
    if (pending_.empty() && !final) return;
    reasoning_started_ = true;
  }
  size_t close = pending_.find(kThinkClose);
  if (close != std::string::npos) {
    std::string reasoning = pending_.substr(0, close);
    while (!reasoning.empty() && is_space(reasoning.back())) reasoning.pop_back();
    out.reasoning += reasoning;
    std::string rest = pending_.substr(close + kThinkClose.size());
    pending_.clear();
    phase_ = Phase::Content;
    content_step(rest, out, final);
    return;
  }
  // Hold a possible partial "</think>" and the whitespace before it (trimmed if the close follows).
  size_t keep = final ? pending_.size() : partial_marker_start(pending_, kThinkClose);
  if (!final) {
    while (keep > 0 && is_space(pending_[keep - 1])) --keep;
  }
  out.reasoning += pending_.substr(0, keep);
  pending_.erase(0, keep);
}

void OutputParser::content_step(const std::string& text, ParsedDelta& out, bool final) {
  std::string t = text;
  if (!content_started_) {
    t = lstrip(t);  // "</think>\n\n" is markup
    if (t.empty() && !final) return;
    content_started_ = true;
  }
  switch (cfg_.tools) {
    case ToolFormat::None:
      emit_content(t, out);
      return;
    case ToolFormat::Hermes:
    case ToolFormat::Qwen3Coder:
    case ToolFormat::Glm45:
      tbuf_ += t;
      hermes_step(out, final);
      return;
    case ToolFormat::DeepSeek:
      tbuf_ += t;
      deepseek_step(out, final);
      return;
    default:
      tbuf_ += t;
      whole_reply_step(out, final);
      return;
  }
}

void OutputParser::emit_content(const std::string& s, ParsedDelta& out) {
  out.content += s;
}

void OutputParser::hermes_step(ParsedDelta& out, bool final) {
  for (;;) {
    if (in_call_) {
      size_t end = tbuf_.find(kCallClose);
      bool closed = end != std::string::npos || final;
      std::string body = tbuf_.substr(0, end);
      stream_calls(scan_tagged_body(body, closed, cfg_.tool_schemas), out);
      if (!closed) return;  // the call is still arriving
      std::string raw = kCallOpen + body + (end == std::string::npos ? "" : kCallClose);
      tbuf_.erase(0, end == std::string::npos ? tbuf_.size() : end + kCallClose.size());
      in_call_ = false;
      if (streams_.empty()) emit_calls(strip(body), raw, out);  // not in a streamable shape: read whole
      streams_.clear();
      continue;
    }
    size_t open = tbuf_.find(kCallOpen);
    if (open != std::string::npos) {
      std::string before = tbuf_.substr(0, open);
      while (!before.empty() && is_space(before.back())) before.pop_back();  // "\n" before a call is markup
      if (calls_ > 0) before = lstrip(before);
      emit_content(before, out);
      tbuf_.erase(0, open + kCallOpen.size());
      in_call_ = true;
      continue;
    }
    // No call opens here: emit all but a possible partial "<tool_call>" and the whitespace before it.
    size_t keep = tbuf_.size();
    if (!final) {
      keep = partial_marker_start(tbuf_, kCallOpen);
      while (keep > 0 && is_space(tbuf_[keep - 1])) --keep;
    } else if (calls_ > 0 && strip(tbuf_).empty()) {
      tbuf_.clear();
      return;
    }
    emit_content(tbuf_.substr(0, keep), out);
    tbuf_.erase(0, keep);
    return;
  }
}

void OutputParser::whole_reply_step(ParsedDelta& out, bool final) {
  if (decision_ == Decision::Undecided) {
    bool mistral = cfg_.tools == ToolFormat::Mistral;
    auto opens_call = [&](const std::string& s) {
      return mistral ? starts_with(s, kMistral) : (starts_with(s, kPythonTag) || starts_with(s, "{"));
    };
    auto maybe_call = [&](const std::string& s) {
      return mistral ? could_become(s, kMistral) : could_become(s, kPythonTag);
    };
    std::string s = lstrip(tbuf_);
    if (opens_call(s)) {
      decision_ = Decision::Calls;
    } else if ((s.empty() || maybe_call(s)) && !final) {
      return;
    } else {
      decision_ = Decision::Plain;
    }
  }
  if (decision_ == Decision::Plain) {
    emit_content(tbuf_, out);
    tbuf_.clear();
    return;
  }
  calls_region_step(out, final);
}

void OutputParser::deepseek_step(ParsedDelta& out, bool final) {
  if (!in_call_) {
    size_t begin = tbuf_.find(kDsCallsBegin);
    if (begin == std::string::npos) {
      size_t keep = final ? tbuf_.size() : partial_marker_start(tbuf_, kDsCallsBegin);
      while (!final && keep > 0 && is_space(tbuf_[keep - 1])) --keep;
      emit_content(tbuf_.substr(0, keep), out);
      tbuf_.erase(0, keep);
      return;
    }
    std::string before = tbuf_.substr(0, begin);
    while (!before.empty() && is_space(before.back())) before.pop_back();
    emit_content(before, out);
    tbuf_.erase(0, begin);
    in_call_ = true;
  }
  calls_region_step(out, final);
}

// The calls run to the end of the reply: each feed rescans them and streams what grew. A region that
// never became a call in the family's syntax is given back as content.
void OutputParser::calls_region_step(ParsedDelta& out, bool final) {
  std::string region = cfg_.tools == ToolFormat::DeepSeek ? tbuf_ : lstrip(tbuf_);
  ScanResult r = cfg_.tools == ToolFormat::Mistral    ? scan_mistral(region, final)
                 : cfg_.tools == ToolFormat::DeepSeek ? scan_deepseek(region, final)
                                                      : scan_llama3(region, final);
  stream_calls(r, out);
  if (!final) return;
  std::string raw = std::move(tbuf_);
  tbuf_.clear();
  in_call_ = false;
  if (streams_.empty()) {  // not streamable: read whole (other key orders, string arguments), else content
    std::string s = strip(raw);
    for (const std::string& m : {kPythonTag, kMistral}) {
      if (starts_with(s, m)) s = strip(s.substr(m.size()));
    }
    if (cfg_.tools == ToolFormat::DeepSeek) {
      emit_content(raw, out);
    } else {
      emit_calls(s, raw, out);
    }
  }
  streams_.clear();
}

void OutputParser::stream_calls(const ScanResult& r, ParsedDelta& out) {
  for (size_t k = 0; k < r.calls.size(); ++k) {
    const CallView& v = r.calls[k];
    if (k == streams_.size()) {
      CallStream st;
      st.dropped = !cfg_.parallel_tool_calls && calls_ > 0;
      if (!st.dropped) {
        st.index = calls_++;
        out.add_call_piece({st.index, call_id(), v.name, ""});
      }
      streams_.push_back(st);
    }
    CallStream& st = streams_[k];
    // A later scan extends the arguments text (tool_call_scan.h); anything else is not told twice.
    if (v.args.size() > st.sent && !st.dropped)
      out.add_call_piece({st.index, "", "", v.args.substr(st.sent)});
    st.sent = std::max(st.sent, v.args.size());
  }
}

void OutputParser::emit_calls(const std::string& json_text, const std::string& raw, ParsedDelta& out) {
  using Json = nlohmann::ordered_json;
  Json parsed = parse_json_bounded<Json>(json_text);  // (the model's text: bounded, see json_fields.h)
  if (parsed.is_discarded() && cfg_.tools == ToolFormat::Llama3Json) {
    // Llama 3 separates several calls with ";".
    Json arr = Json::array();
    size_t start = 0;
    for (size_t pos; (pos = json_text.find("};", start)) != std::string::npos; start = pos + 2) {
      arr.push_back(parse_json_bounded<Json>(json_text.substr(start, pos + 1 - start)));
    }
    arr.push_back(parse_json_bounded<Json>(json_text.substr(start)));
    parsed = arr;
  }
  Json calls = parsed.is_array() ? parsed : Json::array({parsed});
  std::vector<ParsedToolCall> found;
  for (const Json& c : calls) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) {
      emit_content(raw, out);  // not a call after all: the model's text is kept
      return;
    }
    const Json* args = c.contains("arguments")    ? &c["arguments"]
                       : c.contains("parameters") ? &c["parameters"]
                                                  : nullptr;
    std::string arguments = "{}";
    if (args && args->is_string()) {
      arguments = args->get<std::string>();
    } else if (args && args->is_object()) {
      arguments = args->dump();
    } else if (args && !args->is_null()) {
      emit_content(raw, out);
      return;
    }
    found.push_back({0, "", c["name"].get<std::string>(), arguments});
  }
  for (auto& f : found) {
    if (!cfg_.parallel_tool_calls && calls_ > 0) break;
    f.index = calls_++;
    f.id = call_id();
    out.tool_calls.push_back(std::move(f));
  }
}

}  // namespace tf::server
