#include "core/file_io.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace tf {

std::optional<std::string> try_read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string read_file(const std::filesystem::path& p) {
  std::optional<std::string> s = try_read_file(p);
  if (!s) throw Error("cannot read " + p.string());
  return std::move(*s);
}

}  // namespace tf
