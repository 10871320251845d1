// The CUDA backend: owns the device, one stream, the per-forward metadata upload and the attention
// workspace; the arithmetic lives in the kernels (kernels.h). Activations and the KV pool are bf16;
// the residual stream may be bf16 or f32 (add_rms_norm and add accept either).
#include "ops/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/quant.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/block_cache.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/decode_step.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/moe_fused.h"
#include "ops/cuda/quant_linear.h"
#include "ops/cuda/sampling.h"
#include "ops/graph_cache.h"

namespace tf {
namespace cuda {
namespace {

// A pinned host buffer and a device buffer: host data is copied through pinned memory with one async
// copy on the stream. The event keeps the host from overwriting the pinned buffer while a copy that
// reads it is still queued.
class Staging {
 public:
  ~Staging() {
    if (host_) cudaFreeHost(host_);
    if (dev_) cudaFree(dev_);
    if (done_) cudaEventDestroy(done_);
  }
  void* put(const void* data, size_t bytes, cudaStream_t s) {
    if (!done_) TF_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    TF_CUDA_CHECK(cudaEventSynchronize(done_));
    if (bytes > cap_) {
      TF_CUDA_CHECK(cudaStreamSynchronize(s));  // kernels may still read the old device buffer
      if (host_) TF_CUDA_CHECK(cudaFreeHost(host_));
      if (dev_) TF_CUDA_CHECK(cudaFree(dev_));
      cap_ = std::max<size_t>(bytes * 2, 4096);
      TF_CUDA_CHECK(cudaMallocHost(&host_, cap_));
      TF_CUDA_CHECK(cudaMalloc(&dev_, cap_));
    }
    std::memcpy(host_, data, bytes);
    TF_CUDA_CHECK(cudaMemcpyAsync(dev_, host_, bytes, cudaMemcpyHostToDevice, s));
    TF_CUDA_CHECK(cudaEventRecord(done_, s));
    return dev_;
  }

 private:
  void* host_ = nullptr;
  void* dev_ = nullptr;
  size_t cap_ = 0;
  cudaEvent_t done_ = nullptr;
};

// Device-to-host copies queued on the stream into one pinned buffer (Backend::to_host_queued) and handed
// to their destinations once the stream has been waited for (deliver). Pinned memory: the copy is a
// DMA the stream orders, not the driver's staged copy of pageable memory.
class ReadBack {
 public:
  ~ReadBack() {
    if (host_) cudaFreeHost(host_);
  }
  void queue(const void* dev, void* dst, size_t bytes, cudaStream_t s) {
    if (used_ + bytes > cap_) {  // grow: the copies already queued land first
      TF_CUDA_CHECK(cudaStreamSynchronize(s));
      deliver();
      if (bytes > cap_) {
        if (host_) TF_CUDA_CHECK(cudaFreeHost(host_));
        cap_ = std::max<size_t>(bytes * 2, size_t(64) << 10);
        TF_CUDA_CHECK(cudaMallocHost(&host_, cap_));
      }
    }
    TF_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(host_) + used_, dev, bytes, cudaMemcpyDeviceToHost, s));
    pending_.push_back({used_, dst, bytes});
    used_ += (bytes + 255) / 256 * 256;
  }
  // After a failed forward: its queued copies are not delivered (their destinations are gone).
  void discard() {
    pending_.clear();
    used_ = 0;
  }
  // Call after the stream was synchronised: every queued copy has landed in the pinned buffer.
  void deliver() {
    for (const Pending& p : pending_) std::memcpy(p.dst, static_cast<const char*>(host_) + p.offset, p.bytes);
    pending_.clear();
    used_ = 0;
  }

 private:
  struct Pending {
    size_t offset;
    void* dst;
    size_t bytes;
  };
  void* host_ = nullptr;
  size_t cap_ = 0, used_ = 0;
  std::vector<Pending> pending_;
};

// A device buffer that only grows (attention partials). During a graph capture the old buffer cannot be
// freed (cudaFree synchronises the device): it is retired, and freed by release_retired() outside a capture.
// generation() counts the moves, so that graphs which captured an old buffer are known to be stale.
class Workspace {
 public:
  // double_on_growth: grow to twice the request (fewer moves, each of which makes the graphs stale).
  explicit Workspace(bool double_on_growth = false) : double_(double_on_growth) {}
  ~Workspace() {
    release_retired();
    if (p_) cudaFree(p_);
  }
  void* get(size_t bytes, bool capturing = false) {
    if (bytes > cap_) {
      if (p_ && capturing) {
        retired_.push_back(p_);
      } else if (p_) {
        TF_CUDA_CHECK(cudaFree(p_));  // cudaFree waits for the work that may use it
      }
      p_ = nullptr, cap_ = 0;  // until the new buffer exists: a failed request leaves none, not a freed one
      ++generation_;
      const size_t want = capturing || double_ ? bytes * 2 : bytes + bytes / 4;
      const cudaError_t err = cudaMalloc(&p_, want);
      if (err != cudaSuccess) {
        p_ = nullptr;
        cudaGetLastError();  // out of memory is not sticky: clear it, or the next launch check reports it
        TF_CUDA_CHECK(err);
      }
      cap_ = want;
    }
    return p_;
  }
  uint64_t generation() const { return generation_; }
  void release_retired() {
    for (void* p : retired_) cudaFree(p);
    retired_.clear();
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
  uint64_t generation_ = 0;
  std::vector<void*> retired_;
  bool double_ = false;
};

// One captured forward (Backend::run_graph): the executable graph and everything its nodes point at that
// the caller does not own -- tensors allocated during the capture, the host values ops staged (kept in
// the graph's own pinned `arena`, which its copy nodes read on every replay), the caller's `keep`.
struct GraphEntry {
  // Pinned host memory and its device twin; an arena is a list of them (never moved once handed out).
  struct Chunk {
    char* host = nullptr;
    char* dev = nullptr;
    size_t used = 0, cap = 0;
  };
  cudaGraphExec_t exec = nullptr;
  std::vector<Tensor> kept;
  std::shared_ptr<const void> keep;
  std::vector<Chunk> arena;
  const void* meta = nullptr;    // begin_forward's device metadata the graph reads
  const void* tiles = nullptr;   // the attention tiles it reads (refreshed before each launch)
  uint64_t attn_generation = 0;  // of the capture attention workspace

  GraphEntry(const GraphEntry&) = delete;
  GraphEntry& operator=(const GraphEntry&) = delete;
  // The first arena chunk is allocated before the capture: usually no allocation happens inside it.
  explicit GraphEntry(size_t arena_bytes) { add_chunk(arena_bytes); }
  ~GraphEntry() {
    if (exec) cudaGraphExecDestroy(exec);  // a launch still in flight completes first
    for (Chunk& c : arena) {
      if (c.host) cudaFreeHost(c.host);
      if (c.dev) cudaFree(c.dev);
    }
  }
  // Stages `bytes` of host data for the graph. The values are fixed by the graph's key, so no copy node is
  // recorded: upload() copies the whole arena to the device once, before the first launch.
  void* put(const void* data, size_t bytes) {
    size_t off = (arena.back().used + 15) / 16 * 16;
    if (off + bytes > arena.back().cap) add_chunk(std::max<size_t>(bytes, 2 * arena.back().cap)), off = 0;
    Chunk& c = arena.back();
    std::memcpy(c.host + off, data, bytes);
    c.used = off + bytes;
    return c.dev + off;
  }
  void upload(cudaStream_t s) {
    for (Chunk& c : arena)
      if (c.used > 0) TF_CUDA_CHECK(cudaMemcpyAsync(c.dev, c.host, c.used, cudaMemcpyHostToDevice, s));
  }

