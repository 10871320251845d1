#pragma once
// Helpers for the checkpoint tests: a temporary directory removed at the end, whole-file read/write,
// and safetensors files with hand-written headers for the corruption cases.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"

namespace tf::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tf-ckpt-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A file made of an 8-byte length `declared_len`, the header text, and `data_bytes` bytes of data.
inline std::string raw_safetensors(const std::string& header, size_t data_bytes, uint64_t declared_len) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((declared_len >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}
inline std::string raw_safetensors(const std::string& header, size_t data_bytes) {
  return raw_safetensors(header, data_bytes, header.size());
}

// The message of the tf::Error `fn` throws ("" when it throws none); fails the test on other exceptions.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const tf::Error& e) {
    return e.what();
  }
  return "";
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// One line naming `file` and containing `problem`.
#define EXPECT_ONE_LINE_ERROR(msg, file, problem)         \
  do {                                                    \
    std::string m_ = (msg);                               \
    EXPECT_NE(m_, "") << "no tf::Error thrown";           \
    EXPECT_EQ(m_.find('\n'), std::string::npos) << m_;    \
    EXPECT_NE(m_.find(file), std::string::npos) << m_;    \
    EXPECT_NE(m_.find(problem), std::string::npos) << m_; \
  } while (0)

}  // namespace tf::testing
