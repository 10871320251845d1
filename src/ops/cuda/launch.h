#pragma once
// Launch helpers shared by the CUDA kernels' sources (device-code translation units only).
#include <cuda_runtime.h>

#include <utility>

#include "ops/cuda/cuda_check.h"

namespace tf::cuda {

// Programmatic dependent launch (sm_90): a kernel launched this way may start while the previous
// kernel on the stream is finishing; it must execute `griddepcontrol.wait` before it reads anything the
// previous kernels wrote or writes anything they read. The linear kernels load weights (constant)
// before the wait, so their weight streaming overlaps the previous kernel's tail and the launch gap.
// Timing only: the arithmetic is the same with it on or off.
bool pdl_enabled();

#ifdef __CUDACC__
// For kernels launched with launch_pdl: griddepcontrol.wait returns once the previous kernels on the stream
// have finished and their writes are visible (a no-op when the kernel was launched without the attribute).
// Nothing a kernel reads that earlier kernels write, and nothing it writes that they read, may come first.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
// Lets the next kernel on the stream launch now (it parks in its own pdl_wait until this one finishes), so
// its launch latency and whatever it does before its wait overlap this kernel.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;");
}
// 16 bytes an earlier kernel wrote (activations, routing tables), read by a kernel launched with launch_pdl.
// Such data must never be read with ld.global.nc (__ldg, or a `const __restrict__` pointer the compiler
// turns into one): a non-coherent load promises the data is constant for the kernel's lifetime, and ptxas
// hoists such loads above griddepcontrol.wait (it did in the MoE grouped GEMM: runs 25-26, stale routing
// tiles).
__device__ __forceinline__ uint4 ld_act16(const void* p) {
  uint4 r;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
// The small kernels' entry: let the next kernel launch, then wait for the previous ones.
__device__ __forceinline__ void pdl_enter() {
  pdl_launch_dependents();
  pdl_wait();
}
#endif

// `on` false: a plain launch (the kernel's griddepcontrol instructions are then no-ops).
template <typename... KArgs, typename... Args>
void launch_pdl_if(bool on, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr, cfg.numAttrs = on && pdl_enabled() ? 1 : 0;
  TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}
template <typename... KArgs, typename... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  launch_pdl_if(true, kernel, grid, block, smem, s, std::forward<Args>(args)...);
}
// Diagnosis switch read once from the environment: TF_PDL_<name>=0 turns dependent launch off for one
// group of kernels ("MOE", "ELEMENTWISE", "ATTENTION"); TF_PDL=0 (pdl_enabled) for all of them.
bool pdl_group_enabled(const char* name);
// A measurement switch from the environment (the TF_* A/B knobs): `name`=0 off, =1 on, unset or anything
// else `dflt`.
bool env_switch(const char* name, bool dflt);
// A number knob from the environment: `name`=lo .. hi (a decimal integer), unset or anything else `dflt`.
int env_int(const char* name, int lo, int hi, int dflt);
// A mode knob: env_int from 0 to `max`.
int env_digit(const char* name, int max, int dflt);
// Blocks of `kernel` (launched with `threads` threads and at most `smem` bytes of dynamic shared memory,
// opted in here when over 48 KB) resident on the whole device at once: the grid of a persistent kernel.
// Cached per kernel (one GPU model per process assumed); call it outside graph captures first where the
// opt-in is needed (cudaFuncSetAttribute).
int resident_blocks(const void* kernel, int threads, size_t smem = 0);
// SMs of the current device, read once (the server drives one device; another count only costs speed).
int sm_count();

// Large-M linear (linear_tiled.cu): the decode kernel's per-element arithmetic in 128x128 CTA tiles.
// bias_kind: 0 none, 1 f32, 2 bf16.
void linear_tiled_bf16(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32,
                       int m, int n, int k, cudaStream_t s);
// Mid-M linear (linear_mid.cu, 17..512 rows by default): the decode kernel's per-element arithmetic with
// CTA tiles of 32..64 features x 32..128 tokens (MidTile in kernels.h) and a cp.async ring per warp. Same
// arguments.
void linear_mid_bf16(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32,
                     int m, int n, int k, cudaStream_t s);
// The kernel linear_bf16 runs for m rows (set_linear_kernel, set_linear_mid_max_m in kernels.h).
enum class LinearKernel;
LinearKernel linear_kernel_for(int m);

}  // namespace tf::cuda
