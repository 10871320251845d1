#!/usr/bin/env bash
# Builds and runs the whole test suite: C++ unit tests, families vs transformers goldens, text vs
# tokenizers/jinja2/transformers (live), and the server end to end through the official SDKs. Then the
# CPU tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${TF_JOBS:-$(nproc)}"
sanitize=$([ "${TF_SKIP_SANITIZE:-0}" != 1 ] && echo 1 || echo 0)
# Shared libraries and line-table debug info: ~45 test binaries that each linked static copies of every
# library (with full debug info) filled 6 GB and ran CI's disk out; this way the two builds take about 1.5 GB (0.35 + 1.1).
# Unity batches for the libraries (CMakeLists.txt, TF_UNITY_BUILD): CI time.
"$root/scripts/build.sh" -DTF_SHARED_LIBS=ON -DTF_DEBUG_LEVEL=1 -DTF_UNITY_BUILD=ON
if [ "$sanitize" = 1 ]; then
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTF_SANITIZE=ON -DTF_CUDA=OFF \
    -DTF_SHARED_LIBS=ON -DTF_DEBUG_LEVEL=1 -DTF_UNITY_BUILD=ON >/dev/null
  # The sanitizer build starts now at the lowest priority, in its own process group: it runs on the CPU
  # time the plain tests leave idle (they wait on servers and subprocesses), then alone once they end.
  setsid nice -n 19 cmake --build "$root/build-asan" >"$root/build-asan/build.log" 2>&1 &
  asan_build=$!
  trap 'kill -- "-$asan_build" 2>/dev/null || true' EXIT
fi
ctest --test-dir "$root/build" --output-on-failure -j "$jobs" -LE gpu
if [ "$sanitize" = 1 ]; then
  asan_rc=0
  wait "$asan_build" || asan_rc=$?
  trap - EXIT
  cat "$root/build-asan/build.log"  # its output (warnings included) in the CI log, as before
  if [ "$asan_rc" != 0 ]; then
    echo "the sanitizer build failed (log above: $root/build-asan/build.log)" >&2
    exit 1
  fi
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs" -L sanitize
fi
