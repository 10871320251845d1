#include "checkpoint/pull.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/http_client.h"
#include "checkpoint/locate.h"
#include "checkpoint/progress.h"
#include "core/error.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

// Percent-encodes everything but unreserved characters; `keep_slash` for file paths in URLs.
std::string url_escape(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The small files a checkpoint needs besides its weights (tokenizer.model only without tokenizer.json).
const std::set<std::string> kSmallFiles = {
    "config.json",           "generation_config.json",  kSafetensorsIndexFile, "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json"};

// One repo on one endpoint, with the listing of one revision.
struct Hub {
  HttpClient http;
  std::string endpoint, token, repo, shown;
  std::string commit;
  std::vector<RemoteFile> siblings;

  Hub(const PullOptions& o, const ModelId& id)
      : http(o.connect_timeout_s, o.stall_timeout_s),
        endpoint(o.endpoint.empty() ? hf_endpoint() : o.endpoint),
        token(o.token.empty() ? hf_token() : o.token),
        repo(id.repo),
        shown(id.revision == "main" ? id.repo : id.repo + "@" + id.revision) {
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  }

  HttpRequest request(const std::string& url) const {
    HttpRequest r{url, {}};
    if (!token.empty()) r.headers.push_back("Authorization: Bearer " + token);
    return r;
  }
  std::string file_url(const std::string& name) const {
    return endpoint + "/" + repo + "/resolve/" + commit + "/" + url_escape(name, true);
  }
  const RemoteFile* find(const std::string& name) const {
    for (const RemoteFile& f : siblings)
      if (f.name == name) return &f;
    return nullptr;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const RemoteFile& f : siblings) out.push_back(f.name);
    return out;
  }

  [[noreturn]] void unreachable(const NetworkError& e) const {
    throw Error("cannot reach " + endpoint + " (" + e.what() +
                "): offline? Models already pulled still work (`tensorfold models`); HF_ENDPOINT selects "
                "a mirror");
  }

  // One line for an HTTP error status of a request about `what`.
  [[noreturn]] void http_error(const HttpResponse& r, const std::string& what) const {
    std::string hub_says = r.header("x-error-message");
    std::string tail = hub_says.empty() ? "" : " (" + hub_says + ")";
    std::string status = "HTTP " + std::to_string(r.status);
    if (r.status == 401 || r.status == 403) {
      std::string fix = token.empty()
                            ? "if the model is gated or private, accept its terms on the Hub and set HF_TOKEN"
                            : "the token in use has no access to it: accept the model's terms on the Hub";
      throw Error(what + ": access denied by " + endpoint + " (" + status + ")" + tail + "; " + fix);
    }
    if (r.status == 404)
      throw Error(what + ": not found on " + endpoint + " (" + status + ")" + tail +
                  "; check the id and revision" + (token.empty() ? " (gated models need HF_TOKEN)" : ""));
    throw Error(what + ": " + endpoint + " answered " + status + tail);
  }

  void list(const std::string& revision) {
    std::string url =
        endpoint + "/api/models/" + repo + "/revision/" + url_escape(revision, false) + "?blobs=true";
    HttpResponse r;
    try {
      r = http.fetch(request(url));
    } catch (const NetworkError& e) {
      unreachable(e);
    }
    if (r.status != 200) http_error(r, shown);
    json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
        !j.contains("siblings") || !j["siblings"].is_array())
      throw Error(shown + ": " + endpoint + " sent an unexpected model listing");
    commit = j["sha"].get<std::string>();
    for (const json& s : j["siblings"]) siblings.push_back(parse_sibling(s));
  }

  static RemoteFile parse_sibling(const json& s) {
    RemoteFile f;
    f.name = s.value("rfilename", "");
    f.size = s.value("size", uint64_t(0));
    f.blob_id = s.value("blobId", "");
    if (s.contains("lfs") && s["lfs"].is_object()) {
      f.lfs = true;
      f.blob_id = s["lfs"].value("sha256", f.blob_id);
      f.size = s["lfs"].value("size", f.size);
    }
    return f;
  }
};

// An exclusive lock on <cache>/.locks/<repo folder>/<blob>.lock, as huggingface_hub takes, so two pulls
// of the same blob (from either tool) do not write one .incomplete file together.
class BlobLock {
 public:
  explicit BlobLock(const fs::path& path) {
    fs::create_directories(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) throw Error(path.string() + ": cannot lock");
  }
  ~BlobLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

std::string sha256_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    EVP_DigestUpdate(ctx, buf.data(), size_t(f.gcount()));
  }
  unsigned char md[32];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) out += {hex[md[i] >> 4], hex[md[i] & 15]};
  return out;
}

