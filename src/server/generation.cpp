#include "server/generation.h"

#include <algorithm>
#include <climits>
#include <thread>

#include "core/error.h"
#include "server/errors.h"
#include "server/sse.h"
#include "server/structured_output.h"

namespace tf::server {

using nlohmann::json;
using std::chrono::milliseconds;

static void read_stop(const JsonFields& f, GenerationRequest& r) {
  const RequestJson* stop = f.get("stop");
  if (!stop) return;
  auto bad = [&](const std::string& why) { return invalid_field(f.name("stop"), why, "invalid_value"); };
  if (stop->is_string()) {
    if (stop->get<std::string>().empty()) throw bad("'stop' must not be an empty string.");
    r.stop.push_back(stop->get<std::string>());
    return;
  }
  if (!stop->is_array()) {
    throw invalid_field(f.name("stop"),
                        "Invalid type for 'stop': expected a string or an array of strings, but got " +
                            json_type_name(*stop) + ".",
                        "invalid_type");
  }
  if (stop->size() > 16) throw bad("'stop' holds more than 16 sequences.");
  for (size_t i = 0; i < stop->size(); ++i) {
    const RequestJson& s = (*stop)[i];
    std::string name = f.name("stop") + "[" + std::to_string(i) + "]";
    if (!s.is_string()) {
      throw invalid_field(
          name, "Invalid type for '" + name + "': expected a string, but got " + json_type_name(s) + ".",
          "invalid_type");
    }
    if (s.get<std::string>().empty())
      throw invalid_field(name, "'" + name + "' must not be empty.", "invalid_value");
    r.stop.push_back(s.get<std::string>());
  }
}

static void read_sampling(const JsonFields& f, SamplingParams& s) {
  if (auto v = f.number("temperature", 0, 2)) s.temperature = float(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0) throw invalid_field(f.name("top_p"), "'top_p' must be greater than 0.", "invalid_value");
    s.top_p = float(*v);
  }
  if (auto v = f.integer("top_k", -1, INT_MAX)) s.top_k = *v < 0 ? 0 : int(*v);  // -1 = off (vLLM)
  if (auto v = f.number("min_p", 0, 1)) s.min_p = float(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) s.presence_penalty = float(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = float(*v);
  if (auto v = f.number("repetition_penalty", 0, 10)) {
    if (*v <= 0)
      throw invalid_field(f.name("repetition_penalty"), "'repetition_penalty' must be greater than 0.");
    s.repetition_penalty = float(*v);
  }
  if (auto v = f.integer("seed", INT64_MIN, INT64_MAX)) s.seed = uint64_t(*v);
}

// An array of token ids (stop_token_ids, allowed_token_ids: vLLM), each in [0, vocab); `required`: not empty.
static std::vector<int32_t> read_token_ids(const JsonFields& f, const std::string& key, int vocab,
                                           bool required = false) {
  std::vector<int32_t> out;
  const RequestJson* ids = f.array(key);
  if (!ids) return out;
  if (required && ids->empty()) throw invalid_field(f.name(key), "'" + f.name(key) + "' must not be empty.");
  for (size_t i = 0; i < ids->size(); ++i) {
    const std::string name = f.name(key) + "[" + std::to_string(i) + "]";
    if (!(*ids)[i].is_number_integer() || (*ids)[i].get<int64_t>() < 0 || (*ids)[i].get<int64_t>() >= vocab)
      throw invalid_field(name, "'" + name + "' must be a token id in [0, " + std::to_string(vocab) + ").");
    out.push_back(int32_t((*ids)[i].get<int64_t>()));
  }
  return out;
}

// bad_words (vLLM): each word as token sequences -- as written (leading spaces dropped) and after a space,
// where that tokenizes differently -- whose last token the engine masks where the reply ends with the rest.
static void read_bad_words(const JsonFields& f, const ApiContext& ctx, GenerationRequest& r) {
  const RequestJson* words = f.array("bad_words");
  if (!words) return;
  if (words->size() > 256)
    throw invalid_field(f.name("bad_words"), "'bad_words' holds more than 256 words.", "invalid_value");
  for (size_t i = 0; i < words->size(); ++i) {
    const std::string name = f.name("bad_words") + "[" + std::to_string(i) + "]";
    const RequestJson& w = (*words)[i];
    const size_t start = w.is_string() ? w.get<std::string>().find_first_not_of(' ') : 0;
    if (!w.is_string() || start == std::string::npos)
      throw invalid_field(name, "'" + name + "' must be a non-blank string.");
    const std::string word = w.get<std::string>().substr(start);
    for (const std::string& text : {word, " " + word}) {
      std::vector<int32_t> ids = ctx.text.encode(text, false);
      if (!ids.empty() &&
          std::find(r.bad_words_ids.begin(), r.bad_words_ids.end(), ids) == r.bad_words_ids.end())
        r.bad_words_ids.push_back(std::move(ids));
    }
  }
}

// logit_bias: {"<token id>": bias in [-100, 100], ...} (OpenAI), applied by the sampler to the raw logits.
static void read_logit_bias(const JsonFields& f, int vocab, SamplingParams& s) {
  const RequestJson* lb = f.object("logit_bias");
  if (!lb) return;
  if (lb->size() > 1024) {
    throw invalid_field(f.name("logit_bias"), "'logit_bias' holds more than 1024 tokens.", "invalid_value");
  }
  for (const auto& [key, value] : lb->items()) {
    const std::string name = f.name("logit_bias") + "." + key;
    const bool digits = !key.empty() && key.size() <= 9 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long long id = digits ? std::stoll(key) : -1;
    if (id < 0 || id >= vocab) {
      throw invalid_field(name,
                          "Invalid key in 'logit_bias': '" + key + "' is not a token id in [0, " +
                              std::to_string(vocab) + ").",
                          "invalid_value");
    }
    if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100) {
      throw invalid_field(name, "Invalid value for '" + name + "': expected a number in [-100, 100].",
                          "invalid_value");
    }
    s.logit_bias.emplace_back(int32_t(id), float(value.get<double>()));
  }
  std::sort(s.logit_bias.begin(), s.logit_bias.end());
  for (size_t i = 1; i < s.logit_bias.size(); ++i) {
    if (s.logit_bias[i].first == s.logit_bias[i - 1].first) {
      throw invalid_field(f.name("logit_bias"),
                          "'logit_bias' names token " + std::to_string(s.logit_bias[i].first) + " twice.",
                          "invalid_value");
    }
  }
}

