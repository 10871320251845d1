#pragma once
// Server-Sent Events framing as OpenAI streams it: "data: <json>\n\n" per chunk, "data: [DONE]\n\n" last.
#include <nlohmann/json.hpp>
#include <string>

namespace tf::server {

// JSON that never throws on invalid UTF-8 (a token may end mid-character): bad bytes become U+FFFD.
std::string dump_json(const nlohmann::json& j);

std::string sse_event(const nlohmann::json& chunk);
std::string sse_done();
std::string sse_comment(const std::string& text);  // ": text\n\n", ignored by clients

}  // namespace tf::server
