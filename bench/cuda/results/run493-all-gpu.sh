# Session 50, run 493: every GPU test on the final tree (17-32-row MLX 4-bit calls: the down on q4_ks's
# 32-token instance, widths > 8192 as 16 + the rest rows), then issue 12's and issue 11's tables: run 470's
# script (the same binaries and lines; tf_bench_moe now warms the GPU 5 s before its first row).
#   BINS="tests/models/test_moe_cuda tests/models/test_quant_cuda tests/ops/gpu/test_cuda_backend
#     tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_fusion
#     tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_linear tests/ops/gpu/test_cuda_wgmma
#     bench/cuda/tf_bench_moe bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run493-all-gpu.sh; cat $OUT/all.txt", carry=[".devpack"])
exec bash "$(dirname "$0")/run470-all-gpu.sh"
