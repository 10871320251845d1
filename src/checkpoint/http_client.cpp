#include "checkpoint/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

namespace tf {
namespace {

struct Transfer {
  HttpResponse* resp;
  CURL* curl;
  const std::function<bool(long)>* status_known = nullptr;
  const std::function<bool(const char*, size_t)>* sink = nullptr;
  size_t max_body = 0;
  bool decided = false, to_sink = false, too_big = false, sink_aborted = false;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {
    t->resp->chain.emplace_back();  // a new response in the redirect chain
  } else if (size_t colon = line.find(':'); colon != std::string::npos && !t->resp->chain.empty()) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    size_t v = line.find_first_not_of(" \t", colon + 1);
    t->resp->chain.back()[name] = v == std::string::npos ? "" : line.substr(v);
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = size * n;
  if (!t->decided) {
    t->decided = true;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &t->resp->status);
    t->to_sink = t->sink && (*t->status_known)(t->resp->status);
  }
  if (t->to_sink) {
    if ((*t->sink)(data, bytes)) return bytes;
    t->sink_aborted = true;
    return 0;
  }
  if (t->resp->body.size() + bytes > t->max_body) {
    t->too_big = true;
    return 0;
  }
  t->resp->body.append(data, bytes);
  return bytes;
}

bool is_unreachable(CURLcode rc) {
  return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY;
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  for (const auto& h : chain)
    if (auto it = h.find(lower_name); it != h.end()) return it->second;
  return "";
}

HttpClient::HttpClient(long connect_timeout_s, long stall_timeout_s)
    : connect_timeout_s_(connect_timeout_s), stall_timeout_s_(stall_timeout_s) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (!curl_) throw Error("libcurl: cannot create a transfer handle");
}

HttpClient::~HttpClient() {
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

HttpResponse HttpClient::fetch(const HttpRequest& req, size_t max_body) {
  return perform(req, max_body, nullptr, nullptr);
}

HttpResponse HttpClient::stream(const HttpRequest& req, const std::function<bool(long)>& status_known,
                                const std::function<bool(const char*, size_t)>& sink) {
  return perform(req, 64u << 10, &status_known, &sink);
}

HttpResponse HttpClient::perform(const HttpRequest& req, size_t max_body,
                                 const std::function<bool(long)>* status_known,
                                 const std::function<bool(const char*, size_t)>* sink) {
  HttpResponse resp;
  Transfer t{&resp, static_cast<CURL*>(curl_), status_known, sink, max_body};
  CURL* c = t.curl;
  curl_easy_reset(c);
  curl_slist* hdrs = nullptr;
  for (const std::string& h : req.headers) hdrs = curl_slist_append(hdrs, h.c_str());
  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "tensorfold/0.1");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, connect_timeout_s_);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, stall_timeout_s_);
  curl_easy_setopt(c, CURLOPT_NOBODY, req.head ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  char errbuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(hdrs);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  if (rc != CURLE_OK) {
    if (t.sink_aborted) throw Error(req.url + ": download aborted");
    if (t.too_big) throw Error(req.url + ": response larger than " + std::to_string(max_body) + " bytes");
    std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    throw NetworkError(why, is_unreachable(rc));
  }
  if (!t.decided && status_known) (*status_known)(resp.status);  // an empty body still reports its status
  return resp;
}

}  // namespace tf
