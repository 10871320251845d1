// `tf_fake_server --port N [--api-key K] [--max-body-bytes B] [--read-timeout S] [--step-us U]
//  [--context C] [--log-format text|json] [--reply TEXT] [--max-tokens N]`: the real HTTP layer over the fake engine, so
// the Python end-to-end tests can exercise the protocol without a model (--reply: every reply is TEXT).
#include <cstdio>
#include <cstring>
#include <string>

#include "fake_engine.h"
#include "server/http_server.h"
#include "server/request_log.h"
#include "server/shutdown.h"

int main(int argc, char** argv) {
  tf::server::block_shutdown_signals();
  tf::server::ServerOptions opt;
  tf::testing::FakeEngineConfig cfg;
  cfg.context = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--port")
      opt.port = std::stoi(v);
    else if (k == "--api-key")
      opt.api_keys.push_back(v);
    else if (k == "--max-body-bytes")
      opt.max_body_bytes = std::stoul(v);
    else if (k == "--read-timeout")
      opt.read_timeout_s = std::stoi(v);
    else if (k == "--step-us")
      cfg.step = std::chrono::microseconds(std::stoi(v));
    else if (k == "--context")
      cfg.context = std::stoi(v);
    else if (k == "--log-format")
      opt.log_format = tf::server::parse_log_format(v);
    else if (k == "--name")
      opt.name = v;
    else if (k == "--reply")
      cfg.reply = v;
    else if (k == "--max-tokens")
      opt.default_max_tokens = std::stoi(v);
    else {
      std::fprintf(stderr, "tf_fake_server: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  tf::testing::FakeEngine engine(cfg);
  tf::testing::FakeText text;
  tf::server::HttpServer server(engine, text, opt);
  server.bind();
  tf::server::write_log_line(tf::server::startup_report(engine.info(), opt, server.url()));
  tf::server::serve_until_signal(server);
  engine.shutdown();
  tf::server::write_log_line("stopped");
  return 0;
}
