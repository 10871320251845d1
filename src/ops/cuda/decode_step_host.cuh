#pragma once
// The one-kernel decode step's host side (decode_step.h): shape checks, the packed weights, the op table,
// the launch -- an implementation of DecodeStep in namespace TF_STEP_NS, made by make_step. Included by
// decode_step.cu (the dense shape) and decode_step_moe.cu (TF_STEP_MOE: the MoE shape) only. The kernel:
// decode_step_kernel.cuh (with decode_step_words.cuh, decode_step_attention.cuh).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/decode_step.h"
#include "ops/cuda/decode_step_kernel.cuh"
#include "ops/cuda/launch.h"        // env_switch
#include "ops/cuda/linear_wgmma.h"  // make_kv_tensor_map
#include "ops/cuda/quant_linear.h"  // chunk_shift

namespace tf::cuda::TF_STEP_NS {

namespace {

bool is_bf16_cuda(const Tensor* t, std::vector<int64_t> shape) {
  return t && t->defined() && t->device() == Device::CUDA && t->dtype() == DType::BF16 &&
         t->is_contiguous() && t->shape() == shape;
}
bool is_dense_bf16(const LinearWeight* w, int64_t n, int64_t k) {
  return w && w->format == LinearWeight::Format::Dense && !(w->bias.defined() && w->bias.numel() > 0) &&
         is_bf16_cuda(&w->weight, {n, k});
}
// MLX 4-bit [n, k] with bf16 scales and biases, groups of 32, 64 or 128, in quant_linear.h's device layout
// (upload_quantized_linear), without bias.
bool is_mlx4(const LinearWeight* w, int64_t n, int64_t k) {
  auto u32 = [](const Tensor& t, std::vector<int64_t> shape) {
    return t.defined() && t.device() == Device::CUDA && t.dtype() == DType::U32 && t.is_contiguous() &&
           t.shape() == shape;
  };
  return w && w->format == LinearWeight::Format::MlxAffine && w->bits == 4 &&
         (w->group_size == 32 || w->group_size == 64 || w->group_size == 128) &&
         !(w->bias.defined() && w->bias.numel() > 0) && !(w->biases.defined() && w->biases.numel() > 0) &&
         u32(w->weight, {n, k / 8}) && u32(w->scales, {n, k / w->group_size});
}
// The step's weight format of a linear: kWBf16, kWMlx4, or -1 (neither).
int format_of(const LinearWeight* w, int64_t n, int64_t k) {
  return is_dense_bf16(w, n, k) ? kWBf16 : is_mlx4(w, n, k) ? kWMlx4 : -1;
}

// Why the kernel's shape does not fit the model's attention, rope, norms and hidden size ("" when they do).
std::string unsupported_shape(const DecodeStepModel& m) {
  const AttentionParams& a = m.attn;
  if (a.num_heads != kHq || a.num_kv_heads != kHk || a.head_dim != kD)
    return "attention shape " + std::to_string(a.num_heads) + "/" + std::to_string(a.num_kv_heads) + "x" +
           std::to_string(a.head_dim) + " (the kernel takes " + std::to_string(kHq) + " q and " +
           std::to_string(kHk) + " KV heads of " + std::to_string(kD) + ")";
  if (a.sliding_window != 0 || a.softcap != 0.f) return "a sliding window or softcap";
  if (m.rope.rotary_dim != kD || m.rope.interleaved || int(m.rope.inv_freq.size()) != kD / 2)
    return "partial or interleaved rope";
  if (m.norm_offset != 0.f) return "norms with an offset";
  if (!m.embed || !m.embed->defined() || m.embed->device() != Device::CUDA || m.embed->dim(-1) != kHidden)
    return "hidden size " + std::to_string(m.embed && m.embed->defined() ? m.embed->dim(-1) : 0) +
           " (the kernel takes " + std::to_string(kHidden) + ")";
  if (m.layers.empty()) return "no layers";
  if (!is_bf16_cuda(m.final_norm, {kHidden})) return "the final norm is not bf16";
  return "";
}

// Why the kernel cannot run the model ("" when it can); *fmt: the linears' format (WFormat).
std::string unsupported(const DecodeStepModel& m, int* fmt) {
  if (std::string w = unsupported_shape(m); !w.empty()) return w;
  const LinearWeight* lm = m.lm_head;
  *fmt = lm ? format_of(lm, lm->out_features, kHidden) : -1;
  if (*fmt < 0 || lm->out_features % 16 != 0)
    return "the lm_head is not a dense bf16 or MLX 4-bit [vocab % 16 == 0, 4096] weight";
  const int64_t inter = m.layers[0].down ? m.layers[0].down->in_features : 0;
  if (inter % 4096 != 0 || inter < 4096 || inter > kMaxK)
    return "intermediate size " + std::to_string(inter) + " (the kernel takes 4096, 8192 or 12288)";
  for (const DecodeStepLayer& L : m.layers) {
    if (!is_bf16_cuda(L.input_norm, {kHidden}) || !is_bf16_cuda(L.post_norm, {kHidden}))
      return "layer norms that are not bf16";
    if (!is_bf16_cuda(L.q_norm, {kD}) || !is_bf16_cuda(L.k_norm, {kD})) return "no bf16 q/k norms";
    if (format_of(L.qkv, (kHq + 2 * kHk) * kD, kHidden) != *fmt ||
        format_of(L.o, kHidden, kHq * kD) != *fmt || format_of(L.gate_up, 2 * inter, kHidden) != *fmt ||
        format_of(L.down, kHidden, inter) != *fmt)
      return "linears that are not all dense bf16 or all MLX 4-bit (bf16 scales, groups of 32-128) without "
             "bias (a fused qkv and gate_up)";
  }
  return "";
}

#if TF_STEP_MOE
// An MLX 4-bit expert projection the 4-bit instance streams by tensor maps: [n, k] (is_mlx4), k a multiple of
// 128 (whole quads), its scale words' rows a multiple of 16 bytes (the maps' strides).
bool is_mlx4_expert(const LinearWeight& w, int64_t n, int64_t k) {
  return is_mlx4(&w, n, k) && k % 128 == 0 && (k / w.group_size * 4) % 16 == 0;
}
// A router the 4-bit instance takes (dequantized to bf16 at make: linear_quantized's bits are linear_bf16's
// on the dequantized weight): dense bf16, or MLX 2-8-bit with bf16 scales (one U32 scale | bias a group),
// without bias.
bool router_to_bf16(const LinearWeight& w, int64_t n, int64_t k) {
  if (is_dense_bf16(&w, n, k)) return true;
  return w.format == LinearWeight::Format::MlxAffine && w.in_features == k && w.out_features == n &&
         w.weight.defined() && w.weight.device() == Device::CUDA && w.scales.defined() &&
         w.scales.dtype() == DType::U32 && !(w.bias.defined() && w.bias.numel() > 0) &&
         !(w.biases.defined() && w.biases.numel() > 0) && chunk_shift(w) >= 0;
}
// Why the MoE shape's kernel cannot run the model ("" when it can): the 30B-A3B layout with every layer
// sparse, without bias; *fmt: kWBf16 (every weight dense bf16) or kWMlx4 (the attention linears, the lm_head
// and every expert MLX 4-bit with bf16 scales, the router bf16 or MLX of any width: dequantized).
std::string unsupported_moe(const DecodeStepModel& m, int* fmt) {
  if (std::string w = unsupported_shape(m); !w.empty()) return w;
  const LinearWeight* lm = m.lm_head;
  *fmt = lm ? format_of(lm, lm->out_features, kHidden) : -1;
  if (*fmt < 0 || lm->out_features % 16 != 0)
    return "the lm_head is not a dense bf16 or MLX 4-bit [vocab % 16 == 0, 2048] weight";
  const bool q4 = *fmt == kWMlx4;
  for (const DecodeStepLayer& L : m.layers) {
    if (!is_bf16_cuda(L.input_norm, {kHidden}) || !is_bf16_cuda(L.post_norm, {kHidden}))
      return "layer norms that are not bf16";
    if (!is_bf16_cuda(L.q_norm, {kD}) || !is_bf16_cuda(L.k_norm, {kD})) return "no bf16 q/k norms";
    if (format_of(L.qkv, (kHq + 2 * kHk) * kD, kHidden) != *fmt || format_of(L.o, kHidden, kHq * kD) != *fmt)
      return "attention linears that are not in the lm_head's format (dense bf16 or MLX 4-bit) without bias "
             "(a fused qkv)";
    if (!L.moe) return "dense MLP layers among the sparse ones (mlp_only_layers, decoder_sparse_step)";
    const MoeWeights& w = *L.moe;
    const int64_t E = int64_t(w.gate_up.size());
    if (E < 16 || E > 128 || E % 16 != 0 || int64_t(w.down.size()) != E)
      return std::to_string(E) + " experts (the kernel routes 16, 32, ... 128: the router's 16-row tiles)";
    if (w.top_k < 1 || w.top_k > 8 || w.top_k > E) return "top_k " + std::to_string(w.top_k) + " (up to 8)";
    const int64_t I = w.down[0].in_features;
    if (I % 256 != 0 || I > 2048 || w.top_k * I > kMaxK || (w.top_k * I) % (8 * kCWarps * 32) != 0)
      return "expert intermediate size " + std::to_string(I) + " with top_k " + std::to_string(w.top_k) +
             " (multiples of 256 up to 2048, top_k x it a multiple of 2048 up to 6144)";
    if (q4 && w.top_k % 2 != 0) return "an odd top_k with MLX 4-bit experts (two teams take the ranks)";
    if (q4 ? !router_to_bf16(w.router, E, kHidden) : !is_dense_bf16(&w.router, E, kHidden))
      return q4 ? "a router that is neither dense bf16 nor MLX with bf16 scales"
                : "a router that is not dense bf16";
    const LinearWeight &g0 = w.gate_up[0], &d0 = w.down[0];
    for (int64_t e = 0; e < E; ++e) {
      const LinearWeight &g = w.gate_up[size_t(e)], &d = w.down[size_t(e)];
      if (!q4 && (!is_dense_bf16(&g, 2 * I, kHidden) || !is_dense_bf16(&d, kHidden, I)))
        return "experts that are not all dense bf16 without bias (or all MLX 4-bit, with MLX 4-bit attention "
               "linears)";
      if (q4 && (!is_mlx4(&g, 2 * I, kHidden) || !is_mlx4(&d, kHidden, I)))
        return "experts that are not all MLX 4-bit (bf16 scales, groups of 32-128) without bias, with MLX "
               "4-bit attention linears";
      if (q4 && (!is_mlx4_expert(g, 2 * I, kHidden) || !is_mlx4_expert(d, kHidden, I) ||
                 g.group_size != g0.group_size || d.group_size != d0.group_size ||
                 g.subnormal_codes != g0.subnormal_codes || d.subnormal_codes != d0.subnormal_codes))
        return "MLX 4-bit experts of mixed group sizes, or whose scale rows are not a multiple of 16 bytes";
    }
  }
  if (q4 && !DecodeStep::moe_mlx4())
    return "MLX 4-bit experts (turned off: TF_DECODE_STEP_MOE_MLX4=1 turns on)";
  return "";
}
#endif

// The kernel instance of a weight format (WFormat), the product's or the probe's. The MoE shape: bf16 and
// MLX 4-bit (kWMlx4), each with its probe (session 64: the layer timeline of bench/cuda's print_step_stamps).
using KernelFn = void (*)(Params);
KernelFn kernel_of(int fmt, bool probe) {
#if TF_STEP_MOE
  if (fmt == kWBf16) return probe ? decode_step_kernel<kWBf16, true> : decode_step_kernel<kWBf16, false>;
  return probe ? decode_step_kernel<kWMlx4, true> : decode_step_kernel<kWMlx4, false>;
#else
  switch (fmt) {
    case kWBf16:
      return probe ? decode_step_kernel<kWBf16, true> : decode_step_kernel<kWBf16, false>;
    case kWMlx4:
      return probe ? decode_step_kernel<kWMlx4, true> : decode_step_kernel<kWMlx4, false>;
    case kWMlx4Sw4:
      return probe ? decode_step_kernel<kWMlx4Sw4, true> : decode_step_kernel<kWMlx4Sw4, false>;
    default:
      return probe ? decode_step_kernel<kWMlx4Sw8, true> : decode_step_kernel<kWMlx4Sw8, false>;
  }
#endif
}
constexpr size_t kSm90Smem = 227 * 1024;  // a CTA's dynamic shared memory on sm_90
static_assert(kSmemBytes<kWBf16> <= kSm90Smem && kSmemBytes<kWMlx4> <= kSm90Smem &&
                  kSmemBytes<kWMlx4Sw4> <= kSm90Smem && kSmemBytes<kWMlx4Sw8> <= kSm90Smem,
              "the step's shared memory must fit one CTA");
// f(std::integral_constant<int, W>{}) for the format W = fmt (WFormat).
template <typename F>
auto by_format(int fmt, F&& f) {
  return fmt == kWBf16      ? f(std::integral_constant<int, kWBf16>{})
         : fmt == kWMlx4    ? f(std::integral_constant<int, kWMlx4>{})
         : fmt == kWMlx4Sw4 ? f(std::integral_constant<int, kWMlx4Sw4>{})
                            : f(std::integral_constant<int, kWMlx4Sw8>{});
}
size_t smem_of(int fmt) {
  return by_format(fmt, [](auto w) { return kSmemBytes<decltype(w)::value>; });
}
int ring_of(int fmt) {  // the ring's slots at most (its barriers)
  return by_format(fmt, [](auto w) { return kRing<decltype(w)::value>; });
}
// Whether the card is one the dense step's in-flight caps and L2 prefetch were measured on: the H100s (parts
// under 100 GiB). The H200 (141 GB, ~1.4x the bandwidth) keeps every free slot and no prefetch until
// measured.
bool caps_measured_on(size_t global_mem) {
  return global_mem < (size_t(100) << 30);
}
// Params::inflight's default by format and card: the ring stages the producer keeps requested and not yet
// landed, at most. With every free slot requested (~120 KB an SM) each of the hops' dependent accesses queues
// behind the stream. Runs 532-534 (H100, Qwen3-8B b=1; ms): bf16 at 2 / 3 stages (32 / 48 KB an SM) 5.21 ->
// 5.09 / 5.10 at ctx 512 in one process, 5.29 -> 5.22 / 5.19 in another; at 3, ctx 2048 5.40 -> 5.28 and 8192
// 5.80 -> 5.72. MLX 4-bit: SW 2 (~9.2 KB stages) at 3 1.975 -> 1.950, SW 4 (~18 KB) at 2 2.02 -> 1.917, SW 8
// (~36 KB) at 1 2.04 -> 1.93. So ~28-48 KB an SM keep the stream at full rate and more only queues (1 stage
// of SW 2 or bf16: +15-28%). Parts of 100 GiB or more (the H200: more bandwidth, so more bytes needed in
// flight) keep every slot until measured there.
// The MoE shape keeps every free slot requested on every card: run 553 (H100, 30B-A3B bf16 b=1, the lent
// ring, one process; ms): 3 stages 2.917-2.925, 2 2.932, 4 2.959, 6 2.967, 8 2.961, 10 2.942, every free slot
// 2.888-2.892 (69.9% of the roofline); MLX 4-bit (run 550) 3.68 at 3, 3.45 with every free slot.
int inflight_of(int fmt, size_t global_mem) {
  if (TF_STEP_MOE || !caps_measured_on(global_mem)) return 0;
  return fmt == kWBf16 || fmt == kWMlx4 ? 3 : fmt == kWMlx4Sw4 ? 2 : 1;
}
// Params::l2pf's default by format and card: each CTA's first gate_up tiles of a layer bulk-prefetched into
// L2 once the layer's qkv is done, while the stream idles behind the attention's chain. Run 573-574 (H100,
// Qwen3-8B MLX 4-bit b=1 ctx 512, one process each; ms): 0 tiles 1.839 / 1.832, 1.833 / 1.836; 2 1.806
// / 1.812; 3 1.813; 4 1.792 / 1.796, 1.797 / 1.801; 5 1.798 / 1.800; 6 1.803 / 1.809; 12 1.872 / 1.868. bf16
// loses at every count (5.105 -> 5.218 at 2, 5.46 at 4: its stream has no idle time to fill). Parts of 100
// GiB or more (the H200) keep none until measured there.
int l2pf_of(int fmt, size_t global_mem) {
  return TF_STEP_MOE || fmt == kWBf16 || !caps_measured_on(global_mem) ? 0 : 4;
}
// Params::inflight_gu's default: the in-flight cap for the gate_up's tiles past those prefetched into L2 --
// requested while the gate_up runs, where no hop waits on the bytes before the down's x. Run 577 (H100,
// Qwen3-8B MLX 4-bit SW 4 b=1 ctx 512, one process, the prefetch at 4 tiles; ms): the step's 2 stages 1.816 /
// 1.812, 3 1.816 / 1.810, 4 1.790 / 1.794, 6 1.789 / 1.796 (bf16 at any cap: within 0.2%). SW 4 (the default
// stage shape on parts under 100 GiB) only: the others' caps were not measured with it.
int inflight_gu_of(int fmt, size_t global_mem) {
  return TF_STEP_MOE || fmt != kWMlx4Sw4 || !caps_measured_on(global_mem) ? 0 : 4;
}

// Device memory of bytes `fill` (zeros), ordered on `stream` (the backend's stream does not wait for the
// legacy default stream: a plain cudaMemset could land after the kernels that fill the buffer on `stream`).
template <typename T>
T* dalloc(std::vector<void*>& owned, size_t n, cudaStream_t stream, int fill = 0) {
  void* p = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  owned.push_back(p);
  TF_CUDA_CHECK(cudaMemsetAsync(p, fill, n * sizeof(T), stream));
  return static_cast<T*>(p);
}

}  // namespace

struct State {
  std::vector<void*> owned;   // device allocations, freed with the step
  std::vector<Op> ops;        // the host copy of the op table (bind patches the K/V pools)
  std::vector<int> attn_ops;  // each layer's attention op (its kp / vp: the pools the device table holds)
  std::vector<__nv_bfloat16*> dbg;  // set_debug's x buffers, made on first use
  Op* d_ops = nullptr;
  std::vector<CUtensorMap> maps;  // each layer's K and V pool as tensor maps (bind), on the device: d_maps
  CUtensorMap* d_maps = nullptr;
  unsigned* epoch = nullptr;
  __nv_bfloat16* emb_row = nullptr;
  uint32_t* emb_words = nullptr;
  float* inv_freq = nullptr;
  const void* embed = nullptr;
  DType embed_dtype = DType::BF16;
  float embed_scale = 1.f, rope_factor = 1.f, scale = 1.f, eps = 0.f;
  int grid = 0, layers = 0;
  int format = kWBf16;          // the linears' (WFormat)
  int ablate = 0;               // Params::ablate (the probe instance only)
  int ring = 0;                 // set_ring: bf16's Params::ring (the probe only); 4-bit, nslots at most
  int nslots = 0;               // 4-bit: the ring's slots (as many of slot_bytes as kRingBytes holds)
  int slot_bytes = 0;           // 4-bit: a slot's bytes, the largest stage of the model's ops
  int nslots_lent = 0;          // 4-bit: the slots where a CTA lends the ring its attention staging region
  bool lend = true;             // whether CTAs without attention work lend it (TF_STEP_LEND=0: none)
  int inflight = -1;            // Params::inflight (-1: inflight_default)
  int inflight_default = 0;     // inflight_of the format and card
  int l2pf = -1;                // Params::l2pf (-1: l2pf_default)
  int l2pf_default = 0;         // TF_STEP_L2PF_TILES at make
  int inflight_gu = -1;         // Params::inflight_gu (-1: inflight_gu_default; set_inflight_gu)
  int inflight_gu_default = 0;  // inflight_gu_of the format and card, or TF_STEP_INFLIGHT_GU at make
  int early_bias = 0;           // Params::early_bias
  bool probe = false;
  unsigned long long* stamps = nullptr;  // set_probe: made on first use
  bool stamping = false;
  size_t packed = 0;
  ~State() {
    for (void* p : owned) cudaFree(p);
  }
};

// The interface (decode_step.h) on State.
class Impl final : public DecodeStep {
 public:
  explicit Impl(std::unique_ptr<State> s) : s_(std::move(s)) {}
  bool bind(int rows, int max_pos, int block_size, const std::vector<KvLayer>& kv,
            cudaStream_t stream) override;
  void run(const DeviceMeta& dm, float* logits, cudaStream_t stream) override;
  size_t packed_bytes() const override;
  void set_debug(bool on, cudaStream_t stream) override;
  std::vector<uint16_t> debug_x(int op) const override;
  std::vector<uint16_t> debug_y(int op) const override;
  std::vector<uint16_t> debug_res(int op) const override;
  void set_probe(bool on, bool stamps, cudaStream_t stream) override;
  void set_ablate(int what) override;
  void set_ring(int slots) override;
  int ring_slots() const override;
  void set_inflight(int stages) override;
  void set_l2pf(int tiles) override;
  void set_inflight_gu(int stages) override;
  void set_early_bias(int bias) override;
  std::vector<unsigned long long> stamps() const override;
  int grid() const override;

