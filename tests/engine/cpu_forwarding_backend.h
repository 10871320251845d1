#pragma once
// A Backend that forwards every operation to the CPU backend. Engine tests derive from it and override only
// what they study (graph support and run_graph, begin_forward to record the rows of each round).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/backend.h"

namespace tf {

class CpuForwardingBackend : public Backend {
 public:
  CpuForwardingBackend() : cpu_(make_cpu_backend()) {}

  Device device() const override { return cpu_->device(); }
  DType act_dtype() const override { return cpu_->act_dtype(); }
  Tensor alloc(std::vector<int64_t> shape, DType dtype) override {
    return cpu_->alloc(std::move(shape), dtype);
  }
  Tensor upload(const Tensor& host) override { return cpu_->upload(host); }
  LinearWeight upload_linear(const LinearWeight& host) override { return cpu_->upload_linear(host); }
  void to_host(const Tensor& src, Tensor& dst) override { cpu_->to_host(src, dst); }
  void begin_forward(const BatchMeta& meta) override { cpu_->begin_forward(meta); }
  void embedding(const Tensor& table, float scale, Tensor& out) override {
    cpu_->embedding(table, scale, out);
  }
  void linear(const Tensor& x, const LinearWeight& w, Tensor& y) override { cpu_->linear(x, w, y); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, float offset, Tensor& y) override {
    cpu_->rms_norm(x, w, eps, offset, y);
  }
  void add_rms_norm(Tensor& res, const Tensor& x, const Tensor& w, float eps, float offset,
                    Tensor& y) override {
    cpu_->add_rms_norm(res, x, w, eps, offset, y);
  }
  void rope(Tensor& q, Tensor& k, const RopeParams& p) override { cpu_->rope(q, k, p); }
  void silu_mul(const Tensor& gu, Tensor& out) override { cpu_->silu_mul(gu, out); }
  void kv_write(KvLayer& layer, const Tensor& k, const Tensor& v) override { cpu_->kv_write(layer, k, v); }
  void attention(const Tensor& q, const KvLayer& layer, const AttentionParams& p, Tensor& out) override {
    cpu_->attention(q, layer, p, out);
  }
  void add(Tensor& a, const Tensor& b) override { cpu_->add(a, b); }
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    cpu_->gather_rows(x, rows, out);
  }
  void zero(Tensor& t) override { cpu_->zero(t); }
  void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int32_t>& rows,
                        const std::vector<float>& weights) override {
    cpu_->scatter_add_rows(out, y, rows, weights);
  }
  void sample_rows(const Tensor& logits, const std::vector<RowSampling>& rows,
                   std::vector<int32_t>& tokens) override {
    cpu_->sample_rows(logits, rows, tokens);
  }

 protected:
  std::unique_ptr<Backend> cpu_;
};

}  // namespace tf
