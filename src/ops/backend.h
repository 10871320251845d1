#pragma once
// The op interface every model family is written against. Two backends implement it:
//   ops/cpu  — plain, obviously-correct reference (fp32 activations and accumulation), runs in CI;
//   ops/cuda — fast, row-invariant kernels for NVIDIA GPUs.
// Contract (exactness): every op computes each row with arithmetic that does not depend on the other
// rows in the call nor on how many rows there are. Reductions run in a fixed order within the row.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace tf {

// A linear layer's weight as the checkpoint stores it. Dense: `weight` [out, in] in F32/BF16/F16.
// Quantized formats (MLX affine, FP8 block) add scales/biases; `format` says which.
struct LinearWeight {
  enum class Format : uint8_t { Dense, MlxAffine, Fp8Block };
  Format format = Format::Dense;
  Tensor weight;
  Tensor scales, biases;  // quantized formats only
  int bits = 0, group_size = 0;
  // CUDA device layout of MLX 4-bit with bf16 scales: the scales are stored times 2^133
  // (cuda/quant_linear.h).
  bool subnormal_codes = false;
  Tensor bias;  // optional [out]
  int64_t in_features = 0, out_features = 0;
};

// Rotary embedding parameters, derived from config.json's rope_theta / rope_scaling by make_rope().
struct RopeParams {
  int head_dim = 0;
  int rotary_dim = 0;            // first rotary_dim dims rotate (partial rotary), rest pass through
  std::vector<float> inv_freq;   // [rotary_dim / 2]
  float attention_factor = 1.f;  // yarn/longrope: multiplies cos and sin
  bool interleaved = false;      // GPT-J style pairs (0,1),(2,3)…; false = NeoX/HF rotate_half
};

// Host-side description of one forward call's rows. Rows of one sequence are contiguous and in
// increasing position. Row r writes its K/V to pool slot `slots[r]` and attends to positions
// [max(0, pos - window + 1), pos] of sequence `row_seq[r]` through that sequence's block table.
struct BatchMeta {
  std::vector<int32_t> tokens;                     // [R]
  std::vector<int32_t> positions;                  // [R] absolute positions
  std::vector<int32_t> row_seq;                    // [R] index into block_tables
  std::vector<int32_t> slots;                      // [R] block * block_size + pos % block_size
  std::vector<std::vector<int32_t>> block_tables;  // per sequence in this call
  int block_size = 0;
  int rows() const { return int(tokens.size()); }
};

// One layer's paged KV storage: [num_blocks, block_size, kv_heads, head_dim] each.
struct KvLayer {
  Tensor k, v;
};

struct AttentionParams {
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 1.f;
  int sliding_window = 0;  // 0 = full causal
  float softcap = 0.f;     // 0 = none (Gemma 2 style tanh cap)
};

// One logit row's keyed sampling (engine/sampler.h): temperature 0 = greedy.
struct RowSampling {
  float temperature = 0.f;
  uint64_t seed = 0;
  int64_t position = 0;  // absolute position of the token being sampled
};

// A sparse mixture-of-experts MLP (Backend::moe): a softmax router choosing top_k experts a token,
// SwiGLU experts.
struct MoeWeights {
  LinearWeight router;                      // [experts, hidden]
  std::vector<LinearWeight> gate_up, down;  // per expert: [2I, H] (gate rows first), [H, I]
  int top_k = 0;
  bool norm_topk_prob = false;     // renormalise the k chosen probabilities to sum 1
  std::shared_ptr<void> prepared;  // backend-private state made on first use (device pointer tables)
};

// A decoder's weights as Backend::prepare_decode_step reads them (pointers into the model, which outlives
// what the backend prepares): per layer the norms, the fused q/k/v projection and the MLP -- the fused
// gate/up and down projections, or a sparse MLP's experts.
struct DecodeStepLayer {
  const Tensor *input_norm = nullptr, *post_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  const LinearWeight *qkv = nullptr, *o = nullptr, *gate_up = nullptr, *down = nullptr;
  const MoeWeights* moe = nullptr;  // a sparse MLP (its router and experts; gate_up and down then null)
};
struct DecodeStepModel {
  const Tensor* embed = nullptr;
  float embed_scale = 1.f;
  std::vector<DecodeStepLayer> layers;
  const Tensor* final_norm = nullptr;
  const LinearWeight* lm_head = nullptr;
  RopeParams rope;
  AttentionParams attn;
  float norm_eps = 0.f, norm_offset = 0.f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0 (NVIDIA H200)"
  virtual Device device() const = 0;
  virtual DType act_dtype() const = 0;  // dtype of activations and of the KV pool

