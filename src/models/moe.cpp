#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "models/weights.h"

namespace tf {

MoeWeights load_moe(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec, const std::string& p) {
  const int64_t H = spec.hidden, I = spec.moe_intermediate;
  MoeWeights w;
  w.router = load_linear(ckpt, be, p + "gate", spec.num_experts, H, false);
  if (!ckpt.has(p + "experts.0.gate_proj.weight") && !ckpt.has(p + "experts.0.gate_proj.scales"))
    throw Error(ckpt.dir() + ": expert weights of " + p + " are not in the per-expert layout (" + p +
                "experts.N.gate_proj.weight); stacked expert tensors are not supported yet");
  for (int e = 0; e < spec.num_experts; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    w.gate_up.push_back(load_fused_linear(ckpt, be, {ep + "gate_proj", ep + "up_proj"}, {I, I}, H));
    w.down.push_back(load_linear(ckpt, be, ep + "down_proj", H, I, false));
  }
  return w;
}

MoeRouting route_tokens(const float* logits, int rows, int experts, int top_k, bool norm) {
  MoeRouting r;
  r.rows.resize(size_t(experts));
  r.weights.resize(size_t(experts));
  std::vector<float> prob(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int t = 0; t < rows; ++t) {
    const float* l = logits + size_t(t) * experts;
    const float mx = *std::max_element(l, l + experts);
    float sum = 0;
    for (int e = 0; e < experts; ++e) sum += (prob[e] = std::exp(l[e] - mx));
    for (auto& v : prob) v /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
    float topsum = 0;
    for (int j = 0; j < top_k; ++j) topsum += prob[order[j]];
    for (int j = 0; j < top_k; ++j) {
      const int32_t e = order[j];
      r.rows[e].push_back(t);
      r.weights[e].push_back(norm ? prob[e] / topsum : prob[e]);
    }
  }
  return r;
}

void moe_forward(Backend& be, const ModelSpec& spec, MoeWeights& w, const Tensor& h, Tensor& out) {
  const int64_t R = h.dim(0), H = spec.hidden, I = spec.moe_intermediate, E = spec.num_experts;
  // Router logits to the host: routing is a per-token decision made on the CPU.
  Tensor logits = be.alloc({R, E}, DType::F32);
  be.linear(h, w.router, logits);
  Tensor host = Tensor::empty({R, E}, DType::F32);
  be.to_host(logits, host);
  const MoeRouting r = route_tokens(host.data<float>(), int(R), int(E), spec.experts_per_tok, spec.norm_topk_prob);
  be.zero(out);
  const DType dt = be.act_dtype();
  for (int e = 0; e < E; ++e) {  // increasing expert id: the fixed combine order
    const auto& rows = r.rows[e];
    if (rows.empty()) continue;
    const int64_t n = int64_t(rows.size());
    Tensor x = be.alloc({n, H}, dt), gu = be.alloc({n, 2 * I}, dt), act = be.alloc({n, I}, dt), y = be.alloc({n, H}, dt);
    be.gather_rows(h, rows, x);
    be.linear(x, w.gate_up[e], gu);
    be.silu_mul(gu, act);
    be.linear(act, w.down[e], y);
    be.scatter_add_rows(out, y, rows, r.weights[e]);
  }
}

}  // namespace tf