CommonFields read_common_fields(const JsonFields& f, const ApiContext& ctx) {
  CommonFields c;
  GenerationRequest& r = c.request;
  r.sampling = ctx.info().default_sampling;
  read_sampling(f, r.sampling);
  read_logit_bias(f, ctx.text.vocab_size(), r.sampling);
  read_stop(f, r);
  r.json_schema = read_json_constraint(f);
  r.stop_token_ids = read_token_ids(f, "stop_token_ids", ctx.text.vocab_size());
  r.allowed_token_ids = read_token_ids(f, "allowed_token_ids", ctx.text.vocab_size(), true);
  read_bad_words(f, ctx, r);
  if (auto v = f.integer("max_tokens", 1, INT_MAX))
    c.max_tokens = *v, c.max_tokens_param = f.name("max_tokens");
  if (auto v = f.integer("max_completion_tokens", 1, INT_MAX)) {
    c.max_tokens = *v, c.max_tokens_param = f.name("max_completion_tokens");
  }
  if (auto v = f.integer("min_tokens", 0, INT_MAX)) {
    r.min_tokens = int(*v);
    if (c.max_tokens && *v > *c.max_tokens)
      throw invalid_field(f.name("min_tokens"), "'" + f.name("min_tokens") + "' (" + std::to_string(*v) +
                                                    ") must not exceed '" + c.max_tokens_param + "' (" +
                                                    std::to_string(*c.max_tokens) + ").");
  }
  if (auto v = f.integer("truncate_prompt_tokens", -1, INT_MAX)) {
    if (*v == 0)
      throw invalid_field(f.name("truncate_prompt_tokens"), "'" + f.name("truncate_prompt_tokens") +
                                                                "' must be -1 (the context) or at least 1.");
    c.truncate_prompt_tokens = int(*v);
  }
  if (auto v = f.integer("n", 1, ctx.options.max_n)) c.n = int(*v);
  if (auto v = f.boolean("stream")) c.stream = *v;
  if (const RequestJson* so = f.object("stream_options")) {
    JsonFields sf(*so, f.name("stream_options"));
    if (auto v = sf.boolean("include_usage")) c.include_usage = *v;
    if (auto v = sf.boolean("continuous_usage_stats")) c.continuous_usage = *v;
  }
  if (auto v = f.boolean("ignore_eos")) r.ignore_eos = *v;
  if (auto v = f.boolean("draft")) r.draft = *v;
  if (auto v = f.boolean("skip_special_tokens")) r.skip_special_tokens = *v;
  if (auto v = f.boolean("include_stop_str_in_output")) r.include_stop_str_in_output = *v;
  (void)f.string("user");  // accepted for compatibility; type-checked, otherwise unused
  return c;
}

