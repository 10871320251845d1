#include "ops/backend.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/keyed_random.h"

namespace tf {

void Backend::read_raw(const Tensor& src, size_t offset, size_t bytes, void* dst) {
  TF_CHECK(src.device() == Device::CPU, name() + ": read_raw is not implemented for device tensors");
  TF_CHECK(offset + bytes <= src.nbytes(), "read_raw out of range");
  std::memcpy(dst, static_cast<const char*>(src.raw()) + offset, bytes);
}

void Backend::write_raw(Tensor& dst, size_t offset, const void* src, size_t bytes) {
  TF_CHECK(dst.device() == Device::CPU, name() + ": write_raw is not implemented for device tensors");
  TF_CHECK(offset + bytes <= dst.nbytes(), "write_raw out of range");
  std::memcpy(static_cast<char*>(dst.raw()) + offset, src, bytes);
}

void Backend::attention_inputs(Tensor& q, Tensor& k, const Tensor& v, const Tensor* q_norm,
                               const Tensor* k_norm, float eps, float offset, const RopeParams& rope_params,
                               KvLayer& layer) {
  if (q_norm) rms_norm(q, *q_norm, eps, offset, q);
  if (k_norm) rms_norm(k, *k_norm, eps, offset, k);
  rope(q, k, rope_params);
  kv_write(layer, k, v);
}

void Backend::attention_inputs_qkv(const Tensor& qkv, Tensor& q, const Tensor* q_norm, const Tensor* k_norm,
                                   float eps, float offset, const RopeParams& rope_params, KvLayer& layer) {
  TF_CHECK(qkv.ndim() == 2 && layer.k.ndim() == 4,
           "attention_inputs_qkv: qkv must be [rows, (Hq + 2 Hk) * D]");
  const int64_t rows = qkv.dim(0), hk = layer.k.dim(2), d = layer.k.dim(3);
  const int64_t heads = qkv.dim(1) / d, hq = heads - 2 * hk;
  TF_CHECK(heads * d == qkv.dim(1) && hq > 0 && q.numel() == rows * hq * d,
           "attention_inputs_qkv: qkv " + qkv.describe() + " does not split into q " + q.describe() +
               " and " + std::to_string(hk) + " k and v heads of " + std::to_string(d));
  Tensor k = alloc({rows, hk, d}, qkv.dtype()), v = alloc({rows, hk, d}, qkv.dtype());
  const Tensor per_head = qkv.view({rows * heads, d});
  auto part = [&](int64_t first, int64_t n, Tensor& out) {
    std::vector<int32_t> idx;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < n; ++h) idx.push_back(int32_t(r * heads + first + h));
    Tensor dst = out.view({rows * n, d});
    gather_rows(per_head, idx, dst);
  };
  part(0, hq, q);
  part(hq, hk, k);
  part(hq + hk, hk, v);
  attention_inputs(q, k, v, q_norm, k_norm, eps, offset, rope_params, layer);
}

void Backend::silu_mul_linear(const Tensor& gate_up, const LinearWeight& w, Tensor& act, Tensor& y) {
  silu_mul(gate_up, act);
  linear(act, w, y);
}

bool Backend::add_rms_norm_linear(Tensor& residual, const Tensor& x, const Tensor& norm_weight, float eps,
                                  float offset, Tensor& h, const LinearWeight& w, Tensor& y, Tensor&) {
  add_rms_norm(residual, x, norm_weight, eps, offset, h);
  linear(h, w, y);
  return false;
}

bool Backend::linear_add_rms_norm_moe(const Tensor& attn, const LinearWeight& o, Tensor& x, Tensor& residual,
                                      const Tensor& norm_weight, float eps, float offset, Tensor& h,
                                      MoeWeights& w, Tensor& out, Tensor& residual_out) {
  linear(attn, o, x);
  return add_rms_norm_moe(residual, x, norm_weight, eps, offset, h, w, out, residual_out);
}

bool Backend::add_rms_norm_moe(Tensor& residual, const Tensor& x, const Tensor& norm_weight, float eps,
                               float offset, Tensor& h, MoeWeights& w, Tensor& out, Tensor&) {
  add_rms_norm(residual, x, norm_weight, eps, offset, h);
  moe(h, w, out);
  return false;
}

// The reference for every backend's sampling kernel (sample_token() in engine/sampler.cpp computes the
// same scores for its unrestricted case).
void sample_rows_reference(const float* logits, int64_t vocab, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>& tokens) {
  tokens.assign(rows.size(), 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* row = logits + int64_t(r) * vocab;
    const RowSampling& p = rows[r];
    int32_t best = 0;
    if (p.temperature <= 0.f) {
      for (int64_t i = 1; i < vocab; ++i)
        if (row[i] > row[best]) best = int32_t(i);
    } else {
      double top = double(row[0] / p.temperature) + gumbel_noise(p.seed, p.position, 0);
      for (int64_t i = 1; i < vocab; ++i) {
        const double s = double(row[i] / p.temperature) + gumbel_noise(p.seed, p.position, int32_t(i));
        if (s > top) {
          top = s;
          best = int32_t(i);
        }
      }
    }
    tokens[r] = best;
  }
}

void Backend::sample_rows(const Tensor& logits, const std::vector<RowSampling>& rows,
                          std::vector<int32_t>& tokens) {
  TF_CHECK(logits.dtype() == DType::F32 && logits.dim(0) == int64_t(rows.size()),
           "sample_rows: logits must be F32 [rows, vocab]");
  const int64_t vocab = logits.numel() / std::max<int64_t>(1, logits.dim(0));
  if (logits.device() == Device::CPU) return sample_rows_reference(logits.data<float>(), vocab, rows, tokens);
  std::vector<float> host(size_t(logits.numel()));
  read_raw(logits, 0, logits.nbytes(), host.data());
  sample_rows_reference(host.data(), vocab, rows, tokens);
}

}  // namespace tf
