#include "server/options.h"

#include <fstream>

#include "core/error.h"

namespace tf::server {

LogFormat parse_log_format(const std::string& s) {
  if (s == "text") return LogFormat::Text;
  if (s == "json") return LogFormat::Json;
  throw Error("--log-format must be 'text' or 'json', not '" + s + "'");
}

static std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> read_api_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read --api-key-file '" + path + "'");
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (!line.empty() && line[0] != '#') keys.push_back(line);
  }
  if (keys.empty()) throw Error("--api-key-file '" + path + "' holds no key (one key per line)");
  return keys;
}

}  // namespace tf::server