bool truncate_prompt(const CommonFields& c, std::vector<int32_t>& prompt, const ApiContext& ctx) {
  // -1: as much as fits beside the reply (the requested max_tokens, else one token).
  const int context = ctx.info().context;
  const int keep = c.truncate_prompt_tokens != -1 ? c.truncate_prompt_tokens
                   : context > 0                  ? context - int(c.max_tokens.value_or(1))
                                                  : 0;
  if (keep <= 0 || int(prompt.size()) <= keep) return false;
  prompt.erase(prompt.begin(), prompt.end() - keep);
  return true;
}

int resolve_max_tokens(const CommonFields& c, int prompt_tokens, const ApiContext& ctx) {
  int context = ctx.info().context;
  if (context <= 0) return c.max_tokens ? int(*c.max_tokens) : ctx.options.default_max_tokens;
  std::string param = c.max_tokens ? c.max_tokens_param : std::string("messages");
  if (prompt_tokens >= context) throw context_length_exceeded(prompt_tokens, 0, context, param);
  if (c.max_tokens) {
    if (prompt_tokens + *c.max_tokens > context) {
      throw context_length_exceeded(prompt_tokens, int(*c.max_tokens), context, param);
    }
    return int(*c.max_tokens);
  }
  return std::min(ctx.options.default_max_tokens, context - prompt_tokens);
}

std::optional<uint64_t> choice_seed(const GenerationRequest& r, int n, int i) {
  if (r.sampling.seed) return *r.sampling.seed + uint64_t(i);
  if (n == 1) return std::nullopt;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the prompt ids
  for (int32_t t : r.prompt) {
    h ^= uint32_t(t);
    h *= 1099511628211ull;
  }
  return h + uint64_t(i);
}

const char* finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::Length:
      return "length";
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
    default:
      return "stop";
  }
}

Generation::Generation(const ApiContext& ctx, std::vector<GenerationRequest> requests) : ctx_(ctx) {
  try {
    for (auto& r : requests) {
      handles_.push_back(ctx_.engine.submit(std::move(r)));
      finished_.push_back(false);
      ++active_;
      ctx_.stats.generations_active++;
      ctx_.stats.generations_total++;
    }
  } catch (...) {
    cancel(false);
    throw;
  }
}

Generation::~Generation() {
  cancel(false);
}

void Generation::mark_finished(size_t i) {
  if (finished_[i]) return;
  finished_[i] = true;
  --active_;
  ctx_.stats.generations_active--;
}

void Generation::cancel(bool by_client) {
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (finished_[i]) continue;
    handles_[i]->cancel();
    if (by_client) ctx_.stats.cancelled_by_client++;
    mark_finished(i);
  }
}

