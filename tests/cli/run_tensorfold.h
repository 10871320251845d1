#pragma once
// Runs the real `tensorfold` binary (TF_TENSORFOLD_BIN) with every CUDA device hidden, for the CLI tests.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tf {

struct ProcessResult {
  int code = -1;
  std::string output;  // stdout, and stderr unless the arguments redirect it
};

// `args` are appended to the command line as they are (shell syntax); stderr joins stdout unless
// `keep_stderr` is false (then it goes to /dev/null).
inline ProcessResult run_tensorfold(const std::string& args, bool keep_stderr = true) {
  const std::string cmd = "CUDA_VISIBLE_DEVICES=-1 '" + std::string(TF_TENSORFOLD_BIN) + "' " + args +
                          (keep_stderr ? " 2>&1" : " 2>/dev/null");
  ProcessResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace tf
