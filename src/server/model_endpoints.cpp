#include "server/model_endpoints.h"

#include "server/errors.h"
#include "server/json_fields.h"
#include "server/openai_chat.h"
#include "server/openai_common.h"

namespace tf::server {

using nlohmann::json;

static int64_t started_at() {
  static const int64_t t = unix_now();
  return t;
}

json model_json(const ApiContext& ctx, const std::string& id) {
  ctx.check_model(&id);
  const ModelInfo& info = ctx.info();
  return {{"id", id},
          {"object", "model"},
          {"created", started_at()},
          {"owned_by", "tensorfold"},
          {"context_length", info.context},
          {"max_model_len", info.context},
          {"native_context_length", info.native_context},
          {"family", info.family},
          {"parameters", info.parameters},
          {"dtype", info.dtype}};
}

json models_json(const ApiContext& ctx) {
  json data = json::array();
  for (const auto& id : ctx.model_ids()) data.push_back(model_json(ctx, id));
  return {{"object", "list"}, {"data", data}};
}

json health_json(const ApiContext& ctx) {
  const ServerStats& s = ctx.stats;
  EngineStats e = ctx.engine.stats();
  json engine = {{"running", e.running},
                 {"waiting", e.waiting},
                 {"kv_blocks_used", e.kv_blocks_used},
                 {"kv_blocks_total", e.kv_blocks_total},
                 {"requests_finished", e.requests_finished},
                 {"requests_cancelled", e.requests_cancelled},
                 {"prompt_tokens", e.prompt_tokens},
                 {"generated_tokens", e.generated_tokens}};
  return {{"status", ctx.shutting_down ? "shutting_down" : "ok"},
          {"model", ctx.model_ids().front()},
          {"requests_total", s.requests_total.load()},
          {"requests_failed", s.requests_failed.load()},
          {"generations_active", s.generations_active.load()},
          {"generations_total", s.generations_total.load()},
          {"cancelled_by_client", s.cancelled_by_client.load()},
          {"tokens_generated", s.tokens_generated.load()},
          {"engine", engine}};
}

json tokenize_json(const RequestJson& body, const ApiContext& ctx) {
  JsonFields f(body);
  if (auto model = f.string("model")) ctx.check_model(&*model);
  std::vector<int32_t> ids;
  if (const RequestJson* messages = f.get("messages")) {
    RequestJson norm = normalize_messages(*messages);
    bool gen = f.boolean("add_generation_prompt").value_or(true);
    const RequestJson kwargs = template_kwargs(f, ctx);  // (as chat completions render it)
    ids = ctx.text.encode(render_chat_checked(ctx.text, norm, nullptr, gen, kwargs, "messages"), false);
  } else {
    auto text = f.string("prompt");
    if (!text) text = f.string("content");
    if (!text)
      throw invalid_field("prompt", "Missing required parameter: 'prompt' (or 'content', or 'messages').");
    bool special = f.boolean("add_special_tokens").value_or(f.boolean("add_special").value_or(true));
    ids = ctx.text.encode(*text, special);
  }
  json tokens = json::array();
  if (f.boolean("with_pieces").value_or(false)) {
    for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", token_piece(ctx.text, id)}});
  } else {
    tokens = ids;
  }
  return {{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", ctx.info().context}};
}

json detokenize_json(const RequestJson& body, const ApiContext& ctx) {
  JsonFields f(body);
  if (auto model = f.string("model")) ctx.check_model(&*model);
  const RequestJson* tokens = f.array("tokens");
  if (!tokens) throw invalid_field("tokens", "Missing required parameter: 'tokens'.");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const RequestJson& t = (*tokens)[i];
    std::string name = "tokens[" + std::to_string(i) + "]";
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.text.vocab_size()) {
      throw invalid_field(
          name, "'" + name + "' must be a token id in [0, " + std::to_string(ctx.text.vocab_size()) + ").",
          "invalid_value");
    }
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  bool skip = f.boolean("skip_special_tokens").value_or(false);
  std::string text = ctx.text.decode(ids, skip);
  return {{"prompt", text}, {"content", text}};
}

}  // namespace tf::server
