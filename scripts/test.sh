#!/usr/bin/env bash
# Builds and runs the whole test suite: C++ unit tests, families vs transformers goldens, text vs
# tokenizers/jinja2/transformers (live), and the server end to end through the official SDKs. Then the
# CPU tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${TF_JOBS:-$(nproc)}"
"$root/scripts/build.sh"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs" -LE gpu
if [ "${TF_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTF_SANITIZE=ON -DTF_CUDA=OFF >/dev/null
  cmake --build "$root/build-asan"
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" -L sanitize
fi
