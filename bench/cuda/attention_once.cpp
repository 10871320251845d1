// One prefill attention call (a prompt of N tokens, Qwen3-8B heads), a few launches: a target for `ncu`.
//   tf_attention_once [N] [launches]
// Or one decode step's attention (BATCH sequences, default 1, of CTX tokens of context) on each of 36 layers'
// KV in turn (72+ MB: cold in L2, as in a forward), timed alone: what the kernel costs outside the forward's
// chain; then the split blocks' stamps of one more launch (attention_stamps: entered, waited, K in, scores, V
// in, partials out, ticket, merged; min / median / max over blocks, us after the first block's wait).
//   tf_attention_once decode CTX [BATCH]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ops/cuda/attention_mma.h"  // attention_stamps
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"

namespace {

using namespace tf;
constexpr int kHeads = 32, kKvHeads = 8, kDim = 128;  // Qwen3-8B's attention
const AttentionParams kAttn{kHeads, kKvHeads, kDim, 1.f / std::sqrt(float(kDim)), 0, 0.f};

// A pool layer holding every block `meta`'s tables name, random K/V (seeds seed, seed + 1).
KvLayer random_pool(Backend& be, const BatchMeta& meta, uint64_t seed) {
  int blocks = 0;
  for (const auto& t : meta.block_tables)
    for (int b : t) blocks = std::max(blocks, b + 1);
  KvLayer kv{be.alloc({blocks, meta.block_size, kKvHeads, kDim}, DType::BF16),
             be.alloc({blocks, meta.block_size, kKvHeads, kDim}, DType::BF16)};
  cuda::fill_uniform(be, kv.k, seed, -1.f, 1.f);
  cuda::fill_uniform(be, kv.v, seed + 1, -1.f, 1.f);
  return kv;
}

int decode(Backend& be, int ctx, int batch) {
  constexpr int kLayers = 36;
  BatchMeta meta = bench::decode_meta(batch, ctx);
  std::vector<KvLayer> kv;
  for (int l = 0; l < kLayers; ++l) kv.push_back(random_pool(be, meta, 2 + 2 * l));
  Tensor q = be.alloc({batch, kHeads, kDim}, DType::BF16), o = be.alloc({batch, kHeads, kDim}, DType::BF16);
  cuda::fill_uniform(be, q, 1, -1.f, 1.f);
  const AttentionParams& ap = kAttn;
  be.begin_forward(meta);
  const double ms = bench::time_ms(
      cuda::stream_of(be),
      [&] {
        for (int l = 0; l < kLayers; ++l) be.attention(q, kv[size_t(l)], ap, o);
      },
      2, 10);
  const double kv_bytes = 2.0 * ctx * kKvHeads * kDim * 2 * batch;
  std::printf(
      "decode attention b=%d ctx %d: %.2f us a layer (36 layers' KV in turn, eager launches), %.0f GB/s of "
      "KV\n",
      batch, ctx, ms * 1e3 / kLayers, kv_bytes / (ms * 1e-3 / kLayers) / 1e9);
  cuda::set_attention_stamps(true);
  be.attention(q, kv[0], ap, o);
  TF_CUDA_CHECK(cudaStreamSynchronize(cuda::stream_of(be)));
  bench::Stamps st{{}, 0, cuda::kAttnStamps};
  st.v = cuda::attention_stamps(&st.blocks);
  cuda::set_attention_stamps(false);
  if (const unsigned long long t0 = st.first(1); st.blocks && t0 != ~0ull) {  // (1: waited)
    const char* names[cuda::kAttnStamps] = {"entered", "waited",       "K in",   "scores",
                                            "V in",    "partials out", "ticket", "merged"};
    st.print("split attention blocks", names, t0);
    std::printf("\n");
  } else {
    std::printf("no split-attention stamps (the launch took another schedule)\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  auto be = make_cuda_backend(0, &why);
  if (!be) {
    std::fprintf(stderr, "no CUDA backend: %s\n", why.c_str());
    return 1;
  }
  if (argc > 2 && std::string(argv[1]) == "decode")
    return decode(*be, std::atoi(argv[2]), argc > 3 ? std::max(1, std::atoi(argv[3])) : 1);
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096,
            launches = argc > 2 ? std::max(2, std::atoi(argv[2])) : 3;
  BatchMeta meta = bench::prefill_meta(n);
  KvLayer kv = random_pool(*be, meta, 2);
  Tensor q = be->alloc({n, kHeads, kDim}, DType::BF16), o = be->alloc({n, kHeads, kDim}, DType::BF16);
  cuda::fill_uniform(*be, q, 1, -1.f, 1.f);
  const AttentionParams& ap = kAttn;
  be->begin_forward(meta);
  const double flop = 2.0 * double(n) * n * kHeads * kDim;  // causal: QK and PV over half the square
  // The wide loop kernel, then the same tiles on warpgroup MMAs (attention_wgmma.cu), and whether the two
  // outputs are the same bits.
  // w = 2: the warpgroups' MMAs in turns (set_attention_wgmma_pp).
  std::vector<uint16_t> outs[3];
  const bool wg0 = cuda::attention_wgmma(), pp0 = cuda::attention_wgmma_pp();
  for (int w = 0; w < 3; ++w) {
    cuda::set_attention_wgmma(w >= 1);
    cuda::set_attention_wgmma_pp(w == 2);
    const uint64_t l0 = cuda::attention_wgmma_launches();
    const double ms = bench::time_ms(
        cuda::stream_of(*be), [&] { be->attention(q, kv, ap, o); }, 1, launches - 1);
    std::printf("prefill attention N=%d%s: %.3f ms, %.1f TFLOP/s\n", n,
                w == 0                                   ? ""
                : cuda::attention_wgmma_launches() == l0 ? " (wgmma not taken)"
                : w == 1                                 ? " (wgmma)"
                                                         : " (wgmma, turns)",
                ms, flop / (ms * 1e-3) / 1e12);
    Tensor h = Tensor::empty(o.shape(), DType::BF16);
    be->to_host(o, h);
    outs[w].assign(h.data<uint16_t>(), h.data<uint16_t>() + h.numel());
  }
  cuda::set_attention_wgmma(wg0);
  cuda::set_attention_wgmma_pp(pp0);
  for (int w = 1; w < 3; ++w) {
    size_t diff = 0;
    for (size_t i = 0; i < outs[0].size(); ++i) diff += outs[0][i] != outs[w][i];
    std::printf("prefill attention N=%d: %zu of %zu output values differ (wide loop vs wgmma%s)\n", n, diff,
                outs[0].size(), w == 2 ? ", turns" : "");
  }
  return 0;
}
