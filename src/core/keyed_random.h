#pragma once
// Counter-based randomness for keyed sampling (engine/sampler.h), shared by the host and the CUDA
// sampling kernel so both compute the same bits: a uniform in (0, 1) is a pure function of
// (seed, absolute position, token id), and the Gumbel score of a token is logit / T + G(u).
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TF_HOST_DEVICE __host__ __device__
#else
#define TF_HOST_DEVICE
#endif

namespace tf {

TF_HOST_DEVICE inline uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1), never 0 or 1.
TF_HOST_DEVICE inline double keyed_uniform(uint64_t seed, int64_t position, int32_t token) {
  uint64_t h = mix64(seed ^ 0xd1b54a32d192ed03ULL);
  h = mix64(h ^ uint64_t(position) * 0x9e3779b97f4a7c15ULL);
  h = mix64(h ^ uint64_t(uint32_t(token)) * 0xc2b2ae3d27d4eb4fULL);
  return (double(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// The Gumbel variate keyed sampling adds to a token's tempered logit (the logit divided by T in float):
// the argmax over ids of double(logit / T) + gumbel_noise samples softmax(logit / T) exactly.
TF_HOST_DEVICE inline double gumbel_noise(uint64_t seed, int64_t position, int32_t token) {
  return -log(-log(keyed_uniform(seed, position, token)));
}

}  // namespace tf
