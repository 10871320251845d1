#!/usr/bin/env bash
# The persistent decode probe on the GPU (docs/cuda-notes.md "Session 15" .. "Session 17"): every bit check,
# its time against the engine's forward in the same run, its attention steps (--cycles 1) and a context
# sweep. Build and pack HERE (the device has no Debian -dev packages), then one device call:
#   export PATH=/usr/local/cuda/bin:$PATH
#   ninja -C build-cuda tf_mega_probe_pairs tf_mega_probe_pairs_nosplit tf_bench_cuda
#   tools/device_mega.sh --pack        # stripped binaries, xz'd into .devpack/mega.tar.xz (~9 MB, ignored)
#   run(command="tools/device_mega.sh; cat $OUT/all.txt", carry=[".devpack"])
# GPU instances differ by ~1.5% for the same binary (session 17): compare only inside one run. MEGA_ARGS adds
# arguments to every probe run; MEGA_QUICK=1 runs only the probe twice and the engine once (~20 s).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.devpack/mega.tar.xz
if [[ "${1:-}" == "--pack" ]]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" .devpack
  for b in tf_mega_probe_pairs tf_mega_probe_pairs_nosplit tf_bench_cuda; do
    [[ -x build-cuda/bench/cuda/$b ]] || { echo "build-cuda/bench/cuda/$b is missing (ninja -C build-cuda $b)" >&2; exit 1; }
    strip -o "$tmp/bin/$b" "build-cuda/bench/cuda/$b"
  done
  tar -cf - -C "$tmp" . | xz -T2 --lzma2=preset=6,dict=256MiB >"$PACK"
  rm -rf "$tmp"
  ls -la "$PACK"
  exit 0
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
D=$(mktemp -d)
xz -dc "$PACK" | tar -xf - -C "$D" || { echo "no $PACK: run tools/device_mega.sh --pack first" >"$OUT/all.txt"; exit 1; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
} >"$OUT/all.txt" 2>&1
run() {  # name, command...: full log to $OUT/name.txt, the lines that matter to all.txt
  local n=$1
  shift
  echo "=== $n: $*" >>"$OUT/all.txt"
  timeout 150 "$@" >"$OUT/$n.txt" 2>&1
  echo "rc=$?" >>"$OUT/all.txt"
  grep -E "bits|MISMATCH|HANG|rror|attention steps|persistent probe|today's|^decode b=1 ctx|^\| Qwen3-8B decode b=1" \
    "$OUT/$n.txt" >>"$OUT/all.txt"
}
P=$D/bin/tf_mega_probe_pairs
run probe "$P" ${MEGA_ARGS:-}
run engine "$D/bin/tf_bench_cuda" --shape qwen3-8b --format bf16 --decode
run probe-b "$P" ${MEGA_ARGS:-}
if [[ "${MEGA_QUICK:-0}" != 1 ]]; then
  run cycles "$P" --cycles 1 ${MEGA_ARGS:-}
  run nosplit "$D/bin/tf_mega_probe_pairs_nosplit" ${MEGA_ARGS:-}
  for c in 1024 2048 4096; do run "ctx$c" "$P" --ctx $c ${MEGA_ARGS:-}; done
  run noattn "$P" --attn 0 ${MEGA_ARGS:-}
fi
rm -rf "$D"
