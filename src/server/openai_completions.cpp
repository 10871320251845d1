#include "server/openai_completions.h"

#include "server/errors.h"
#include "server/json_fields.h"

namespace tf::server {

using nlohmann::json;

static bool is_token_list(const RequestJson& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const auto& x : v) {
    if (!x.is_number_integer()) return false;
  }
  return true;
}

static std::vector<int32_t> token_ids(const RequestJson& v, const std::string& name, const ApiContext& ctx) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id = v[i].get<int64_t>();
    if (id < 0 || id >= ctx.text.vocab_size()) {
      std::string n = name + "[" + std::to_string(i) + "]";
      throw invalid_field(n,
                          "Invalid value for '" + n + "': token id " + std::to_string(id) +
                              " is outside [0, " + std::to_string(ctx.text.vocab_size()) + ").",
                          "invalid_value");
    }
    ids.push_back(int32_t(id));
  }
  return ids;
}

static void read_prompts(const RequestJson& p, CompletionRequest& r, const ApiContext& ctx) {
  auto add_text = [&](const std::string& s) {
    r.prompts.push_back(ctx.text.encode(s, true));
    r.prompt_texts.push_back(s);
  };
  auto add_ids = [&](const RequestJson& v, const std::string& name) {
    r.prompts.push_back(token_ids(v, name, ctx));
    r.prompt_texts.push_back(ctx.text.decode(r.prompts.back(), false));
  };
  const char* expected =
      "a string, an array of strings, an array of token ids or an array of token-id arrays";
  if (p.is_string()) {
    add_text(p.get<std::string>());
  } else if (is_token_list(p)) {
    add_ids(p, "prompt");
  } else if (p.is_array() && !p.empty()) {
    for (size_t i = 0; i < p.size(); ++i) {
      std::string name = "prompt[" + std::to_string(i) + "]";
      if (p[i].is_string()) {
        add_text(p[i].get<std::string>());
      } else if (is_token_list(p[i])) {
        add_ids(p[i], name);
      } else {
        throw invalid_field(name,
                            "Invalid type for '" + name +
                                "': expected a string or an array of token ids, but got " +
                                json_type_name(p[i]) + ".",
                            "invalid_type");
      }
    }
  } else {
    throw invalid_field("prompt",
                        std::string("Invalid type for 'prompt': expected ") + expected + ", but got " +
                            (p.is_array() ? "an empty array" : json_type_name(p)) + ".",
                        "invalid_type");
  }
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    if (r.prompts[i].empty())
      throw invalid_field("prompt", "The prompt is empty after tokenization.", "invalid_value");
  }
}

CompletionRequest parse_completion_request(const RequestJson& body, const ApiContext& ctx) {
  JsonFields f(body);
  CompletionRequest r;
  auto model = f.string("model");
  r.model = ctx.check_model(model ? &*model : nullptr);
  r.common = read_common_fields(f, ctx);
  if (auto v = f.integer("logprobs", 0, 20)) r.logprobs = int(*v);
  if (auto v = f.boolean("echo")) r.echo = *v;
  // echo with logprobs: the prompt's tokens come first in `logprobs`, the first with null (OpenAI's legacy
  // completions; lm-evaluation-harness scores continuations this way).
  if (r.echo && r.logprobs >= 0) r.common.request.prompt_logprobs = r.logprobs;
  if (auto v = f.string("suffix"); v && !v->empty()) {
    throw invalid_field("suffix", "'suffix' (fill in the middle) is not supported.", "unsupported_value");
  }
  r.common.request.logprobs = r.logprobs;
  const RequestJson* prompt = f.get("prompt");
  if (!prompt) throw invalid_field("prompt", "Missing required parameter: 'prompt'.");
  read_prompts(*prompt, r, ctx);
  for (size_t i = 0; i < r.prompts.size(); ++i)  // (echo shows what the model read)
    if (truncate_prompt(r.common, r.prompts[i], ctx))
      r.prompt_texts[i] = ctx.text.decode(r.prompts[i], false);
  if (r.prompts.size() * size_t(r.common.n) > size_t(ctx.options.max_n) * 4) {
    throw invalid_field("prompt", "Too many prompts x n in one request (at most " +
                                      std::to_string(ctx.options.max_n * 4) + " choices).");
  }
  for (const auto& p : r.prompts) r.max_tokens.push_back(resolve_max_tokens(r.common, int(p.size()), ctx));
  return r;
}

