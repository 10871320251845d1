#pragma once
// Engine-side messages (warnings the operator should see once, cache and admission notes) on stderr,
// as whole lines. The server formats its own request log; this is for the layers below it.
#include <string>

namespace tf {

enum class LogLevel { Debug, Info, Warning, Error };
void log_message(LogLevel level, const std::string& msg);
inline void log_info(const std::string& m) {
  log_message(LogLevel::Info, m);
}
inline void log_warning(const std::string& m) {
  log_message(LogLevel::Warning, m);
}
// Messages below this level are dropped (default Info; TENSORFOLD_LOG=debug|info|warning|error).
void set_log_level(LogLevel level);
LogLevel log_level();

}  // namespace tf