uint64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  uint64_t n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.good()) throw Error(tmp.string() + ": cannot write");
  }
  fs::rename(tmp, path);
}

json parse_cached_json(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(path.string() + ": not a valid JSON object");
  return j;
}

}  // namespace

namespace {

// Downloads files of one listed revision into the cache layout. fetch() may run on several threads at
// once, each with its own HttpClient; `progress` (set for the weights) sums their bytes.
class Puller {
 public:
  Puller(Hub& hub, const PullOptions& o, const fs::path& repo_dir)
      : hub_(hub), o_(o), repo_dir_(repo_dir), log_(o.log ? o.log : &std::cerr) {
    tty_ = o.progress == ProgressStyle::Bar ||
           (o.progress == ProgressStyle::Auto && log_ == &std::cerr && ::isatty(STDERR_FILENO));
    if (o.progress == ProgressStyle::None) log_ = nullptr;
  }

  fs::path snapshot() const { return repo_dir_ / "snapshots" / hub_.commit; }
  fs::path blob_path(const RemoteFile& f) const { return repo_dir_ / "blobs" / f.blob_id; }
  uint64_t downloaded() const { return downloaded_; }
  std::ostream* log() const { return log_; }
  bool tty() const { return tty_; }
  void set_progress(DownloadProgress* p) { progress_ = p; }
  void cancel() { cancelled_ = true; }  // other workers stop at their next chunk

  // Blob in place (downloaded now or before) and the snapshot's symlink pointing at it.
  void fetch(RemoteFile f, HttpClient& http) {
    if (f.blob_id.empty()) resolve_blob_id(&f, http);
    fs::path blob = blob_path(f);
    if (!have_blob(blob, f)) {
      fs::create_directories(blob.parent_path());
      BlobLock lock(repo_dir_.parent_path() / ".locks" / repo_dir_.filename() / (f.blob_id + ".lock"));
      if (!have_blob(blob, f)) download(f, blob, http);
    }
    link(f.name, f.blob_id);
  }

 private:
  bool have_blob(const fs::path& blob, const RemoteFile& f) const {
    std::error_code ec;
    return fs::is_regular_file(blob, ec) && (f.size == 0 || file_size_or_zero(blob) == f.size);
  }

  void say(const std::string& line) {
    if (progress_) return progress_->note(line);
    std::lock_guard<std::mutex> lock(log_mu_);
    if (log_) *log_ << line << "\n";
  }

  // Listings without blob ids (some mirrors): the ETag of a HEAD request names the blob.
  void resolve_blob_id(RemoteFile* f, HttpClient& http) {
    HttpRequest req = hub_.request(hub_.file_url(f->name));
    req.head = true;
    HttpResponse r;
    try {
      r = http.fetch(req);
    } catch (const NetworkError& e) {
      hub_.unreachable(e);
    }
    if (r.status != 200) hub_.http_error(r, hub_.shown + ": " + f->name);
    std::string etag = r.header("x-linked-etag");
    if (etag.empty()) etag = r.header("etag");
    if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
    if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
    if (etag.empty() || etag.find('/') != std::string::npos)
      throw Error(hub_.shown + ": " + f->name + ": the server sent no usable ETag");
    f->blob_id = etag;
    f->lfs = etag.size() == 64;  // a sha256 names LFS content
  }

