# Session 49, run 482: every GPU test on the final tree, then the MoE and 8B tables -- run 470's script as it
# is (its pack line lists the 11 binaries; packed at ebf8e46, TF_PACK_DICT=1GiB).
#   run(command="bash bench/cuda/results/run482-all-gpu.sh; cat $OUT/all.txt", carry=[".devpack"])
exec bash "$(dirname "$0")/run470-all-gpu.sh"
