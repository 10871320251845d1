// Tokenizer throughput: encodes the first 1 MB of War and Peace (text-fixtures corpus) on one thread
// and prints tokens/s, for comparison with Hugging Face tokenizers (tests/text/tokenizer_bench.py).
// Usage: tokenizer_bench TOKENIZER_DIR CORPUS.txt[.gz] [bytes=1000000] [repeats=5]
#include <time.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "text/tokenizer.h"

namespace {

std::string read_corpus(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // zlib reads plain files too
  if (!f) throw std::runtime_error("cannot read " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

// Thread CPU time: the machine this runs on is often shared, and wall time would measure the others.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS [bytes] [repeats]\n", argv[0]);
    return 2;
  }
  size_t bytes = argc > 3 ? std::stoul(argv[3]) : 1000000;
  int repeats = argc > 4 ? std::stoi(argv[4]) : 5;
  std::string text = read_corpus(argv[2]);
  bytes = std::min(bytes, text.size());
  while (bytes < text.size() && (static_cast<unsigned char>(text[bytes]) & 0xC0) == 0x80) ++bytes;
  text.resize(bytes);

  double t0 = cpu_seconds();
  tf::Tokenizer tok = tf::Tokenizer::load(argv[1]);
  double load_s = cpu_seconds() - t0;

  double best = 1e30;
  size_t ntok = 0;
  for (int r = 0; r < repeats; ++r) {
    double a = cpu_seconds();
    ntok = tok.encode(text, false).size();
    best = std::min(best, cpu_seconds() - a);
  }
  std::printf("%s: %zu bytes -> %zu tokens, best of %d: %.3f s CPU, %.0f tokens/s, %.2f MB/s (load %.2f s)\n",
              argv[1], bytes, ntok, repeats, best, ntok / best, bytes / best / 1e6, load_s);
  return 0;
}
