// The CUDA backend's Backend::moe: router linear, routing, grouping, grouped gate_up GEMM (bf16 or MLX
// 4/8-bit experts), silu_mul, grouped down GEMM and combine, all queued on the backend's stream with no
// host sync. Pair and slot counts (rows * top_k) are known on the host; only the per-expert tiles live on
// the device, so the GEMM grids are launched at their upper bound and idle blocks exit.
#include "ops/cuda/moe_fused.h"

#include <cuda_runtime.h>

#include <atomic>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/quant_linear.h"  // chunk_shift

namespace tf::cuda {
namespace {

// Device tables of the experts' weight and scale pointers: [gate_up 0..E-1, down 0..E-1] each, then the
// layer's barrier words of moe_decode (kMoeDecodeBarrierWords, zeroed, 8-byte aligned).
// bf16 experts: their tensor maps too (moe_wgmma_maps; gate_up's, down's), null where not made.
struct Prepared {
  void* table = nullptr;
  unsigned* barrier = nullptr;
  void* maps[2] = {nullptr, nullptr};
  ~Prepared() {
    if (table) cudaFree(table);
    for (void* m : maps)
      if (m) cudaFree(m);
  }
};

bool dense_bf16(const LinearWeight& w) {
  return w.format == LinearWeight::Format::Dense && w.weight.device() == Device::CUDA &&
         w.weight.dtype() == DType::BF16;
}

// MLX affine 4- or 8-bit kept packed by upload_quantized_linear with bf16 scales (one U32 scale|bias a
// group): the layout the grouped GEMM's MlxRows reads. Other widths and f16/f32 scales are not fused.
bool packed_mlx(const LinearWeight& w) {
  return w.format == LinearWeight::Format::MlxAffine && (w.bits == 4 || w.bits == 8) &&
         w.weight.device() == Device::CUDA && w.scales.defined() && w.scales.dtype() == DType::U32 &&
         w.scales.ndim() == 2 && w.scales.dim(0) == w.out_features && chunk_shift(w) >= 0 &&
         w.out_features * w.in_features * w.bits / 8 < (int64_t(1) << 31);
}

// Every expert of one projection in the same fusable format and shape [n, k].
bool fusable_projection(const std::vector<LinearWeight>& ws, int64_t n, int64_t k) {
  const LinearWeight& w0 = ws[0];
  const bool dense = dense_bf16(w0);
  if (!dense && !packed_mlx(w0)) return false;
  for (const auto& w : ws) {
    if (w.bias.defined() && w.bias.numel() > 0) return false;
    if (w.out_features != n || w.in_features != k) return false;
    if (dense ? !dense_bf16(w) || w.weight.dim(0) != n || w.weight.dim(1) != k
              : !packed_mlx(w) || w.bits != w0.bits || w.group_size != w0.group_size ||
                    w.subnormal_codes != w0.subnormal_codes || w.scales.dim(1) != w0.scales.dim(1))
      return false;
  }
  return true;
}

const void* const* tables(MoeWeights& w, cudaStream_t s) {
  if (!w.prepared) {
    std::vector<const void*> ptrs;
    for (const auto& e : w.gate_up) ptrs.push_back(e.weight.raw());
    for (const auto& e : w.down) ptrs.push_back(e.weight.raw());
    for (const auto& e : w.gate_up) ptrs.push_back(e.scales.defined() ? e.scales.raw() : nullptr);
    for (const auto& e : w.down) ptrs.push_back(e.scales.defined() ? e.scales.raw() : nullptr);
    auto p = std::make_shared<Prepared>();
    const size_t bytes = (ptrs.size() * sizeof(void*) + 255) / 256 * 256;
    TF_CUDA_CHECK(cudaMalloc(&p->table, bytes + kMoeDecodeBarrierWords * sizeof(unsigned)));
    TF_CUDA_CHECK(
        cudaMemcpyAsync(p->table, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice, s));
    p->barrier = reinterpret_cast<unsigned*>(static_cast<char*>(p->table) + bytes);
    TF_CUDA_CHECK(cudaMemsetAsync(p->barrier, 0, kMoeDecodeBarrierWords * sizeof(unsigned), s));
    TF_CUDA_CHECK(cudaStreamSynchronize(s));  // once per layer, at the first forward
    for (int j = 0; j < 2; ++j) {
      const std::vector<LinearWeight>& ws = j ? w.down : w.gate_up;
      if (!dense_bf16(ws[0])) continue;
      std::vector<const void*> wp;
      for (const auto& e : ws) wp.push_back(e.weight.raw());
      p->maps[j] = moe_wgmma_maps(wp, int(ws[0].out_features), int(ws[0].in_features), s);
    }
    w.prepared = p;
  }
  return static_cast<const void* const*>(static_cast<Prepared*>(w.prepared.get())->table);
}

unsigned* barrier_of(const MoeWeights& w) {
  return static_cast<Prepared*>(w.prepared.get())->barrier;
}

// A packed MLX weight's layout as the kernels read it.
MoeLayout packed_layout(const LinearWeight& w) {
  MoeLayout x;
  x.bits = w.bits;
  x.row_bytes = w.in_features * w.bits / 8;
  x.groups = int(w.scales.dim(1));
  x.chunk_shift = chunk_shift(w);
  x.quad_chunks = int(w.in_features / 128 * 4);
  x.subnormal = w.subnormal_codes;
  return x;
}

// The grouped GEMM's view of one projection (all experts alike, checked by moe_fusable).
MoeExperts experts_of(const LinearWeight& w0, int experts, const void* const* weights,
                      const void* const* scales, const void* maps) {
  MoeExperts x;
  x.experts = experts;
  x.weights = weights;
  x.maps = maps;
  if (w0.format == LinearWeight::Format::Dense) return x;
  x.scales = scales;
  static_cast<MoeLayout&>(x) = packed_layout(w0);
  return x;
}

// The router as moe_decode reads it (MoeRouter): dense bf16, or MLX 4/8-bit kept packed with bf16 scales; no
// bias; [experts, hidden]. weight null where it is none of these.
MoeRouter router_of(const LinearWeight& w, int64_t experts, int64_t hidden) {
  MoeRouter r;
  if (w.bias.defined() && w.bias.numel() > 0) return r;
  if (dense_bf16(w) && w.weight.ndim() == 2 && w.weight.dim(0) == experts && w.weight.dim(1) == hidden) {
    r.weight = w.weight.raw();
    r.row_bytes = w.weight.dim(1) * 2;
  } else if (packed_mlx(w) && w.out_features == experts && w.in_features == hidden) {
    r.weight = w.weight.raw();
    r.scales = w.scales.raw();
    static_cast<MoeLayout&>(r) = packed_layout(w);
  }
  return r;
}

std::atomic<bool> g_enabled{true};                                  // set_moe_fused
std::atomic<unsigned> g_repeat{0};                                  // set_moe_repeat
std::atomic<bool> g_add_norm{env_switch("TF_MOE_ADD_NORM", true)};  // set_moe_add_norm
// An empty 1-block dependent kernel after the one-kernel MoE: run 411 (30B-A3B MLX 4-bit b=1), same call in
// three processes 1.982 / 1.992 / 2.000 -> 1.967 / 1.957 / 1.962 ms; the product's forward, processes
// alternating, 2.014 / 1.991 ms off vs 1.958 / 1.964 on. Why is not known (docs/cuda-notes.md "Session 38").
std::atomic<bool> g_empty_after{env_switch("TF_MOE_EMPTY_AFTER", true)};  // set_moe_empty_after

// TF_MOE_FUSED=0 (read once) sends every MoE layer down the host-routed default path: a diagnosis
// switch that isolates the fused kernels from the rest of the model.
bool fused_disabled() {
  static const bool off = !env_switch("TF_MOE_FUSED", true);  // launch.h
  return off || !g_enabled.load(std::memory_order_relaxed);
}

// Calls f, twice where bit i of set_moe_repeat's mask is set (benches).
template <typename F>
void repeat(int i, F&& f) {
  f();
  if (g_repeat.load(std::memory_order_relaxed) >> i & 1) f();
}

// A layer's experts as the kernels read them (tables uploaded at the first call), and the router where it
// runs inside moe_decode (weight null: the router linear runs first).
struct LayerView {
  MoeExperts gate_up, down;
  MoeRouter router;
  bool one_kernel = false;  // moe_decode takes the call
};
LayerView view_of(MoeWeights& w, cudaStream_t s, int rows, int hidden) {
  const int E = int(w.gate_up.size()), I = int(w.down[0].in_features);
  const void* const* tab = tables(w, s);
  LayerView v;
  const auto* prep = static_cast<const Prepared*>(w.prepared.get());
  v.gate_up = experts_of(w.gate_up[0], E, tab, tab + 2 * E, prep->maps[0]);
  v.down = experts_of(w.down[0], E, tab + E, tab + 3 * E, prep->maps[1]);
  v.router = router_of(w.router, E, hidden);
  if (v.router.weight && !moe_decode_ok(v.gate_up, v.down, rows, w.top_k, hidden, I, v.router))
    v.router = MoeRouter{};
  v.one_kernel = v.router.weight || moe_decode_ok(v.gate_up, v.down, rows, w.top_k, hidden, I);
  return v;
}

}  // namespace

bool moe_fusable(const MoeWeights& w, int64_t hidden) {
  if (fused_disabled()) return false;
  const size_t E = w.gate_up.size();
  if (E == 0 || E > size_t(kMoeMaxExperts) || w.down.size() != E || w.top_k <= 0 || w.top_k > kMoeMaxTopK ||
      size_t(w.top_k) > E)
    return false;
  const int64_t H = hidden, I = w.down[0].in_features;
  if (H % 32 || I % 32) return false;
  return fusable_projection(w.gate_up, 2 * I, H) && fusable_projection(w.down, H, I);
}

bool moe_fusable(const Tensor& h, const MoeWeights& w) {
  return h.dtype() == DType::BF16 && moe_fusable(w, h.dim(-1));
}

void set_moe_repeat(unsigned mask) {
  g_repeat.store(mask, std::memory_order_relaxed);
}

void set_moe_fused(bool enabled) {
  g_enabled.store(enabled, std::memory_order_relaxed);
}

int moe_tile_for(int pairs, int experts) {
  const int active = pairs < experts ? pairs : experts;
  const int avg = (pairs + active - 1) / (active > 0 ? active : 1);
  return avg <= 8 ? 8 : avg <= 16 ? 16 : avg <= 32 ? 32 : 64;
}

void moe_fused(Backend& be, cudaStream_t s, const Tensor& h, MoeWeights& w, Tensor& out) {
  const int R = int(h.dim(0)), H = int(h.dim(-1)), E = int(w.gate_up.size()), K = w.top_k;
  const int I = int(w.down[0].in_features), P = R * K;
  TF_CHECK(out.numel() == int64_t(R) * H && (out.dtype() == DType::BF16 || out.dtype() == DType::F32),
           "moe: out must be bf16 or f32 [rows, hidden], got " + out.describe());
  if (R == 0) return;
  // One decode row of 4-bit experts: the whole MoE in one kernel (moe_decode), the router linear too where
  // it fits; else the router linear first.
  const LayerView v = view_of(w, s, R, H);
  const MoeExperts &gate_up = v.gate_up, &down = v.down;
  const MoeRouter& router = v.router;
  Tensor logits;  // (not made where the router runs inside moe_decode)
  if (!router.weight) {
    logits = be.alloc({R, E}, DType::F32);
    repeat(0, [&] { be.linear(h, w.router, logits); });
  }
  if (v.one_kernel) {
    Tensor act = be.alloc({P, I}, DType::BF16);
    const MoeRouting rt{router.weight ? nullptr : static_cast<const float*>(logits.raw()),
                        R,
                        K,
                        w.norm_topk_prob,
                        nullptr,
                        nullptr};
    repeat(6, [&] {
      moe_decode(rt, h.raw(), gate_up, down, act.raw(), out.raw(), out.dtype(), H, I, barrier_of(w), s,
                 router);
    });
    return;
  }
  // Prefill-sized groups of 4-bit experts: the wgmma GEMMs (tiles of 128 or 64 slots), the down's x the
  // gate_up's silu_mul as its permuted copy is made (no silu_mul kernel, no act tensor).
  const int wg_tile = moe_grouped_wgmma_tile(gate_up, down, P, H, I, h.raw(), s);
  const int tile = wg_tile ? wg_tile : moe_tile_for(P, E), max_tiles = moe_max_tiles(P, E, tile);
  Tensor pair_e = be.alloc({P}, DType::I32), pair_w = be.alloc({P}, DType::F32);
  Tensor slot_of_pair = be.alloc({P}, DType::I32), slot_row = be.alloc({P}, DType::I32);
  Tensor tiles = be.alloc({max_tiles + 1, 4}, DType::I32);
  // Decode: the gate_up GEMM routes the rows itself and applies silu_mul (moe_routed_gemm): no routing +
  // grouping kernel, no silu_mul kernel, no gu tensor.
  const bool routed = moe_routed_ok(gate_up, down, R, K, H, I);
  // The grouped gate_up applies silu_mul itself where its persistent kernel serves (4-bit, tiles of 8).
  const bool silu_fused = routed || (!wg_tile && moe_grouped_fuses_silu(gate_up, max_tiles, tile, P, H));
  Tensor gu = silu_fused ? Tensor() : be.alloc({P, 2 * I}, DType::BF16);
  Tensor act = wg_tile ? Tensor() : be.alloc({P, I}, DType::BF16), y = be.alloc({P, H}, DType::BF16);
  auto i32 = [](Tensor& t) { return static_cast<int32_t*>(t.raw()); };
  auto* tl = static_cast<int4*>(tiles.raw());
  const MoeRouting rt{static_cast<const float*>(logits.raw()), R, K, w.norm_topk_prob, i32(pair_e),
                      static_cast<float*>(pair_w.raw())};
  if (!routed)
    repeat(1, [&] {
      moe_route_group(static_cast<const float*>(logits.raw()), R, E, K, w.norm_topk_prob, i32(pair_e),
                      static_cast<float*>(pair_w.raw()), tile, tl, i32(slot_of_pair), i32(slot_row), s);
    });
  if (wg_tile) {
    repeat(2, [&] {
      moe_grouped_wgmma(h.raw(), i32(slot_row), false, gate_up, tl, max_tiles, tile, P, gu.raw(), 2 * I, H,
                        s);
    });
    repeat(4, [&] {
      moe_grouped_wgmma(gu.raw(), nullptr, true, down, tl, max_tiles, tile, P, y.raw(), H, I, s);
    });
  } else {
    repeat(2, [&] {  // routed: silu_mul fused, the output is act
      if (routed) return moe_routed_gemm(rt, true, h.raw(), gate_up, act.raw(), 2 * I, H, s);
      moe_grouped_gemm(h.raw(), i32(slot_row), gate_up, tl, max_tiles, tile, P,
                       silu_fused ? act.raw() : gu.raw(), 2 * I, H, s, silu_fused);
    });
    if (!silu_fused) repeat(3, [&] { silu_mul(gu.raw(), act.raw(), P, I, s); });
    repeat(4, [&] {
      if (routed) return moe_routed_gemm(rt, false, act.raw(), down, y.raw(), H, I, s);
      moe_grouped_gemm(act.raw(), nullptr, down, tl, max_tiles, tile, P, y.raw(), H, I, s);
    });
  }
  repeat(5, [&] {
    moe_combine(y.raw(), routed ? nullptr : i32(slot_of_pair), static_cast<const float*>(pair_w.raw()),
                out.raw(), out.dtype(), R, K, H, s);
  });
}

namespace {
// The o projection as moe_decode reads it (MoeOProj), attn the one row it multiplies; weight null where the
// weight is not packed MLX 4-bit [hidden, attn width] without a bias.
MoeOProj o_proj_of(const LinearWeight& o, const Tensor& attn, int64_t hidden) {
  MoeOProj p;
  if (!packed_mlx(o) || o.bits != 4 || (o.bias.defined() && o.bias.numel() > 0) || o.out_features != hidden ||
      attn.device() != Device::CUDA || attn.dtype() != DType::BF16 || !attn.is_contiguous() ||
      attn.numel() != o.in_features)
    return p;
  static_cast<MoeLayout&>(p) = packed_layout(o);
  p.weight = o.weight.raw();
  p.scales = o.scales.raw();
  p.attn = attn.raw();
  p.k = int(o.in_features);
  return p;
}

// moe_fused_add_norm, and with the o projection inside where attn and o are given (x is then the kernel's
// output as well as the add's input).
bool fused_add_norm(Backend& be, cudaStream_t s, const Tensor* attn, const LinearWeight* o, const Tensor& res,
                    const Tensor& x, const Tensor& nw, float eps, float offset, MoeWeights& w, Tensor& out,
                    Tensor& res_out) {
  auto on_gpu = [](const Tensor& t) { return t.device() == Device::CUDA && t.is_contiguous(); };
  if (!g_add_norm.load(std::memory_order_relaxed) || !moe_fusable(x, w) || x.dim(0) != 1 || !on_gpu(x) ||
      !on_gpu(res) || !on_gpu(res_out) || !on_gpu(out) || res.dtype() != DType::BF16 ||
      res_out.dtype() != DType::BF16 || res.numel() != x.numel() || res_out.numel() != x.numel() ||
      res.raw() == res_out.raw() || out.numel() != x.numel() ||
      (out.dtype() != DType::BF16 && out.dtype() != DType::F32) || nw.numel() != x.dim(-1) ||
      nw.device() != Device::CUDA ||
      (nw.dtype() != DType::BF16 && nw.dtype() != DType::F32 && nw.dtype() != DType::F16))
    return false;
  const int H = int(x.dim(-1)), K = w.top_k, I = int(w.down[0].in_features);
  const LayerView v = view_of(w, s, 1, H);  // (moe_decode's hidden <= 2048 fits add_norm_row)
  if (!v.router.weight) return false;       // the router linear would need the norm's output first
  MoeOProj op;
  if (attn) {  // the o projection inside, or nothing (the caller runs the linear first); x is bf16 (fusable)
    op = o_proj_of(*o, *attn, H);
    if (!op.weight || !moe_decode_o_ok(v.gate_up, v.down, K, H, I, v.router, op)) return false;
  }
  AddNormArgs a;
  a.res = res.raw();
  a.res_out = res_out.raw();
  a.w = nw.raw();
  a.wt = nw.dtype();
  a.eps = eps;
  a.offset = offset;
  Tensor act = be.alloc({K, I}, DType::BF16);
  const MoeRouting rt{nullptr, 1, K, w.norm_topk_prob, nullptr, nullptr};
  repeat(6, [&] {
    moe_decode(rt, x.raw(), v.gate_up, v.down, act.raw(), out.raw(), out.dtype(), H, I, barrier_of(w), s,
               v.router, a, op);
  });
  if (g_empty_after.load(std::memory_order_relaxed)) empty_step(1, s);
  return true;
}
}  // namespace

bool moe_fused_add_norm(Backend& be, cudaStream_t s, const Tensor& res, const Tensor& x, const Tensor& nw,
                        float eps, float offset, MoeWeights& w, Tensor& out, Tensor& res_out) {
  return fused_add_norm(be, s, nullptr, nullptr, res, x, nw, eps, offset, w, out, res_out);
}

bool moe_fused_o_add_norm(Backend& be, cudaStream_t s, const Tensor& attn, const LinearWeight& o,
                          const Tensor& res, Tensor& x, const Tensor& nw, float eps, float offset,
                          MoeWeights& w, Tensor& out, Tensor& res_out) {
  return fused_add_norm(be, s, &attn, &o, res, x, nw, eps, offset, w, out, res_out);
}

void set_moe_empty_after(bool on) {
  g_empty_after.store(on, std::memory_order_relaxed);
}

void set_moe_add_norm(bool on) {
  g_add_norm.store(on, std::memory_order_relaxed);
}

}  // namespace tf::cuda
