# Session 46, run 462: test_cuda_backend after its decode-loop tests learned to restore the caller's mode.
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 $D/bin/test_cuda_backend --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED|Failure" | head
