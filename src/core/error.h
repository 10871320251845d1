#pragma once
// Errors carry a message a user can act on; the CLI prints them as one line, the server maps them to
// the API's error format.
#include <stdexcept>
#include <string>

namespace tf {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request the caller can fix (bad field, prompt too long): HTTP 400 in the server.
class InvalidRequest : public Error {
 public:
  explicit InvalidRequest(const std::string& msg, std::string param = {}, std::string code = {})
      : Error(msg), param_(std::move(param)), code_(std::move(code)) {}
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  std::string param_, code_;
};

// The server is at capacity (the wait queue is full): HTTP 429 with Retry-After in the server.
class Overloaded : public Error {
 public:
  using Error::Error;
};

// The device had no memory for an allocation (not sticky: the device stays usable). The engine runs a
// round that hit it again with fewer prompt rows.
class DeviceOutOfMemory : public Error {
 public:
  using Error::Error;
};

#define TF_CHECK(cond, msg)                           \
  do {                                                \
    if (!(cond)) throw ::tf::Error(std::string(msg)); \
  } while (0)

}  // namespace tf
