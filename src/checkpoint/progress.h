#pragma once
// Progress of a pull's weight downloads, summed over the files being fetched in parallel: a redrawn bar on
// a terminal (bytes, rate, ETA), plain lines every few seconds otherwise (logs, CI), so neither floods the
// output. Thread-safe: download workers report bytes and messages through it.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>

namespace tf {

std::string format_bytes(uint64_t n);     // "1.5 GB", "512 B"
std::string format_duration(double sec);  // "0:42", "1:02:03"

class DownloadProgress {
 public:
  // `out` may be null (quiet). `total` 0 when unknown; `resumed` bytes were already on disk.
  DownloadProgress(std::ostream* out, bool tty, std::string label, uint64_t total, uint64_t resumed);
  void advance(uint64_t bytes);        // bytes written; draws at most ~10 times a second (every 10 s plain)
  void rewind(uint64_t bytes);         // a file restarted from zero gives its bytes back
  void note(const std::string& line);  // a message line that does not tear the bar
  void finish();                       // the summary line

 private:
  std::string status_line() const;
  void draw();
  using Clock = std::chrono::steady_clock;
  std::mutex mu_;
  std::ostream* out_;
  bool tty_;
  std::string label_;
  uint64_t total_, resumed_, done_;
  Clock::time_point start_, last_draw_;
};

}  // namespace tf
