#include "core/log.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

namespace tf {

namespace {
LogLevel initial_level() {
  const char* e = std::getenv("TENSORFOLD_LOG");
  if (!e) return LogLevel::Info;
  if (!std::strcmp(e, "debug")) return LogLevel::Debug;
  if (!std::strcmp(e, "warning")) return LogLevel::Warning;
  if (!std::strcmp(e, "error")) return LogLevel::Error;
  return LogLevel::Info;
}
LogLevel g_level = initial_level();
std::mutex g_mu;
}  // namespace

void set_log_level(LogLevel level) {
  g_level = level;
}

LogLevel log_level() {
  return g_level;
}

void log_message(LogLevel level, const std::string& msg) {
  if (level < g_level) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(g_mu);
  std::cerr << "tensorfold: " << names[int(level)] << ": " << msg << "\n";
}

}  // namespace tf
