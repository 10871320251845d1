// The one-kernel decode step of the MoE shape (decode_step.h): decode_step_host.cuh and the kernel compiled
// with the Qwen3-30B-A3B constants (decode_step_words.cuh's TF_STEP_MOE), namespace step_moe; its make_step
// is DecodeStep::make's for models with sparse layers (decode_step.cu).
#define TF_STEP_MOE 1
#include "ops/cuda/decode_step_host.cuh"
