# Session 43's second device call: q4_ks_kernel on by default for the down at 9-16 rows (TF_Q4_KS=3,
# configuration 1), the choice run 453's same-call forward lines made. The GPU tests on that default, the 8B
# table (b=16 now with it; the same-call "q4_ks off" line as the A/B), and the product: `tensorfold bench
# --parallel 16` on a random 8B MLX 4-bit checkpoint, drafted output = serial.
# Build and pack: ninja -C build-cuda test_quant_cuda test_cuda_graphs test_cuda_model test_cuda_backend \
#   tf_bench_cuda tensorfold; BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_graphs \
#   tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_backend bench/cuda/tf_bench_cuda tensorfold" \
#   tools/device_step.sh --pack
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
for t in test_quant_cuda test_cuda_graphs test_cuda_model test_cuda_backend; do
  timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure|differs" $OUT/$t.txt | head -10 >> $OUT/all.txt
done
timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16,mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "decode b=|\| Qwen3-8B" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
grep -o "q4_ks off / on in configurations[^|]*" $OUT/8b.txt >> $OUT/all.txt
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
timeout 200 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 16 --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
echo "e2e bench parallel 16 rc=$?" >> $OUT/all.txt; grep -E "tok/s|differ|rror|random" $OUT/e2e.txt | head -8 >> $OUT/all.txt
rm -rf $M $D
