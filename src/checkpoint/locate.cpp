#include "checkpoint/locate.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

std::string home_dir() {
  std::string h = env_string("HOME");
  return h.empty() ? "/root" : h;
}

std::optional<std::string> read_ref(const fs::path& file) {
  std::ifstream f(file);
  std::string commit;
  if (!f || !(f >> commit) || commit.empty()) return std::nullopt;
  return commit;
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

uint64_t blobs_size(const fs::path& repo_dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(repo_dir / "blobs", ec))
    if (e.is_regular_file(ec) && e.path().extension() != ".incomplete") total += e.file_size(ec);
  return total;
}

// The newest snapshot directory (by modification time), for repos pulled without a refs/main.
std::optional<fs::path> newest_snapshot(const fs::path& repo_dir) {
  std::optional<fs::path> best;
  fs::file_time_type best_time{};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(repo_dir / "snapshots", ec)) {
    if (!e.is_directory(ec)) continue;
    auto t = e.last_write_time(ec);
    if (!best || t > best_time) best = e.path(), best_time = t;
  }
  return best;
}

}  // namespace

std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::optional<ModelId> parse_model_id(const std::string& arg) {
  // Hub names: letters, digits, '-', '_', '.', one '/' between namespace and name.
  static const std::regex shape(R"(([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(@(.+))?)");
  std::smatch m;
  if (!std::regex_match(arg, m, shape)) return std::nullopt;
  std::string name = m[2].str();
  if (name.find("..") != std::string::npos || m[1].str().find("..") != std::string::npos) return std::nullopt;
  ModelId id{m[1].str() + "/" + name, m[4].matched ? m[4].str() : "main"};
  return id;
}

std::string hf_home_dir() {
  if (std::string h = env_string("HF_HOME"); !h.empty()) return h;
  if (std::string x = env_string("XDG_CACHE_HOME"); !x.empty()) return x + "/huggingface";
  return home_dir() + "/.cache/huggingface";
}

std::string hf_hub_cache_dir() {
  if (std::string c = env_string("HF_HUB_CACHE"); !c.empty()) return c;
  if (std::string c = env_string("HUGGINGFACE_HUB_CACHE"); !c.empty()) return c;  // the legacy name
  return hf_home_dir() + "/hub";
}

std::string repo_cache_dir(const std::string& cache, const std::string& repo) {
  std::string folder = "models--" + repo;
  size_t slash = folder.find('/');
  if (slash != std::string::npos) folder.replace(slash, 1, "--");
  return (fs::path(cache) / folder).string();
}

std::optional<std::string> find_cached_snapshot(const std::string& cache, const ModelId& id) {
  fs::path repo = repo_cache_dir(cache, id.repo);
  std::error_code ec;
  std::optional<std::string> commit = read_ref(repo / "refs" / id.revision);
  if (!commit && is_commit_hash(id.revision)) commit = id.revision;
  if (!commit) return std::nullopt;
  fs::path snap = repo / "snapshots" / *commit;
  if (!fs::is_directory(snap, ec)) return std::nullopt;
  return snap.string();
}

std::string resolve_model(const std::string& arg) {
  std::error_code ec;
  if (fs::is_directory(arg, ec)) return arg;
  std::optional<ModelId> id = parse_model_id(arg);
  if (!id) {
    if (fs::exists(arg, ec))
      throw Error(arg + ": not a directory (expected a checkpoint directory or org/name)");
    throw Error(arg + ": no such directory, and not a model id of the form org/name[@revision]");
  }
  std::string cache = hf_hub_cache_dir();
  if (std::optional<std::string> snap = find_cached_snapshot(cache, *id)) return *snap;
  std::string shown = id->revision == "main" ? id->repo : id->repo + "@" + id->revision;
  throw Error(shown + " not found locally (cache: " + cache + "); run `tensorfold pull " + shown + "`");
}

std::vector<CachedModel> list_cached_models() {
  std::vector<CachedModel> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(hf_hub_cache_dir(), ec)) {
    std::string folder = e.path().filename().string();
    if (!e.is_directory(ec) || folder.rfind("models--", 0) != 0) continue;
    std::string repo = folder.substr(8);
    size_t sep = repo.find("--");
    if (sep == std::string::npos) continue;  // a repo without a namespace: not ours to show
    repo.replace(sep, 2, "/");
    CachedModel m{repo, "main", {}, blobs_size(e.path())};
    if (auto snap = find_cached_snapshot(hf_hub_cache_dir(), {repo, "main"})) {
      m.path = *snap;
    } else if (auto newest = newest_snapshot(e.path())) {
      m.path = newest->string();
      m.revision = newest->filename().string();
    } else {
      continue;
    }
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace tf
