#include "checkpoint/progress.h"

#include <cstdio>

namespace tf {

std::string format_bytes(uint64_t n) {
  static const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = double(n);
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string format_duration(double sec) {
  long s = sec < 0 ? 0 : long(sec + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

DownloadProgress::DownloadProgress(std::ostream* out, bool tty, std::string label, uint64_t total,
                                   uint64_t resumed)
    : out_(out),
      tty_(tty),
      label_(std::move(label)),
      total_(total),
      resumed_(resumed),
      done_(resumed),
      start_(Clock::now()),
      last_draw_(start_) {
  if (out_ && !tty_)
    *out_ << label_ << ": " << (resumed_ ? "resuming at " + format_bytes(resumed_) + " of " : "downloading ")
          << (total_ ? format_bytes(total_) : std::string("unknown size")) << "\n";
}

std::string DownloadProgress::status_line() const {
  double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  uint64_t fresh = done_ > resumed_ ? done_ - resumed_ : 0;  // this run's bytes only
  double rate = secs > 0 ? double(fresh) / secs : 0;
  std::string s = label_ + "  " + format_bytes(done_);
  if (total_) {
    char pct[16];
    std::snprintf(pct, sizeof pct, " (%.0f%%)", 100.0 * double(done_) / double(total_));
    s += " / " + format_bytes(total_) + pct;
  }
  s += "  " + format_bytes(uint64_t(rate)) + "/s";
  if (total_ && rate > 0 && done_ < total_) s += "  ETA " + format_duration(double(total_ - done_) / rate);
  return s;
}

void DownloadProgress::draw() {
  std::string line = status_line();
  if (!tty_) {
    *out_ << line << "\n" << std::flush;
    return;
  }
  if (total_) {  // a 24-cell bar in front of the numbers
    int filled = int(24.0 * double(std::min(done_, total_)) / double(total_));
    line = "[" + std::string(filled, '#') + std::string(24 - filled, '.') + "] " + line;
  }
  *out_ << "\r" << line << "\x1b[K" << std::flush;
}

void DownloadProgress::advance(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += bytes;
  if (!out_) return;
  auto now = Clock::now();
  auto period = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(10000);
  if (now - last_draw_ < period) return;
  last_draw_ = now;
  draw();
}

void DownloadProgress::rewind(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ -= std::min(done_, bytes);
  resumed_ -= std::min(resumed_, bytes);
}

void DownloadProgress::note(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!out_) return;
  *out_ << (tty_ ? "\r\x1b[K" : "") << line << "\n" << std::flush;
  if (tty_) draw();
}

void DownloadProgress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!out_) return;
  double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  uint64_t fresh = done_ > resumed_ ? done_ - resumed_ : 0;
  std::string rate = secs > 0 ? format_bytes(uint64_t(double(fresh) / secs)) + "/s" : "";
  if (tty_) *out_ << "\r\x1b[K";
  *out_ << label_ << ": " << format_bytes(fresh) << " in " << format_duration(secs) << " (" << rate << ")\n"
        << std::flush;
}

}  // namespace tf
