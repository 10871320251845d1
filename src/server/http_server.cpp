#include "server/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/error.h"
#include "server/anthropic_messages.h"
#include "server/errors.h"
#include "server/http_reply.h"
#include "server/json_fields.h"
#include "server/metrics.h"
#include "server/model_endpoints.h"
#include "server/openai_chat.h"
#include "server/openai_completions.h"
#include "server/openai_responses.h"
#include "server/request_log.h"
#include "server/sse.h"
#include "server/thinking_budget.h"

namespace tf::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  send_api_error(res, e, e.to_json());  // (the request log's error too)
}

// The OpenAI replies' usage (all choices) and time to first token in the request's log record.
void record_usage(const json& usage, Clock::time_point first_token) {
  RequestRecord& rec = request_record();
  rec.prompt_tokens = usage.value("prompt_tokens", int64_t(-1));
  rec.completion_tokens = usage.value("completion_tokens", int64_t(-1));
  rec.cached_tokens = usage["prompt_tokens_details"].value("cached_tokens", int64_t(-1));
  record_first_token(first_token);
}

// A whole (non-streamed) reply: wait for every choice, then one JSON body.
void respond_whole(const ApiContext& ctx, httplib::Response& res, EventSource& gen,
                   const std::function<json(const std::vector<ChoiceResult>&)>& to_json) {
  auto results = gen.collect([&] { return ctx.shutting_down.load(); });
  json body = to_json(results);
  record_usage(body["usage"], gen.first_token_at());
  request_record().finish = body["choices"].empty() ? "" : body["choices"][0].value("finish_reason", "");
  send_json(res, 200, body);
}

// What a streamed reply keeps alive until the connection is done with it.
struct StreamJob {
  std::shared_ptr<const void> request;  // the parsed request the formatter refers to
  std::unique_ptr<EventSource> gen;
  std::unique_ptr<StreamFormatter> fmt;
  StreamUsage usage;
  int n = 1;
};

void respond_stream(const ApiContext& ctx, httplib::Response& res, std::shared_ptr<StreamJob> job) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, job](size_t, httplib::DataSink& sink) {
        std::vector<Usage> usage;
        std::string finish;  // choice 0's, as a whole reply's log line has it
        auto write = [&sink](const std::string& s) {
          return sink.is_writable() && sink.write(s.data(), s.size());
        };
        bool ok = stream_generation(*job->gen, *job->fmt, job->usage, job->n, write, ctx.shutting_down,
                                    &usage, &finish);
        record_usage(usage_json(usage, job->n), job->gen->first_token_at());
        request_record().finish = ok ? finish : ctx.shutting_down ? "shutdown" : "client_gone";
        if (ok || ctx.shutting_down) {
          sink.done();  // a stream ended by shutdown still closes properly (error event, [DONE])
          return true;
        }
        return false;  // the client is gone: drop the connection
      },
      [job](bool) { job->gen->cancel(false); });  // no-op when finished; frees the streams otherwise
}

void handle_chat(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto parsed = std::make_shared<ChatRequest>(parse_chat_request(parse_body(req.body), ctx));
  ResponseMeta meta{make_response_id("chatcmpl"), unix_now(), parsed->model, ctx.info().fingerprint};
  record_reply(meta.id, meta.model, parsed->common.stream);
  std::vector<GenerationRequest> submissions = chat_submissions(*parsed);
  StreamUsage usage = stream_usage(parsed->common, submissions);
  std::unique_ptr<EventSource> gen = budgeted_choices(ctx, std::move(submissions), parsed->thinking_budget,
                                                      parsed->parsing.reasoning_starts_open);
  if (!parsed->common.stream) {
    respond_whole(ctx, res, *gen, [&](const std::vector<ChoiceResult>& r) {
      return chat_completion_json(*parsed, meta, r, ctx.text);
    });
    return;
  }
  auto job = std::make_shared<StreamJob>();
  job->fmt = std::make_unique<ChatStreamFormatter>(*parsed, meta, ctx.text);
  job->request = parsed;
  job->gen = std::move(gen);
  job->usage = std::move(usage);
  job->n = parsed->common.n;
  respond_stream(ctx, res, job);
}

void handle_completions(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto parsed = std::make_shared<CompletionRequest>(parse_completion_request(parse_body(req.body), ctx));
  ResponseMeta meta{make_response_id("cmpl"), unix_now(), parsed->model, ctx.info().fingerprint};
  record_reply(meta.id, meta.model, parsed->common.stream);
  std::vector<GenerationRequest> submissions = completion_submissions(*parsed);
  StreamUsage usage = stream_usage(parsed->common, submissions);
  auto gen = std::make_unique<Generation>(ctx, std::move(submissions));
  if (!parsed->common.stream) {
    respond_whole(ctx, res, *gen, [&](const std::vector<ChoiceResult>& r) {
      return completion_json(*parsed, meta, r, ctx.text);
    });
    return;
  }
  auto job = std::make_shared<StreamJob>();
  job->fmt = std::make_unique<CompletionStreamFormatter>(*parsed, meta, ctx.text);
  job->request = parsed;
  job->gen = std::move(gen);
  job->usage = std::move(usage);
  job->n = parsed->common.n;
  respond_stream(ctx, res, job);
}

}  // namespace

