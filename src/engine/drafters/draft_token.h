#pragma once
// Sampling a drafter's proposal cheaply, coupled with the target's keyed sampling.
#include <cstdint>

#include "engine/api.h"  // SamplingParams

namespace tf {

// A draft token from a drafter's logits row (MTP head, draft model), sampled as the target samples (the
// same keyed noise, so the two agree when their distributions do), cheaply: greedy is the argmax; tempered
// without truncation is sample_rows_reference's Gumbel-max over the ids that could win (within 16 of the
// argmax's score in logit / T: the same token but with odds below V * e^-16), not keyed noise for the whole
// vocabulary. With top-k/top-p/min-p: sample_token without penalties.
int32_t draft_token(const float* logits, int vocab, const SamplingParams& p, uint64_t seed, int64_t position);

}  // namespace tf
