#pragma once
// The startup report and one log line per request, as text or JSON (--log-format), on stderr.
#include <chrono>
#include <cstdint>
#include <string>

#include "engine/api.h"
#include "server/options.h"

namespace tf::server {

// What one request did; filled by the handler, written when the response is done.
struct RequestRecord {
  std::string method, path, remote;
  int status = 0;
  double duration_ms = 0;
  std::string id, model, finish;
  int64_t prompt_tokens = -1, completion_tokens = -1, cached_tokens = -1;
  double ttft_ms = -1;
  bool stream = false;
  std::string error;                              // the error message for status >= 400
  std::chrono::steady_clock::time_point start{};  // when the request arrived (none: not started)
};

// The record of the request this thread is answering. httplib runs a request's pre-routing handler, its
// handler, its stream provider and its logger on one worker thread, one request at a time: the server
// starts the record, every API's adapter fills what it knows (send_api_error the error), the logger takes it.
void begin_request_record();
RequestRecord& request_record();
// The record, its duration set, and a fresh one in its place.
RequestRecord take_request_record();
// The reply's id, model and whether it streams, in the record.
void record_reply(const std::string& id, const std::string& model, bool stream);
// The time to first token in the record (`first_token`: none when no token came).
void record_first_token(std::chrono::steady_clock::time_point first_token);
// An adapter's generation in the record: usage, time to first token and finish reason.
void record_generation(const Usage& usage, std::chrono::steady_clock::time_point first_token,
                       const std::string& finish);

std::string format_request_line(const RequestRecord& r, LogFormat fmt);
void write_log_line(const std::string& line);  // whole lines, never interleaved

// The live line (live_line.h): while on, log lines are written above it and it is redrawn after them.
void set_live_line(bool on);
void draw_live_line(const std::string& text);

// The block printed once the server listens: model, family, parameters, dtype, backend, contexts,
// memory, the URL, the ids served and whether auth is on.
std::string startup_report(const ModelInfo& info, const ServerOptions& opt, const std::string& url);

}  // namespace tf::server
