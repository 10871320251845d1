#pragma once
// A dense decoder's whole one-row decode step as one persistent kernel (docs/cuda-notes.md, sessions 15-18):
// one CTA an SM, a producer warp streaming the CTA's weight tiles (packed into 16 KB stages, one bulk copy
// each) into a shared-memory ring as far ahead as it holds, across every dependency; 8 consumer warps
// computing each 16-feature tile with linear.cu's arithmetic; 3 attention warps computing the row's
// attention with attention_mma's. Activations travel as tagged 32-bit words (bf16 bits | the launch's tag
// << 16): a reader polls a word until it carries the launch's tag, so no counter, fence or grid barrier
// sits between the ops (the attention's partials to merge: f32 words, a NaN pattern where not yet written,
// written back by the merge once folded). Every value has the bits of the op chain (embedding, rms_norm,
// linear_bf16, qkv_norm_rope_kv, attention_mma, add_rms_norm, silu_mul, the lm_head): a row's tokens are the
// same whichever path its round takes.
//
// Shapes: the Qwen3-8B layout (hidden 4096, 32 q / 8 KV heads of 128, q/k norms, a fused qkv and gate_up,
// intermediate a multiple of 4096 up to 12288, bf16 or MLX 4-bit weights without bias, NeoX rope over the
// whole head, norms without offset, no window or softcap, KV blocks of 16 positions); and the Qwen3-30B-A3B
// layout (hidden 2048, 32 q / 4 KV heads of 128, every layer's MLP sparse: a bf16 router of up to 128
// experts, top-k up to 8, bf16 SwiGLU experts read where they are; or all MLX 4-bit, the router any MLX
// width or bf16; decode_step_moe.cu). The two shapes are
// the same kernel source compiled twice with different constants (decode_step_words.cuh's TF_STEP_MOE), each
// an implementation of this interface.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/cuda/kernels.h"

namespace tf::cuda {

class DecodeStep {
 public:
  // Positions the step takes: up to here it beats the bench's op chain on the H200 at every context
  // measured (runs 275-276, 280-281: 2048 4.31 ms vs the chain's 4.58, 2300 4.47 vs 4.54, 3000 4.53 vs 4.75,
  // 4096 4.62 vs 4.82, 6000 4.76 vs 5.03, 8192 4.97 vs 5.15, 10000 5.18 vs 5.58, 12000 5.35 vs 5.63, 16000
  // 5.83 vs 6.15); in the product (`tensorfold bench`, run 287) it ties the chain from ~8k. From ~2100
  // positions the 8 x 16 other chunks' units outnumber the 124 CTAs that take them: CTAs run two or more a
  // layer (~5 us each), the merging CTAs early chunks too, and the merge takes rounds of 16 chunks (8 at
  // 16k). Partials for 128 chunks: 154 MB at 36 layers.
  static constexpr int kMaxPositions = 16384;

  // Checks the shape (null and `why` when it is not the one the kernel handles) and packs the linears'
  // weights into the kernel's stage layout: a second copy of them in device memory.
  static std::unique_ptr<DecodeStep> make(const DecodeStepModel& m, cudaStream_t stream, std::string* why);
  // Whether make() takes models with sparse (MoE) layers (the 30B-A3B shape): on unless TF_DECODE_STEP_MOE=0
  // (decode_step.cu says why).
  static void set_moe(bool on);
  static bool moe();
  // Whether make() takes models with MLX 4-bit linears: the same bits as their op chain, 3-6% faster than it
  // on an H200 (docs/cuda-notes.md "Session 27"); on unless TF_DECODE_STEP_MLX4=0 (tests, benches: here).
  static void set_mlx4(bool on);
  static bool mlx4();
  // Whether make() takes MoE models whose linears and experts are MLX 4-bit (the 30B-A3B shape's 4-bit
  // instance, its router dequantized to bf16): off unless TF_DECODE_STEP_MOE_MLX4=1 until measured on a GPU
  // (decode_step.cu).
  static void set_moe_mlx4(bool on);
  static bool moe_mlx4();
  virtual ~DecodeStep() = default;
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;

  // Whether the step can run a forward of `rows` rows at positions up to `max_pos` with blocks of
  // `block_size` positions (one row, below kMaxPositions, 16) on the pools `kv`; then points the kernel's op
  // table and its tensor maps of the pools at `kv` (stream-ordered; outside any graph capture).
  virtual bool bind(int rows, int max_pos, int block_size, const std::vector<KvLayer>& kv,
                    cudaStream_t stream) = 0;
  // The step of the bound row: its K/V rows written to the pool, its logits to `logits` (f32 [vocab]).
  // Kernels only: may be captured into a CUDA graph (the launch tag comes from a device word).
  virtual void run(const DeviceMeta& dm, float* logits, cudaStream_t stream) = 0;
  // Bytes of the packed weights.
  virtual size_t packed_bytes() const = 0;

