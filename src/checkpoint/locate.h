#pragma once
// Finding a model: a local directory, or an `org/name[@revision]` id in the Hugging Face cache layout
// shared with huggingface_hub:
//   <cache>/models--org--name/refs/<revision>         the commit a branch or tag points to
//   <cache>/models--org--name/snapshots/<commit>/...  files as relative symlinks into ../../blobs/
//   <cache>/models--org--name/blobs/<etag>            content, named by sha256 (LFS) or git blob id
// where <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tf {

struct ModelId {
  std::string repo;      // "org/name"
  std::string revision;  // branch, tag or commit; "main" when the argument names none
};

// Parses "org/name" or "org/name@revision"; nullopt when `arg` does not have that shape.
std::optional<ModelId> parse_model_id(const std::string& arg);

// The environment variable `name`, "" when it is unset.
std::string env_string(const char* name);

std::string hf_home_dir();       // $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
std::string hf_hub_cache_dir();  // see above
std::string repo_cache_dir(const std::string& cache, const std::string& repo);  // <cache>/models--org--name

// The snapshot directory of a cached revision, or nullopt when it is not in `cache`.
std::optional<std::string> find_cached_snapshot(const std::string& cache, const ModelId& id);

// A local directory is returned as is; an id resolves to its cached snapshot. Throws tf::Error, e.g.
// "Qwen/Qwen3-8B not found locally (cache: /root/.cache/huggingface/hub); run `tensorfold pull
// Qwen/Qwen3-8B`".
std::string resolve_model(const std::string& arg);

struct CachedModel {
  std::string id;           // "org/name"
  std::string revision;     // the ref shown ("main" when present, else the newest snapshot's commit)
  std::string path;         // snapshot directory
  uint64_t size_bytes = 0;  // blobs on disk for this repo (all revisions)
};
// Every model repo in the cache with at least one snapshot, sorted by id.
std::vector<CachedModel> list_cached_models();

}  // namespace tf
