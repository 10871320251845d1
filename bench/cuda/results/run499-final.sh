# Ran in session 52 (H100, logs run499/): every test passed; see docs/cuda-notes.md "Session 52".
# Session 51, run 499 (prepared, not run: no device was lent after run 497): every GPU test on the final tree
# (q4_wg's cluster instance for 17-32 rows and 32-row pieces of wide weights at 33-64 rows, as landed; its test
# Quant4BitWarpgroupClusterEqualsDecodeKernel in its landed form), then issue 12's and issue 11's tables (run
# 470's script: the 8B table's b=32 line now A/Bs the clusters off / on, twice).
#   BINS="tests/models/test_moe_cuda tests/models/test_quant_cuda tests/ops/gpu/test_cuda_backend
#     tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_fusion
#     tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_linear tests/ops/gpu/test_cuda_wgmma
#     bench/cuda/tf_bench_moe bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run499-final.sh; cat $OUT/all.txt", carry=[".devpack"])
exec bash "$(dirname "$0")/run470-all-gpu.sh"