  // Storage. upload_* take CPU tensors (possibly mmap'd) and return this backend's copy or view.
  virtual Tensor alloc(std::vector<int64_t> shape, DType dtype) = 0;
  virtual Tensor upload(const Tensor& host) = 0;  // norms, embeddings: kept in the host dtype
  virtual LinearWeight upload_linear(const LinearWeight& host) = 0;
  virtual void to_host(const Tensor& src, Tensor& host_dst) = 0;  // same shape; F32 host_dst converts
  // to_host queued behind the work already on the device: `host_dst` (same shape and dtype as `src`) holds
  // the values only after the next synchronize(), sample_rows() or to_host(). A forward's read-back queues
  // the final hidden states (for the MTP head) this way so that they travel with the sampled tokens: one
  // wait for the device a round, not two. Default: to_host at once.
  virtual void to_host_queued(const Tensor& src, Tensor& host_dst) { to_host(src, host_dst); }

  // Called once per forward with the rows' metadata; the ops below that need it read it from here.
  virtual void begin_forward(const BatchMeta& meta) = 0;

  // out[R, H] = table[tokens[r]] (the batch's tokens), converted to act dtype, times `scale`.
  virtual void embedding(const Tensor& table, float scale, Tensor& out) = 0;
  // y[M, N] = x[M, K] · W[N, K]ᵀ (+ bias). Accumulates in fp32 in a fixed K order.
  virtual void linear(const Tensor& x, const LinearWeight& w, Tensor& y) = 0;
  // y = x / rms(x) * (weight + offset) over the last dim; rows = numel / last dim. offset: 1 for
  // Gemma-style (1 + w) norms, 0 otherwise. y may alias x.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, float offset, Tensor& y) = 0;
  // residual += x; y = rms_norm(residual). Fused because decode reads each byte once.
  virtual void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, float offset,
                            Tensor& y) = 0;
  // In place on q [R, Hq, D] and k [R, Hk, D] at the batch's positions.
  virtual void rope(Tensor& q, Tensor& k, const RopeParams& p) = 0;
  // gate_up [M, 2I] (gate first) -> out [M, I] = silu(gate) * up.
  virtual void silu_mul(const Tensor& gate_up, Tensor& out) = 0;
  // Writes k, v [R, Hk, D] into the pool at the batch's slots.
  virtual void kv_write(KvLayer& layer, const Tensor& k, const Tensor& v) = 0;
  // out [R, Hq, D] = softmax(q·Kᵀ·scale) V over each row's visible positions (GQA: head h reads
  // kv head h / (Hq / Hk)).
  virtual void attention(const Tensor& q, const KvLayer& layer, const AttentionParams& p, Tensor& out) = 0;
  // a += b, elementwise.
  virtual void add(Tensor& a, const Tensor& b) = 0;
  // out[i] = x[rows[i]] for the given row indices.
  virtual void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) = 0;
  // t = 0.
  virtual void zero(Tensor& t) = 0;
  // out[rows[i]] += weights[i] * y[i] (fp32 arithmetic, rounded to out's dtype): one expert's outputs
  // combined into the tokens that chose it. Rows are distinct within a call; callers add experts in a
  // fixed order (by expert id) so a token's sum never depends on other tokens.
  virtual void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int32_t>& rows,
                                const std::vector<float>& weights) = 0;
  // out[R, H] = the MoE MLP of h[R, H]: f32 router logits, softmax, each row's top_k experts (ties to the
  // lower id), their probabilities renormalised when norm_topk_prob, and the k SwiGLU outputs added in
  // rank order (highest probability first) with fp32 arithmetic. A row's bits never depend on the other
  // rows. The default (ops/moe.cpp, the CPU reference) routes on the host (one sync) and runs
  // the ops above per expert.
  virtual void moe(const Tensor& h, MoeWeights& w, Tensor& out);
  // Whether moe() on `w` (activations of width `hidden`) queues only device work with no host sync once
  // it has run once, so a forward with it may be captured into a CUDA graph (run_graph). The default's
  // host routing syncs: false.
  virtual bool moe_graph_safe(const MoeWeights& w, int64_t hidden) const {
    (void)w, (void)hidden;
    return false;
  }
  // Raw byte copies between host memory and a tensor of this backend (KV blocks for the prompt cache's
  // spill and snapshots). The CPU backend copies directly; device backends override.
  virtual void read_raw(const Tensor& src, size_t offset, size_t bytes, void* dst);
  virtual void write_raw(Tensor& dst, size_t offset, const void* src, size_t bytes);
  // One layer's attention inputs, in place: q and k RMS-normed per head when `q_norm` / `k_norm` are
  // given (qk-norm families), both rotated by `rope`, then k and v written to the rows' pool slots. The
  // same as rms_norm(q), rms_norm(k), rope(q, k), kv_write(layer, k, v) in that order (the default);
  // backends may fuse them with the same arithmetic.
  virtual void attention_inputs(Tensor& q, Tensor& k, const Tensor& v, const Tensor* q_norm,
                                const Tensor* k_norm, float eps, float offset, const RopeParams& rope,
                                KvLayer& layer);
  // attention_inputs for q, k and v made by one linear over the q, k, v weights' rows concatenated (each
  // output feature of a linear is computed on its own, so the parts' bits equal three linears'): qkv
  // [R, (Hq + 2 Hk) * D] holds a row's q heads, then its k heads, then its v heads. q [R, Hq, D] receives q
  // normed and rotated; k and v go to the pool only; qkv is not modified. The default copies the three
  // parts out (gather_rows) and runs attention_inputs; backends may read them in place.
  virtual void attention_inputs_qkv(const Tensor& qkv, Tensor& q, const Tensor* q_norm, const Tensor* k_norm,
                                    float eps, float offset, const RopeParams& rope, KvLayer& layer);
  // y = linear(silu_mul(gate_up), w): the MLP's down projection with its activation. `act` [M, I] is
  // scratch for backends that run the two ops (the default); its contents afterwards are unspecified.
  // Bitwise the same as silu_mul(gate_up, act) then linear(act, w, y).
  virtual void silu_mul_linear(const Tensor& gate_up, const LinearWeight& w, Tensor& act, Tensor& y);
  // residual_out = residual + x, h = rms_norm(residual_out) (add_rms_norm's arithmetic), y = linear(h, w):
  // a layer's norm and the projection after it. Returns true when the backend wrote the new residual to
  // residual_out (out of place; `residual` unchanged, h unspecified: the norm was made inside the linear),
  // false when it ran add_rms_norm in place on `residual` (h written) and then linear (the default). The
  // caller keeps whichever holds the stream. Bitwise add_rms_norm followed by linear either way.
  virtual bool add_rms_norm_linear(Tensor& residual, const Tensor& x, const Tensor& norm_weight, float eps,
                                   float offset, Tensor& h, const LinearWeight& w, Tensor& y,
                                   Tensor& residual_out);
  // residual_out = residual + x, h = rms_norm(residual_out), out = moe(h, w): a MoE layer's norm and its MLP,
  // with add_rms_norm_linear's contract (true: the new residual is in residual_out, h unspecified; false:
  // add_rms_norm ran in place, then moe). x and out may be the same tensor. Bitwise the two ops either way.
  virtual bool add_rms_norm_moe(Tensor& residual, const Tensor& x, const Tensor& norm_weight, float eps,
                                float offset, Tensor& h, MoeWeights& w, Tensor& out, Tensor& residual_out);
  // x = linear(attn, o), then add_rms_norm_moe(residual, x, ...): a MoE layer's attention output projection,
  // norm and MLP, with add_rms_norm_moe's contract (x is written either way; x and out may be the same
  // tensor). Bitwise the ops either way.
  virtual bool linear_add_rms_norm_moe(const Tensor& attn, const LinearWeight& o, Tensor& x, Tensor& residual,
                                       const Tensor& norm_weight, float eps, float offset, Tensor& h,
                                       MoeWeights& w, Tensor& out, Tensor& residual_out);
  // tokens[i] = the id maximising double(logits[i][id] / T) + gumbel_noise(seed, position, id) for
  // rows[i] (T = 0: the first maximum of the raw logits), lowest id on exact ties: the token
  // sample_token() gives without penalties, truncation or logprobs. `logits` is F32 [rows, vocab] on
  // this backend. The default reads the logits to the host; device backends sample in place and copy
  // back only the ids.
  virtual void sample_rows(const Tensor& logits, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>& tokens);
  // One-launch decode steps (CUDA: ops/cuda/decode_step.h). A backend that can run a dense decoder's whole
  // step for one row as one kernel, with the bits of the op chain (embedding, the layers, the final norm and
  // the lm_head), prepares it once a model: null, with `why`, when it cannot (shape, dtype, device); it may
  // take device memory (a packed copy of the weights), so models prepare it when they load. On success `why`
  // describes what was prepared (for the log).
  virtual std::shared_ptr<void> prepare_decode_step(const DecodeStepModel& m, std::string* why) {
    (void)m;
    if (why) *why = name() + " has no one-launch decode step";
    return nullptr;
  }
  // Whether the prepared step runs the forward of begin_forward's metadata on the pools `kv` (one row, a
  // short enough context, the step enabled); points it at `kv`. Call it outside run_graph's `record`.
  virtual bool bind_decode_step(void* step, const std::vector<KvLayer>& kv) {
    (void)step, (void)kv;
    return false;
  }
  // The bound step: the row's K/V rows written to the pools and its logits [1, vocab] (F32) to `logits`,
  // bitwise what embedding + the layers + add + rms_norm + linear(lm_head) give. May run inside `record`.
  virtual void decode_step(void* step, Tensor& logits) {
    (void)step, (void)logits;
    throw Error(name() + ": decode_step without a prepared step");
  }
  // Device memory still free for the KV pool, in bytes; 0 when unknown (the CPU backend).
  virtual size_t free_memory() const { return 0; }
  // The device's whole memory in bytes; 0 when unknown (the CPU backend).
  virtual size_t total_memory() const { return 0; }
  // Scratch device memory an attention call of `rows` query rows may take at positions below `context`
  // (the CUDA backend's split-schedule partials, sized for every row of the call: ~0.5 KB a row, head and
  // 128 positions). The engine reserves it with the forward's activations. 0 where none is allocated.
  virtual size_t attention_workspace_bytes(int64_t rows, int heads, int head_dim, int context) const {
    (void)rows, (void)heads, (void)head_dim, (void)context;
    return 0;
  }
  // Waits for queued work (no-op on CPU).
  virtual void synchronize() {}
  // After an op threw (e.g. out of device memory): waits for what was queued, drops the host copies queued
  // for the failed forward (to_host_queued: their destinations are gone) and clears an error the device
  // runtime keeps for its next check (CUDA: the last error of a failed cudaMalloc). An error the device
  // cannot recover from still fails the next call.
  virtual void clear_error() {}

  // CUDA graphs (docs/cuda-notes.md, session 4). run_graph runs `record` -- the device work of a forward
  // whose begin_forward was just called -- captured into a graph under `key` the first time, and on later
  // calls with the same key replays that graph instead of calling `record`. Per call the backend refreshes
  // what begin_forward's metadata carries (tokens, positions, slots, block tables, row_seq) and the
  // attention's tiles of the rows (for `attn`, the one attention shape the forward runs); the caller's key
  // must fix everything else `record` does: row and block-table counts, gathered row indices, tensor
  // addresses. Inside `record`, ops must not copy to the host (to_host, sample_rows, read_raw): do that
  // after run_graph. Tensors `record` uses must keep their addresses while the graph lives: allocate them
  // inside `record` (the graph keeps them) or let `keep` own them (the graph holds it). The backend adds
  // its own state to the key (the attention chunk bucket and tile counts, kernel switches) and recaptures
  // when a buffer it captured moved. A key is captured only once it recurs (kGraphCaptureAfterUses in
  // ops/graph_cache.h): its first calls run `record` eagerly. Returns true when this call captured a graph
  // (it took milliseconds more than a replay or an eager run: timing models must not learn from it).
  // Backends without graphs call record() every time and return false.
  virtual bool graphs_supported() const { return false; }
  virtual bool run_graph(const std::vector<int64_t>& key, const AttentionParams& attn,
                         std::shared_ptr<const void> keep, const std::function<void()>& record) {
    (void)key, (void)attn, (void)keep;
    record();
    return false;
  }
  // Drops every cached graph (a model that graphs captured is going away).
  virtual void clear_graphs() {}
  struct GraphStats {
    int64_t captures = 0, replays = 0;
    int64_t eager = 0;  // run_graph calls run eagerly: their key was not yet used often enough to capture
    size_t cached = 0, capacity = 0;
  };
  virtual GraphStats graph_stats() const { return {}; }
};

