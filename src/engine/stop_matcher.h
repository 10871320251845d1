#pragma once
// Stop strings matched across token boundaries: text that could still become a stop string is held back
// until it either completes one (the stream ends before it) or cannot any more (it is released).
#include <string>
#include <vector>

namespace tf {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `text`; returns what is safe to emit. When a stop string completes, `*matched` is set to it and
  // the return value ends right before it; later pushes return nothing. Not `armed` (min_tokens not yet
  // reached): no stop string is matched, but possible beginnings of one are still held back, so a stop
  // string that an armed push completes is matched.
  std::string push(const std::string& text, std::string* matched, bool armed = true);
  std::string flush();  // end of stream without a stop: release what was held back
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace tf