  void download(const RemoteFile& f, const fs::path& blob, HttpClient& http) {
    fs::path part = blob.string() + ".incomplete";
    for (int attempt = 0;; ++attempt) {
      try {
        if (transfer(f, part, http)) break;
      } catch (const NetworkError& e) {
        if (attempt >= o_.max_retries)
          throw Error(hub_.shown + ": " + f.name + ": download failed after " + std::to_string(attempt + 1) +
                      " attempts (" + e.what() + "); run the pull again to resume");
        say(f.name + ": transfer interrupted (" + e.what() + "); resuming at " +
            format_bytes(file_size_or_zero(part)));
      }
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::min(30000, o_.retry_delay_ms << std::min(attempt, 5))));
    }
    verify(f, part);
    fs::rename(part, blob);
  }

  // One HTTP request continuing `part`; true when the file is complete.
  bool transfer(const RemoteFile& f, const fs::path& part, HttpClient& http) {
    uint64_t offset = file_size_or_zero(part);
    if (f.size && offset > f.size) {  // not a prefix of this blob: start over
      if (progress_) progress_->rewind(offset);
      offset = 0;
    }
    if (f.size && offset == f.size) return true;
    std::FILE* out = std::fopen(part.c_str(), offset ? "ab" : "wb");
    if (!out) throw Error(part.string() + ": cannot write");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(out, std::fclose);
    HttpRequest req = hub_.request(hub_.file_url(f.name));
    if (offset) req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-");
    uint64_t done = offset;
    auto on_status = [&](long status) {
      if (status == 200 && offset) {  // the server ignored the Range: rewrite from the start
        if (::ftruncate(::fileno(out), 0) != 0) return false;
        std::fseek(out, 0, SEEK_SET);
        if (progress_) progress_->rewind(offset);
        done = 0;
      }
      return status == 200 || status == 206;
    };
    auto on_data = [&](const char* p, size_t n) {
      if (cancelled_ || std::fwrite(p, 1, n, out) != n) return false;
      done += n;
      downloaded_ += n;
      if (progress_) progress_->advance(n);
      return true;
    };
    HttpResponse r = http.stream(req, on_status, on_data);
    if (std::fflush(out) != 0) throw Error(part.string() + ": write failed (disk full?)");
    if (r.status == 416 && offset) {  // nothing past our offset: complete if the size agrees, else restart
      closer.reset();
      if (f.size == 0 || offset == f.size) return true;
      fs::remove(part);
      if (progress_) progress_->rewind(offset);
      throw NetworkError("the server refused to resume", false);
    }
    if (r.status >= 500) throw NetworkError("HTTP " + std::to_string(r.status), false);
    if (r.status != 200 && r.status != 206) hub_.http_error(r, hub_.shown + ": " + f.name);
    if (f.size && done < f.size) throw NetworkError("connection closed early", false);
    return true;
  }

  void verify(const RemoteFile& f, const fs::path& part) {
    uint64_t size = file_size_or_zero(part);
    std::string problem;
    if (f.size && size != f.size) {
      problem = "size " + std::to_string(size) + " differs from the expected " + std::to_string(f.size);
    } else if (f.lfs) {
      std::string digest = sha256_file(part);
      if (digest != f.blob_id) problem = "sha256 " + digest + " differs from the expected " + f.blob_id;
    }
    if (problem.empty()) return;
    fs::remove(part);
    throw Error(hub_.shown + ": " + f.name + ": downloaded file is corrupt (" + problem +
                "); it was deleted, run the pull again");
  }

  // snapshots/<commit>/<name> -> ../../blobs/<id>, with one more ../ per directory level in `name`.
  void link(const std::string& name, const std::string& blob_id) {
    fs::path pointer = snapshot() / name;
    fs::create_directories(pointer.parent_path());
    std::string target = "../../";
    for (char c : name)
      if (c == '/') target += "../";
    target += "blobs/" + blob_id;
    std::error_code ec;
    if (fs::is_symlink(pointer, ec) && fs::read_symlink(pointer, ec).string() == target) return;
    fs::remove(pointer, ec);
    fs::create_symlink(target, pointer);
  }

  Hub& hub_;
  const PullOptions& o_;
  fs::path repo_dir_;
  std::ostream* log_;
  bool tty_ = false;
  std::atomic<uint64_t> downloaded_{0};
  std::atomic<bool> cancelled_{false};
  DownloadProgress* progress_ = nullptr;
  std::mutex log_mu_;
};

}  // namespace

std::string hf_endpoint() {
  std::string e = env_string("HF_ENDPOINT");
  return e.empty() ? "https://huggingface.co" : e;
}

std::string hf_token() {
  if (std::string t = trim(env_string("HF_TOKEN")); !t.empty()) return t;
  if (std::string t = trim(env_string("HUGGING_FACE_HUB_TOKEN")); !t.empty()) return t;  // the legacy name
  std::string path = env_string("HF_TOKEN_PATH");
  if (path.empty()) path = hf_home_dir() + "/token";
  std::ifstream f(path);
  std::string t;
  std::getline(f, t);
  return trim(t);
}