 private:
  void add_chunk(size_t bytes) {
    Chunk c;
    c.cap = std::max<size_t>(bytes, 256);
    TF_CUDA_CHECK(cudaMallocHost(&c.host, c.cap));
    if (cudaMalloc(&c.dev, c.cap) != cudaSuccess) {
      cudaFreeHost(c.host);
      throw Error("CUDA graph capture: out of GPU memory for a " + std::to_string(c.cap) +
                  "-byte staging arena");
    }
    arena.push_back(c);
  }
};

constexpr size_t kDefaultGraphCapacity = 64;

const void* ptr(const Tensor& t) {
  return t.raw();
}

bool g_fused_norm_linear = false;  // set_fused_norm_linear: off, slower on the H200 (run 16)
// set_fused_silu_linear: off, slower on the H200 (run 16); TF_FUSED_SILU=1 turns it on (measurement).
bool g_fused_silu_linear = env_switch("TF_FUSED_SILU", false);  // launch.h
int g_min_attention_chunks = 0;  // set_attention_min_chunks: tests size attention launches up
// set_decode_step: the one-kernel decode step of one-row rounds (decode_step.h); TF_DECODE_STEP=0: off.
bool g_decode_step = env_switch("TF_DECODE_STEP", true);
std::atomic<int64_t> g_decode_steps_prepared{0}, g_decode_step_rounds{0};  // for tests

void expect(const Tensor& t, DType d, const char* op, const char* what) {
  TF_CHECK(t.device() == Device::CUDA, std::string(op) + ": " + what + " is not on the GPU");
  TF_CHECK(t.dtype() == d,
           std::string(op) + ": " + what + " must be " + dtype_name(d) + ", got " + t.describe());
  TF_CHECK(t.is_contiguous(), std::string(op) + ": " + what + " must be contiguous");
}

void expect_float(const Tensor& t, const char* op, const char* what) {
  TF_CHECK(t.device() == Device::CUDA, std::string(op) + ": " + what + " is not on the GPU");
  TF_CHECK(t.dtype() == DType::BF16 || t.dtype() == DType::F32 || t.dtype() == DType::F16,
           std::string(op) + ": " + what + " must be bf16, f16 or f32, got " + t.describe());
}

std::vector<uint16_t> to_bf16(const Tensor& host) {
  std::vector<float> f = host.to_f32_vector();
  std::vector<uint16_t> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = f32_to_bf16(f[i]);
  return out;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const cudaDeviceProp& prop) : device_(device), sm_count_(prop.multiProcessorCount) {
    name_ = "cuda:" + std::to_string(device) + " (" + prop.name + ")";
    TF_CUDA_CHECK(cudaSetDevice(device));
    TF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // Tensors come from a block cache (block_cache.h) so that per-forward activations cost no cudaMalloc
    // or cudaFree. The cache outlives the backend (tensors may too).
    auto cache = std::make_shared<BlockCache>(
        [device](size_t n) -> void* {
          void* p = nullptr;
          TF_CUDA_CHECK(cudaSetDevice(device));
          if (cudaMalloc(&p, n) != cudaSuccess) {
            cudaGetLastError();  // clear the allocation error; the cache retries after trimming
            return nullptr;
          }
          return p;
        },
        [](void* p) { cudaFree(p); });
    set_device_allocator(Device::CUDA,
                         DeviceAllocator{[cache](size_t n) {
                                           void* p = cache->alloc(n);
                                           if (!p) {
                                             size_t free_b = 0, total_b = 0;
                                             cudaMemGetInfo(&free_b, &total_b);
                                             throw Error("out of GPU memory allocating " +
                                                         std::to_string(n >> 20) + " MiB (" +
                                                         std::to_string(free_b >> 20) + " of " +
                                                         std::to_string(total_b >> 20) +
                                                         " MiB free): lower the context or batch");
                                           }
                                           return p;
                                         },
                                         [cache](void* p) { cache->free(p); }});
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    if (tickets_) cudaFree(tickets_);
    if (sample_tickets_) cudaFree(sample_tickets_);
    cuda::free_q4_ks_workspace(ks_ws_);
    graphs_.clear();
    cudaStreamDestroy(stream_);
  }

  cudaStream_t stream() const { return stream_; }
  std::string name() const override { return name_; }
  Device device() const override { return Device::CUDA; }
  DType act_dtype() const override { return DType::BF16; }

