# NOT RUN (session 47): superseded by run 464 (run directly) and run 467 (test_cuda_backend on the new default).
# Session 47: run 462's test_cuda_backend (its long-context split variants under mode 0; never run) in the same
# call as run 464 (the two-team decode loop at 8 / 12 rows). test_cuda_backend travels in .devpack2 (stripped,
# built at HEAD b594475; the libraries come from .devpack):
#   run(command="bash bench/cuda/results/run465-backend-teams.sh; cat $OUT/all.txt $OUT/backend.txt",
#       carry=[".devpack", ".devpack2"])
set -u
D2=$(mktemp -d); xz -dc .devpack2/step.tar.xz | tar -xf - -C $D2
D1=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D1 ./bin/libutf8proc.so.2 ./bin/libcpp-httplib.so.0.11
LD_LIBRARY_PATH=$D1/bin:${LD_LIBRARY_PATH:-} timeout 90 $D2/bin/test_cuda_backend --gtest_brief=1 > $OUT/backend-full.txt 2>&1
echo "test_cuda_backend rc=$?" > $OUT/backend.txt
grep -E "PASSED|FAILED|Failure" $OUT/backend-full.txt | head -12 >> $OUT/backend.txt
rm -rf $D1 $D2
bash bench/cuda/results/run464-teams-b8.sh
