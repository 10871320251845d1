#pragma once
// A read-only memory mapping of a whole file (RAII). Checkpoint tensors borrow from it and keep it alive
// through a shared_ptr, so weights are paged in lazily by the OS and never copied.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tf {

class MappedFile {
 public:
  // Throws tf::Error naming the path when the file cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tf
