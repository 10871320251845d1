#pragma once
// `tensorfold pull`: downloads the files a checkpoint needs from the Hugging Face Hub (or $HF_ENDPOINT)
// into the cache layout huggingface_hub uses (see locate.h), so either tool can read what the other
// pulled. Small files first, then a caller's check on config.json and the weight list (so unsupported
// checkpoints are refused before gigabytes move), then the weights; interrupted transfers resume from
// blobs/<etag>.incomplete with an HTTP Range request, and LFS blobs are checked against their sha256.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace tf {

struct RemoteFile {
  std::string name;     // path in the repo
  uint64_t size = 0;    // 0 when the listing did not say
  std::string blob_id;  // the blob's name in the cache: sha256 for LFS files, git blob id otherwise
  bool lfs = false;     // blob_id is the content's sha256, so the download can be verified
};

// What a pull will fetch, given to PullOptions::check after the small files are in the cache.
struct PullPlan {
  std::string repo, revision, commit;
  nlohmann::json config;                  // config.json
  nlohmann::json index;                   // model.safetensors.index.json, or null when there is none
  std::vector<RemoteFile> files;          // everything pulled: small files, then the weights
  std::vector<std::string> weight_files;  // the *.safetensors among them
  uint64_t weight_bytes = 0;
};

enum class ProgressStyle { Auto, Bar, Lines, None };  // Auto: a bar when the log is a terminal

struct PullOptions {
  std::string revision;  // overrides an "@revision" in the id; default "main"
  // Called before any weight is downloaded; throw tf::Error to refuse (the message reaches the user).
  std::function<void(const PullPlan&)> check;
  std::ostream* log = nullptr;  // progress and messages; null: std::cerr
  ProgressStyle progress = ProgressStyle::Auto;
  int parallel_files = 4;     // weight files downloaded at once, each over its own connection
  int max_retries = 5;        // resumes per file after a broken transfer
  int retry_delay_ms = 1000;  // doubled after each failed attempt, at most 30 s
  std::string endpoint;       // empty: hf_endpoint()
  std::string token;          // empty: hf_token()
  std::string cache_dir;      // empty: hf_hub_cache_dir()
  long connect_timeout_s = 10;
  long stall_timeout_s = 30;  // a transfer that moves nothing for this long is retried
};

struct PullResult {
  std::string snapshot_dir;  // <cache>/models--org--name/snapshots/<commit>
  std::string commit;
  uint64_t downloaded_bytes = 0;  // 0 when everything was already cached
};

std::string hf_endpoint();  // $HF_ENDPOINT, else https://huggingface.co
std::string hf_token();     // $HF_TOKEN, else the file $HF_TOKEN_PATH or <HF_HOME>/token; "" if none

// `id` is "org/name" or "org/name@revision". Throws tf::Error with one actionable line: offline or
// unreachable, access denied (gated or private: set HF_TOKEN), not found, refused by `check`, ...
PullResult pull_model(const std::string& id, const PullOptions& opts = {});

// config, index and safetensors headers of a remote checkpoint, read with small requests (HTTP Range for
// the headers) and nothing written to the cache: `tensorfold info org/name` before a pull.
CheckpointSummary inspect_remote(const std::string& id, const PullOptions& opts = {});

}  // namespace tf
