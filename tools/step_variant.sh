#!/usr/bin/env bash
# A bench binary of the one-kernel decode step built from a variant of decode_step.cu without touching the
# build: compiles the working tree's src/ops/cuda/decode_step.cu with extra nvcc flags, puts that object in
# a copy of build-cuda's libtf_ops.a and relinks tf_bench_cuda against it as build-cuda/bench/cuda/NAME.
# Used for same-call A/Bs on the GPU (session 22):
#   tools/step_variant.sh tf_bench_cuda_16k -DTF_STEP_LIMIT=16512   # the step past its limit
#   tools/step_variant.sh tf_bench_cuda_var                          # an edited kernel vs build-cuda's
# (decode_step.cu's spill bytes: add -Xptxas=-v and read ptxas's lines for decode_step_kernel<0, false>.)
# Needs a configured build-cuda with tf_bench_cuda built once (ninja -C build-cuda tf_bench_cuda).
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 NAME [nvcc flags...]" >&2; exit 2; }
name=$1
shift
cd "$(dirname "$0")/../build-cuda"
export PATH=/usr/local/cuda/bin:$PATH
obj=src/ops/CMakeFiles/tf_ops.dir/cuda/decode_step.cu.o
tmp=$(mktemp -d)
cmd=$(ninja -t commands "$obj" | tail -1)
eval "${cmd/-o $obj/-o $tmp/decode_step.cu.o} $*"
cp src/ops/libtf_ops.a "$tmp/"
(cd "$tmp" && ar r libtf_ops.a decode_step.cu.o)
link=$(ninja -t commands bench/cuda/tf_bench_cuda | tail -1)
link=${link//src\/ops\/libtf_ops.a/$tmp\/libtf_ops.a}
link=${link//-o bench\/cuda\/tf_bench_cuda/-o bench\/cuda\/$name}
eval "$link"
rm -rf "$tmp"
ls -la "bench/cuda/$name"
