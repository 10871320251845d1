# Session 42's prepared first call (written without a device; not yet run): q4_ks_kernel (quant_ks.cu) on the
# GPU. Build and pack here first:
#   export PATH=/usr/local/cuda/bin:$PATH; ninja -C build-cuda test_quant_cuda test_cuda_graphs test_cuda_model \
#     test_cuda_backend tf_bench_quant tf_bench_cuda tf_attention_once tensorfold
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_model \
#     tests/ops/gpu/test_cuda_backend bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda \
#     bench/cuda/tf_attention_once tensorfold" \
#     tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run453-ks.sh a; cat $OUT/all.txt", carry=[".devpack"])  (~5 min)
#   run(command="bash bench/cuda/results/run453-ks.sh b; cat $OUT/all.txt", carry=[".devpack"])  (~5 min)
# Part a: the bits, the tables, the forward. Part b: ncu, the attention, the other GPU tests.
# Order: the bits of the ticket configurations 0-4 first (stop there on a failure or a hang), then the
# cluster-fold configurations 5-6 (on a failure or a hang the benches skip them: TF_BENCH_KS_CLUSTER=0), then
# the linears' tables at M = 16 / 9 / 1 ("q4_ks off / always in configurations 0 1 2 3 4" and "... 5 6": per
# call kind, same call), the 8B forward at b = 16 ("q4_ks off / on in configurations 0 1 2 3 4 / the down
# only, widths <= 8192 only", then 5 6; and the attention's combine launch against the fused combine past its
# default 64 pairs, bf16 and 4-bit: same call), ncu's bytes a kernel (the x-traffic hypothesis), the
# other GPU tests.
# Predictions (docs/cuda-notes.md "Session 42"): down at M = 16 0.573 -> 0.36-0.45 ms a step, q / o 0.235 ->
# 0.20-0.26, the cluster fold ~1 us a call under the ticket's; the forward at b=16 3.41 -> ~3.2-3.3 ms.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
PART=${1:-a}
if [ "$PART" = a ]; then
timeout 240 $D/bin/test_quant_cuda --gtest_brief=1 --gtest_filter='*KSliceKernel*:*Warpgroup*' > $OUT/ks-test.txt 2>&1
rc=$?; echo "ks tests rc=$rc" >> $OUT/all.txt; grep -E "PASSED|FAILED|Failure|differs|did not" $OUT/ks-test.txt | head -20 >> $OUT/all.txt
if [ $rc -ne 0 ]; then rm -rf $D; exit 0; fi  # (part b's other tests then say more)
timeout 120 $D/bin/test_quant_cuda --gtest_brief=1 --gtest_filter='*KSliceCluster*' > $OUT/ks-cluster-test.txt 2>&1
rc=$?; echo "ks cluster tests rc=$rc" >> $OUT/all.txt; grep -E "PASSED|FAILED|Failure|differs|did not" $OUT/ks-cluster-test.txt | head -20 >> $OUT/all.txt
[ $rc -ne 0 ] && export TF_BENCH_KS_CLUSTER=0
timeout 200 $D/bin/tf_bench_quant --linears-m 16,9,1 > $OUT/linears.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt
grep -E "^\||q4_ks" $OUT/linears.txt | cut -c1-600 >> $OUT/all.txt
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16,mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "decode b=16|q4_ks off|q4_wg off" $OUT/8b.txt | cut -c1-700 >> $OUT/all.txt
fi
if [ "$PART" = b ]; then
# The hypothesis itself (docs/cuda-notes.md "Session 42"): L2 -> SM and DRAM bytes of each 16-row 4-bit kernel,
# q4_ks off then on (down: q4_decode_kernel's x traffic predicted ~3x its 28 MB of weights).
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
  timeout 200 $NCU --clock-control none --print-kernel-base function -k regex:q4_ --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_sector_hit_rate.pct \
    --csv $D/bin/tf_bench_quant --profile-m 16 > $OUT/ncu.csv 2>&1; rc=$?; echo "ncu rc=$rc" >> $OUT/all.txt
  [ $rc -ne 0 ] && timeout 150 $NCU --clock-control none --print-kernel-base function -k regex:q4_ --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --csv $D/bin/tf_bench_quant --profile-m 16 > $OUT/ncu.csv 2>&1 && echo "ncu (sections) rc=$?" >> $OUT/all.txt
  grep '^"' $OUT/ncu.csv | awk -F'","' 'NF>=15 && $5 ~ /q4_/ {print $(NF-2)" | "$(NF-1)" | "$NF" | "$5}' | cut -c1-200 | head -40 >> $OUT/all.txt
fi
# The 16-row decode attention (0.68 ms of the 8B b=16 forward at ~45% of the bandwidth; bf16 pays it too):
# alone, with its split blocks' stamps, at 1 and 16 sequences, and ncu's view of one b=16 launch.
for a in "512 1" "512 16" "2048 16"; do
  timeout 60 $D/bin/tf_attention_once decode $a > $OUT/attn.txt 2>&1; echo "attention $a rc=$?" >> $OUT/all.txt
  cut -c1-600 $OUT/attn.txt >> $OUT/all.txt
done
if [ -n "$NCU" ]; then  # the combine launch (default) and the fused combine past 64 pairs (TF_ATTN_FUSED_MAX)
  for fm in 64 512; do
    TF_ATTN_FUSED_MAX=$fm timeout 60 $NCU --clock-control none --print-kernel-base function -k regex:attention_mma_kernel --launch-skip 40 --launch-count 1 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers \
      --csv $D/bin/tf_attention_once decode 512 16 > $OUT/ncu-attn-$fm.csv 2>&1; echo "ncu attention fused max $fm rc=$?" >> $OUT/all.txt
    grep '^"' $OUT/ncu-attn-$fm.csv | awk -F'","' 'NF>=15 && $5 ~ /attention/ {print $(NF-2)" | "$NF" | "$5}' | cut -c1-160 | head -12 >> $OUT/all.txt
  done
fi
for t in test_cuda_backend test_quant_cuda test_cuda_graphs test_cuda_model; do  # (part a ran the KSlice tests)
  timeout 150 $D/bin/$t --gtest_brief=1 --gtest_filter='-*KSlice*' > $OUT/$t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure|differs" $OUT/$t.txt | head -10 >> $OUT/all.txt
done
fi
rm -rf $D