 private:
  std::unique_ptr<State> s_;
};

size_t Impl::packed_bytes() const {
  return s_->packed;
}

std::unique_ptr<DecodeStep> make_step(const DecodeStepModel& m, cudaStream_t stream, std::string* why) {
  auto refuse = [&](const std::string& w) {
    if (why) *why = "one-kernel decode step: " + w;
    return nullptr;
  };
  int fmt = -1;
#if TF_STEP_MOE
  if (const std::string w = unsupported_moe(m, &fmt); !w.empty()) return refuse(w);
#else
  if (const std::string w = unsupported(m, &fmt); !w.empty()) return refuse(w);
#endif
  int dev = 0;
  TF_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  if (fmt == kWMlx4 && !TF_STEP_MOE) {
    // Same bits as the 4-bit op chain; faster than it on an H200 since session 27 (Qwen3-8B b=1 ctx
    // 512: 2.06-2.11 against 2.18-2.19 ms, runs 314-315; `tensorfold generate` 461 vs 435 tok/s): taken
    // unless turned off.
    if (!DecodeStep::mlx4()) return refuse("MLX 4-bit linears (turned off: TF_DECODE_STEP_MLX4=0)");
    // TF_STEP_Q4_SW=2/4/8: K slices a 4-bit stage (same bits). Each card's default is its same-call A/Bs:
    // 4 on both. The H200: 1.699-1.714 ms against 2's 1.780, 8 a tie (run 480, every free slot in flight).
    // The H100: with every free slot in flight 2 was faster (1.986-2.004 against 2.027-2.039, runs 473 and
    // 475); with inflight_of's caps 4 is (1.916-1.927 at 2 stages against 2's 1.944-1.961 at 3, run 534), and
    // with the rings in slots of the model's stage too (7 slots 1.892-1.894, SW 2's 14 1.913-1.916, run 538).
    const int sw = env_int("TF_STEP_Q4_SW", 2, 8, 4);  // launch.h
    fmt = sw == 2 ? kWMlx4 : sw == 8 ? kWMlx4Sw8 : kWMlx4Sw4;
  }
  const int SW = sw_of(fmt), SK = fmt == kWBf16 ? kStageK : kQStageK;
  const size_t smem = smem_of(fmt);
  if (prop.major < 9) return refuse("needs sm_90 (bulk copies)");
  if (prop.multiProcessorCount < 2 * kHk) return refuse("fewer than 16 SMs (8 merge the attention)");
  if (prop.sharedMemPerBlockOptin < smem) return refuse("not enough shared memory a block");
#if TF_STEP_MOE
  const int64_t H = kHidden, QKV = (kHq + 2 * kHk) * kD;
#else
  const int64_t H = kHidden, QKV = (kHq + 2 * kHk) * kD, I = m.layers[0].down->in_features;
#endif
  const int64_t V = m.lm_head->weight.dim(0);
  // A stage's bytes (the 4-bit stage holds its pieces' scale words too) and a weight's packed bytes.
  auto stage_bytes = [&](const LinearWeight& w) {
    return fmt == kWBf16 ? kStageBytes : q_stage_bytes(SW, w.group_size);
  };
  auto packed_of = [&](const LinearWeight& w) {
    return size_t(w.out_features / 16) * size_t(w.in_features / SK / SW) * size_t(stage_bytes(w));
  };
  size_t packed = packed_of(*m.lm_head);
  for (const DecodeStepLayer& L : m.layers)
    packed += packed_of(*L.qkv) + packed_of(*L.o) +
              (!L.moe          ? packed_of(*L.gate_up) + packed_of(*L.down)
               : fmt == kWBf16 ? packed_of(L.moe->router)
                               : size_t(L.moe->router.out_features) * size_t(H) * 2);  // (bf16 pieces)
  size_t free = 0, total = 0;
  TF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (packed > free / 2)
    return refuse("its packed weights (" + std::to_string(packed >> 20) +
                  " MiB) would take more than half of the " + std::to_string(free >> 20) + " MiB free");

  auto st = std::make_unique<State>();
  State& s = *st;
  std::vector<void*>& own = s.owned;
  s.packed = packed;
  s.embed = m.embed->raw();
  s.embed_dtype = m.embed->dtype();
  s.embed_scale = m.embed_scale;
  s.rope_factor = m.rope.attention_factor;
  s.scale = m.attn.scale;
  s.eps = m.norm_eps;
  s.grid = prop.multiProcessorCount;
  // TF_STEP_GRID=n (tests): n CTAs (16 .. one an SM) as an sm_90 part with fewer SMs would run it (H100 PCIe
  // 114, H20 78): below the limit some CTAs then take two or more attention units a layer (the next one
  // staged during the current one) and the merging CTAs early chunks, paths an H200 takes only past it.
  if (const char* g = std::getenv("TF_STEP_GRID"); g && *g)
    s.grid = std::clamp(std::atoi(g), 2 * kHk, prop.multiProcessorCount);
  s.layers = int(m.layers.size());
  s.format = fmt;
  // TF_STEP_INFLIGHT_STAGES=n: the stages in flight instead of inflight_of's (0: every free slot; same bits;
  // the GPU tests run the capped and uncapped producer on every card).
  s.inflight_default = env_int("TF_STEP_INFLIGHT_STAGES", 0, 1 << 20, inflight_of(fmt, prop.totalGlobalMem));
  // TF_STEP_L2PF_TILES=n: each CTA's first n gate_up tiles of a layer prefetched into L2 during the attention
  // instead of l2pf_of's (the dense shape; same bits; the GPU test runs 4 on 132 and 40 CTAs).
  s.l2pf_default = env_int("TF_STEP_L2PF_TILES", 0, 64, l2pf_of(fmt, prop.totalGlobalMem));
  // TF_STEP_INFLIGHT_GU=n: the in-flight cap for the gate_up's tiles past the prefetched ones instead of
  // inflight_gu_of's (same bits; the GPU test runs 3).
  s.inflight_gu_default = env_int("TF_STEP_INFLIGHT_GU", 0, 64, inflight_gu_of(fmt, prop.totalGlobalMem));
  // TF_STEP_RING_SLOTS=n (tests): the 4-bit ring's slots in use, fewer than fit (set_ring's; same bits).
  s.ring = env_int("TF_STEP_RING_SLOTS", 0, 1 << 20, 0);
  s.lend = env_switch("TF_STEP_LEND", true);  // launch.h
  s.epoch = dalloc<unsigned>(own, 1, stream);
  s.emb_row = dalloc<__nv_bfloat16>(own, H, stream);
  s.emb_words = dalloc<uint32_t>(own, H, stream);
  s.inv_freq = dalloc<float>(own, kD / 2, stream);
  TF_CUDA_CHECK(
      cudaMemcpyAsync(s.inv_freq, m.rope.inv_freq.data(), kD / 2 * 4, cudaMemcpyHostToDevice, stream));

  // Packs w into its stages; the op's weights, stage bytes and 4-bit variant.
  auto pack = [&](Op& o, const LinearWeight& w, bool gate_up) {
    const int n = int(w.out_features), k = int(w.in_features);
    const int stages = (n / 16) * (k / SK / SW);
    o.sbytes = stage_bytes(w);
    unsigned char* wp = dalloc<unsigned char>(own, packed_of(w), stream);
    if (fmt == kWBf16) {
      pack_kernel<<<stages, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(w.weight.raw()),
                                              reinterpret_cast<__nv_bfloat16*>(wp), n, k,
                                              gate_up ? n / 2 : 0);
    } else {
      const int gshift = chunk_shift(w);  // 0-2: is_mlx4 takes groups of 32-128
      o.qsel = q4_sel(w.subnormal_codes, gshift);
      auto* pk = SW == 2 ? pack_q4_kernel<2> : SW == 4 ? pack_q4_kernel<4> : pack_q4_kernel<8>;
      pk<<<stages, 256, 0, stream>>>(static_cast<const uint32_t*>(w.weight.raw()),
                                     static_cast<const uint32_t*>(w.scales.raw()), wp, k, gate_up ? n / 2 : 0,
                                     gshift, o.sbytes);
    }
    TF_CUDA_LAUNCH_CHECK();
    o.wp = wp;
  };
#if TF_STEP_MOE
  // The 4-bit instance's router: dequantized to bf16 (dequantize_bf16: the values linear_quantized
  // multiplies) and packed in pieces of kRouterPieceK (pack_bf16_pieces_kernel: a stage the size of a 4-bit
  // one).
  std::vector<Tensor> dequantized;  // (alive until the packing is done: the stream is synchronized below)
  auto pack_bf16_pieces = [&](Op& o, const LinearWeight& w) {
    const int n = int(w.out_features), k = int(w.in_features);
    const void* src = w.weight.raw();
    if (!is_dense_bf16(&w, n, k)) {
      dequantized.push_back(dequantize_bf16(w, stream));
      src = dequantized.back().raw();
    }
    o.sk = kRouterPieceK;
    o.sbytes = 16 * kSW * kRouterPieceK * 2;
    unsigned char* wp = dalloc<unsigned char>(own, size_t(n) * size_t(k) * 2, stream);
    pack_bf16_pieces_kernel<<<(n / 16) * (k / kRouterPieceK / kSW), 256, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(src), reinterpret_cast<__nv_bfloat16*>(wp), k, kRouterPieceK);
    TF_CUDA_LAUNCH_CHECK();
    o.wp = wp;
  };
