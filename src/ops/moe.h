#pragma once
// Host-side mixture-of-experts routing: the reference every backend's Backend::moe follows.
#include <cstdint>
#include <vector>

namespace tf {

// Each row's top_k experts in rank order (highest probability first, ties to the lower expert id) and
// their combine weights, as transformers' Qwen3MoeTopKRouter computes them: softmax over the f32
// logits (max subtracted, one sum in increasing expert id), then p / (sum of the k chosen, in rank
// order) when norm_topk_prob. experts and weights are [rows * top_k].
struct MoeRoute {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};
MoeRoute route_topk(const float* logits, int rows, int experts, int top_k, bool norm_topk_prob);

// Diagnostics (tests): while a sink is set on this thread, route_topk appends, for every row it routes,
// the gap between the probability of the row's top_k-th expert and the next one (1 when top_k ==
// experts). A row with a small gap is a near-tie: bf16 activations on a GPU can route it to another
// expert set than the f32 reference, which changes that token and, through attention, every later one.
// Pass null to stop recording.
void set_route_margin_sink(std::vector<float>* sink);

}  // namespace tf
