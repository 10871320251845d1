#!/usr/bin/env bash
# The one-kernel decode step through the product on the GPU: a random-weight Qwen3-8B checkpoint made on
# the device (tools/make_random_checkpoint.py), then `tensorfold generate` with the step on and off
# (TF_DECODE_STEP=1 / 0) -- greedy and sampled, with the default drafter (decode rounds take the step, verify
# rounds the chain) -- whose texts must be identical, and `tensorfold bench --drafter none` (plain decode
# tok/s) both ways. Pack HERE (the device lacks the -dev packages):
#   export PATH=/usr/local/cuda/bin:$PATH; ninja -C build-cuda tensorfold
#   tools/device_step_e2e.sh --pack      # .devpack/e2e.tar.xz: tensorfold, two libraries, the tokenizer
#   run(command="tools/device_step_e2e.sh; cat $OUT/e2e.txt", carry=[".devpack"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.devpack/e2e.tar.xz
if [[ "${1:-}" == "--pack" ]]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/tok" .devpack
  strip -o "$tmp/bin/tensorfold" build-cuda/tensorfold
  cp -L /lib/x86_64-linux-gnu/libutf8proc.so.2 /lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 "$tmp/bin/"
  cp ../shared/text-fixtures/qwen3/tokenizer* "$tmp/tok/"
  tar -cf - -C "$tmp" . | xz -T2 --lzma2=preset=6,dict=256MiB >"$PACK"
  rm -rf "$tmp"
  ls -la "$PACK"
  exit 0
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
D=$(mktemp -d)
xz -dc "$PACK" | tar -xf - -C "$D" || { echo "no $PACK" >"$OUT/e2e.txt"; exit 1; }
export LD_LIBRARY_PATH=$D/bin:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
TF=$D/bin/tensorfold
M=/dev/shm/q8b
R=$OUT/e2e.txt
{
  date -u
  ldd $TF | grep "not found"
  t0=$(date +%s)
  python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok 2>&1 | tail -2
  echo "checkpoint in $(($(date +%s) - t0)) s"
} >"$R" 2>&1
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for temp in 0 0.7; do
  for step in 1 0; do
    TF_DECODE_STEP=$step timeout 120 $TF generate $M --backend cuda -p "$P" -n 300 --ignore-eos --temperature $temp \
      --seed 7 --context 4096 >"$OUT/gen-t$temp-s$step.txt" 2>"$OUT/gen-t$temp-s$step.err"
    echo "generate temperature $temp step $step: rc=$? $(grep -E 'tok/s|one-kernel' "$OUT/gen-t$temp-s$step.err" | tr '\n' ' ')" >>"$R"
  done
  if cmp -s "$OUT/gen-t$temp-s1.txt" "$OUT/gen-t$temp-s0.txt"; then
    echo "temperature $temp: texts identical ($(wc -c <"$OUT/gen-t$temp-s1.txt") bytes)" >>"$R"
  else
    echo "temperature $temp: TEXTS DIFFER" >>"$R"
  fi
done
for step in 1 0; do
  TF_DECODE_STEP=$step timeout 150 $TF bench $M --backend cuda --drafter none --workload random --tokens 256 \
    --parallel 1 --prompt-tokens 512 --context 4096 >"$OUT/bench-s$step.txt" 2>&1
  echo "bench step $step: rc=$?" >>"$R"
  grep -iE "tok/s|decode" "$OUT/bench-s$step.txt" | head -8 >>"$R"
done
rm -rf "$D"