#endif
  auto bf = [](const Tensor* t) { return static_cast<const __nv_bfloat16*>(t->raw()); };
  int tiles = 0;
  auto add = [&](Op o) {
    o.tiles = o.n / 16;
    o.tile_begin = tiles;
    tiles += o.tiles;
    o.eps = m.norm_eps;
    s.ops.push_back(o);
  };
  const uint32_t* res = s.emb_words;  // layer 0: the embedding row, rms_norm'd (no add)
  const uint32_t* add_in = nullptr;
#if TF_STEP_MOE
  // The experts as tensor maps (a stage by two boxes: the step 3.88 -> 3.00 ms, run 545 on an H100; 16 row
  // copies a stage were its bottleneck, run 544); with TF_STEP_MOE_TMA=0, or where a map cannot be encoded,
  // the layer's stages go by row copies (the same bits).
  const bool want_tma = env_switch("TF_STEP_MOE_TMA", true);
  // The 4-bit down's stages a rank (Op::dsplit): halves by default, read by the rank's warp (run 561: 16
  // stages a tile of 3.5 KB instead of 32 of 2.5 KB, and a 4.5 KB slot holding 3.5 KB instead of 2.5);
  // TF_STEP_MOE_Q4_DOWN_STAGES=4: owners' (two K slices, read by the owner's warp of the rank's team).
  const int dsplit = env_int("TF_STEP_MOE_Q4_DOWN_STAGES", 2, 4, 2) == 4 ? 4 : 2;
