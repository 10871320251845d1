#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/file_io.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join(const std::string& label, const std::string& rel) {
  return label + "/" + rel;
}

// "dir/" and "dir" name the same checkpoint; messages should not say "dir//config.json".
std::string strip_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

json parse_json_file(const std::string& label, const std::string& rel, const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(join(label, rel) + ": not valid JSON");
  if (!j.is_object()) throw Error(join(label, rel) + ": not a JSON object");
  return j;
}

// Shards named "<prefix>-00002-of-00005.safetensors" promise a complete numbered set.
void check_shard_set(const std::string& label, const std::vector<std::string>& shards,
                     const std::set<std::string>& present) {
  static const std::regex numbered(R"((.*)-(\d+)-of-(\d+)\.safetensors)");
  std::set<std::string> checked;
  for (const std::string& s : shards) {
    std::smatch m;
    if (!std::regex_match(s, m, numbered) || !checked.insert(m[1].str() + m[3].str()).second) continue;
    int total = std::stoi(m[3].str());
    int width = int(m[2].length());
    for (int k = 1; k <= total && k < 100000; ++k) {
      std::string idx = std::to_string(k);
      idx.insert(0, std::max(0, width - int(idx.size())), '0');
      std::string name = m[1].str() + "-" + idx + "-of-" + m[3].str() + ".safetensors";
      if (!present.count(name))
        throw Error(join(label, name) + ": missing shard (" + kSafetensorsIndexFile + " expects " +
                    std::to_string(total) + " shards)");
    }
  }
}

std::vector<std::string> index_shards(const std::string& label, const json& index) {
  const std::string where = join(label, kSafetensorsIndexFile);
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(where + ": has no \"weight_map\" object");
  std::set<std::string> seen;
  std::vector<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw Error(where + ": weight_map entry '" + name + "' is not a file name");
    if (seen.insert(file.get<std::string>()).second) shards.push_back(file.get<std::string>());
  }
  if (shards.empty()) throw Error(where + ": weight_map is empty");
  std::sort(shards.begin(), shards.end());
  return shards;
}

// Adds one file's tensors; with an index, a tensor belongs to the file the index names.
void add_tensors(const std::string& label, const SafetensorsHeader& h, const std::string& rel,
                 const json* weight_map, CheckpointSummary* out) {
  for (const auto& [name, info] : h.tensors) {
    if (weight_map && weight_map->contains(name) && (*weight_map)[name] != rel) continue;
    auto [it, fresh] = out->tensors.emplace(name, info);
    if (!fresh)
      throw Error(join(label, rel) + ": tensor '" + name + "' is also defined in " +
                  join(label, it->second.file));
    it->second.file = rel;
  }
}

void check_index_entries(const std::string& label, const json& weight_map, const CheckpointSummary& s) {
  for (const auto& [name, file] : weight_map.items())
    if (!s.tensors.count(name))
      throw Error(join(label, file.get<std::string>()) + ": has no tensor '" + name + "', which " +
                  kSafetensorsIndexFile + " places there");
}

CheckpointSource local_source(const std::string& given) {
  std::string dir = strip_trailing_slashes(given);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir + ": not a directory");
  CheckpointSource src;
  src.label = dir;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) src.files.push_back(e.path().filename().string());  // follows symlinks
  if (ec) throw Error(dir + ": cannot list: " + ec.message());
  std::sort(src.files.begin(), src.files.end());
  src.read_text = [dir](const std::string& rel) { return try_read_file(join(dir, rel)); };
  src.read_header = [dir](const std::string& rel) { return read_safetensors_header(join(dir, rel)); };
  return src;
}

}  // namespace

std::vector<std::string> select_weight_files(const std::string& label, const std::vector<std::string>& files,
                                             const json* index) {
  std::set<std::string> present(files.begin(), files.end());
  if (index) {
    std::vector<std::string> shards = index_shards(label, *index);
    for (const std::string& s : shards)
      if (!present.count(s))
        throw Error(join(label, s) + ": missing shard listed in " + std::string(kSafetensorsIndexFile));
    check_shard_set(label, shards, present);
    return shards;
  }
  if (present.count(kSingleSafetensorsFile)) return {kSingleSafetensorsFile};
  std::vector<std::string> out;
  for (const std::string& f : files)
    if (f.find('/') == std::string::npos && ends_with(f, ".safetensors")) out.push_back(f);
  if (out.empty())
    throw Error(label + ": no weights (expected " + kSingleSafetensorsFile + ", " + kSafetensorsIndexFile +
                " or *.safetensors)");
  return out;
}

CheckpointSummary summarize_checkpoint(const CheckpointSource& src) {
  CheckpointSummary s;
  s.source = src.label;
  std::optional<std::string> text = src.read_text("config.json");
  if (!text) throw Error(src.label + ": no config.json (not a Hugging Face checkpoint?)");
  s.config = parse_json_file(src.label, "config.json", *text);
  if ((text = src.read_text("generation_config.json")))
    s.generation_config = parse_json_file(src.label, "generation_config.json", *text);
  std::optional<json> index;
  bool has_index = std::find(src.files.begin(), src.files.end(), kSafetensorsIndexFile) != src.files.end();
  if (has_index && (text = src.read_text(kSafetensorsIndexFile)))
    index = parse_json_file(src.label, kSafetensorsIndexFile, *text);
  s.weight_files = select_weight_files(src.label, src.files, index ? &*index : nullptr);
  const json* weight_map = index ? &(*index)["weight_map"] : nullptr;
  for (const std::string& rel : s.weight_files)
    add_tensors(src.label, src.read_header(rel), rel, weight_map, &s);
  if (weight_map) check_index_entries(src.label, *weight_map, s);
  for (const auto& [name, t] : s.tensors) {
    s.total_bytes += t.nbytes();
    s.bytes_by_dtype[dtype_name(t.dtype)] += t.nbytes();
  }
  return s;
}

CheckpointSummary inspect_checkpoint(const std::string& dir) {
  return summarize_checkpoint(local_source(dir));
}

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = strip_trailing_slashes(dir);
  CheckpointSource src = local_source(c.dir_);
  // Map each file once; the summary reads headers from the mapping, not from a second read.
  src.read_header = [&c, dir = c.dir_](const std::string& rel) {
    auto it = c.files_.emplace(rel, SafetensorsFile::open(join(dir, rel))).first;
    return it->second.header();
  };
  c.summary_ = summarize_checkpoint(src);
  return c;
}

Tensor Checkpoint::get(const std::string& name) const {
  auto it = summary_.tensors.find(name);
  if (it == summary_.tensors.end()) throw Error(dir_ + ": checkpoint has no tensor '" + name + "'");
  return files_.at(it->second.file).get(name);
}

std::optional<TensorInfo> Checkpoint::info(const std::string& name) const {
  auto it = summary_.tensors.find(name);
  if (it == summary_.tensors.end()) return std::nullopt;
  TensorInfo t = it->second;
  t.file = join(dir_, t.file);
  return t;
}

std::optional<std::string> Checkpoint::find_file(const std::string& rel) const {
  std::error_code ec;
  std::string path = join(dir_, rel);
  if (fs::is_regular_file(path, ec)) return path;  // follows the cache's symlinks
  return std::nullopt;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : summary_.tensors) out.push_back(name);
  return out;
}

}  // namespace tf