std::vector<GenerationRequest> completion_submissions(const CompletionRequest& req) {
  std::vector<GenerationRequest> out;
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    for (int i = 0; i < req.common.n; ++i) {
      GenerationRequest g = req.common.request;
      g.prompt = req.prompts[p];
      g.max_tokens = req.max_tokens[p];
      g.sampling.seed = choice_seed(g, req.common.n, i);
      out.push_back(std::move(g));
    }
  }
  return out;
}

static json meta_fields(const ResponseMeta& m) {
  return {{"id", m.id},
          {"object", "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"system_fingerprint", m.fingerprint}};
}

json completion_json(const CompletionRequest& req, const ResponseMeta& meta,
                     const std::vector<ChoiceResult>& choices, const ModelText& text) {
  json out = meta_fields(meta);
  json arr = json::array();
  std::vector<Usage> usage;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    std::string prefix = req.echo ? req.prompt_texts[i / size_t(req.common.n)] : std::string();
    json logprobs = nullptr;
    if (req.logprobs >= 0) {
      logprobs = completion_logprobs(text, c.tokens, req.logprobs, prefix.size());
      if (req.echo)
        logprobs = with_prompt(
            prompt_logprobs(text, req.prompts[i / size_t(req.common.n)], c.prompt_tokens, req.logprobs),
            logprobs);
    }
    arr.push_back({{"index", i},
                   {"text", prefix + c.text},
                   {"logprobs", logprobs},
                   {"finish_reason", finish_reason_text(c.finish)}});
    usage.push_back(c.usage);
  }
  out["choices"] = arr;
  out["usage"] = usage_json(usage, req.common.n);
  return out;
}

CompletionStreamFormatter::CompletionStreamFormatter(const CompletionRequest& req, ResponseMeta meta,
                                                     const ModelText& text)
    : req_(req),
      meta_(std::move(meta)),
      text_(text),
      offsets_(req.prompts.size() * size_t(req.common.n), 0) {}

json CompletionStreamFormatter::chunk(size_t index, const std::string& text, json logprobs,
                                      json finish) const {
  json c = meta_fields(meta_);
  c["choices"] = json::array({{{"index", index},
                               {"text", text},
                               {"logprobs", std::move(logprobs)},
                               {"finish_reason", std::move(finish)}}});
  if (req_.common.include_usage) c["usage"] = nullptr;
  return c;
}

std::vector<json> CompletionStreamFormatter::begin(size_t index) {
  if (!req_.echo) return {};
  const std::string& prefix = req_.prompt_texts[index / size_t(req_.common.n)];
  offsets_[index] = prefix.size();
  if (req_.logprobs >= 0) return {};  // the echo goes out with the prompt's logprobs, in the first event
  return {chunk(index, prefix, nullptr, nullptr)};
}

std::vector<json> CompletionStreamFormatter::tokens(size_t index, const StreamEvent& ev) {
  std::vector<json> out;
  if (req_.echo && req_.logprobs >= 0 && !ev.prompt_logprobs.empty()) {
    const size_t p = index / size_t(req_.common.n);
    out.push_back(chunk(index, req_.prompt_texts[p],
                        prompt_logprobs(text_, req_.prompts[p], ev.prompt_logprobs, req_.logprobs), nullptr));
  }
  json logprobs = nullptr;
  if (req_.logprobs >= 0) logprobs = completion_logprobs(text_, ev.tokens, req_.logprobs, offsets_[index]);
  offsets_[index] += ev.text.size();
  if (!ev.text.empty() || !logprobs.is_null()) out.push_back(chunk(index, ev.text, logprobs, nullptr));
  return out;
}

json CompletionStreamFormatter::finish(size_t index, const StreamEvent& ev) {
  return chunk(index, "", nullptr, finish_reason_text(ev.finish));
}

json CompletionStreamFormatter::usage(const json& usage) {
  json c = meta_fields(meta_);
  c["choices"] = json::array();
  c["usage"] = usage;
  return c;
}

}  // namespace tf::server
