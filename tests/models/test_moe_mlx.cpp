// Qwen3-MoE checkpoints converted by mlx-lm (tools/make_tiny_moe_mlx.py): stacked `switch_mlp` experts,
// 4-bit quantized and bf16, load and match mlx-lm's logits and greedy tokens. The conversion and mlx-lm's
// outputs are regenerated live when the test python has mlx and mlx-lm (a few seconds), else the committed
// ones are used. Also: the host router's tie and rank rules, and row invariance of the MoE path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "ops/backend.h"
#include "ops/moe.h"
#include "run_logits.h"

using namespace tf;
namespace fs = std::filesystem;

namespace {

const char* const kModels[] = {"qwen3-moe-mlx-4bit", "qwen3-moe-mlx-bf16"};

std::string data_dir() {
  static const std::string dir = [] {
    const std::string committed = std::string(TF_SOURCE_DIR) + "/tests/data/quant/";
    const std::string py = TF_PYTHON;
    if (std::system((py + " -c 'import mlx.core, mlx_lm' >/dev/null 2>&1").c_str()) != 0) {
      std::cerr << "[test_moe_mlx] mlx/mlx-lm not importable by " << py << ": using committed goldens\n";
      return committed;
    }
    const std::string out = std::string(TF_BINARY_DIR) + "/moe_mlx_live/" + std::to_string(getpid());
    fs::create_directories(out);
    const std::string cmd =
        py + " " + TF_SOURCE_DIR + "/tools/make_tiny_moe_mlx.py --out " + out + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "regenerating the mlx-lm conversions failed: " << cmd;
      return committed;
    }
    std::cerr << "[test_moe_mlx] conversions and goldens regenerated live with mlx-lm in " << out << "\n";
    return out + "/";
  }();
  return dir;
}

std::vector<int32_t> golden_ints(const std::string& name, const char* key) {
  auto f = SafetensorsFile::open(data_dir() + name + "/logits_mlx.safetensors");
  const Tensor t = f.get(key);
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

using test::run_logits;

TEST(MoeMlx, StackedExpertsLoad) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    Checkpoint ckpt = Checkpoint::open(data_dir() + name);
    EXPECT_TRUE(ckpt.has("model.layers.0.mlp.switch_mlp.gate_proj.weight"));
    EXPECT_FALSE(ckpt.has("model.layers.0.mlp.experts.0.gate_proj.weight"));
    auto be = make_cpu_backend();
    auto model = load_model(ckpt, *be, 64);
    EXPECT_EQ(model->spec().num_experts, 8);
    EXPECT_TRUE(model->spec().is_sparse(0));
    EXPECT_FALSE(model->spec().is_sparse(1));
  }
}

TEST(MoeMlx, LogitsMatchMlxLmAndAreRowInvariant) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    auto f = SafetensorsFile::open(data_dir() + name + "/logits_mlx.safetensors");
    const std::vector<int32_t> tokens = golden_ints(name, "tokens");
    const std::vector<float> ref = f.get("logits").to_f32_vector();
    const auto ours = run_logits(data_dir() + name, tokens, int(tokens.size()));
    const auto single = run_logits(data_dir() + name, tokens, 1);
    ASSERT_EQ(ours.size(), ref.size());
    EXPECT_EQ(0, std::memcmp(ours.data(), single.data(), ours.size() * 4)) << "not row invariant";
    const size_t vocab = ref.size() / tokens.size();
    double max_err = 0, max_ref = 0;
    int argmax_same = 0;
    for (size_t p = 0; p < tokens.size(); ++p) {
      size_t a = 0, b = 0;
      for (size_t v = 0; v < vocab; ++v) {
        const size_t i = p * vocab + v;
        max_err = std::max(max_err, double(std::fabs(ours[i] - ref[i])));
        max_ref = std::max(max_ref, double(std::fabs(ref[i])));
        if (ours[i] > ours[p * vocab + a]) a = v;
        if (ref[i] > ref[p * vocab + b]) b = v;
      }
      argmax_same += a == b;
    }
    std::cerr << name << ": max |ours - mlx-lm| = " << max_err << " (max |logit| " << max_ref << ")\n";
    EXPECT_GT(max_ref, 0.1);                            // a live model
    EXPECT_LT(max_err, 1e-4 * std::max(1.0, max_ref));  // measured 4e-6
    EXPECT_EQ(argmax_same, int(tokens.size()));
  }
}