namespace {

ModelId parse_id_or_throw(const std::string& arg, const PullOptions& o) {
  std::optional<ModelId> id = parse_model_id(arg);
  if (!id) throw Error(arg + ": not a model id of the form org/name[@revision]");
  std::string offline = env_string("HF_HUB_OFFLINE");
  if (!offline.empty() && offline != "0" && offline != "false" && offline != "FALSE")
    throw Error(arg + ": HF_HUB_OFFLINE is set, so nothing is downloaded; unset it to pull");
  if (!o.revision.empty()) id->revision = o.revision;
  return *id;
}

// Small files present in the listing, tokenizer.model only as a fallback for tokenizer.json.
std::vector<RemoteFile> small_files(const Hub& hub) {
  std::vector<RemoteFile> out;
  for (const RemoteFile& f : hub.siblings)
    if (kSmallFiles.count(f.name) || (f.name == "tokenizer.model" && !hub.find("tokenizer.json")))
      out.push_back(f);
  return out;
}

void require_safetensors(const Hub& hub) {
  if (!hub.find("config.json"))
    throw Error(hub.shown + ": has no config.json, so it is not a transformers checkpoint");
  bool safetensors = false, other = false;
  for (const RemoteFile& f : hub.siblings) {
    bool top = f.name.find('/') == std::string::npos;
    safetensors |= top && f.name.size() > 12 && f.name.ends_with(".safetensors");
    other |= top && (f.name.ends_with(".bin") || f.name.ends_with(".gguf") || f.name.ends_with(".pth"));
  }
  if (!safetensors && other)
    throw Error(hub.shown +
                ": has no .safetensors weights (only .bin/.gguf/.pth, which tensorfold does not "
                "load); look for a safetensors version of the model");
}

PullPlan make_plan(const Hub& hub, const ModelId& id, const fs::path& snapshot) {
  PullPlan plan;
  plan.repo = id.repo;
  plan.revision = id.revision;
  plan.commit = hub.commit;
  plan.files = small_files(hub);
  plan.config = parse_cached_json(snapshot / "config.json");
  if (hub.find(kSafetensorsIndexFile)) plan.index = parse_cached_json(snapshot / kSafetensorsIndexFile);
  plan.weight_files =
      select_weight_files(hub.shown, hub.names(), plan.index.is_null() ? nullptr : &plan.index);
  for (const std::string& w : plan.weight_files) {
    plan.files.push_back(*hub.find(w));
    plan.weight_bytes += hub.find(w)->size;
  }
  return plan;
}

// Refuses up front when the weights still to download cannot fit, rather than failing at 90%.
void check_disk_space(const fs::path& repo_dir, const PullPlan& plan, const Hub& hub) {
  uint64_t needed = 0;
  for (const std::string& w : plan.weight_files) {
    const RemoteFile& f = *hub.find(w);
    fs::path blob = repo_dir / "blobs" / f.blob_id;
    if (f.blob_id.empty() || fs::exists(blob)) continue;
    uint64_t partial = file_size_or_zero(blob.string() + ".incomplete");
    needed += f.size > partial ? f.size - partial : 0;
  }
  std::error_code ec;
  fs::space_info space = fs::space(repo_dir / "blobs", ec);
  if (!ec && needed > space.available)
    throw Error(hub.shown + ": needs " + format_bytes(needed) + " more disk space in " + repo_dir.string() +
                " but only " + format_bytes(space.available) + " is free");
}

// Bytes of the weights already on disk (finished blobs and partial downloads), where the progress starts.
uint64_t weight_bytes_on_disk(const Puller& puller, const Hub& hub, const PullPlan& plan) {
  uint64_t total = 0;
  for (const std::string& w : plan.weight_files) {
    const RemoteFile& f = *hub.find(w);
    if (f.blob_id.empty()) continue;
    fs::path blob = puller.blob_path(f);
    uint64_t have =
        fs::exists(blob) ? file_size_or_zero(blob) : file_size_or_zero(blob.string() + ".incomplete");
    total += std::min(have, f.size);
  }
  return total;
}

// The weight files, `parallel_files` at a time, each worker with its own connection. The first error
// stops the others and is the one reported.
void fetch_weights(Puller& puller, const Hub& hub, const PullPlan& plan, const PullOptions& o) {
  uint64_t on_disk = weight_bytes_on_disk(puller, hub, plan);
  bool moving = on_disk < plan.weight_bytes || plan.weight_bytes == 0;
  DownloadProgress progress(moving ? puller.log() : nullptr, puller.tty(), hub.shown, plan.weight_bytes,
                            on_disk);
  puller.set_progress(&progress);
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto worker = [&] {
    try {
      HttpClient http(o.connect_timeout_s, o.stall_timeout_s);
      for (size_t i; (i = next++) < plan.weight_files.size();)
        puller.fetch(*hub.find(plan.weight_files[i]), http);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      puller.cancel();
    }
  };
  size_t n = std::clamp<size_t>(size_t(std::max(1, o.parallel_files)), 1, plan.weight_files.size());
  std::vector<std::thread> helpers;
  for (size_t i = 1; i < n; ++i) helpers.emplace_back(worker);
  worker();
  for (std::thread& t : helpers) t.join();
  puller.set_progress(nullptr);
  if (error) std::rethrow_exception(error);
  if (moving) progress.finish();
}

PullResult pull_into_cache(const std::string& arg, const PullOptions& o) {
  ModelId id = parse_id_or_throw(arg, o);
  Hub hub(o, id);
  hub.list(id.revision);
  require_safetensors(hub);
  fs::path repo_dir = repo_cache_dir(o.cache_dir.empty() ? hf_hub_cache_dir() : o.cache_dir, id.repo);
  Puller puller(hub, o, repo_dir);
  for (const RemoteFile& f : small_files(hub)) puller.fetch(f, hub.http);
  PullPlan plan = make_plan(hub, id, puller.snapshot());
  if (o.check) o.check(plan);
  std::ostream* log = puller.log();
  if (log)
    *log << hub.shown << " @ " << hub.commit.substr(0, 12) << ": " << plan.weight_files.size()
         << " weight file(s), " << format_bytes(plan.weight_bytes) << "\n";
  check_disk_space(repo_dir, plan, hub);
  fetch_weights(puller, hub, plan, o);
  if (id.revision != hub.commit) write_text_atomic(repo_dir / "refs" / id.revision, hub.commit);
  if (log)
    *log << hub.shown << ": ready in " << puller.snapshot().string() << " ("
         << (puller.downloaded() ? format_bytes(puller.downloaded()) + " downloaded" : "already up to date")
         << ")\n";
  return {puller.snapshot().string(), hub.commit, puller.downloaded()};
}

}  // namespace

