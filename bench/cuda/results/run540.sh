# Session 59, run 540: L2 prefetches, measured alone first (tf_l2_probe: does a bulk prefetch leave its bytes in
# L2 for a later kernel, and do they survive 64 MB of other loads, with and without evict_last / a persisting
# set-aside?), then in the 30B-A3B b=1 chain (TF_BENCH_L2 codes: 1 the o weights during the attention, issued by
# the q/k norm + rope kernel after its wait; 32 the same with evict_last; 2 / 4 the routed experts' down weights
# by the routed gate_up once routed / at each block's last item; 8 / 16 the next layer's qkv during the routing,
# normal / evict_last), each row then the default again; test_moe_cuda with the down prefetch on.
#   BINS="bench/cuda/tf_l2_probe bench/cuda/tf_bench_moe tests/models/test_moe_cuda"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p540.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 60 $D/bin/tf_l2_probe > $OUT/l2-probe.txt 2>&1
echo "l2 probe rc=$? $(el)" >> $OUT/all.txt
cat $OUT/l2-probe.txt >> $OUT/all.txt
TF_MOE_L2_DOWN=2 timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test_moe.txt 2>&1
echo "test_moe_cuda (down prefetch 2) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_moe.txt | head -20 >> $OUT/all.txt
TF_BENCH_L2=0,1,32,2,4,8,16,5,13,36,53,0 timeout 150 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-l2.txt 2>&1
echo "moe bf16 l2 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=(1|8) ctx 512 \||L2 prefetch" $OUT/moe-bf16-l2.txt >> $OUT/all.txt
TF_BENCH_L2_PERSIST_MB=40 TF_BENCH_L2=0,32,16,48,53,0 timeout 150 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-l2p.txt 2>&1
echo "moe bf16 l2 persisting rc=$? $(el)" >> $OUT/all.txt
grep -E "persisting|^\| decode b=(1|8) ctx 512 \||L2 prefetch" $OUT/moe-bf16-l2p.txt >> $OUT/all.txt
TF_BENCH_L2=0,1,32,0 timeout 150 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe-mlx4-l2.txt 2>&1
echo "moe mlx4 l2 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=(1|8) ctx 512 \||L2 prefetch" $OUT/moe-mlx4-l2.txt >> $OUT/all.txt
rm -rf $D
