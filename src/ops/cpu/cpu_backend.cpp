// The CPU reference backend: plain loops, fp32 activations and accumulation, every row computed on its
// own. Obviously correct first; it is the twin every CUDA kernel is tested against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/cpu/quant.h"

namespace tf {

namespace {

void check_cpu_f32(const Tensor& t, const char* what) {
  TF_CHECK(t.device() == Device::CPU && t.dtype() == DType::F32 && t.is_contiguous(),
           std::string("cpu backend: ") + what + " must be a contiguous f32 CPU tensor, got " + t.describe());
}

// Host tensor of any float dtype -> owning f32 copy.
Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::F32 && t.is_contiguous()) return t;
  std::vector<float> v = t.to_f32_vector();
  Tensor out = Tensor::empty(t.shape(), DType::F32);
  std::memcpy(out.raw(), v.data(), v.size() * 4);
  return out;
}

// Dot product with a fixed reduction order: 8 interleaved partial sums, then a fixed tree. Independent
// of anything but the two vectors, and vectorisable without -ffast-math.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  for (int j = 0; k < n; ++k, ++j) acc[j] += a[k] * b[k];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

inline float sum_squares(const float* x, int64_t n) {
  return dot(x, x, n);
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::CPU; }
  DType act_dtype() const override { return DType::F32; }

  Tensor alloc(std::vector<int64_t> shape, DType dtype) override {
    return Tensor::empty(std::move(shape), dtype);
  }
  Tensor upload(const Tensor& host) override { return to_f32(host); }
  LinearWeight upload_linear(const LinearWeight& host) override {
    LinearWeight w = host;
    if (host.bias.defined()) w.bias = to_f32(host.bias);
    if (host.format != LinearWeight::Format::Dense) {  // kept packed; linear() dequantizes row by row
      check_quantized_linear(host);
      return w;
    }
    w.weight = to_f32(host.weight);
    w.out_features = w.weight.dim(0);
    w.in_features = w.weight.dim(1);
    return w;
  }
  void to_host(const Tensor& src, Tensor& dst) override {
    TF_CHECK(src.numel() == dst.numel(), "to_host: size mismatch");
    if (dst.dtype() == src.dtype()) {
      std::memcpy(dst.raw(), src.raw(), src.nbytes());
    } else {
      check_cpu_f32(dst, "to_host destination");
      auto v = src.to_f32_vector();
      std::memcpy(dst.raw(), v.data(), v.size() * 4);
    }
  }

  void begin_forward(const BatchMeta& meta) override { meta_ = &meta; }

  void embedding(const Tensor& table, float scale, Tensor& out) override {
    check_cpu_f32(table, "embedding table");
    check_cpu_f32(out, "embedding output");
    const int64_t h = table.dim(1);
    for (int r = 0; r < meta_->rows(); ++r) {
      int32_t id = meta_->tokens[r];
      TF_CHECK(id >= 0 && id < table.dim(0), "token id " + std::to_string(id) + " out of the vocabulary");
      const float* src = table.data<float>() + int64_t(id) * h;
      float* dst = out.data<float>() + int64_t(r) * h;
      for (int64_t i = 0; i < h; ++i) dst[i] = src[i] * scale;
    }
  }

  void linear(const Tensor& x, const LinearWeight& w, Tensor& y) override {
    check_cpu_f32(x, "linear input");
    check_cpu_f32(y, "linear output");
    const int64_t M = x.numel() / w.in_features, K = w.in_features, N = w.out_features;
    TF_CHECK(x.dim(-1) == K && y.numel() == M * N,
             "linear: shapes " + x.describe() + " x " + w.weight.describe() + " -> " + y.describe());
    const float* B = w.bias.defined() ? w.bias.data<float>() : nullptr;
    if (w.format != LinearWeight::Format::Dense) return linear_quantized(x, w, y, B);
    const float* W = w.weight.data<float>();
    // Weight rows outer, activation rows inner: each weight row is read once per call whatever M is,
    // and every output is the same dot() in the same order, so rows stay bitwise independent of M.
    for (int64_t n = 0; n < N; ++n) {
      const float* wr = W + n * K;
      const float b = B ? B[n] : 0.f;
      for (int64_t m = 0; m < M; ++m) y.data<float>()[m * N + n] = dot(x.data<float>() + m * K, wr, K) + b;
    }
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, float offset, Tensor& y) override {
    check_cpu_f32(x, "rms_norm input");
    const int64_t d = weight.numel(), rows = x.numel() / d;
    const float* w = weight.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      norm_row(x.data<float>() + r * d, w, d, eps, offset, y.data<float>() + r * d);
  }

  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, float offset,
                    Tensor& y) override {
    add(residual, x);
    rms_norm(residual, weight, eps, offset, y);
  }

  void rope(Tensor& q, Tensor& k, const RopeParams& p) override {
    check_cpu_f32(q, "rope q");
    check_cpu_f32(k, "rope k");
    const int R = meta_->rows();
    const int64_t hq = q.numel() / (int64_t(R) * p.head_dim), hk = k.numel() / (int64_t(R) * p.head_dim);
    const int half = p.rotary_dim / 2;
    std::vector<float> cs(half), sn(half);
    for (int r = 0; r < R; ++r) {
      const float pos = float(meta_->positions[r]);
      for (int i = 0; i < half; ++i) {
        float f = pos * p.inv_freq[i];
        cs[i] = std::cos(f) * p.attention_factor;
        sn[i] = std::sin(f) * p.attention_factor;
      }
      for (int64_t h = 0; h < hq; ++h) rotate(q.data<float>() + (r * hq + h) * p.head_dim, cs, sn, p);
      for (int64_t h = 0; h < hk; ++h) rotate(k.data<float>() + (r * hk + h) * p.head_dim, cs, sn, p);
    }
  }

  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    check_cpu_f32(gate_up, "silu_mul input");
    const int64_t I = gate_up.dim(-1) / 2, M = gate_up.numel() / (2 * I);
    for (int64_t m = 0; m < M; ++m) {
      const float* g = gate_up.data<float>() + m * 2 * I;
      float* o = out.data<float>() + m * I;
      for (int64_t i = 0; i < I; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * g[I + i];
    }
  }

  void kv_write(KvLayer& layer, const Tensor& k, const Tensor& v) override {
    const int64_t row = layer.k.numel() / (layer.k.dim(0) * layer.k.dim(1));  // kv_heads * head_dim
    for (int r = 0; r < meta_->rows(); ++r) {
      const int64_t slot = meta_->slots[r];
      if (slot < 0) continue;  // a padding row writes nothing (as on the GPU)
      std::memcpy(layer.k.data<float>() + slot * row, k.data<float>() + r * row, row * 4);
      std::memcpy(layer.v.data<float>() + slot * row, v.data<float>() + r * row, row * 4);
    }
  }

  void attention(const Tensor& q, const KvLayer& layer, const AttentionParams& p, Tensor& out) override {
    const int D = p.head_dim, group = p.num_heads / p.num_kv_heads, bs = meta_->block_size;
    const int64_t kv_row = int64_t(p.num_kv_heads) * D;
    std::vector<float> scores;
    for (int r = 0; r < meta_->rows(); ++r) {
      const int pos = meta_->positions[r];
      const auto& table = meta_->block_tables[meta_->row_seq[r]];
      const int start = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
      scores.resize(pos - start + 1);
      for (int h = 0; h < p.num_heads; ++h) {
        const float* qh = q.data<float>() + (int64_t(r) * p.num_heads + h) * D;
        const int kvh = h / group;
        float mx = -INFINITY;
        for (int t = start; t <= pos; ++t) {
          int64_t slot = int64_t(table[t / bs]) * bs + t % bs;
          float s = dot(qh, layer.k.data<float>() + slot * kv_row + kvh * D, D) * p.scale;
          if (p.softcap > 0) s = std::tanh(s / p.softcap) * p.softcap;
          scores[t - start] = s;
          mx = std::max(mx, s);
        }
        float sum = 0;
        for (auto& s : scores) sum += (s = std::exp(s - mx));
        float* o = out.data<float>() + (int64_t(r) * p.num_heads + h) * D;
        std::fill(o, o + D, 0.f);
        for (int t = start; t <= pos; ++t) {
          int64_t slot = int64_t(table[t / bs]) * bs + t % bs;
          const float* vv = layer.v.data<float>() + slot * kv_row + kvh * D;
          const float w = scores[t - start] / sum;
          for (int d = 0; d < D; ++d) o[d] += w * vv[d];
        }
      }
    }
  }

  void add(Tensor& a, const Tensor& b) override {
    TF_CHECK(a.numel() == b.numel(), "add: size mismatch " + a.describe() + " + " + b.describe());
    float* x = a.data<float>();
    const float* y = b.data<float>();
    for (int64_t i = 0; i < a.numel(); ++i) x[i] += y[i];
  }

  void zero(Tensor& t) override { std::memset(t.raw(), 0, t.nbytes()); }

  void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int32_t>& rows,
                        const std::vector<float>& weights) override {
    check_cpu_f32(out, "scatter_add_rows output");
    check_cpu_f32(y, "scatter_add_rows input");
    const int64_t w = out.numel() / out.dim(0);
    for (size_t i = 0; i < rows.size(); ++i) {
      float* o = out.data<float>() + rows[i] * w;
      const float* src = y.data<float>() + int64_t(i) * w;
      for (int64_t j = 0; j < w; ++j) o[j] += weights[i] * src[j];
    }
  }

  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    const int64_t w = x.numel() / x.dim(0);
    for (size_t i = 0; i < rows.size(); ++i)
      std::memmove(out.data<float>() + i * w, x.data<float>() + rows[i] * w, w * 4);
  }

 private:
  // Weight-only quantized linear: each weight row is dequantized once (exact format values) and then used
  // exactly like a dense row, so results equal the dense path on the dequantized weight, whatever M is.
  static void linear_quantized(const Tensor& x, const LinearWeight& w, Tensor& y, const float* B) {
    const int64_t K = w.in_features, N = w.out_features, M = x.numel() / K;
    std::vector<float> wr(static_cast<size_t>(K));
    for (int64_t n = 0; n < N; ++n) {
      dequantize_row(w, n, wr.data());
      const float b = B ? B[n] : 0.f;
      for (int64_t m = 0; m < M; ++m)
        y.data<float>()[m * N + n] = dot(x.data<float>() + m * K, wr.data(), K) + b;
    }
  }
  static void norm_row(const float* x, const float* w, int64_t d, float eps, float offset, float* y) {
    const float inv = 1.f / std::sqrt(sum_squares(x, d) / float(d) + eps);
    for (int64_t i = 0; i < d; ++i) y[i] = (w[i] + offset) * (x[i] * inv);
  }
  static void rotate(float* v, const std::vector<float>& cs, const std::vector<float>& sn,
                     const RopeParams& p) {
    const int half = p.rotary_dim / 2;
    if (p.interleaved) {
      for (int i = 0; i < half; ++i) {
        float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cs[i] - b * sn[i];
        v[2 * i + 1] = b * cs[i] + a * sn[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
  const BatchMeta* meta_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace tf