#endif
  for (const DecodeStepLayer& L : m.layers) {
    uint32_t* th1 = dalloc<uint32_t>(own, H, stream);
    uint32_t* tqkv = dalloc<uint32_t>(own, QKV, stream);
    uint32_t* aout = dalloc<uint32_t>(own, kHq * kD, stream);
    uint32_t* to = dalloc<uint32_t>(own, H, stream);
    uint32_t* th2 = dalloc<uint32_t>(own, H, stream);
#if TF_STEP_MOE
    const MoeWeights& mw = *L.moe;
    const int E = int(mw.gate_up.size()), I = int(mw.down[0].in_features);
    uint32_t* tgu = dalloc<uint32_t>(own, size_t(mw.top_k) * I, stream);  // act words [top_k][inter]
#else
    uint32_t* tgu = dalloc<uint32_t>(own, I, stream);
#endif
    uint32_t* td = dalloc<uint32_t>(own, H, stream);
    Op qkv{};
    pack(qkv, *L.qkv, false);
    qkv.n = int(QKV), qkv.k = int(H), qkv.xkind = kXAddNorm;
    qkv.x = add_in, qkv.res = res, qkv.res_out = th1, qkv.nw = bf(L.input_norm), qkv.y = tqkv;
    qkv.res_const = add_in == nullptr;
    add(qkv);
    Op o{};
    pack(o, *L.o, false);
    o.n = int(H), o.k = kHq * kD, o.xkind = kXAttnMerge, o.x = aout, o.y = to;
    o.qn = bf(L.q_norm), o.kn = bf(L.k_norm);
    o.part = dalloc<uint32_t>(own, size_t(kHq) * kMaxChunks * kRecW, stream, 0xff);  // kUnwritten
    o.qkv = tqkv, o.aout = aout;
    s.attn_ops.push_back(int(s.ops.size()));
    add(o);
#if TF_STEP_MOE
    // The router (packed, its logits as f32 words; its add + norm writes the residual), then the experts'
    // gate_up and down+combine ops, which read the experts where they are: tables of their weights.
    std::vector<const __nv_bfloat16*> tab(2 * size_t(E));
    for (int e = 0; e < E; ++e) tab[size_t(e)] = bf(&mw.gate_up[size_t(e)].weight);
    for (int e = 0; e < E; ++e) tab[size_t(E + e)] = bf(&mw.down[size_t(e)].weight);
    const __nv_bfloat16** dtab = dalloc<const __nv_bfloat16*>(own, tab.size(), stream);
    TF_CUDA_CHECK(
        cudaMemcpyAsync(dtab, tab.data(), tab.size() * sizeof(tab[0]), cudaMemcpyHostToDevice, stream));
    auto* logit_words = dalloc<unsigned long long>(own, size_t(E), stream);
    std::vector<CUtensorMap> maps(2 * size_t(E)), smaps;
    const bool q4 = fmt != kWBf16;
    bool tma = want_tma || q4;   // (the 4-bit experts: by tensor maps only)
    int dquads = 0, dwords = 0;  // the 4-bit down's stage: quads a box, scale words a row
    const int gsg = q4 ? chunk_shift(mw.gate_up[0]) : 0, gsd = q4 ? chunk_shift(mw.down[0]) : 0;
    if (q4) {
      for (int p = 0; p < dsplit; ++p) {  // the part's chunks c0 .. c1 (inter / 32 a rank)
        const int c0 = p * (I / 32 / dsplit), c1 = c0 + I / 32 / dsplit - 1;
        dquads = std::max(dquads, (c1 >> 2) - (c0 >> 2) + 1);
        dwords = std::max(dwords, (c1 >> gsd) - q4_down_word0(c0, gsd) + 1);
      }
      dwords = (dwords + 3) / 4 * 4;  // (a box row: a multiple of 16 bytes)
      smaps.resize(2 * size_t(E));
      for (int e = 0; e < E && tma; ++e) {
        const LinearWeight &g = mw.gate_up[size_t(e)], &dw = mw.down[size_t(e)];
        tma = make_quads_tensor_map(&maps[size_t(e)], g.weight.raw(), 2 * I, H, 4) &&
              make_quads_tensor_map(&maps[size_t(E + e)], dw.weight.raw(), H, I, dquads) &&
              make_words_tensor_map(&smaps[size_t(e)], g.scales.raw(), 2 * I, g.scales.dim(1), 16 >> gsg) &&
              make_words_tensor_map(&smaps[size_t(E + e)], dw.scales.raw(), H, dw.scales.dim(1), dwords);
      }
      if (!tma) return refuse("an MLX 4-bit expert's codes or scale words cannot be a tensor map");
    }
    for (int e = 0; e < E && tma && !q4; ++e)
      tma = make_rows8_tensor_map(&maps[size_t(e)], mw.gate_up[size_t(e)].weight.raw(), 2 * I, H, 8) &&
            make_rows8_tensor_map(&maps[size_t(E + e)], mw.down[size_t(e)].weight.raw(), H, I, I / 256);
    CUtensorMap *dmaps = nullptr, *dsmaps = nullptr;
    if (!tma && want_tma)
      log_warning("one-kernel decode step: an expert's weight cannot be a tensor map; layer " +
                  std::to_string(s.attn_ops.size() - 1) + "'s experts go by row copies");
    if (tma) {
      dmaps = dalloc<CUtensorMap>(own, maps.size(), stream);
      TF_CUDA_CHECK(cudaMemcpyAsync(dmaps, maps.data(), maps.size() * sizeof(CUtensorMap),
                                    cudaMemcpyHostToDevice, stream));
    }
    if (q4) {
      dsmaps = dalloc<CUtensorMap>(own, smaps.size(), stream);
      TF_CUDA_CHECK(cudaMemcpyAsync(dsmaps, smaps.data(), smaps.size() * sizeof(CUtensorMap),
                                    cudaMemcpyHostToDevice, stream));
    }
    Op rt{};
    if (q4)
      pack_bf16_pieces(rt, mw.router);
    else
      pack(rt, mw.router, false);
    rt.n = E, rt.k = int(H), rt.xkind = kXAddNorm, rt.moe = kMoeRouter;
    rt.x = to, rt.res = th1, rt.res_out = th2, rt.nw = bf(L.post_norm), rt.y = logit_words;
    add(rt);
    Op gu{};
    gu.moe = kMoeGateUp, gu.rlog = logit_words, gu.ex = dtab, gu.experts = E, gu.top_k = mw.top_k,
    gu.inter = I, gu.norm_topk = mw.norm_topk_prob, gu.exmap = dmaps, gu.exsc = dsmaps;
    // a stage: 16 rows of two K slices (4-bit: their codes, 4 KB, then their scale words)
    gu.sbytes = q4 ? 4096 + 2 * 8 * (16 >> gsg) * 4 : 16 * kSW * kStageK * 2;
    if (q4) gu.qsel = q4_sel(mw.gate_up[0].subnormal_codes, gsg);
    gu.n = 2 * mw.top_k * I, gu.k = int(H), gu.xkind = kXAddNorm, gu.silu_out = 1;
    // (the same add + norm as the router's: its residual to a scratch buffer)
    gu.x = to, gu.res = th1, gu.res_out = dalloc<uint32_t>(own, H, stream), gu.nw = bf(L.post_norm),
    gu.y = tgu;
    add(gu);
    Op d = gu;
    d.ex = dtab + E, d.exmap = dmaps ? dmaps + E : nullptr, d.silu_out = 0, d.moe = kMoeDown;
    // A stage: 16 rows of two K slices (inter / 4 k-values) of one rank, or (dranks) of two where they fit a
    // slot (the kernel's down_ranks; variant 5: one).
    d.dranks = mw.top_k % 2 == 0 && 32 * (I / 2 + 64) <= kBf16SlotBytes ? 2 : 1;
    d.sbytes = 16 * (I / 2);  // (a stage: the kernel's down_ranks x this)
    if (q4) {  // (4-bit: a part of one rank a stage, two boxes of dquads quads, then the scale words)
      d.exsc = dsmaps + E, d.qsel = q4_sel(mw.down[0].subnormal_codes, gsd), d.dranks = 1, d.dsplit = dsplit;
      d.dquads = dquads, d.dwords = dwords, d.sbytes = 2 * dquads * 512 + 2 * 8 * dwords * 4;
    }
    d.n = int(H), d.k = mw.top_k * I, d.xkind = kXCopy, d.x = tgu, d.res = nullptr, d.res_out = nullptr,
    d.nw = nullptr, d.y = td;
    add(d);
#else
    Op gu{};
    pack(gu, *L.gate_up, true);
    gu.n = int(2 * I), gu.k = int(H), gu.xkind = kXAddNorm;
    gu.x = to, gu.res = th1, gu.res_out = th2, gu.nw = bf(L.post_norm), gu.y = tgu, gu.silu_out = 1;
    add(gu);
    Op d{};
    pack(d, *L.down, false);
    d.n = int(H), d.k = int(I), d.xkind = kXCopy, d.x = tgu, d.y = td;
    add(d);
#endif
    res = th2, add_in = td;
  }
  Op lm{};
  pack(lm, *m.lm_head, false);
  lm.n = int(V), lm.k = int(H), lm.xkind = kXAddNorm, lm.y_f32 = 1;
  lm.x = add_in, lm.res = res, lm.res_out = dalloc<uint32_t>(own, H, stream), lm.nw = bf(m.final_norm);
  add(lm);
  if (fmt != kWBf16) {   // the 4-bit ring: slots of the largest stage, as many as fit (kRingBytes)
    int64_t stages = 0;  // a bound on a CTA's stage count j (Params::slot_magic's division takes j < 2^28)
    for (const Op& o : s.ops) {
      s.slot_bytes = std::max(s.slot_bytes, (o.sbytes + 127) / 128 * 128);
      stages += int64_t(o.tiles) * (o.k / SK / SW);
    }
    const int most = ring_of(fmt);
    const int bytes = by_format(fmt, [](auto w) { return kRingBytes<decltype(w)::value>; });
    s.nslots = std::min(most, bytes / s.slot_bytes);
    s.nslots_lent = std::min(most, (bytes + kAttnBytes) / s.slot_bytes);
    if (s.nslots < 2) return refuse("its 4-bit stages do not fit two ring slots");
    if (stages >= (int64_t(1) << 28)) return refuse("more than 2^28 weight stages");
  }
