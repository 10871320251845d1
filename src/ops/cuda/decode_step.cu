// The one-kernel decode step (decode_step.h): the dense shape's implementation (decode_step_host.cuh with
// the Qwen3-8B constants, namespace step), the switches, and make(), which hands models with sparse layers
// to the MoE shape's implementation (decode_step_moe.cu, namespace step_moe).
#include "ops/cuda/decode_step_host.cuh"

namespace tf::cuda {

namespace step_moe {
std::unique_ptr<DecodeStep> make_step(const DecodeStepModel& m, cudaStream_t stream, std::string* why);
}  // namespace step_moe

static bool g_mlx4 = env_switch("TF_DECODE_STEP_MLX4", true);  // launch.h
void DecodeStep::set_mlx4(bool on) {
  g_mlx4 = on;
}
bool DecodeStep::mlx4() {
  return g_mlx4;
}
// On by default: the MoE step gives the chain's bits and, its experts' stages by tensor maps, is faster than
// the chain (30B-A3B bf16 b=1 ctx 512 on an H100: 2.98-3.00 ms against 3.44, run 545; by row copies it was
// slower, 3.76-3.88). TF_DECODE_STEP_MOE=0 turns it off.
static bool g_moe = env_switch("TF_DECODE_STEP_MOE", true);
void DecodeStep::set_moe(bool on) {
  g_moe = on;
}
bool DecodeStep::moe() {
  return g_moe;
}

// Off by default: the MoE step's MLX 4-bit instance (session 63) gives the chain's bits by construction but
// has not yet run on a GPU. TF_DECODE_STEP_MOE_MLX4=1 turns it on.
static bool g_moe_mlx4 = env_switch("TF_DECODE_STEP_MOE_MLX4", false);
void DecodeStep::set_moe_mlx4(bool on) {
  g_moe_mlx4 = on;
}
bool DecodeStep::moe_mlx4() {
  return g_moe_mlx4;
}

std::unique_ptr<DecodeStep> DecodeStep::make(const DecodeStepModel& m, cudaStream_t stream,
                                             std::string* why) {
  for (const DecodeStepLayer& L : m.layers)
    if (L.moe) {
      if (!moe()) {
        if (why) *why = "one-kernel decode step: sparse layers (turned off: TF_DECODE_STEP_MOE=0)";
        return nullptr;
      }
      return step_moe::make_step(m, stream, why);
    }
  return step::make_step(m, stream, why);
}

}  // namespace tf::cuda
