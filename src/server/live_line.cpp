#include "server/live_line.h"

#include <chrono>
#include <cstdio>

#include "server/request_log.h"

namespace tf::server {

LiveLine::LiveLine(const Engine& engine, const ServerStats& stats) : engine_(engine), stats_(stats) {
  set_live_line(true);
  thread_ = std::thread([this] { run(); });
}

LiveLine::~LiveLine() {
  stop_ = true;
  thread_.join();
  set_live_line(false);
}

void LiveLine::run() {
  using Clock = std::chrono::steady_clock;
  int64_t last_tokens = engine_.stats().generated_tokens;
  auto last = Clock::now();
  double rate = 0;
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EngineStats e = engine_.stats();
    auto now = Clock::now();
    double dt = std::chrono::duration<double>(now - last).count();
    double inst = dt > 0 ? double(e.generated_tokens - last_tokens) / dt : 0;
    rate = rate == 0 ? inst : 0.5 * rate + 0.5 * inst;  // smoothed so the number is readable
    last_tokens = e.generated_tokens;
    last = now;
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "[live] %d running, %d waiting, %.0f tok/s, %lld requests, KV %d/%d blocks", e.running,
                  e.waiting, rate, (long long)stats_.requests_total.load(), e.kv_blocks_used,
                  e.kv_blocks_total);
    draw_live_line(buf);
  }
}

}  // namespace tf::server