  // TF_CUDA_POISON=1 (read when the backend is made) fills every tensor handed out with 0xFF bytes (NaN
  // in bf16/f16/f32, -1 in int32): a kernel that reads memory nothing wrote then shows NaN or faults
  // every time, instead of reading whatever a cached block last held.
  Tensor alloc(std::vector<int64_t> shape, DType dtype) override {
    Tensor t = Tensor::empty(std::move(shape), dtype, Device::CUDA);
    if (poison_ && t.nbytes() > 0) TF_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0xFF, t.nbytes(), stream_));
    if (capture_) capture_->kept.push_back(t);  // the graph's nodes keep this address
    return t;
  }

  Tensor upload(const Tensor& host) override {
    no_capture("upload");
    TF_CHECK(host.device() == Device::CPU && host.is_contiguous(), "upload: expects a contiguous CPU tensor");
    Tensor t = alloc(host.shape(), host.dtype());
    TF_CUDA_CHECK(cudaMemcpyAsync(t.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice, stream_));
    TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host tensor may be freed after we return
    return t;
  }

  LinearWeight upload_linear(const LinearWeight& host) override {
    LinearWeight w = host;
    if (host.format != LinearWeight::Format::Dense && upload_quantized_linear(host, w, stream_)) {
      // MLX affine and FP8: packed as shipped, dequantized in registers (quant_linear.h); the K-slice
      // kernel's workspace, when its mode is on, with the first weight it can take (uploads come outside
      // graph captures)
      if (!ks_ws_.part && cuda::q4_ks_mode() != 0 && cuda::q4_ks_takes(w))
        ks_ws_ = cuda::make_q4_ks_workspace();
    } else if (host.format != LinearWeight::Format::Dense) {
      // Shapes without a kernel (see quant_linear.h): the CPU twin's weights, rounded to bf16.
      w.format = LinearWeight::Format::Dense;
      w.weight = upload_bf16(dequantize_linear(host));
      w.scales = w.biases = Tensor();
    } else {
      w.weight = upload_bf16(host.weight);
    }
    if (host.bias.defined() && host.bias.numel() > 0)
      w.bias = host.bias.dtype() == DType::F16 ? upload_f32(host.bias) : upload(host.bias);
    return w;
  }

  void to_host(const Tensor& src, Tensor& dst) override {
    no_capture("to_host");
    TF_CHECK(src.numel() == dst.numel(), "to_host: " + src.describe() + " vs " + dst.describe());
    sync_stream();
    if (src.dtype() == dst.dtype()) {
      TF_CUDA_CHECK(cudaMemcpy(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToHost));
      return;
    }
    TF_CHECK(dst.dtype() == DType::F32 && (src.dtype() == DType::BF16 || src.dtype() == DType::F16),
             "to_host: can convert only bf16/f16 to f32");
    std::vector<uint16_t> tmp(src.numel());
    TF_CUDA_CHECK(cudaMemcpy(tmp.data(), src.raw(), src.nbytes(), cudaMemcpyDeviceToHost));
    float* d = dst.data<float>();
    for (size_t i = 0; i < tmp.size(); ++i)
      d[i] = src.dtype() == DType::BF16 ? bf16_to_f32(tmp[i]) : f16_to_f32(tmp[i]);
  }

  void to_host_queued(const Tensor& src, Tensor& dst) override {
    no_capture("to_host_queued");
    if (src.dtype() != dst.dtype() || dst.device() != Device::CPU || !dst.is_contiguous() ||
        !src.is_contiguous())
      return to_host(src, dst);
    TF_CHECK(src.numel() == dst.numel(), "to_host_queued: " + src.describe() + " vs " + dst.describe());
    read_back_.queue(src.raw(), dst.raw(), src.nbytes(), stream_);
  }

  // Waits for the stream, then hands the queued read-backs to their destinations.
  void sync_stream() {
    TF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    read_back_.deliver();
  }

  void begin_forward(const BatchMeta& meta) override {
    no_capture("begin_forward");
    const int r = meta.rows(), s = int(meta.block_tables.size());
    TF_CHECK(int(meta.positions.size()) == r && int(meta.row_seq.size()) == r && int(meta.slots.size()) == r,
             "begin_forward: tokens, positions, row_seq and slots must have one entry per row");
    std::vector<int32_t> buf;
    buf.reserve(4 * r + s + 64);
    for (auto* v : {&meta.tokens, &meta.positions, &meta.row_seq, &meta.slots})
      buf.insert(buf.end(), v->begin(), v->end());
    int32_t off = 0;
    for (auto& t : meta.block_tables) buf.push_back(off), off += int32_t(t.size());
    for (auto& t : meta.block_tables) buf.insert(buf.end(), t.begin(), t.end());
    buf.push_back(0);  // never empty
    auto* d = static_cast<const int32_t*>(meta_stage_.put(buf.data(), buf.size() * 4, stream_));
    dm_ = DeviceMeta{d, d + r, d + 2 * r, d + 3 * r, d + 4 * r, d + 4 * r + s, r, meta.block_size};
    max_pos_ = 0;
    row_seq_ = meta.row_seq;
    tiles_rpt_ = 0;
    for (int i = 0; i < r; ++i) {
      TF_CHECK(meta.row_seq[i] >= 0 && meta.row_seq[i] < s, "begin_forward: row_seq out of range");
      max_pos_ = std::max(max_pos_, meta.positions[i]);
    }
    have_meta_ = true;
  }

  void embedding(const Tensor& table, float scale, Tensor& out) override {
    need_meta("embedding");
    expect_float(table, "embedding", "table");
    const int hidden = int(table.dim(-1));
    TF_CHECK(out.numel() == int64_t(dm_.rows) * hidden, "embedding: out must be [rows, hidden]");
    cuda::embedding(ptr(table), table.dtype(), dm_.tokens, out.raw(), out.dtype(), dm_.rows, hidden, scale,
                    stream_);
  }

  void linear(const Tensor& x, const LinearWeight& w, Tensor& y) override {
    expect(x, DType::BF16, "linear", "x");
    TF_CHECK(y.device() == Device::CUDA && y.is_contiguous() &&
                 (y.dtype() == DType::BF16 || y.dtype() == DType::F32),
             "linear: y must be a contiguous bf16 or f32 GPU tensor, got " + y.describe());
    if (w.format != LinearWeight::Format::Dense) return linear_quantized(x, w, y, stream_, &ks_ws_);
    expect(w.weight, DType::BF16, "linear", "weight (use upload_linear)");
    const int64_t n = w.weight.dim(0), k = w.weight.dim(1);
    TF_CHECK(x.dim(-1) == k, "linear: x " + x.describe() + " does not match weight " + w.weight.describe());
    const int64_t m = x.numel() / k;
    TF_CHECK(y.numel() == m * n, "linear: y " + y.describe() + " must hold [" + std::to_string(m) + ", " +
                                     std::to_string(n) + "]");
    const bool has_bias = w.bias.defined() && w.bias.numel() > 0;
    cuda::linear_bf16(ptr(x), ptr(w.weight), has_bias ? ptr(w.bias) : nullptr,
                      has_bias ? w.bias.dtype() : DType::F32, y.raw(), y.dtype(), int(m), int(n), int(k),
                      stream_);
  }

  void rms_norm(const Tensor& x, const Tensor& w, float eps, float offset, Tensor& y) override {
    expect(x, DType::BF16, "rms_norm", "x");
    expect(y, DType::BF16, "rms_norm", "y");
    expect_float(w, "rms_norm", "weight");
    const int cols = int(x.dim(-1));
    TF_CHECK(w.numel() == cols && y.numel() == x.numel(), "rms_norm: shapes differ");
    cuda::rms_norm(ptr(x), ptr(w), w.dtype(), y.raw(), x.numel() / cols, cols, eps, offset, stream_);
  }

  void add_rms_norm(Tensor& res, const Tensor& x, const Tensor& w, float eps, float offset,
                    Tensor& y) override {
    TF_CHECK(res.dtype() == DType::BF16 || res.dtype() == DType::F32,
             "add_rms_norm: residual must be bf16 or f32");
    expect(x, DType::BF16, "add_rms_norm", "x");
    expect(y, DType::BF16, "add_rms_norm", "y");
    expect_float(w, "add_rms_norm", "weight");
    const int cols = int(x.dim(-1));
    TF_CHECK(w.numel() == cols && res.numel() == x.numel() && y.numel() == x.numel(),
             "add_rms_norm: shapes differ");
    cuda::add_rms_norm(res.raw(), res.dtype(), ptr(x), ptr(w), w.dtype(), y.raw(), x.numel() / cols, cols,
                       eps, offset, stream_);
  }

  void rope(Tensor& q, Tensor& k, const RopeParams& p) override {
    need_meta("rope");
    expect(q, DType::BF16, "rope", "q");
    expect(k, DType::BF16, "rope", "k");
    const int d = p.head_dim;
    TF_CHECK(
        d > 0 && p.rotary_dim <= d && p.rotary_dim % 2 == 0 && int(p.inv_freq.size()) == p.rotary_dim / 2,
        "rope: inconsistent RopeParams");
    const int hq = int(q.numel() / (int64_t(dm_.rows) * d)), hk = int(k.numel() / (int64_t(dm_.rows) * d));
    TF_CHECK(int64_t(hq) * dm_.rows * d == q.numel() && int64_t(hk) * dm_.rows * d == k.numel(),
             "rope: q/k must be [rows, heads, head_dim] for this batch");
    cuda::rope(q.raw(), k.raw(), dm_.rows, hq, hk, d, p.rotary_dim, device_inv_freq(p), p.attention_factor,
               p.interleaved, dm_.positions, stream_);
  }

  void attention_inputs(Tensor& q, Tensor& k, const Tensor& v, const Tensor* qn, const Tensor* kn, float eps,
                        float offset, const RopeParams& p, KvLayer& layer) override {
    need_meta("attention_inputs");
    const int d = p.head_dim;
    const int hq = d > 0 ? int(q.numel() / (int64_t(dm_.rows) * d)) : 0;
    const int hk = d > 0 ? int(k.numel() / (int64_t(dm_.rows) * d)) : 0;
    if (k.dtype() == DType::BF16 && v.dtype() == DType::BF16 && v.numel() == k.numel() &&
        int64_t(hk) * dm_.rows * d == k.numel() && inputs_fusable(q, qn, kn, p, layer, hq, hk) &&
        cuda::qk_norm_rope_kv(q.raw(), k.raw(), ptr(v), qn ? ptr(*qn) : nullptr, kn ? ptr(*kn) : nullptr,
                              qn ? qn->dtype() : DType::F32, eps, offset, dm_.rows, hq, hk, d, p.rotary_dim,
                              device_inv_freq(p), p.attention_factor, p.interleaved, dm_.positions,
                              layer.k.raw(), layer.v.raw(), dm_.slots, stream_))
      return;
    Backend::attention_inputs(q, k, v, qn, kn, eps, offset, p, layer);  // shapes the fused kernel lacks
  }

  void attention_inputs_qkv(const Tensor& qkv, Tensor& q, const Tensor* qn, const Tensor* kn, float eps,
                            float offset, const RopeParams& p, KvLayer& layer) override {
    need_meta("attention_inputs_qkv");
    const int d = p.head_dim;
    const int hk = layer.k.ndim() == 4 ? int(layer.k.dim(2)) : 0;
    const int hq = d > 0 ? int(q.numel() / (int64_t(dm_.rows) * d)) : 0;
    if (qkv.dtype() == DType::BF16 && qkv.device() == Device::CUDA && qkv.is_contiguous() &&
        qkv.numel() == int64_t(dm_.rows) * (hq + 2 * hk) * d && inputs_fusable(q, qn, kn, p, layer, hq, hk) &&
        cuda::qkv_norm_rope_kv(ptr(qkv), q.raw(), qn ? ptr(*qn) : nullptr, kn ? ptr(*kn) : nullptr,
                               qn ? qn->dtype() : DType::F32, eps, offset, dm_.rows, hq, hk, d, p.rotary_dim,
                               device_inv_freq(p), p.attention_factor, p.interleaved, dm_.positions,
                               layer.k.raw(), layer.v.raw(), dm_.slots, stream_))
      return;
    Backend::attention_inputs_qkv(qkv, q, qn, kn, eps, offset, p, layer);  // copies the parts out
  }

  void silu_mul_linear(const Tensor& gu, const LinearWeight& w, Tensor& act, Tensor& y) override {
    const int64_t k = w.in_features, m = gu.dim(-1) == 2 * k ? gu.numel() / (2 * k) : -1;
    const bool has_bias = w.bias.defined() && w.bias.numel() > 0;
    // M = 1 only: its kernel (kSilu1) loads the next step's gate/up values ahead; at M = 2..16 (kSilu) the
    // values are waited for chunk by chunk (+1.6 ms at b = 8 in run 39): silu_mul + linear there. M > 16:
    // the wgmma kernel's x permute computes the activation, where that path runs (else the two ops).
    if (((g_fused_silu_linear && m == 1) || m > 16) && w.format == LinearWeight::Format::Dense &&
        w.weight.dtype() == DType::BF16 && w.weight.dim(1) == k && gu.dtype() == DType::BF16 &&
        gu.device() == Device::CUDA && gu.is_contiguous() && m >= 0 && y.device() == Device::CUDA &&
        y.is_contiguous() && (y.dtype() == DType::BF16 || y.dtype() == DType::F32) &&
        y.numel() == m * w.weight.dim(0) &&
        cuda::linear_silu_bf16(ptr(gu), ptr(w.weight), has_bias ? ptr(w.bias) : nullptr,
                               has_bias ? w.bias.dtype() : DType::F32, y.raw(), y.dtype(), int(m),
                               int(w.weight.dim(0)), int(k), stream_))
      return;
    // MLX 4-bit prefill: the wgmma linear's x permute computes the activation too.
    if (gu.device() == Device::CUDA && y.device() == Device::CUDA &&
        cuda::linear_quantized_silu(gu, w, y, stream_))
      return;
    Backend::silu_mul_linear(gu, w, act, y);  // M > 16, quantized weights: the two ops
  }

  bool add_rms_norm_linear(Tensor& res, const Tensor& x, const Tensor& nw, float eps, float offset, Tensor& h,
                           const LinearWeight& w, Tensor& y, Tensor& res_out) override {
    const int64_t k = w.in_features, m = k > 0 ? x.numel() / k : -1;
    const bool has_bias = w.bias.defined() && w.bias.numel() > 0;
    auto on_gpu = [](const Tensor& t) { return t.device() == Device::CUDA && t.is_contiguous(); };
    if (g_fused_norm_linear && w.format == LinearWeight::Format::Dense && w.weight.dtype() == DType::BF16 &&
        w.weight.dim(1) == k && x.dim(-1) == k && x.dtype() == DType::BF16 && on_gpu(x) && on_gpu(res) &&
        on_gpu(res_out) && res_out.dtype() == res.dtype() && res.numel() == x.numel() &&
        res_out.numel() == x.numel() && res.raw() != res_out.raw() && nw.numel() == k &&
        nw.device() == Device::CUDA &&
        (nw.dtype() == DType::BF16 || nw.dtype() == DType::F32 || nw.dtype() == DType::F16) && on_gpu(y) &&
        (y.dtype() == DType::BF16 || y.dtype() == DType::F32) && y.numel() == m * w.weight.dim(0) &&
        cuda::linear_add_rms_norm_bf16(ptr(res), res.dtype(), ptr(x), ptr(nw), nw.dtype(), eps, offset,
                                       res_out.raw(), ptr(w.weight), has_bias ? ptr(w.bias) : nullptr,
                                       has_bias ? w.bias.dtype() : DType::F32, y.raw(), y.dtype(), int(m),
                                       int(w.weight.dim(0)), int(k), stream_))
      return true;
    return Backend::add_rms_norm_linear(res, x, nw, eps, offset, h, w, y, res_out);  // M > 8, quantized
  }

  void silu_mul(const Tensor& gu, Tensor& out) override {
    expect(gu, DType::BF16, "silu_mul", "gate_up");
    expect(out, DType::BF16, "silu_mul", "out");
    const int inter = int(gu.dim(-1) / 2);
    const int64_t rows = gu.numel() / gu.dim(-1);
    TF_CHECK(out.numel() == rows * inter, "silu_mul: out must be [rows, inter]");
    cuda::silu_mul(ptr(gu), out.raw(), rows, inter, stream_);
  }

  void kv_write(KvLayer& layer, const Tensor& k, const Tensor& v) override {
    need_meta("kv_write");
    expect(k, DType::BF16, "kv_write", "k");
    expect(v, DType::BF16, "kv_write", "v");
    expect(layer.k, DType::BF16, "kv_write", "K pool");
    expect(layer.v, DType::BF16, "kv_write", "V pool");
    const int64_t row = layer.k.dim(2) * layer.k.dim(3);
    TF_CHECK(k.numel() == row * dm_.rows && v.numel() == k.numel(),
             "kv_write: k/v must be [rows, kv_heads, head_dim]");
    TF_CHECK(layer.k.dim(1) == dm_.block_size, "kv_write: pool block size differs from the batch's");
    cuda::kv_write(layer.k.raw(), layer.v.raw(), ptr(k), ptr(v), dm_.rows, int(row), dm_.slots, stream_);
  }

  void attention(const Tensor& q, const KvLayer& layer, const AttentionParams& p, Tensor& out) override {
    need_meta("attention");
    expect(q, DType::BF16, "attention", "q");
    expect(out, DType::BF16, "attention", "out");
    expect(layer.k, DType::BF16, "attention", "K pool");
    TF_CHECK(
        layer.k.dim(2) == p.num_kv_heads && layer.k.dim(3) == p.head_dim && layer.k.dim(1) == dm_.block_size,
        "attention: KV pool shape does not match the attention parameters");
    TF_CHECK(q.numel() == int64_t(dm_.rows) * p.num_heads * p.head_dim && out.numel() == q.numel(),
             "attention: q/out must be [rows, heads, head_dim]");
    // A captured launch is sized for the bucket (same bits: blocks past a row's chunks do nothing), so that
    // the graph serves every step until the longest row leaves it.
    const int exact = exact_chunks();
    const int chunks = capture_ ? attention_chunk_bucket(exact) : exact;
    const size_t n = size_t(dm_.rows) * p.num_heads * chunks;
    Workspace& ws = capture_ ? graph_attn_ws_ : attn_ws_;
    attn_heads_ = p.num_heads, attn_dim_ = p.head_dim;
    if (cuda::attention_mma_enabled() &&
        cuda::attention_mma_supported(p.head_dim, p.num_heads, p.num_kv_heads)) {
      const int rpt = cuda::attention_mma_rows_per_tile(p.num_heads, p.num_kv_heads);
      if (rpt != tiles_rpt_ || cuda::attention_tile_schedule() != tiles_schedule_ ||
          cuda::attention_loop_wide() != tiles_wide_) {  // once per forward
        // run_graph planned the tiles of a capture (they are refreshed before every replay): a different
        // attention shape inside the captured forward would bake this round's tiles into the graph.
        TF_CHECK(!capture_,
                 "run_graph: the captured forward's attention differs from the shape given to run_graph");
        plan_tiles(p.num_heads, p.num_kv_heads, chunks, tile_stage_);
      }
      cuda::AttentionMmaArgs a;
      a.q = ptr(q), a.k_pool = ptr(layer.k), a.v_pool = ptr(layer.v), a.out = out.raw(), a.meta = dm_;
      a.hq = p.num_heads, a.hk = p.num_kv_heads, a.head_dim = p.head_dim, a.scale = p.scale;
      a.window = p.sliding_window, a.softcap = p.softcap, a.max_chunks = chunks;
      a.loop_tiles = tiles_, a.num_loop_tiles = num_loop_tiles_, a.wide_loop = tiles_wide_;
      a.pool_slots = layer.k.dim(0) * layer.k.dim(1);
      a.split_tiles = tiles_ + num_loop_tiles_, a.num_split_tiles = num_split_tiles_;
      a.decode_loop =
          cuda::attention_decode_loop_takes(num_split_tiles_, p.num_kv_heads, split_one_warp_, chunks);
      // The graph's key holds the decode loop's choice for run_graph's KV heads: a layer of other KV heads
      // inside the capture could choose otherwise and replay wrongly.
      TF_CHECK(!capture_ || a.decode_loop == graph_decode_loop_,
               "run_graph: the captured forward's attention chooses its kernel otherwise than its key");
      if (num_split_tiles_ > 0) {  // partials only for the split schedule
        a.part_acc = static_cast<float*>(ws.get(partial_bytes(n, p.head_dim), capture_ != nullptr));
        a.part_ml = a.part_acc + n * p.head_dim;
        a.tickets = attention_tickets(size_t(num_split_tiles_) * size_t(p.num_kv_heads), chunks);
      }
      return cuda::attention_mma(a, stream_);
    }
    auto* part = static_cast<float*>(ws.get(n * (p.head_dim + 2) * sizeof(float), capture_ != nullptr));
    cuda::attention(ptr(q), ptr(layer.k), ptr(layer.v), out.raw(), dm_, p.num_heads, p.num_kv_heads,
                    p.head_dim, p.scale, p.sliding_window, p.softcap, chunks, part, part + n * p.head_dim,
                    stream_);
  }

  // The split schedule's partials of n (row, head, chunk) slots: [n, head_dim] outputs, then [n, 2] max/sum.
  static size_t partial_bytes(size_t n, int head_dim) { return n * size_t(head_dim + 2) * sizeof(float); }

  // The fused combine's tickets (AttentionMmaArgs::tickets): one zeroed buffer made at the first eager
  // attention, never moved (captured graphs keep its address); null (the combine launch instead, same
  // bits) for calls of more than attention_fused_combine_max() (split tile, KV head) pairs (64 by default),
  // or when the fused combine is off (set_attention_fused_combine). Run 94 (8B, ctx 512, two A/B pairs):
  // fused b=8 bf16 5.36 -> 5.32 ms, 4-bit 3.17 -> 3.10 ms, b=1 4-bit 2.44 -> 2.43 ms; but b=16 bf16 6.30
  // -> 6.36 ms (the last blocks' merges trail the grid): so only up to 8 sequences of 8 KV heads. And only up
  // to kFusedCombineMaxChunks chunks: at 8k context (64 chunks, b=1) the combine launch was 2-3% faster (runs
  // 139-140).
  int* attention_tickets(size_t n, int chunks) {
    if (!cuda::attention_fused_combine() || n > size_t(cuda::attention_fused_combine_max()) ||
        chunks > kFusedCombineMaxChunks)
      return nullptr;
    if (!tickets_ && !capture_) {  // (room for the largest rule: set_attention_fused_combine_max)
      TF_CUDA_CHECK(cudaMalloc(&tickets_, cuda::kFusedCombineCap * sizeof(int)));
      TF_CUDA_CHECK(cudaMemsetAsync(tickets_, 0, cuda::kFusedCombineCap * sizeof(int), stream_));
    }
    return tickets_;
  }

  void add(Tensor& a, const Tensor& b) override {
    expect_float(a, "add", "a");
    expect_float(b, "add", "b");
    TF_CHECK(a.numel() == b.numel() && a.dtype() != DType::F16 && b.dtype() != DType::F16,
             "add: a and b must have the same size, bf16 or f32");
    cuda::add(a.raw(), a.dtype(), ptr(b), b.dtype(), a.numel(), stream_);
  }

  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    TF_CHECK(x.device() == Device::CUDA && out.device() == Device::CUDA && x.dtype() == out.dtype(),
             "gather_rows: x and out must be GPU tensors of one dtype");
    const int64_t row_bytes = int64_t(x.nbytes() / x.dim(0));
    TF_CHECK(out.nbytes() == size_t(row_bytes) * rows.size(),
             "gather_rows: out must be [rows, ...] of x's row size");
    for (int32_t r : rows) TF_CHECK(r >= 0 && r < x.dim(0), "gather_rows: row index out of range");
    if (rows.empty()) return;
    auto* d = static_cast<const int32_t*>(stage(gather_stage_, rows.data(), rows.size() * 4));
    cuda::gather_rows(ptr(x), d, out.raw(), int(rows.size()), row_bytes, stream_);
  }

  void zero(Tensor& t) override {
    TF_CHECK(t.device() == Device::CUDA, "zero: a GPU tensor is required");
    TF_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
  }

  void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int32_t>& rows,
                        const std::vector<float>& weights) override {
    TF_CHECK(out.device() == Device::CUDA && y.device() == Device::CUDA && out.dtype() == y.dtype() &&
                 (out.dtype() == DType::BF16 || out.dtype() == DType::F32) && rows.size() == weights.size(),
             "scatter_add_rows: out and y must be GPU tensors of one dtype (bf16 or f32)");
    if (rows.empty()) return;
    const int64_t width = out.numel() / out.dim(0);
    for (int32_t r : rows) TF_CHECK(r >= 0 && r < out.dim(0), "scatter_add_rows: row index out of range");
    std::vector<uint8_t> packed(rows.size() * 8);
    std::memcpy(packed.data(), rows.data(), rows.size() * 4);
    std::memcpy(packed.data() + rows.size() * 4, weights.data(), rows.size() * 4);
    auto* d = static_cast<const uint8_t*>(stage(scatter_stage_, packed.data(), packed.size()));
    cuda::scatter_add_rows(out.raw(), ptr(y), out.dtype(), reinterpret_cast<const int32_t*>(d),
                           reinterpret_cast<const float*>(d + rows.size() * 4), int(rows.size()), width,
                           stream_);
  }

  bool add_rms_norm_moe(Tensor& res, const Tensor& x, const Tensor& nw, float eps, float offset, Tensor& h,
                        MoeWeights& w, Tensor& out, Tensor& res_out) override {
    // One decode row: the one-kernel MoE makes its input from the residual (moe_fused.h).
    if (cuda::moe_fused_add_norm(*this, stream_, res, x, nw, eps, offset, w, out, res_out)) return true;
    return Backend::add_rms_norm_moe(res, x, nw, eps, offset, h, w, out, res_out);
  }

  bool linear_add_rms_norm_moe(const Tensor& attn, const LinearWeight& o, Tensor& x, Tensor& res,
                               const Tensor& nw, float eps, float offset, Tensor& h, MoeWeights& w,
                               Tensor& out, Tensor& res_out) override {
    // One decode row: the one-kernel MoE computes the o projection too (moe_fused.h).
    if (cuda::moe_fused_o_add_norm(*this, stream_, attn, o, res, x, nw, eps, offset, w, out, res_out))
      return true;
    return Backend::linear_add_rms_norm_moe(attn, o, x, res, nw, eps, offset, h, w, out, res_out);
  }

  bool moe_graph_safe(const MoeWeights& w, int64_t hidden) const override {
    return cuda::moe_fusable(w, hidden);  // (bf16 activations; its tables upload once, eagerly)
  }

  void moe(const Tensor& h, MoeWeights& w, Tensor& out) override {
    if (!cuda::moe_fusable(h, w)) return Backend::moe(h, w, out);  // e.g. MLX 4-bit experts
    cuda::moe_fused(*this, stream_, h, w, out);
  }

  void read_raw(const Tensor& src, size_t offset, size_t bytes, void* dst) override {
    no_capture("read_raw");
    TF_CHECK(src.device() == Device::CUDA && offset + bytes <= src.nbytes(),
             "read_raw: out of range of " + src.describe());
    TF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    TF_CUDA_CHECK(
        cudaMemcpy(dst, static_cast<const char*>(src.raw()) + offset, bytes, cudaMemcpyDeviceToHost));
  }

  void write_raw(Tensor& dst, size_t offset, const void* src, size_t bytes) override {
    no_capture("write_raw");
    TF_CHECK(dst.device() == Device::CUDA && offset + bytes <= dst.nbytes(),
             "write_raw: out of range of " + dst.describe());
    TF_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<char*>(dst.raw()) + offset, src, bytes, cudaMemcpyHostToDevice, stream_));
    TF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse `src` at once
  }

  void sample_rows(const Tensor& logits, const std::vector<RowSampling>& rows,
                   std::vector<int32_t>& tokens) override {
    no_capture("sample_rows");
    TF_CHECK(logits.device() == Device::CUDA && logits.dtype() == DType::F32 &&
                 logits.dim(0) == int64_t(rows.size()),
             "sample_rows: logits must be an F32 GPU tensor [rows, vocab]");
    const int n = int(rows.size());
    tokens.assign(rows.size(), 0);
    if (n == 0) return;
    std::vector<DeviceRowSampling> d(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) d[i] = {rows[i].temperature, rows[i].seed, rows[i].position};
    auto* dev =
        static_cast<uint8_t*>(sample_stage_.put(d.data(), d.size() * sizeof(DeviceRowSampling), stream_));
    const int64_t vocab = logits.numel() / n;
    if (n > sample_tickets_cap_) {  // a ticket a row, zero between calls (the kernel's last block resets it)
      if (sample_tickets_) TF_CUDA_CHECK(cudaFree(sample_tickets_));  // waits for the kernels using it
      sample_tickets_ = nullptr, sample_tickets_cap_ = 0;
      const int cap = std::max(1024, 2 * n);
      TF_CUDA_CHECK(cudaMalloc(&sample_tickets_, size_t(cap) * sizeof(int)));
      TF_CUDA_CHECK(cudaMemsetAsync(sample_tickets_, 0, size_t(cap) * sizeof(int), stream_));
      sample_tickets_cap_ = cap;
    }
    // out [n] ints, then the spans' bests [n, spans]
    const size_t spans_at = (size_t(n) * 4 + 15) / 16 * 16;
    auto* buf = static_cast<char*>(
        sample_out_.get(spans_at + size_t(n) * size_t(cuda::sample_spans(vocab)) * sizeof(cuda::SampleBest)));
    auto* out = reinterpret_cast<int32_t*>(buf);
    cuda::sample_rows(static_cast<const float*>(ptr(logits)), vocab,
                      reinterpret_cast<const DeviceRowSampling*>(dev), n, out,
                      reinterpret_cast<cuda::SampleBest*>(buf + spans_at), sample_tickets_, stream_);
    TF_CUDA_CHECK(
        cudaMemcpyAsync(tokens.data(), out, rows.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    sync_stream();
  }

  std::shared_ptr<void> prepare_decode_step(const DecodeStepModel& m, std::string* why) override {
    no_capture("prepare_decode_step");
    if (act_dtype() != DType::BF16) {
      if (why) *why = "one-kernel decode step: activations are not bf16";
      return nullptr;
    }
    if (!g_decode_step) {  // not prepared at all: no packed copy of the weights taking device memory
      if (why) *why = "one-kernel decode step: turned off (TF_DECODE_STEP=0)";
      return nullptr;
    }
    std::unique_ptr<DecodeStep> step = DecodeStep::make(m, stream_, why);
    if (step) {
      ++g_decode_steps_prepared;
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f", double(step->packed_bytes()) / double(1ull << 30));
      if (why)
        *why = "one-kernel decode step for one-row rounds below position " +
               std::to_string(DecodeStep::kMaxPositions) + " (a packed copy of the weights: " + gib + " GiB)";
    }
    return std::shared_ptr<void>(std::move(step));
  }
  bool bind_decode_step(void* step, const std::vector<KvLayer>& kv) override {
    need_meta("bind_decode_step");
    no_capture("bind_decode_step");
    const bool ok = g_decode_step && step &&
                    static_cast<DecodeStep*>(step)->bind(dm_.rows, max_pos_, dm_.block_size, kv, stream_);
    if (ok) ++g_decode_step_rounds;
    return ok;
  }
  void decode_step(void* step, Tensor& logits) override {
    need_meta("decode_step");
    TF_CHECK(step, "decode_step: no prepared step");
    expect(logits, DType::F32, "decode_step", "logits");
    static_cast<DecodeStep*>(step)->run(dm_, logits.data<float>(), stream_);
  }

  void synchronize() override {
    no_capture("synchronize");
    sync_stream();
  }

  bool graphs_supported() const override { return true; }

  bool run_graph(const std::vector<int64_t>& key, const AttentionParams& attn,
                 std::shared_ptr<const void> keep, const std::function<void()>& record) override {
    need_meta("run_graph");
    no_capture("run_graph");
    const int bucket = attention_chunk_bucket(exact_chunks());
    // The attention tiles of this round's rows, in the fixed buffer every graph reads: only their counts
    // (the grids) are keyed, so verify rounds of different draft widths share a graph.
    const bool mma =
        attention_mma_enabled() && attention_mma_supported(attn.head_dim, attn.num_heads, attn.num_kv_heads);
    if (mma) plan_tiles(attn.num_heads, attn.num_kv_heads, bucket, graph_tile_stage_);
    // The backend's part of the key: what sizes or picks launches besides the caller's shapes.
    std::vector<int64_t> k = key;
    graph_decode_loop_ =
        mma ? attention_decode_loop_takes(num_split_tiles_, attn.num_kv_heads, split_one_warp_, bucket) : 0;
    k.insert(k.end(), {-1, bucket, dm_.rows, dm_.block_size, int64_t(mma), mma ? num_loop_tiles_ : -1,
                       mma ? num_split_tiles_ : -1, int64_t(attention_tile_schedule()), int64_t(tiles_wide_),
                       int64_t(graph_decode_loop_), int64_t(g_fused_norm_linear),
                       int64_t(g_fused_silu_linear), int64_t(pdl_enabled())});
    const void* tiles = mma ? static_cast<const void*>(tiles_) : nullptr;
    if (GraphEntry* e = graphs_.find(k)) {
      if (e->meta == dm_.tokens && e->tiles == tiles && e->attn_generation == graph_attn_ws_.generation()) {
        TF_CUDA_CHECK(cudaGraphLaunch(e->exec, stream_));
        ++graph_stats_.replays;
        return false;
      }
      graphs_.erase(k);  // a buffer it captured moved
    }
    if (!graph_uses_.use(k)) {  // a shape seen too rarely yet to pay a capture: run it eagerly
      tiles_rpt_ = 0;           // the attention plans its own tiles, as in any eager forward
      record();
      ++graph_stats_.eager;
      return false;
    }
    graph_attn_ws_.release_retired();
    if (attn_heads_ > 0)  // sized before the capture when the shape is known (no cudaMalloc inside it)
      graph_attn_ws_.get(size_t(dm_.rows) * attn_heads_ * bucket * (attn_dim_ + 2) * 4);
    auto entry = std::make_unique<GraphEntry>(4096 + 64 * size_t(dm_.rows));
    entry->keep = std::move(keep);
    entry->meta = dm_.tokens;
    entry->tiles = tiles;
    capture(*entry, record);
    entry->attn_generation = graph_attn_ws_.generation();
    GraphEntry* e = graphs_.put(k, std::move(entry));
    e->upload(stream_);                                // the staged tiles and row indices, once
    TF_CUDA_CHECK(cudaGraphLaunch(e->exec, stream_));  // the capture itself ran nothing
    ++graph_stats_.captures;
    return true;
  }

  void clear_graphs() override {
    no_capture("clear_graphs");
    graphs_.clear();
    graph_uses_.clear();
  }
  GraphStats graph_stats() const override {
    GraphStats s = graph_stats_;
    s.cached = graphs_.size(), s.capacity = graphs_.capacity();
    return s;
  }
  void set_graph_capacity(size_t n) {
    no_capture("set_graph_capacity");
    graphs_ = LruMap<GraphEntry>(n);
  }
  void reserve_q4_ks_workspace() {
    no_capture("reserve_q4_ks_workspace");
    if (!ks_ws_.part) ks_ws_ = cuda::make_q4_ks_workspace();
  }
  void set_graph_capture_after(int uses) {
    no_capture("set_graph_capture_after");
    graph_uses_ = GraphUseCounter(uses);
  }
  void clear_error() override {
    cudaStreamSynchronize(stream_);  // errors ignored: cleared next
    cudaGetLastError();
    read_back_.discard();
    if (sample_tickets_)  // a sampling launch that failed half-way may have left tickets taken
      cudaMemsetAsync(sample_tickets_, 0, size_t(sample_tickets_cap_) * sizeof(int), stream_);
    cuda::reset_q4_ks_workspace(ks_ws_, stream_);  // (the same for the K-slice linear's)
  }
  // The split schedule's partials at positions below `context`, grown by a quarter as attn_ws_ grows.
  size_t attention_workspace_bytes(int64_t rows, int heads, int head_dim, int context) const override {
    const size_t chunks = size_t(std::max(context, 1) - 1) / kAttnChunk + 1;
    return partial_bytes(size_t(rows) * size_t(heads) * chunks, head_dim) * 5 / 4;
  }
  size_t free_memory() const override {
    size_t free = 0, total = 0;
    TF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }
  size_t total_memory() const override {
    size_t free = 0, total = 0;
    TF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return total;
  }

 private:
  // The rope frequencies on the device, one upload per distinct set (a model and its draft model: a few),
  // kept for the backend's life: captured graphs point at them.
  const float* device_inv_freq(const RopeParams& p) {
    for (auto& [host, dev] : inv_freqs_)
      if (host == p.inv_freq) return dev.data<float>();
    TF_CHECK(!capture_, "rope: the frequencies must be uploaded by an eager forward before a graph capture");
    std::vector<float> host = p.inv_freq;
    Tensor dev = upload(Tensor::borrow(host.data(), {int64_t(host.size())}, DType::F32, Device::CPU));
    inv_freqs_.emplace_back(std::move(host), dev);
    return dev.data<float>();
  }
  // Attention chunks of kAttnChunk positions the forward's longest row spans (tests may size it up).
  int exact_chunks() const { return std::max(max_pos_ / kAttnChunk + 1, g_min_attention_chunks); }
  void no_capture(const char* op) const {
    TF_CHECK(!capture_, std::string(op) + " cannot run inside a CUDA graph capture (Backend::run_graph)");
  }
  // Host data for a kernel: through the staging buffer, or during a capture into the graph's arena.
  const void* stage(Staging& st, const void* data, size_t bytes) {
    return capture_ ? capture_->put(data, bytes) : st.put(data, bytes, stream_);
  }
  // Cuts this forward's rows into attention tiles for hq/hk heads and stages them through `st`: the
  // attention's staging buffer, or for a graph the fixed buffer it reads on every replay.
  void plan_tiles(int hq, int hk, int chunks, Staging& st) {
    const int rpt = cuda::attention_mma_rows_per_tile(hq, hk);
    std::vector<int32_t> loop, split;
    // Loop tiles pay once they fill the card (~2 blocks an SM over the KV heads); fewer walk their
    // chunks too serially (run 10: a verify of 8 rows at 8k context, 8 blocks walking 64 chunks).
    cuda::plan_attention_tiles(row_seq_, rpt, cuda::attention_tile_schedule(), loop, split,
                               (2 * sm_count_ + hk - 1) / hk, chunks);
    tiles_wide_ = cuda::attention_loop_wide();
    if (tiles_wide_) cuda::widen_loop_tiles(row_seq_, rpt, loop);
    num_loop_tiles_ = int(loop.size() / 2), num_split_tiles_ = int(split.size() / 2);
    split_one_warp_ = true;  // (the decode loop kernel's condition: set_attention_decode_loop)
    for (size_t t = 1; t < split.size(); t += 2)
      split_one_warp_ = split_one_warp_ && split[t] * (hq / hk) <= 16;
    loop.insert(loop.end(), split.begin(), split.end());
    loop.push_back(0), loop.push_back(0);  // never empty
    tiles_ = static_cast<const int2*>(st.put(loop.data(), loop.size() * 4, stream_));
    tiles_rpt_ = rpt, tiles_schedule_ = cuda::attention_tile_schedule();
  }
  // Records `record` into entry.exec. A failed capture is ended and its partial graph dropped.
  void capture(GraphEntry& entry, const std::function<void()>& record) {
    TF_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    capture_ = &entry;
    cudaGraph_t g = nullptr;
    try {
      record();
    } catch (...) {
      capture_ = nullptr;
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      cudaGetLastError();
      throw;
    }
    capture_ = nullptr;
    TF_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    const cudaError_t err = cudaGraphInstantiate(&entry.exec, g, 0);
    cudaGraphDestroy(g);
    TF_CUDA_CHECK(err);
  }
  // Whether qk_norm_rope_kv / qkv_norm_rope_kv may run for q [rows, hq, D] and this pool and norms (the
  // kernels themselves also refuse rope layouts they lack).
  bool inputs_fusable(const Tensor& q, const Tensor* qn, const Tensor* kn, const RopeParams& p,
                      const KvLayer& layer, int hq, int hk) const {
    const int d = p.head_dim;
    return d > 0 && hq > 0 && hk > 0 && q.dtype() == DType::BF16 && q.is_contiguous() &&
           int64_t(hq) * dm_.rows * d == q.numel() && layer.k.dtype() == DType::BF16 &&
           layer.v.dtype() == DType::BF16 && layer.k.ndim() == 4 && layer.k.dim(3) == d &&
           layer.k.dim(2) == hk && layer.k.dim(1) == dm_.block_size && (qn == nullptr) == (kn == nullptr) &&
           (!qn || (qn->dtype() == kn->dtype() && qn->numel() == d && kn->numel() == d &&
                    qn->device() == Device::CUDA && kn->device() == Device::CUDA)) &&
           int(p.inv_freq.size()) == p.rotary_dim / 2;
  }
  void need_meta(const char* op) {
    TF_CHECK(have_meta_, std::string(op) + ": begin_forward() was not called");
  }
  Tensor upload_bf16(const Tensor& host) {
    if (host.dtype() == DType::BF16) return upload(host);
    std::vector<uint16_t> b = to_bf16(host);
    return upload(Tensor::borrow(b.data(), host.shape(), DType::BF16, Device::CPU));
  }
  Tensor upload_f32(const Tensor& host) {
    std::vector<float> f = host.to_f32_vector();
    return upload(Tensor::borrow(f.data(), host.shape(), DType::F32, Device::CPU));
  }

  int device_;
  int sm_count_ = 132;
  std::string name_;
  const bool poison_ = env_switch("TF_CUDA_POISON", false);
  cudaStream_t stream_ = nullptr;
  Staging meta_stage_, gather_stage_, scatter_stage_, sample_stage_, tile_stage_;
  ReadBack read_back_;                               // to_host_queued
  static constexpr int kFusedCombineMaxChunks = 16;  // the longest row's chunks (2,048 positions)
  int* tickets_ = nullptr;                           // attention_tickets
  cuda::Q4KsWorkspace ks_ws_;                        // q4_ks_kernel's (upload_linear)

  Staging graph_tile_stage_;      // the attention tiles of graphed forwards (a fixed address while it fits)
  std::vector<int32_t> row_seq_;  // host copy of this forward's rows' sequences (attention tiles)
  const int2* tiles_ = nullptr;   // device: loop tiles, then split tiles, as (first row, rows)
  int tiles_rpt_ = 0, num_loop_tiles_ = 0, num_split_tiles_ = 0;
  bool split_one_warp_ = false;
  int graph_decode_loop_ = 0;  // run_graph's key: the decode loop kernel's teams for its attention (0: not)
  bool tiles_wide_ = false;
  cuda::TileSchedule tiles_schedule_ = cuda::TileSchedule::Auto;
  Workspace attn_ws_, sample_out_;
  int* sample_tickets_ = nullptr;  // sample_rows' tickets, sample_tickets_cap_ of them (zero between calls)
  int sample_tickets_cap_ = 0;
  Workspace graph_attn_ws_{true};      // attention partials of captured graphs (attn_ws_ may move under them)
  GraphEntry* capture_ = nullptr;      // the graph being captured
  int attn_heads_ = 0, attn_dim_ = 0;  // the last attention's shape (sizes graph_attn_ws_ before a capture)
  LruMap<GraphEntry> graphs_{kDefaultGraphCapacity};
  GraphUseCounter graph_uses_;  // run_graph calls per key: a key is captured once it recurs
  GraphStats graph_stats_;
  DeviceMeta dm_;
  int max_pos_ = 0;
  bool have_meta_ = false;
  std::vector<std::pair<std::vector<float>, Tensor>> inv_freqs_;
};

CudaBackend& as_cuda(Backend& b) {
  auto* c = dynamic_cast<CudaBackend*>(&b);
  TF_CHECK(c, "expected the CUDA backend, got " + b.name());
  return *c;
}

}  // namespace