#if TF_STEP_MOE
  if (fmt == kWBf16) s.nslots = kStages, s.nslots_lent = kStagesLent;  // (the lent ring; not variant 8)
#endif
  s.d_ops = dalloc<Op>(own, s.ops.size(), stream);
  s.maps.resize(2 * m.layers.size());
  s.d_maps = dalloc<CUtensorMap>(own, s.maps.size(), stream);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    Op& o = s.ops[size_t(s.attn_ops[l])];
    o.kmap = s.d_maps + 2 * l, o.vmap = s.d_maps + 2 * l + 1;
  }
  for (auto* fn : {kernel_of(fmt, false), kernel_of(fmt, true)})
    TF_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  TF_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_of(fmt, false), kThreads, smem));
  if (per_sm != 1) return refuse("the kernel does not fit one CTA an SM");
  TF_CUDA_CHECK(cudaStreamSynchronize(stream));  // the packing
  return std::make_unique<Impl>(std::move(st));
}

void Impl::set_debug(bool on, cudaStream_t stream) {
  State& s = *s_;
  if (on && s.dbg.empty())
    for (size_t i = 0; i < s.ops.size(); ++i) s.dbg.push_back(dalloc<__nv_bfloat16>(s.owned, kMaxK, stream));
  for (size_t i = 0; i < s.ops.size(); ++i) s.ops[i].dbg = on ? s.dbg[i] : nullptr;
  TF_CUDA_CHECK(
      cudaMemcpyAsync(s.d_ops, s.ops.data(), s.ops.size() * sizeof(Op), cudaMemcpyHostToDevice, stream));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream));
}
namespace {
std::vector<uint16_t> words_bf16(const void* p, int n) {
  std::vector<uint32_t> w(static_cast<size_t>(n));
  TF_CUDA_CHECK(cudaMemcpy(w.data(), p, size_t(n) * 4, cudaMemcpyDeviceToHost));
  std::vector<uint16_t> b(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) b[size_t(i)] = uint16_t(w[size_t(i)] & 0xffffu);
  return b;
}
}  // namespace
void Impl::set_probe(bool on, bool stamps, cudaStream_t stream) {
  State& s = *s_;
  s.probe = on, s.stamping = on && stamps;
  const size_t n = size_t(s.layers) * s.grid * kStampSlots;
  if (s.stamping && !s.stamps)
    s.stamps = dalloc<unsigned long long>(s.owned, n, stream);  // zeroed
  else if (s.stamping)
    TF_CUDA_CHECK(cudaMemsetAsync(s.stamps, 0, n * 8, stream));
}
std::vector<unsigned long long> Impl::stamps() const {
  const State& s = *s_;
  std::vector<unsigned long long> v(s.stamps ? size_t(s.layers) * s.grid * kStampSlots : 0);
  if (!v.empty()) TF_CUDA_CHECK(cudaMemcpy(v.data(), s.stamps, v.size() * 8, cudaMemcpyDeviceToHost));
  return v;
}
void Impl::set_early_bias(int bias) {
  s_->early_bias = bias;
}
void Impl::set_ablate(int what) {
  s_->ablate = what;
}
void Impl::set_ring(int slots) {
  s_->ring = slots;
}
void Impl::set_l2pf(int tiles) {
  s_->l2pf = tiles;
}
void Impl::set_inflight_gu(int stages) {
  s_->inflight_gu = stages;
}
void Impl::set_inflight(int stages) {
  s_->inflight = stages;
}
int Impl::ring_slots() const {
  return s_->format == kWBf16 ? kStages : s_->nslots;
}
int Impl::grid() const {
  return s_->grid;
}
std::vector<uint16_t> Impl::debug_x(int op) const {
  const Op& o = s_->ops.at(size_t(op));
  if (!o.dbg) return {};
  std::vector<uint16_t> b(size_t(o.k));
  TF_CUDA_CHECK(cudaMemcpy(b.data(), o.dbg, b.size() * 2, cudaMemcpyDeviceToHost));
  return b;
}
std::vector<uint16_t> Impl::debug_y(int op) const {
  const Op& o = s_->ops.at(size_t(op));
  if (o.y_f32) return {};
#if TF_STEP_MOE
  if (o.moe == kMoeRouter) return {};  // (f32 logit words)
#endif
  return words_bf16(o.y, o.silu_out ? o.n / 2 : o.n);
}
std::vector<uint16_t> Impl::debug_res(int op) const {
  const Op& o = s_->ops.at(size_t(op));
  if (o.xkind != kXAddNorm) return {};
  return words_bf16(o.res_out, o.k);
}

