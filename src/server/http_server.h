#pragma once
// The HTTP layer: routes, bearer auth, body/time limits, OpenAI error mapping, request logging and a
// graceful stop. Handlers live in openai_chat / openai_completions / model_endpoints.
#include <atomic>
#include <memory>
#include <string>

#include "engine/api.h"
#include "server/api_context.h"
#include "server/model_text.h"
#include "server/options.h"

namespace tf::server {

class HttpServer {
 public:
  // `engine` and `text` must outlive the server.
  HttpServer(Engine& engine, const ModelText& text, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0 = any free port); throws tf::Error when it cannot.
  void bind();
  int port() const { return port_; }
  std::string url() const;
  // Serves until stop(); returns once in-flight requests have ended. Call bind() first.
  void run();
  // Thread-safe: stop accepting, end in-flight generations (streams get an error event and [DONE]).
  void stop();
  const ServerStats& stats() const { return stats_; }

 private:
  struct Impl;
  ServerOptions options_;
  ServerStats stats_;
  std::atomic<bool> stopping_{false};
  ApiContext ctx_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::server
