set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
for i in 1 2; do timeout 100 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16,mlx4 --decode --quick > $OUT/8b-$i.txt 2>&1; echo "8b run $i rc=$?" >> $OUT/all.txt; grep -E "decode b=16|q4_wg off" $OUT/8b-$i.txt | cut -c1-400 >> $OUT/all.txt; done
