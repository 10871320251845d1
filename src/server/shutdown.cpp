#include "server/shutdown.h"

#include <signal.h>

#include <atomic>
#include <thread>

#include "server/request_log.h"

namespace tf::server {

static sigset_t shutdown_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void block_shutdown_signals() {
  sigset_t set = shutdown_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void serve_until_signal(HttpServer& server) {
  std::atomic<bool> ended{false};
  std::thread waiter([&server, &ended] {
    sigset_t set = shutdown_set();
    int sig = 0;
    sigwait(&set, &sig);
    if (ended) return;  // woken by the server ending on its own (see below)
    write_log_line(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                   ": stopping (in-flight requests are ended), then exiting");
    server.stop();
  });
  server.run();
  ended = true;
  // If the server ended for another reason, wake the waiter with a signal it is waiting for.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
}

}  // namespace tf::server
