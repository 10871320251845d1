# Quantized checkpoints (MLX affine, FP8): tests/models/test_quant.cpp, data from tools/make_quant_models.py.
tf_add_test(test_quant SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant.cpp LIBS tf_models tf_engine LABELS "cpu;sanitize")
# GPU: label "gpu" only (CI compiles it, has no GPU to run it).
if(TF_HAVE_CUDA)
  tf_add_test(test_quant_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant_cuda.cpp LIBS tf_models tf_engine CUDA::cudart
              LABELS "gpu")
endif()