  // Debugging (benches): after a run with debug on, each op's x as the kernel made it and its outputs, as
  // bf16 bits. Ops per layer: qkv, o, gate_up, down (MoE: qkv, o, router, gate_up, down); then the lm_head.
  // y: the op's output words (gate_up: silu_mul of its gate and up features, [n / 2]; the lm_head and an MoE
  // router: none); res: an add + norm op's new residual.
  virtual void set_debug(bool on, cudaStream_t stream) = 0;
  virtual std::vector<uint16_t> debug_x(int op) const = 0;
  virtual std::vector<uint16_t> debug_y(int op) const = 0;
  virtual std::vector<uint16_t> debug_res(int op) const = 0;
  // Benches: `on` runs the kernel's probe instance (its own code: the product's has none of this), with
  // `stamps` per-layer timestamps (globaltimer ns) of each CTA's attention units and the o op's inputs:
  // stamps()[(layer * grid + cta) * kStampSlots + slot], 0 where none was taken. Slots: attention unit u
  // of the CTA's layer (u < kStampUnits) at kStampUnitEvents * u + {start, poll, K/V landed, scores, P V,
  // partial}; merge round r (r < kStampRounds) gathered / folded at kStampRoundIn + 2r / + 2r + 1; round 1's
  // bulk copies issued / landed / checked and its retry count; the merge's output words; the consumers'
  // last qkv tile, o's x made, o's last tile, gate_up's and down's last tiles; counters of where the
  // consumers and the producer wait (SM cycles).
  enum StampSlot : int {
    kStampUnitEvents = 6,
    kStampUnits = 6,
    kStampRound1Issued = 36,
    kStampRound1Landed = 37,
    kStampRound1Checked = 38,
    kStampRound1Retries = 39,
    kStampRoundIn = 40,
    kStampRounds = 10,
    kStampAout = 60,
    kStampQkvDone = 61,
    kStampXMade = 62,
    kStampOLast = 63,
    kStampGuLast = 64,
    kStampDownLast = 65,
    kStampWaitFull = 66,     // SM cycles (clock64) of the layer: consumer warp 1 waiting for ring stages,
    kStampWaitX = 67,        // making its ops' x (polls included),
    kStampWaitBar = 68,      // at the tiles' slice-sum barrier,
    kStampLayerCycles = 69,  // all of its layer;
    kStampWaitEmpty = 70,    // the producer waiting for free slots to issue the layer's stages,
    kStampProdCycles = 71,   // all of its layer;
    kStampFence = 72,        // consumer warp 1 in its proxy fences before freeing slots
    // warp 0's first kStampLogTiles tiles of the layer's o and gate_up ops (globaltimer ns): at
    // kStampTileLog + (op * kStampLogTiles + tile) * kStampTileEvents + {tile begun, first stage landed,
    // arithmetic done, slice-sum barrier passed, stored} (op 0: o, 1: gate_up; 4-bit: warp 0's team's tiles)
    kStampTileLog = 73,
    kStampLogTiles = 4,
    kStampTileEvents = 5,
    // warp 0's SM cycles over all of the layer's gate_up tiles: the tile's start, waiting for stages, the
    // arithmetic, the barrier, the slice sum and store; then the tile count
    kStampGuCycles = 113,
    // the MoE shape: the router's tile stored (the CTAs with one); the producer at its routing, its poll of
    // the logits done, its picks made, its routing done (the picks' tensor maps prefetched)
    kStampRouterLast = 119,
    kStampRouteIn = 120,
    kStampPolled = 121,
    kStampPicked = 122,
    kStampRouted = 123,
    kStampSlots = 124
  };
  virtual void set_probe(bool on, bool stamps, cudaStream_t stream) = 0;
  // The probe instance's timing ablations (decode_step_kernel.cuh's Params::ablate; 0: none). Benches only:
  // the logits' bits are wrong under them.
  virtual void set_ablate(int what) = 0;
  // The ring's depth (benches only, same bits): `slots` of the ring's ring_slots() in use (0: all). bf16: the
  // probe instance only, ignored unless fewer and a multiple of the slots' owners; MLX 4-bit: both
  // instances, 2 or more (ring_slots: as many of the model's largest stage as 126 KB hold; with 0, CTAs
  // without attention work in a launch also lend the ring their attention staging region, TF_STEP_LEND=0:
  // not; any other value sets the depth of every CTA's ring).
  virtual void set_ring(int slots) = 0;
  virtual int ring_slots() const = 0;
  // Benches (A/B, same bits): the producer keeps at most `stages` ring stages requested and not yet landed,
  // so that the hops' global accesses queue behind fewer weight bytes (0: every free slot; -1: the format's
  // default, decode_step.cu's inflight_of).
  virtual void set_inflight(int stages) = 0;
  // Benches (A/B, same bits): each CTA bulk-prefetches its first `tiles` gate_up tiles of a layer into L2
  // once the layer's qkv is done (the dense shape; 0: none; -1: the default, decode_step_host.cuh's l2pf_of
  // or TF_STEP_L2PF_TILES at make).
  virtual void set_l2pf(int tiles) = 0;
  // Benches (A/B, same bits): the stages-in-flight cap for the gate_up's tiles past those prefetched (0:
  // set_inflight's; -1: the default, decode_step_host.cuh's inflight_gu_of or TF_STEP_INFLIGHT_GU at make).
  virtual void set_inflight_gu(int stages) = 0;
  // Benches (A/B): shifts the number of early chunks the merging CTAs take (decode_step_kernel.cuh's e) by
  // `bias` (0: the kernel's rule). Same bits: only which CTA computes a chunk's partial changes.
  virtual void set_early_bias(int bias) = 0;
  virtual std::vector<unsigned long long> stamps() const = 0;
  virtual int grid() const = 0;

 protected:
  DecodeStep() = default;
};

}  // namespace tf::cuda
