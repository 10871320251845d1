# Session 67, run 579 (scripted for an H200; not run): the dense step's L2 prefetch and the gate_up's cap there,
# where both are off by default (l2pf_of / inflight_gu_of: parts of 100 GiB or more) and the ring keeps every
# free slot in flight (inflight_of) -- Qwen3-8B MLX 4-bit and bf16 b=1 ctx 512: the prefetch at 0, 2, 4, 6, 8
# tiles; then with 4 tiles (TF_STEP_L2PF_TILES at make) the in-flight caps 0 (every free slot), 2, 3, 4 and
# the gate_up's cap at 4, 6, 8 over a cap of 2.
#   Pack: .devpack/p578.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step"; the final
#   kernels' SASS) -- or rebuild: TF_PACK_DICT=1GiB tools/device_step.sh --pack with those BINS.
# Run (kind nvidia-h200): bash bench/cuda/results/run579.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/p578.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/all.txt
TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF=0,2,4,6,8 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/a.txt 2>&1
echo "a rc=$?" >> $OUT/all.txt; grep -E "one kernel|L2|Qwen3-8B \|" $OUT/a.txt >> $OUT/all.txt
TF_STEP_L2PF_TILES=4 TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT=0,2,3,4 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/b.txt 2>&1
echo "b rc=$?" >> $OUT/all.txt; grep -E "one kernel|in flight" $OUT/b.txt >> $OUT/all.txt
TF_STEP_L2PF_TILES=4 TF_STEP_INFLIGHT_STAGES=2 TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT_GU_AB=0,4,6,8 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/c.txt 2>&1
echo "c rc=$?" >> $OUT/all.txt; grep -E "one kernel|capped" $OUT/c.txt >> $OUT/all.txt
rm -rf $D
