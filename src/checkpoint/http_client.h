#pragma once
// A small blocking HTTP(S) client over libcurl for pulling checkpoints: redirects followed (Hub files
// redirect to a CDN; curl does not forward the Authorization header to another host), bodies either
// returned or streamed to a sink, stalled transfers aborted so the caller can resume them.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"

namespace tf {

// The server could not be reached or the transfer broke off; `unreachable` when no connection was made
// at all (offline, DNS failure, connection refused), so nothing is worth retrying.
class NetworkError : public Error {
 public:
  NetworkError(const std::string& msg, bool unreachable) : Error(msg), unreachable_(unreachable) {}
  bool unreachable() const { return unreachable_; }

 private:
  bool unreachable_;
};

struct HttpResponse {
  long status = 0;
  std::string body;  // empty for streamed and HEAD requests
  // Headers of each response in the redirect chain, names lower-cased; back() is the final one.
  std::vector<std::map<std::string, std::string>> chain;

  // The first value of a header anywhere in the chain ("" when absent): the Hub puts X-Linked-Etag and
  // X-Repo-Commit on its redirect, not on the CDN's final response.
  std::string header(const std::string& lower_name) const;
};

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  bool head = false;
};

class HttpClient {
 public:
  // A transfer slower than 1 byte/s for `stall_timeout_s` is aborted as a NetworkError.
  HttpClient(long connect_timeout_s = 10, long stall_timeout_s = 30);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // The whole body in memory (API answers, small files), at most `max_body` bytes.
  HttpResponse fetch(const HttpRequest& req, size_t max_body = 64u << 20);
  // Streams the final response's body to `sink` once the status is known (`status_known` is called first
  // and may return false to skip the body, e.g. on an error status); a sink returning false aborts.
  HttpResponse stream(const HttpRequest& req, const std::function<bool(long status)>& status_known,
                      const std::function<bool(const char* data, size_t n)>& sink);

 private:
  HttpResponse perform(const HttpRequest& req, size_t max_body, const std::function<bool(long)>* status_known,
                       const std::function<bool(const char*, size_t)>* sink);
  void* curl_;  // CURL*, kept for connection reuse
  long connect_timeout_s_, stall_timeout_s_;
};

}  // namespace tf