void set_fused_norm_linear(bool on) {
  g_fused_norm_linear = on;
}

void set_fused_silu_linear(bool on) {
  g_fused_silu_linear = on;
}

void set_decode_step(bool on) {
  g_decode_step = on;
}
int64_t decode_steps_prepared() {
  return g_decode_steps_prepared;
}
int64_t decode_step_rounds() {
  return g_decode_step_rounds;
}

cudaStream_t stream_of(Backend& b) {
  return as_cuda(b).stream();
}

void set_graph_capacity(Backend& b, size_t n) {
  as_cuda(b).set_graph_capacity(n);
}
void reserve_q4_ks_workspace(Backend& b) {
  as_cuda(b).reserve_q4_ks_workspace();
}
void set_graph_capture_after(Backend& b, int uses) {
  as_cuda(b).set_graph_capture_after(uses);
}

void set_attention_min_chunks(int n) {
  g_min_attention_chunks = n;
}

void fill_uniform(Backend& b, Tensor& t, uint64_t seed, float lo, float hi) {
  TF_CHECK(t.device() == Device::CUDA && (t.dtype() == DType::BF16 || t.dtype() == DType::F32),
           "fill_uniform: expects a bf16 or f32 GPU tensor");
  fill_uniform(t.raw(), t.dtype(), t.numel(), seed, lo, hi, stream_of(b));
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device_index, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return nullptr;
  };
  // Every kernel of the binary loaded when the context is made, not each at its first launch (the driver's
  // default, LAZY), unless the user chose: the same kernels and bits, never slower in runs 397-398 (H200):
  // the 30B-A3B MLX 4-bit decode at one row -1.1% / -0.5% (tf_bench_moe), `tensorfold bench` 1 stream the
  // same, 8 streams +0.5% serial / +1.6% drafted; the start-up ~40 ms longer. Before the first CUDA call
  // (the driver reads it once); a later backend in the process changes nothing.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return say(std::string("no usable CUDA device: ") + cudaGetErrorString(e));
  if (device_index < 0 || device_index >= count)
    return say("CUDA device " + std::to_string(device_index) + " does not exist (" + std::to_string(count) +
               " found)");
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, device_index);
  if (e != cudaSuccess) return say(std::string("cannot query the CUDA device: ") + cudaGetErrorString(e));
  if (prop.major < 8)
    return say(std::string(prop.name) + " is compute capability " + std::to_string(prop.major) + "." +
               std::to_string(prop.minor) + "; the CUDA backend needs sm_80 (Ampere) or newer");
  return std::make_unique<cuda::CudaBackend>(device_index, prop);
}

}  // namespace tf
