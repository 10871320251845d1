#pragma once
// A fake Hugging Face Hub on 127.0.0.1 for the pull tests: the model listing API, /resolve/ with the
// Hub's redirect of LFS files to a CDN path carrying X-Linked-Etag, Range requests, and knobs to break
// things (a connection dropped mid-file, Range ignored, a token required, a wrong checksum).
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tf::testing {

std::string sha256_hex(const std::string& bytes);
std::string git_blob_id(const std::string& bytes);  // sha1("blob <n>\0" + bytes), as git names blobs

class FakeHub {
 public:
  struct Request {
    std::string method, path, range, authorization;
  };

  FakeHub();
  ~FakeHub();
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // LFS files (weights) are named by their sha256 and redirected to /cdn/; others by their git blob id.
  void add_file(const std::string& name, const std::string& content, bool lfs);
  std::string blob_id(const std::string& name) const;
  std::vector<Request> requests() const;
  std::vector<Request> requests_for(const std::string& file) const;  // GETs of the file's content
  void clear_requests();

  // Knobs, set before the requests they affect.
  std::string repo = "org/tiny";
  std::string commit = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
  std::map<std::string, size_t> cut_after;  // file -> body bytes sent before dropping the connection (once)
  bool ignore_range = false;
  bool list_blob_ids = true;      // false: a mirror whose listing has no blob ids (HEAD finds them)
  std::string required_token;     // non-empty: 401 unless "Authorization: Bearer <token>"
  bool gate_listing = true;       // false: the listing is public and only files need the token
  std::set<std::string> bad_sha;  // files whose listed sha256 is wrong

 private:
  struct File {
    std::string content, blob_id;
    bool lfs;
  };
  void serve();
  void handle(int fd);
  void respond(int fd, const Request& req);
  std::string listing() const;
  std::string tree_listing() const;
  void send_content(int fd, const Request& req, const std::string& name, const File& f);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<std::string, File> files_;
  std::vector<Request> requests_;
};

}  // namespace tf::testing
