#include "fake_hub.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace tf::testing {
namespace {

std::string digest_hex(const EVP_MD* md, const std::string& bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), out, &len, md, nullptr);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) s += {hex[out[i] >> 4], hex[out[i] & 15]};
  return s;
}

void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += size_t(n);
  }
}

void send_status(int fd, int code, const std::string& reason, const std::string& headers = "",
                 const std::string& body = "") {
  send_all(fd, "HTTP/1.1 " + std::to_string(code) + " " + reason +
                   "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                   headers + "\r\n" + body);
}

std::string header_value(const std::string& head, const std::string& name) {
  std::istringstream in(head);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > name.size() && strncasecmp(line.c_str(), name.c_str(), name.size()) == 0 &&
        line[name.size()] == ':')
      return line.substr(line.find_first_not_of(' ', name.size() + 1));
  }
  return "";
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  return digest_hex(EVP_sha256(), bytes);
}
std::string git_blob_id(const std::string& bytes) {
  return digest_hex(EVP_sha1(), "blob " + std::to_string(bytes.size()) + std::string(1, '\0') + bytes);
}

FakeHub::FakeHub() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // never anything but loopback
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("fake hub: cannot listen on 127.0.0.1");
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

FakeHub::~FakeHub() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

void FakeHub::add_file(const std::string& name, const std::string& content, bool lfs) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[name] = {content, lfs ? sha256_hex(content) : git_blob_id(content), lfs};
}

std::string FakeHub::blob_id(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.at(name).blob_id;
}

std::vector<FakeHub::Request> FakeHub::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::vector<FakeHub::Request> FakeHub::requests_for(const std::string& file) const {
  std::vector<Request> out;
  for (const Request& r : requests())
    if (r.method == "GET" &&
        (r.path == "/cdn/" + file || r.path == "/" + repo + "/resolve/" + commit + "/" + file))
      out.push_back(r);
  return out;
}

void FakeHub::clear_requests() {
  std::lock_guard<std::mutex> lock(mu_);
  requests_.clear();
}

void FakeHub::serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    handle(fd);
    ::close(fd);
  }
}

void FakeHub::handle(int fd) {
  std::string head;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    head.append(buf, size_t(n));
  }
  Request req;
  std::istringstream line(head.substr(0, head.find("\r\n")));
  line >> req.method >> req.path;
  req.range = header_value(head, "Range");
  req.authorization = header_value(head, "Authorization");
  {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(req);
  }
  respond(fd, req);
}

std::string FakeHub::listing() const {
  nlohmann::json siblings = nlohmann::json::array();
  for (const auto& [name, f] : files_) {
    nlohmann::json s = {{"rfilename", name}};
    if (list_blob_ids) {
      s["size"] = f.content.size();
      s["blobId"] = git_blob_id(f.content);
      if (f.lfs)
        s["lfs"] = {{"sha256", bad_sha.count(name) ? sha256_hex("other") : f.blob_id},
                    {"size", f.content.size()},
                    {"pointerSize", 134}};
    }
    siblings.push_back(s);
  }
  return nlohmann::json{{"id", repo}, {"sha", commit}, {"siblings", siblings}}.dump();
}

// The recursive tree listing huggingface_hub's snapshot_download asks for.
std::string FakeHub::tree_listing() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [name, f] : files_) {
    nlohmann::json e = {
        {"type", "file"}, {"path", name}, {"size", f.content.size()}, {"oid", git_blob_id(f.content)}};
    if (f.lfs) e["lfs"] = {{"oid", f.blob_id}, {"size", f.content.size()}, {"pointerSize", 134}};
    entries.push_back(e);
  }
  return entries.dump();
}

void FakeHub::respond(int fd, const Request& req) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string api = "/api/models/" + repo + "/revision/",
                    resolve = "/" + repo + "/resolve/" + commit + "/";
  bool authorised = required_token.empty() || req.authorization == "Bearer " + required_token;
  bool hub_path = (gate_listing && req.path.rfind("/api/", 0) == 0) || req.path.rfind(resolve, 0) == 0;
  if (hub_path && !authorised)
    return send_status(
        fd, 401, "Unauthorized",
        "X-Error-Code: GatedRepo\r\nX-Error-Message: Access to model " + repo + " is restricted.\r\n");
  const std::string tree = "/api/models/" + repo + "/tree/";
  if (req.path.rfind(tree, 0) == 0)
    return send_status(fd, 200, "OK", "Content-Type: application/json\r\n", tree_listing());
  if (req.path.rfind(api, 0) == 0) {
    std::string rev = req.path.substr(api.size(), req.path.find('?') - api.size());
    if (rev != "main" && rev != commit)
      return send_status(fd, 404, "Not Found", "X-Error-Message: Revision Not Found\r\n");
    return send_status(fd, 200, "OK", "Content-Type: application/json\r\n", listing());
  }
  std::string file;
  if (req.path.rfind(resolve, 0) == 0)
    file = req.path.substr(resolve.size());
  else if (req.path.rfind("/cdn/", 0) == 0)
    file = req.path.substr(5);
  auto it = files_.find(file);
  if (it == files_.end())
    return send_status(fd, 404, "Not Found", "X-Error-Message: Repository not found\r\n");
  const File& f = it->second;
  // The Hub redirects LFS content to its CDN, another host: here "localhost", the same loopback listener
  // under another name, so clients treat it as a foreign host (no token sent, metadata taken from the
  // redirect itself) as they do with the real CDN.
  if (f.lfs && req.path.rfind(resolve, 0) == 0)
    return send_status(fd, 302, "Found",
                       "Location: http://localhost:" + std::to_string(port_) + "/cdn/" + file +
                           "\r\nX-Repo-Commit: " + commit + "\r\nX-Linked-Etag: \"" + f.blob_id +
                           "\"\r\nX-Linked-Size: " + std::to_string(f.content.size()) + "\r\n");
  send_content(fd, req, file, f);
}

void FakeHub::send_content(int fd, const Request& req, const std::string& name, const File& f) {
  size_t size = f.content.size(), begin = 0, end = size;  // [begin, end)
  int code = 200;
  std::string extra = f.lfs ? "" : "ETag: \"" + f.blob_id + "\"\r\nX-Repo-Commit: " + commit + "\r\n";
  if (!req.range.empty() && !ignore_range) {
    size_t dash = req.range.find('-');
    begin = std::stoul(req.range.substr(6, dash - 6));  // "bytes=B-" or "bytes=B-E"
    if (dash + 1 < req.range.size()) end = std::min(size, std::stoul(req.range.substr(dash + 1)) + 1);
    if (begin >= size)
      return send_status(fd, 416, "Range Not Satisfiable",
                         "Content-Range: bytes */" + std::to_string(size) + "\r\n");
    code = 206;
    extra += "Content-Range: bytes " + std::to_string(begin) + "-" + std::to_string(end - 1) + "/" +
             std::to_string(size) + "\r\n";
  }
  std::string body = f.content.substr(begin, end - begin);
  std::string head = "HTTP/1.1 " + std::to_string(code) + (code == 200 ? " OK" : " Partial Content") +
                     "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                     extra + "\r\n";
  if (req.method == "HEAD") return send_all(fd, head);
  if (auto cut = cut_after.find(name); cut != cut_after.end()) {  // drop the connection part way, once
    body.resize(std::min(body.size(), cut->second));
    cut_after.erase(cut);
  }
  send_all(fd, head + body);
}

}  // namespace tf::testing
