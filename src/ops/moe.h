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

}  // namespace tf
