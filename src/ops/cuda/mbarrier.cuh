#pragma once
// mbarriers, named barriers, the async-proxy fence and the plain bulk copy (PTX ISA: "Parallel
// synchronization and communication", "cp.async.bulk"), shared by the wgmma linears (linear_wgmma.cu,
// linear_rs.cu), the attention's K/V staging (attention_mma.cu) and the persistent kernels (the decode step,
// moe_decode.cu). Addresses are shared-memory (.shared::cta) addresses (saddr).
#include <cstdint>

namespace tf::cuda {

__device__ __forceinline__ uint32_t saddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The global timer (ns): the persistent kernels' bench stamps and watchdogs.
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Named barrier `id` over `count` threads: __syncwarp first (a warp leaving a per-lane polling loop is not
// converged) and the non-aligned form.
__device__ __forceinline__ void nbar_sync(int id, int count) {
  __syncwarp();
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// Arrives on named barrier `id` of `count` threads without waiting (a producer's half of a handoff: what this
// thread wrote before is visible to the threads that then wait with nbar_sync).
__device__ __forceinline__ void nbar_arrive(int id, int count) {
  __syncwarp();
  asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// After the mbar_init calls of a block (one thread), before the barrier that publishes them: the
// initialised mbarriers become visible to the async proxy (bulk copies, TMA) and to a cluster's CTAs.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Whether the phase of `parity` has completed (one try, which may suspend the thread a while).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done;
}
// The same test without suspending the thread (test_wait: returns at once).
__device__ __forceinline__ bool mbar_test_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Generic-proxy accesses to shared memory (st.shared, cp.async, ldmatrix) ordered before the async proxy's
// (wgmma operand reads, bulk-copy writes). Each accessing thread runs it, then a barrier (or, for its own
// earlier reads, the issuing thread alone before its copy).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// `bytes` (a multiple of 16, 16-byte aligned ends) from global memory into shared memory at dst,
// completing on mbarrier bar (which must expect them: mbar_arrive_expect_tx).
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

}  // namespace tf::cuda