bool Impl::bind(int rows, int max_pos, int block_size, const std::vector<KvLayer>& kv, cudaStream_t stream) {
  State& s = *s_;
  if (rows != 1 || block_size != kBlock || max_pos < 0 || max_pos >= kLimit || kv.size() != s.attn_ops.size())
    return false;
  bool changed = false;
  for (size_t l = 0; l < kv.size(); ++l) {
    const Tensor &k = kv[l].k, &v = kv[l].v;
    if (k.dtype() != DType::BF16 || v.dtype() != DType::BF16 || k.dim(-1) != kD || k.dim(-2) != kHk ||
        k.dim(-3) != kBlock || v.shape() != k.shape())
      return false;
    Op& o = s.ops[s.attn_ops[l]];
    if (o.kp != k.raw() || o.vp != v.raw()) {
      const int64_t slots = k.dim(0) * kBlock;
      if (!make_kv_tensor_map(&s.maps[2 * l], k.raw(), slots, kHk, kD, kRS, kBlock) ||
          !make_kv_tensor_map(&s.maps[2 * l + 1], v.raw(), slots, kHk, kD, kRS, kBlock)) {
        for (int a : s.attn_ops) s.ops[size_t(a)].kp = s.ops[size_t(a)].vp = nullptr;  // all again next time
        return false;
      }
      o.kp = static_cast<__nv_bfloat16*>(const_cast<void*>(k.raw()));
      o.vp = static_cast<__nv_bfloat16*>(const_cast<void*>(v.raw()));
      changed = true;
    }
  }
  if (changed) {  // stream-ordered: a launch still running reads the old table and maps
    TF_CUDA_CHECK(cudaMemcpyAsync(s.d_maps, s.maps.data(), s.maps.size() * sizeof(CUtensorMap),
                                  cudaMemcpyHostToDevice, stream));
    TF_CUDA_CHECK(
        cudaMemcpyAsync(s.d_ops, s.ops.data(), s.ops.size() * sizeof(Op), cudaMemcpyHostToDevice, stream));
  }
  return true;
}

