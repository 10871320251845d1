#!/usr/bin/env bash
# Builds and runs the whole test suite: C++ unit tests, families vs transformers goldens, text vs
# tokenizers/jinja2/transformers (live), and the server end to end through the official SDKs. Then the
# CPU tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${TF_JOBS:-$(nproc)}"
# Shared libraries and line-table debug info: ~45 test binaries that each linked static copies of every
# library (with full debug info) filled 6 GB and ran CI's disk out; this way the two builds take about 1.5 GB (0.35 + 1.1).
"$root/scripts/build.sh" -DTF_SHARED_LIBS=ON -DTF_DEBUG_LEVEL=1
ctest --test-dir "$root/build" --output-on-failure -j "$jobs" -LE gpu
if [ "${TF_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTF_SANITIZE=ON -DTF_CUDA=OFF \
    -DTF_SHARED_LIBS=ON -DTF_DEBUG_LEVEL=1 >/dev/null
  cmake --build "$root/build-asan"
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" -L sanitize
fi
