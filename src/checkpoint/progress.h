#pragma once
// Download progress for one file: a redrawn bar on a terminal (bytes, rate, ETA), plain lines every few
// seconds otherwise (logs, CI), so neither floods the output.
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace tf {

std::string format_bytes(uint64_t n);     // "1.5 GB", "512 B"
std::string format_duration(double sec);  // "0:42", "1:02:03"

class DownloadProgress {
 public:
  // `out` may be null (quiet). `total` 0 when unknown; `resumed` bytes were already on disk.
  DownloadProgress(std::ostream* out, bool tty, std::string label, uint64_t total, uint64_t resumed);
  void update(uint64_t done);  // bytes of the file on disk so far; draws at most ~10 times a second
  void finish(uint64_t done);  // the final line

 private:
  std::string status_line(uint64_t done) const;
  using Clock = std::chrono::steady_clock;
  std::ostream* out_;
  bool tty_;
  std::string label_;
  uint64_t total_, resumed_;
  Clock::time_point start_, last_draw_;
};

}  // namespace tf