void Impl::run(const DeviceMeta& dm, float* logits, cudaStream_t stream) {
  State& s = *s_;
  embedding(s.embed, s.embed_dtype, dm.tokens, s.emb_row, DType::BF16, 1, kHidden, s.embed_scale, stream);
  step_prologue<<<1, 256, 0, stream>>>(s.epoch, s.emb_row, s.emb_words, kHidden);
  TF_CUDA_LAUNCH_CHECK();
  Params p{};
  p.ops = s.d_ops, p.nops = int(s.ops.size()), p.epoch_word = s.epoch;
  p.positions = dm.positions, p.slots = dm.slots, p.row_seq = dm.row_seq, p.table_offsets = dm.table_offsets;
  p.tables = dm.tables, p.inv_freq = s.inv_freq, p.rope_factor = s.rope_factor, p.scale = s.scale;
  p.qk_eps = s.eps, p.logits = logits;
#if TF_STEP_MOE
  // The MoE shape's timing ablations (benches; wrong bits): TF_STEP_MOE_ABLATE=1 no tile arithmetic, 3 no
  // routing wait in the producer (experts 0 .. top_k - 1) (2, run 544's expert stage as one contiguous copy,
  // is retired: the tensor maps answered it); and a variant with the same bits: 4 the combine's weights
  // routed at the down's x (before run 546: the default routes them at the gate_up's); 5 one rank a down
  // stage (before run 549: the default takes two where they fit, Op::dranks; run 549, H100: 3.166 ms with
  // one, 2.966-2.971 with two); 8 the bf16 ring's 8 slots everywhere (before run 550: the default lends a
  // CTA without attention work its attention staging region, 12 slots; run 550, H100: 3.015 / 3.019 ms with
  // 8, 2.991 / 2.992 with 12; TF_STEP_LEND=0 lends nowhere, in every instance). Retired: run
  // 546's 5 (every expert's tensor maps prefetched during the routing wait: 3.46 ms against 2.95), run 549's
  // 6 (the combine's one barrier a tile: 3.212) and 7 (the down's x by rank: 3.170), run 555's 9 (the
  // bf16 experts' tensor-map stage sources derived once a tile, BfTileSrc, is now the default: 2.921-2.927
  // ms against 2.953-2.954). The MLX 4-bit instance takes none of 4, 5, 8 (it always lends); its own
  // same-bits variants: 10 its producer's stages one at a time (before session 65: the default issues four
  // at a time, lane l stage s + l), 11 eight at a time. Both instances: 12, no warm-up call of the routing
  // before its logits are there (poll_route). Retired: run 571's 13 and 14 (the 4-bit router's tiles, and the
  // router's and o's, on both teams, warp w its K slice w: 2.349 and 2.375 ms against 2.335). set_ablate's
  // value where set.
  p.ablate = s.ablate ? s.ablate : env_int("TF_STEP_MOE_ABLATE", 0, 12, 0);
#else
  p.ablate = s.probe ? s.ablate : 0;
#endif
  p.ring = s.probe ? s.ring : 0;
  p.nslots = s.ring >= 2 && s.ring < s.nslots ? s.ring : s.nslots;  // (4-bit; set_ring: fewer)
  p.slot_bytes = s.slot_bytes;
  // Lent slots only with the ring as it fits (set_ring: a fixed depth everywhere).
  p.nslots_lent = s.lend && s.ring == 0 ? s.nslots_lent : 0;
  auto magic = [](int n) { return uint32_t(((uint64_t(1) << 32) + uint64_t(n) - 1) / uint64_t(n)); };
  if (p.nslots > 0) p.slot_magic = magic(p.nslots);
  if (p.nslots_lent > 0) p.slot_magic_lent = magic(p.nslots_lent);
  p.early_bias = s.early_bias;
  p.inflight = s.inflight < 0 ? s.inflight_default : s.inflight;
  p.l2pf = s.l2pf < 0 ? s.l2pf_default : s.l2pf;
  p.inflight_gu = s.inflight_gu < 0 ? s.inflight_gu_default : s.inflight_gu;
  p.stamps = s.stamping ? s.stamps : nullptr;
  p.tile_log = s.stamping && std::getenv("TF_STEP_TILE_LOG") != nullptr;  // (perturbs the other stamps)
  // Cooperative: every CTA polls words the others write, so all of them must be resident at once; the
  // launch guarantees it or fails (another context holding SMs) instead of hanging until the watchdog.
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(s.grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem_of(s.format);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel_of(s.format, s.probe), p));
}

}  // namespace tf::cuda::TF_STEP_NS
