#pragma once
// One live status line at the bottom of a terminal: active streams and tokens/s, redrawn twice a second.
// Only for an interactive stderr (off when redirected or TENSORFOLD_NO_LIVE=1); request log lines are
// written above it.
#include <atomic>
#include <thread>

#include "engine/api.h"
#include "server/api_context.h"

namespace tf::server {

class LiveLine {
 public:
  LiveLine(const Engine& engine, const ServerStats& stats);
  ~LiveLine();  // stops and clears the line
  LiveLine(const LiveLine&) = delete;
  LiveLine& operator=(const LiveLine&) = delete;

 private:
  void run();
  const Engine& engine_;
  const ServerStats& stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tf::server
