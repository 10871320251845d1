// Backend::moe's default: the reference. Routing on the host (router logits copied back: one sync a
// layer), each expert's rows through gather_rows / linear / silu_mul / linear, then the k outputs of every
// row added in rank order with scatter_add_rows (rank j of all rows in one call: rows distinct).
#include "ops/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "ops/backend.h"

namespace tf {

namespace {
thread_local std::vector<float>* g_margin_sink = nullptr;
}  // namespace

void set_route_margin_sink(std::vector<float>* sink) {
  g_margin_sink = sink;
}

MoeRoute route_topk(const float* logits, int rows, int experts, int top_k, bool norm) {
  TF_CHECK(top_k > 0 && top_k <= experts, "moe: top_k must be between 1 and the number of experts");
  MoeRoute r;
  r.experts.reserve(size_t(rows) * top_k);
  r.weights.reserve(size_t(rows) * top_k);
  std::vector<float> prob(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int t = 0; t < rows; ++t) {
    const float* l = logits + size_t(t) * experts;
    const float mx = *std::max_element(l, l + experts);
    float sum = 0;
    for (int e = 0; e < experts; ++e) sum += (prob[e] = std::exp(l[e] - mx));
    for (auto& v : prob) v /= sum;
    std::iota(order.begin(), order.end(), 0);
    const int sorted = std::min(top_k + 1, experts);  // one more than chosen: the margin's runner-up
    std::partial_sort(order.begin(), order.begin() + sorted, order.end(), [&](int32_t a, int32_t b) {
      return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
    });
    if (g_margin_sink)
      g_margin_sink->push_back(top_k < experts ? prob[order[top_k - 1]] - prob[order[top_k]] : 1.f);
    float topsum = 0;
    for (int j = 0; j < top_k; ++j) topsum += prob[order[j]];
    for (int j = 0; j < top_k; ++j) {
      r.experts.push_back(order[j]);
      r.weights.push_back(norm ? prob[order[j]] / topsum : prob[order[j]]);
    }
  }
  return r;
}

void Backend::moe(const Tensor& h, MoeWeights& w, Tensor& out) {
  const int64_t R = h.dim(0), H = h.dim(-1), E = int64_t(w.gate_up.size()), K = w.top_k;
  TF_CHECK(E > 0 && w.down.size() == size_t(E) && w.router.out_features == E,
           "moe: one gate_up and one down weight per router output");
  const int64_t I = w.down[0].in_features;
  Tensor logits = alloc({R, E}, DType::F32);
  linear(h, w.router, logits);
  Tensor host = Tensor::empty({R, E}, DType::F32);
  to_host(logits, host);
  const MoeRoute route = route_topk(host.data<float>(), int(R), int(E), int(K), w.norm_topk_prob);
  // Slots: the (row, rank) pairs grouped by expert; slot_of[row * K + rank].
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(E)), pairs_of(static_cast<size_t>(E));
  for (int64_t p = 0; p < R * K; ++p) {
    rows_of[route.experts[p]].push_back(int32_t(p / K));
    pairs_of[route.experts[p]].push_back(int32_t(p));
  }
  std::vector<int32_t> slot_of(static_cast<size_t>(R * K));
  const DType dt = act_dtype();
  Tensor y = alloc({R * K, H}, dt);
  int64_t base = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = int64_t(rows_of[e].size());
    if (n == 0) continue;
    Tensor x = alloc({n, H}, dt), gu = alloc({n, 2 * I}, dt), act = alloc({n, I}, dt);
    Tensor ye = y.slice_rows(base, base + n);
    gather_rows(h, rows_of[e], x);
    linear(x, w.gate_up[e], gu);
    silu_mul(gu, act);
    linear(act, w.down[e], ye);
    for (int64_t i = 0; i < n; ++i) slot_of[pairs_of[e][i]] = int32_t(base + i);
    base += n;
  }
  zero(out);
  std::vector<int32_t> all(static_cast<size_t>(R)), src(static_cast<size_t>(R));
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> wj(static_cast<size_t>(R));
  Tensor yj = alloc({R, H}, dt);
  for (int64_t j = 0; j < K; ++j) {  // rank order: the fixed combine order
    for (int64_t t = 0; t < R; ++t) src[t] = slot_of[t * K + j], wj[t] = route.weights[t * K + j];
    gather_rows(y, src, yj);
    scatter_add_rows(out, yj, all, wj);
  }
}

}  // namespace tf