PullResult pull_model(const std::string& arg, const PullOptions& o) {
  try {
    return pull_into_cache(arg, o);
  } catch (const fs::filesystem_error& e) {  // an unwritable cache or a full disk: still one line
    throw Error(arg + ": " + e.what());
  }
}

namespace {

// The bytes [begin, begin + n) of a remote file, by HTTP Range.
std::string fetch_range(Hub& hub, const std::string& name, uint64_t begin, uint64_t n) {
  if (n == 0) return "";
  HttpRequest req = hub.request(hub.file_url(name));
  req.headers.push_back("Range: bytes=" + std::to_string(begin) + "-" + std::to_string(begin + n - 1));
  HttpResponse r;
  try {
    r = hub.http.fetch(req, n);
  } catch (const NetworkError& e) {
    hub.unreachable(e);
  }
  if (r.status != 206 && r.status != 200) hub.http_error(r, hub.shown + ": " + name);
  if (r.body.size() != n) throw Error(hub.shown + ": " + name + ": short read of its header");
  return r.body;
}

}  // namespace

CheckpointSummary inspect_remote(const std::string& arg, const PullOptions& o) {
  ModelId id = parse_id_or_throw(arg, o);
  Hub hub(o, id);
  hub.list(id.revision);
  require_safetensors(hub);
  CheckpointSource src;
  src.label = hub.shown;
  src.files = hub.names();
  src.read_text = [&hub](const std::string& rel) -> std::optional<std::string> {
    if (!hub.find(rel)) return std::nullopt;
    HttpResponse r;
    try {
      r = hub.http.fetch(hub.request(hub.file_url(rel)));
    } catch (const NetworkError& e) {
      hub.unreachable(e);
    }
    if (r.status != 200) hub.http_error(r, hub.shown + ": " + rel);
    return r.body;
  };
  src.read_header = [&hub](const std::string& rel) {
    uint64_t size = hub.find(rel)->size;
    std::string label = hub.shown + ": " + rel;
    std::string prefix(8, '\0');
    if (size >= 8) prefix = fetch_range(hub, rel, 0, 8);  // a shorter file fails the length check
    uint64_t n = safetensors_header_length(reinterpret_cast<const uint8_t*>(prefix.data()), size, label);
    SafetensorsHeader h = parse_safetensors_header(fetch_range(hub, rel, 8, n), size - 8 - n, label);
    for (auto& [name, t] : h.tensors) t.file = rel;
    return h;
  };
  return summarize_checkpoint(src);
}

}  // namespace tf