// The engine (scheduler, chunked prefill, sampler) on the converted checkpoints generates what mlx-lm does.
TEST(MoeMlx, EngineGreedyEqualsMlxLmGreedy) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    const std::vector<int32_t> want = golden_ints(name, "greedy"), tokens = golden_ints(name, "tokens");
    EngineOptions o;
    o.model_path = data_dir() + name;
    o.backend = "cpu";
    o.parallel = 2;
    o.prefill_chunk = 3;
    auto e = create_engine(o);
    GenerationRequest r;
    r.prompt.assign(tokens.begin(), tokens.begin() + 4);
    r.sampling.temperature = 0.f;
    r.max_tokens = int(want.size());
    r.ignore_eos = true;
    auto h = e->submit(r);
    std::vector<int32_t> got;
    StreamEvent ev;
    while (h->next(ev, std::chrono::seconds(60))) {
      if (ev.kind != StreamEvent::Kind::Tokens) break;
      for (auto& t : ev.tokens) got.push_back(t.token);
    }
    EXPECT_EQ(got, want);
  }
}

TEST(MoeRouting, RankOrderTiesToLowerIdAndRenormalisation) {
  // Row 0: experts 1 and 3 tie for first, 0 and 2 tie below. Row 1: a clear order 2 > 0 > 3 > 1.
  const float logits[] = {0.f, 2.f, 0.f, 2.f, 1.f, -1.f, 3.f, 0.5f};
  const MoeRoute r = route_topk(logits, 2, 4, 3, true);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3, 0, 2, 0, 3}));
  EXPECT_FLOAT_EQ(r.weights[0] + r.weights[1] + r.weights[2], 1.f);
  EXPECT_EQ(r.weights[0], r.weights[1]);
  const MoeRoute raw = route_topk(logits, 2, 4, 3, false);
  double z = std::exp(1.0) + std::exp(-1.0) + std::exp(3.0) + std::exp(0.5);
  EXPECT_NEAR(raw.weights[3], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(raw.weights[4], std::exp(1.0) / z, 1e-6);
  EXPECT_THROW(route_topk(logits, 2, 4, 5, true), std::exception);
}

// Backend::moe's reference (the CPU backend) against the MoE MLP written out per token in double.
TEST(MoeOp, CpuReferenceMatchesAPerTokenDoubleComputation) {
  constexpr int R = 13, H = 64, I = 32, E = 8;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.f, 1.f);
  auto rand_w = [&](int out, int in, float s) {
    LinearWeight w;
    w.out_features = out, w.in_features = in;
    w.weight = Tensor::empty({out, in}, DType::F32);
    for (int64_t i = 0; i < w.weight.numel(); ++i) w.weight.data<float>()[i] = s * d(rng);
    return w;
  };
  auto be = make_cpu_backend();
  for (bool norm : {true, false}) {
    SCOPED_TRACE(norm ? "norm_topk_prob" : "raw probabilities");
    MoeWeights w;
    w.top_k = 3, w.norm_topk_prob = norm;
    w.router = be->upload_linear(rand_w(E, H, 0.3f));
    for (int e = 0; e < E; ++e) {
      w.gate_up.push_back(be->upload_linear(rand_w(2 * I, H, 0.2f)));
      w.down.push_back(be->upload_linear(rand_w(H, I, 0.2f)));
    }
    Tensor x = Tensor::empty({R, H}, DType::F32), out = Tensor::empty({R, H}, DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
    be->moe(x, w, out);
    auto dot = [](const float* a, const float* b, int n) {
      double s = 0;
      for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
      return s;
    };
    for (int t = 0; t < R; ++t) {
      const float* xt = x.data<float>() + t * H;
      std::vector<double> p(E);
      for (int e = 0; e < E; ++e) p[e] = dot(w.router.weight.data<float>() + e * H, xt, H);
      const double mx = *std::max_element(p.begin(), p.end());
      double z = 0;
      for (auto& v : p) z += (v = std::exp(v - mx));
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      double top = 0;
      for (int j = 0; j < 3; ++j) top += p[order[j]] / z;
      std::vector<double> y(H, 0.0);
      for (int j = 0; j < 3; ++j) {
        const int e = order[j];
        const double wt = norm ? p[e] / z / top : p[e] / z;
        const float* gu = w.gate_up[e].weight.data<float>();
        std::vector<float> act(I);
        for (int i = 0; i < I; ++i) {
          const double g = dot(gu + i * H, xt, H), u = dot(gu + (I + i) * H, xt, H);
          act[i] = float(g / (1 + std::exp(-g)) * u);
        }
        for (int h = 0; h < H; ++h) y[h] += wt * dot(w.down[e].weight.data<float>() + h * I, act.data(), I);
      }
      double num = 0, den = 0;
      for (int h = 0; h < H; ++h) {
        num += std::pow(out.data<float>()[t * H + h] - y[h], 2);
        den += y[h] * y[h];
      }
      EXPECT_GT(den, 0.0);
      EXPECT_LT(std::sqrt(num / den), 1e-5) << "token " << t;
    }
  }
}

}  // namespace
