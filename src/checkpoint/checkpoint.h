#pragma once
// A Hugging Face checkpoint directory: config.json, optional generation_config.json, and weights as
// model.safetensors, or shards listed by model.safetensors.index.json, or (neither present) whatever
// *.safetensors files the directory holds (e.g. consolidated.safetensors). Everything is validated at
// open: every header, every index entry against its shard, no shard missing, no tensor defined twice.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/tensor.h"

namespace tf {

inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";
inline constexpr const char* kSingleSafetensorsFile = "model.safetensors";

// What the checkpoint holds, from config, index and headers only (no weights read, nothing mapped).
struct CheckpointSummary {
  std::string source;  // the directory (or, for a remote summary, the repo id)
  nlohmann::json config;
  nlohmann::json generation_config = nlohmann::json::object();
  std::vector<std::string> weight_files;           // relative to the checkpoint root, in load order
  std::map<std::string, TensorInfo> tensors;       // TensorInfo::file is relative to the root
  uint64_t total_bytes = 0;                        // sum of tensor bytes
  std::map<std::string, uint64_t> bytes_by_dtype;  // "BF16" -> bytes, for `tensorfold info`
};

// How a summary reads a checkpoint, local or remote.
struct CheckpointSource {
  std::string label;               // names the checkpoint in errors
  std::vector<std::string> files;  // every file present, relative paths
  // Text of a file, or nullopt when it does not exist.
  std::function<std::optional<std::string>(const std::string& rel)> read_text;
  // Validated header of a .safetensors file (TensorInfo::file set to `rel`).
  std::function<SafetensorsHeader(const std::string& rel)> read_header;
};

// The weight files a checkpoint loads, given its file listing and parsed index (null when none). The
// index wins; else model.safetensors; else every top-level *.safetensors. Throws when there are none or
// when the index is malformed or names a shard that is not in the listing.
std::vector<std::string> select_weight_files(const std::string& label, const std::vector<std::string>& files,
                                             const nlohmann::json* index);

// Reads config (required), generation config, index and headers through `src`.
CheckpointSummary summarize_checkpoint(const CheckpointSource& src);
// The cheap local path (`tensorfold info DIR`): config plus a few KB per weight file.
CheckpointSummary inspect_checkpoint(const std::string& dir);

class Checkpoint {
 public:
  // Maps every weight file and validates it; throws tf::Error with one line naming the file and problem.
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return summary_.config; }
  const nlohmann::json& generation_config() const { return summary_.generation_config; }  // {} if none
  const std::vector<std::string>& weight_files() const { return summary_.weight_files; }
  const CheckpointSummary& summary() const { return summary_; }
  // The path of another file of the checkpoint (tokenizer.json, chat_template.jinja, ...) if it exists.
  std::optional<std::string> find_file(const std::string& rel) const;

  bool has(const std::string& name) const { return summary_.tensors.count(name) != 0; }
  // A read-only CPU tensor borrowing the mapping; throws naming the tensor and the checkpoint.
  Tensor get(const std::string& name) const;
  std::optional<TensorInfo> info(const std::string& name) const;  // TensorInfo::file is absolute
  std::vector<std::string> names() const;                         // sorted
  int64_t total_bytes() const { return int64_t(summary_.total_bytes); }

 private:
  std::string dir_;
  CheckpointSummary summary_;
  std::map<std::string, SafetensorsFile> files_;  // by relative path
};

}  // namespace tf