std::unique_ptr<Backend> make_cpu_backend();
// Host keyed sampling of F32 rows [rows.size(), vocab]: the reference twin of Backend::sample_rows.
void sample_rows_reference(const float* logits, int64_t vocab, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>& tokens);
// Returns null with `why` set when no usable GPU exists (no device, below sm_80, built without CUDA).
std::unique_ptr<Backend> make_cuda_backend(int device_index, std::string* why);

// Rope parameters from config: rope_theta, rope_scaling {type|rope_type: linear, dynamic, llama3, yarn,
// longrope?}, partial_rotary_factor, max_position_embeddings. `context` is the allocated context (used by
// dynamic NTK scaling, which we fix at the allocated length so that a token's arithmetic never changes).
struct RopeConfig {
  int head_dim = 0;
  float theta = 10000.f;
  float partial_rotary_factor = 1.f;
  std::string scaling_type;  // "", "default", "linear", "dynamic", "llama3", "yarn"
  float factor = 1.f;
  float low_freq_factor = 1.f, high_freq_factor = 4.f;
  int original_max_position = 0;
  float beta_fast = 32.f, beta_slow = 1.f;
  float mscale = 0.f, mscale_all_dim = 0.f;
  float attention_factor = 0.f;  // explicit override, 0 = derive
  bool truncate = true;          // yarn
  int max_position = 0;          // config max_position_embeddings
};
RopeParams make_rope(const RopeConfig& c, int context);

}  // namespace tf