struct HttpServer::Impl {
  httplib::Server http;
};

HttpServer::HttpServer(Engine& engine, const ModelText& text, ServerOptions options)
    : options_(std::move(options)),
      ctx_{engine, text, options_, stats_, stopping_},
      impl_(std::make_unique<Impl>()) {
  auto& http = impl_->http;
  int threads = std::max(4, options_.worker_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http.set_payload_max_length(options_.max_body_bytes);
  http.set_read_timeout(options_.read_timeout_s, 0);
  http.set_write_timeout(options_.write_timeout_s, 0);
  http.set_keep_alive_timeout(5);
  http.set_tcp_nodelay(true);  // SSE chunks go out as they are written

  http.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    begin_request_record();
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Statuses httplib sets itself (413 body too large, 404 unknown route, 400 unparsable request) get the
  // OpenAI error object too.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 413) {
          send_error(res, payload_too_large(options_.max_body_bytes));
        } else if (res.status == 404) {
          send_error(res, route_not_found(req.method, req.path));
        } else {
          send_error(res, ApiError(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                                   "The server could not process this HTTP request (status " +
                                       std::to_string(res.status) + ")."));
        }
        if (req.path.rfind("/v1/messages", 0) == 0) rewrite_as_anthropic_error(res);  // Anthropic's shape
        return httplib::Server::HandlerResponse::Handled;
      }));

  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      send_error(res, to_api_error(e));
    } catch (...) {
      send_error(res, internal_error("unknown exception"));
    }
  });

  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    RequestRecord r = take_request_record();
    r.method = req.method;
    r.path = req.path;
    r.remote = req.remote_addr;
    r.status = res.status;
    stats_.requests_total++;
    if (res.status >= 400) stats_.requests_failed++;
    server_metrics().observe_request(r);
    write_log_line(format_request_line(r, options_.log_format));
  });

  // Every route: auth first, then the handler; any exception becomes an OpenAI error object.
  auto route = [this](auto handler, bool needs_auth = true) {
    return [this, handler, needs_auth](const httplib::Request& req, httplib::Response& res) {
      try {
        if (stopping_) throw shutting_down();
        if (needs_auth) check_bearer(req, options_);
        handler(req, res);
      } catch (const std::exception& e) {
        send_error(res, to_api_error(e));
      }
    };
  };
  http.Get("/health", route([this](const httplib::Request&,
                                   httplib::Response& res) { send_json(res, 200, health_json(ctx_)); },
                            false));
  if (options_.metrics_enabled())
    http.Get("/metrics", route(
                             [this](const httplib::Request&, httplib::Response& res) {
                               res.set_content(server_metrics().render(ctx_),
                                               "text/plain; version=0.0.4; charset=utf-8");
                             },
                             false));
  http.Get("/v1/models", route([this](const httplib::Request&, httplib::Response& res) {
             send_json(res, 200, models_json(ctx_));
           }));
  http.Get(R"(/v1/models/(.+))", route([this](const httplib::Request& req, httplib::Response& res) {
             send_json(res, 200, model_json(ctx_, req.matches[1]));
           }));
  http.Post("/tokenize", route([this](const httplib::Request& req, httplib::Response& res) {
              send_json(res, 200, tokenize_json(parse_body(req.body), ctx_));
            }));
  http.Post("/detokenize", route([this](const httplib::Request& req, httplib::Response& res) {
              send_json(res, 200, detokenize_json(parse_body(req.body), ctx_));
            }));
  http.Post("/v1/chat/completions", route([this](const httplib::Request& req, httplib::Response& res) {
              handle_chat(ctx_, req, res);
            }));
  register_anthropic_routes(http, ctx_);  // Anthropic auth (x-api-key) and error shape
  register_responses_routes(http, ctx_);  // POST /v1/responses, GET/DELETE /v1/responses/{id}
  http.Post("/v1/completions", route([this](const httplib::Request& req, httplib::Response& res) {
              handle_completions(ctx_, req, res);
            }));
}

HttpServer::~HttpServer() {
  stop();
}

std::string HttpServer::url() const {
  return "http://" + options_.host + ":" + std::to_string(port_);
}

namespace {

// Debian's cpp-httplib 0.11 is a shared library built with a listen backlog of 5: 64 clients connecting
// at once see some connections reset. Linux re-reads the backlog on a second listen(), so raise it on
// the socket httplib bound (found among our descriptors by its port; httplib does not expose it).
void widen_listen_backlog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    int accepting = 0;
    socklen_t len = sizeof accepting;
    if (getsockopt(int(fd), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(int(fd), SOMAXCONN);
  }
  closedir(dir);
}

}  // namespace

void HttpServer::bind() {
  auto& http = impl_->http;
  if (options_.port == 0) {
    port_ = http.bind_to_any_port(options_.host);
    if (port_ < 0) throw Error("cannot listen on " + options_.host + ": no free port");
  } else {
    if (!http.bind_to_port(options_.host, options_.port)) {
      throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                  " (in use, or not an address of this machine); choose another with --host / --port");
    }
    port_ = options_.port;
  }
  widen_listen_backlog(port_);
}

void HttpServer::run() {
  impl_->http.listen_after_bind();
}

void HttpServer::stop() {
  stopping_ = true;
  impl_->http.stop();
}

}  // namespace tf::server