bool Generation::next(size_t& index, StreamEvent& ev, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (active_ == 0) return false;
    // Poll every unfinished stream without waiting, starting after the last one served (fairness).
    for (size_t k = 0; k < handles_.size(); ++k) {
      size_t i = (cursor_ + k) % handles_.size();
      if (finished_[i]) continue;
      bool single = active_ == 1;
      milliseconds wait = single ? std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(
                                                                 deadline - std::chrono::steady_clock::now()))
                                 : milliseconds(0);
      if (handles_[i]->next(ev, wait)) {
        index = i;
        cursor_ = i + 1;
        if (ev.kind != StreamEvent::Kind::Tokens) mark_finished(i);
        ctx_.stats.tokens_generated += int64_t(ev.tokens.size());
        if (!ev.tokens.empty() && first_token_at_ == std::chrono::steady_clock::time_point{}) {
          first_token_at_ = std::chrono::steady_clock::now();
        }
        return true;
      }
      if (single) return false;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

std::vector<ChoiceResult> EventSource::collect(const std::function<bool()>& abort) {
  std::vector<ChoiceResult> out(size());
  StreamEvent ev;
  size_t i = 0;
  while (!done()) {
    if (!next(i, ev, milliseconds(50))) {
      if (abort()) {
        cancel(false);
        throw shutting_down();
      }
      continue;
    }
    ChoiceResult& c = out[i];
    if (ev.kind == StreamEvent::Kind::Tokens) {
      c.text += ev.text;
      for (auto& t : ev.tokens) c.tokens.push_back(std::move(t));
      if (!ev.prompt_logprobs.empty()) c.prompt_tokens = std::move(ev.prompt_logprobs);
    } else if (ev.kind == StreamEvent::Kind::Finished) {
      c.text += ev.text;  // a final event may flush held-back text
      c.finish = ev.finish;
      c.usage = ev.usage;
    } else {
      cancel(false);
      throw internal_error(ev.error);
    }
    ev = StreamEvent();
  }
  return out;
}

json usage_json(const std::vector<Usage>& per_choice, int n) {
  int64_t prompt = 0, completion = 0, cached = 0, drafted = 0, accepted = 0;
  for (size_t i = 0; i < per_choice.size(); ++i) {
    const Usage& u = per_choice[i];
    if (i % size_t(n) == 0) prompt += u.prompt_tokens, cached += u.cached_tokens;  // once per prompt
    completion += u.completion_tokens;
    drafted += u.drafted_tokens;
    accepted += u.accepted_tokens;
  }
  json usage = {{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (drafted > 0) {
    usage["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted},
                                          {"rejected_prediction_tokens", drafted - accepted}};
  }
  return usage;
}

StreamUsage stream_usage(const CommonFields& c, const std::vector<GenerationRequest>& submissions) {
  StreamUsage u{c.include_usage, c.include_usage && c.continuous_usage, {}};
  for (const auto& r : submissions) u.prompt_tokens.push_back(int(r.prompt.size()));
  return u;
}

bool stream_generation(EventSource& gen, StreamFormatter& fmt, const StreamUsage& stream_usage, int n,
                       const std::function<bool(const std::string&)>& write, const std::atomic<bool>& stop,
                       std::vector<Usage>* usage_out, std::string* finish_out) {
  auto send = [&](const json& chunk) { return write(sse_event(chunk)); };
  std::vector<Usage> usage(gen.size());
  std::vector<int64_t> produced(gen.size(), 0);  // tokens each choice has generated so far
  // A chunk of choice i, with its running counts when continuous usage is on.
  auto send_counted = [&](json chunk, size_t i) {
    if (stream_usage.continuous) {
      const int64_t p = i < stream_usage.prompt_tokens.size() ? stream_usage.prompt_tokens[i] : 0;
      chunk["usage"] = {
          {"prompt_tokens", p}, {"completion_tokens", produced[i]}, {"total_tokens", p + produced[i]}};
    }
    return send(chunk);
  };
  for (size_t i = 0; i < gen.size(); ++i) {
    for (const json& chunk : fmt.begin(i)) {
      if (!send(chunk)) return gen.cancel(true), false;
    }
  }
  auto idle_since = std::chrono::steady_clock::now();
  StreamEvent ev;
  size_t i = 0;
  while (!gen.done()) {
    if (!gen.next(i, ev, milliseconds(50))) {
      if (stop) {
        gen.cancel(false);
        write(sse_event(shutting_down().to_json()));
        write(sse_done());
        return false;
      }
      // A comment line now and then while queued: clients ignore it, and a write to a closed connection
      // is how we learn the client left (the second write after a hang-up fails), so a waiting request
      // gives its queue place back within about a second.
      if (std::chrono::steady_clock::now() - idle_since > milliseconds(500)) {
        if (!write(sse_comment("waiting"))) return gen.cancel(true), false;
        idle_since = std::chrono::steady_clock::now();
      }
      continue;
    }
    idle_since = std::chrono::steady_clock::now();
    bool ok = true;
    produced[i] += int64_t(ev.tokens.size());
    if (ev.kind == StreamEvent::Kind::Tokens) {
      for (const json& chunk : fmt.tokens(i, ev)) ok = ok && send_counted(chunk, i);
    } else if (ev.kind == StreamEvent::Kind::Finished) {
      if (!ev.text.empty() || !ev.tokens.empty()) {
        for (const json& chunk : fmt.tokens(i, ev)) ok = ok && send_counted(chunk, i);
      }
      usage[i] = ev.usage;
      if (stream_usage.continuous) produced[i] = usage[i].completion_tokens;  // the engine's own count
      json fin = fmt.finish(i, ev);
      if (finish_out && i == 0 && fin.contains("choices") && !fin["choices"].empty())  // the log's finish
        *finish_out = fin["choices"][0].value("finish_reason", "");
      ok = ok && send_counted(fin, i);
    } else {
      ok = send(internal_error(ev.error).to_json());
    }
    if (!ok) return gen.cancel(true), false;
    ev = StreamEvent();
  }
  if (usage_out) *usage_out = usage;
  if (stream_usage.final && !send(fmt.usage(usage_json(usage, n)))) return false;
  return write(sse_done());
}

}  // namespace tf::server
