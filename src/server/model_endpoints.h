#pragma once
// The endpoints that do not generate: GET /v1/models, GET /health, POST /tokenize, POST /detokenize.
#include <nlohmann/json.hpp>

#include "server/api_context.h"
#include "server/json_fields.h"

namespace tf::server {

nlohmann::json models_json(const ApiContext& ctx);
// One entry of /v1/models; throws 404 for an unknown id (GET /v1/models/{id}).
nlohmann::json model_json(const ApiContext& ctx, const std::string& id);
nlohmann::json health_json(const ApiContext& ctx);
// Body: {"prompt" | "content": str, "add_special_tokens" | "add_special": bool, "with_pieces": bool}
//    or {"messages": [...], "add_generation_prompt": bool, "chat_template_kwargs": {...}}.
nlohmann::json tokenize_json(const RequestJson& body, const ApiContext& ctx);
// Body: {"tokens": [ids]}; answers {"prompt": text, "content": text}.
nlohmann::json detokenize_json(const RequestJson& body, const ApiContext& ctx);

}  // namespace tf::server
