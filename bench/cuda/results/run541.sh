# Session 59, run 541: run 540 showed bulk L2 prefetches holding up the kernels that issue them (the o weights
# from the 5-block q/k norm + rope kernel: +1.4 ms a step). Now per-thread line prefetches (prefetch.global.L2,
# no completion to wait for): the probe times each prefetch kernel alone too; chain codes 64 / 128: the o
# weights by line prefetches (normal / evict_last), 6: the routed experts' down weights by line prefetches at
# each gate_up block's last item, 70 both; persisting set-aside 31 MiB for the evict_last rows. Also
# test_cuda_backend: the wgmma attention's K/V tensor maps now cached a pool.
#   BINS="bench/cuda/tf_l2_probe bench/cuda/tf_bench_moe tests/models/test_moe_cuda tests/ops/gpu/test_cuda_backend"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p541.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 60 $D/bin/tf_l2_probe > $OUT/l2-probe.txt 2>&1
echo "l2 probe rc=$? $(el)" >> $OUT/all.txt
cat $OUT/l2-probe.txt >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_backend --gtest_brief=1 > $OUT/test_backend.txt 2>&1
echo "test_cuda_backend rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_backend.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_backend.txt | head -20 >> $OUT/all.txt
TF_MOE_L2_DOWN=3 timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test_moe.txt 2>&1
echo "test_moe_cuda (down prefetch 3) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_moe.txt | head -20 >> $OUT/all.txt
TF_BENCH_L2=0,64,128,6,70,0 timeout 150 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-l2.txt 2>&1
echo "moe bf16 l2 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=(1|8) ctx 512 \||L2 prefetch" $OUT/moe-bf16-l2.txt >> $OUT/all.txt
TF_BENCH_L2_PERSIST_MB=31 TF_BENCH_L2=0,128,16,0 timeout 150 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-l2p.txt 2>&1
echo "moe bf16 l2 persisting rc=$? $(el)" >> $OUT/all.txt
grep -E "persisting|^\| decode b=(1|8) ctx 512 \||L2 prefetch" $OUT/moe-bf16-l2p.txt >> $OUT/all.txt
TF_BENCH_L2=0,64,128,0 timeout 150 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe-mlx4-l2.txt 2>&1
echo "moe mlx4 l2 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=(1|8) ctx 512 \||L2 prefetch" $OUT/moe-mlx4-l2.txt >> $OUT/all.txt
rm -rf $D
