#!/usr/bin/env bash
# The one-kernel decode step (src/ops/cuda/decode_step.h) on the GPU, as one device call: its bit-for-bit
# test against the op chain (test), its time against the chain's in the same run (bench: tf_bench_cuda
# --decode, the "decode step b=1" lines), the CUDA-graph tests (graphs), and the product (e2e: a random
# Qwen3-8B checkpoint made on the device, `tensorfold generate` at T=0 and 0.7 with the step on and off --
# TF_DECODE_STEP=1 / 0 -- whose texts must be identical, and `tensorfold bench --drafter none` both ways).
# Build and pack HERE (the device has no Debian -dev packages):
#   export PATH=/usr/local/cuda/bin:$PATH
#   ninja -C build-cuda test_cuda_decode_step test_cuda_graphs tf_bench_cuda [tensorfold]
#   tools/device_step.sh --pack     # stripped binaries, two libraries, the Qwen3 tokenizer: .devpack/step.tar.xz
#   run(command="tools/device_step.sh; cat $OUT/all.txt", carry=[".devpack"])
# STEPS="test bench graphs" by default (~30 s of device time); add e2e (~80 s more; needs tensorfold packed),
# e2e4 (the same for a random MLX 4-bit/g64 checkpoint: the 4-bit step on / off, TF_DECODE_STEP_MLX4=1 / 0,
# texts compared; `tensorfold bench` at prompts of 512 and 6000 tokens).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.devpack/step.tar.xz
BINS=${BINS:-"tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_cuda tensorfold"}
if [[ "${1:-}" == "--pack" ]]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/tok" .devpack
  for b in $BINS; do
    if [[ -x build-cuda/$b ]]; then strip -o "$tmp/bin/$(basename $b)" "build-cuda/$b"; else echo "not packed: build-cuda/$b"; fi
  done
  # The device lacks these two; the tokenizer makes the random checkpoint loadable (e2e).
  cp -L /lib/x86_64-linux-gnu/libutf8proc.so.2 /lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 "$tmp/bin/"
  cp ../shared/text-fixtures/qwen3/tokenizer* "$tmp/tok/"
  tar -cf - -C "$tmp" . | xz -T1 --lzma2=preset=6,dict=${TF_PACK_DICT:-256MiB} >"$PACK"
  rm -rf "$tmp"
  ls -la "$PACK"
  exit 0
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
D=$(mktemp -d)
xz -dc "$PACK" | tar -xf - -C "$D" || { echo "no $PACK: run tools/device_step.sh --pack first" >"$OUT/all.txt"; exit 1; }
export LD_LIBRARY_PATH=$D/bin:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  for b in "$D"/bin/*; do [[ $b == *.so* ]] || ldd "$b" | grep "not found" | sed "s|^|$b: |"; done
} >"$OUT/all.txt" 2>&1
run() {  # name, timeout, command...: full log to $OUT/name.txt, the lines that matter to all.txt
  local n=$1 t=$2
  shift 2
  echo "=== $n: $*" >>"$OUT/all.txt"
  timeout "$t" "$@" >"$OUT/$n.txt" 2>&1
  echo "rc=$?" >>"$OUT/all.txt"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|HANG|rror|^decode step|^\| Qwen3-8B decode b=1|one-kernel|round [0-9]|logits differ|tok/s" \
    "$OUT/$n.txt" | head -40 >>"$OUT/all.txt"
}
STEPS=${STEPS:-test bench graphs}
[[ " $STEPS " == *" test "* ]] && run step-test 400 "$D/bin/test_cuda_decode_step" --gtest_brief=1
[[ " $STEPS " == *" bench "* ]] && run bench 300 "$D/bin/tf_bench_cuda" --shape qwen3-8b --format bf16 --decode
[[ " $STEPS " == *" graphs "* ]] && run graphs-test 300 "$D/bin/test_cuda_graphs" --gtest_brief=1
# The product with the step on and off (switch=1 / 0): a random checkpoint (extra flags for
# make_random_checkpoint.py), `tensorfold generate` texts at T = 0 and 0.7 compared, then `tensorfold bench`
# at each prompt length. Logs: NAME-text-*.txt (the text alone, stdout), NAME-gen-*.txt (stats, stderr).
e2e() {  # name, checkpoint dir, switch variable, "prompt lengths", context, make_random_checkpoint flags...
  local name=$1 M=$2 var=$3 prompts=$4 ctx=$5
  shift 5
  local t0=$(date +%s) temp step pt a b
  python3 tools/make_random_checkpoint.py --shape qwen3-8b --out "$M" --tokenizer "$D/tok" "$@" 2>&1 |
    tail -1 >>"$OUT/all.txt"
  echo "checkpoint in $(($(date +%s) - t0)) s" >>"$OUT/all.txt"
  local P="Write a short story about a lighthouse keeper who finds a message in a bottle."
  for temp in 0 0.7; do
    for step in 1 0; do
      echo "=== $name-gen-t$temp-s$step" >>"$OUT/all.txt"
      env "$var=$step" timeout 120 "$D/bin/tensorfold" generate "$M" --backend cuda -p "$P" -n 300 --ignore-eos \
        --temperature $temp --seed 7 --context 4096 >"$OUT/$name-text-t$temp-s$step.txt" 2>"$OUT/$name-gen-t$temp-s$step.txt"
      echo "rc=$?" >>"$OUT/all.txt"
      grep "tok/s" "$OUT/$name-gen-t$temp-s$step.txt" >>"$OUT/all.txt"
    done
    # a log line can land inside a line of text in a combined log, so the texts are compared from stdout alone
    a=$(md5sum <"$OUT/$name-text-t$temp-s1.txt") b=$(md5sum <"$OUT/$name-text-t$temp-s0.txt")
    [[ $a == "$b" ]] && echo "$name temperature $temp: texts identical" >>"$OUT/all.txt" ||
      echo "$name temperature $temp: TEXTS DIFFER" >>"$OUT/all.txt"
  done
  for pt in $prompts; do
    for step in 1 0; do
      run "$name-tfbench-p$pt-s$step" 150 env "$var=$step" "$D/bin/tensorfold" bench "$M" --backend cuda \
        --drafter none --workload random --tokens 256 --parallel 1 --prompt-tokens $pt --context $ctx
    done
  done
  rm -rf "$M"
}
if [[ -x $D/bin/tensorfold ]]; then
  [[ " $STEPS " == *" e2e "* ]] && e2e e2e /dev/shm/q8b TF_DECODE_STEP 512 4096
  [[ " $STEPS " == *" e2e4 "* ]] && e2e e2e4 /dev/shm/q8b-4bit TF_DECODE_STEP_MLX4 "512 6000" 8192 --mlx-bits 4
fi
rm -rf "$D"
