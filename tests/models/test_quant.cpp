// Quantized checkpoints (tools/make_quant_models.py): dequantization against the real tools (mlx's
// mx.dequantize bit for bit, FP8 against a float64 product), the quantization block of config.json, the
// weight-only linear's row invariance, and tiny Qwen3 conversions end to end (vs mlx-lm and vs the same
// model with dequantized dense weights, which must give identical logits).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "models/quant_config.h"
#include "models/weights.h"
#include "ops/cpu/quant.h"
#include "run_logits.h"

using namespace tf;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string data(const std::string& rel) {
  return std::string(TF_SOURCE_DIR) + "/tests/data/quant/" + rel;
}

// Goldens made live by mlx when the test python has it (CI installs mlx-cpu), else the committed ones.
std::string dequant_dir() {
  static const std::string dir = [] {
    const std::string py = TF_PYTHON;
    if (std::system((py + " -c 'import mlx.core' >/dev/null 2>&1").c_str()) != 0) {
      std::cerr << "[test_quant] mlx not importable by " << py << ": using committed goldens\n";
      return data("");
    }
    // One directory per process: ctest runs each test of this binary as its own process, maybe in parallel.
    const std::string out = std::string(TF_BINARY_DIR) + "/quant_goldens_live/" + std::to_string(getpid());
    fs::create_directories(out);
    const std::string cmd =
        py + " " + TF_SOURCE_DIR + "/tools/make_quant_models.py --dequant-only --out " + out;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::cerr << "[test_quant] goldens regenerated live with mlx in " << out << "\n";
    return out + "/";
  }();
  return dir;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct MlxCase {
  int bits, group;
  std::string dtype;
};

std::vector<MlxCase> mlx_cases() {
  std::vector<MlxCase> v;
  for (const char* d : {"bf16", "f16", "f32"})
    for (int b : {2, 3, 4, 5, 6, 8})
      for (int g : {32, 64, 128}) v.push_back({b, g, d});
  return v;
}

}  // namespace

TEST(MlxDequant, EqualsMxDequantizeBitForBit) {
  auto f = SafetensorsFile::open(dequant_dir() + "mlx_dequant.safetensors");
  int checked = 0;
  for (const auto& c : mlx_cases()) {
    const std::string k = "b" + std::to_string(c.bits) + "_g" + std::to_string(c.group) + "_" + c.dtype;
    SCOPED_TRACE(k);
    const DType dt = c.dtype == "bf16" ? DType::BF16 : c.dtype == "f16" ? DType::F16 : DType::F32;
    LinearWeight w;
    w.format = LinearWeight::Format::MlxAffine;
    w.weight = f.get(k + ".weight");
    w.scales = (f.get(k + ".scales"));
    w.biases = (f.get(k + ".biases"));
    w.bits = c.bits;
    w.group_size = c.group;
    w.out_features = w.weight.dim(0);
    w.in_features = w.weight.dim(1) * 32 / c.bits;
    ASSERT_EQ(w.in_features, 256);
    const Tensor expect = (f.get(k + ".dequant"));
    const Tensor got = dequantize(w, dt);
    ASSERT_EQ(got.nbytes(), expect.nbytes());
    EXPECT_EQ(std::memcmp(got.raw(), expect.raw(), got.nbytes()), 0);
    // The f32 row path (what the linear uses) equals mx.dequantize of f32-cast scales and biases.
    std::vector<float> row(size_t(w.in_features)), ref = f.get(k + ".dequant_f32").to_f32_vector();
    for (int64_t r = 0; r < w.out_features; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t i = 0; i < w.in_features; ++i)
        ASSERT_EQ(bits_of(row[i]), bits_of(ref[size_t(r * w.in_features + i)]))
            << "row " << r << " col " << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 54);
}

TEST(MlxDequant, UnpackStraddlesWordsLittleEndFirst) {
  // 3-bit values 0..7 repeated: value i occupies bits [3i, 3i+3) of the row's bit stream.
  std::vector<uint32_t> row(3, 0);
  for (int i = 0; i < 32; ++i) {
    const uint64_t bit = uint64_t(i) * 3, v = uint64_t(i % 8);
    row[bit / 32] |= uint32_t(v << (bit % 32));
    if (bit % 32 + 3 > 32) row[bit / 32 + 1] |= uint32_t(v >> (32 - bit % 32));
  }
  for (int i = 0; i < 32; ++i) EXPECT_EQ(mlx_unpack(row.data(), 3, i), uint32_t(i % 8)) << i;
}

TEST(Fp8Dequant, EqualsFloat64ProductRoundedToF32) {
  const std::string dir = dequant_dir() + "fp8_dequant";
  auto ckpt = Checkpoint::open(dir);
  for (const char* k : {"block", "channel", "tensor"}) {
    SCOPED_TRACE(k);
    LinearWeight w = read_linear(ckpt, k, 40, 300, false);
    EXPECT_EQ(w.format, LinearWeight::Format::Fp8Block);
    const std::vector<float> expect = ckpt.get(std::string(k) + ".expect").to_f32_vector();
    const Tensor got = dequantize(w, DType::F32);
    for (size_t i = 0; i < expect.size(); ++i)
      ASSERT_EQ(bits_of(got.data<float>()[i]), bits_of(expect[i])) << i;
  }
}

TEST(QuantConfig, MlxDefaultsOverridesAndUnquantizedLayers) {
  json c = json::parse(R"({"quantization": {"group_size": 64, "bits": 4, "mode": "affine",
      "model.layers.0.mlp.down_proj": {"bits": 6, "group_size": 64},
      "model.layers.1.mlp.down_proj": {"bits": 6, "group_size": 64},
      "model.layers.2.mlp.down_proj": {"bits": 6, "group_size": 64},
      "lm_head": false}})");
  QuantConfig q = parse_quant_config(c);
  EXPECT_EQ(q.method, QuantConfig::Method::MlxAffine);
  EXPECT_EQ(q.layer("model.layers.0.mlp.down_proj").bits, 6);
  EXPECT_EQ(q.layer("model.layers.0.mlp.up_proj").bits, 4);
  EXPECT_FALSE(q.layer("lm_head").quantized);
  EXPECT_EQ(q.describe(), "mlx affine 4-bit, group 64 (mixed: 3 layers at 6-bit, 1 layer unquantized)");
  // mlx-lm also writes a copy as quantization_config (no quant_method).
  json c2 = json::parse(R"({"quantization_config": {"group_size": 32, "bits": 8}})");
  EXPECT_EQ(parse_quant_config(c2).describe(), "mlx affine 8-bit, group 32");
  EXPECT_EQ(parse_quant_config(json::object()).method, QuantConfig::Method::None);
}

TEST(QuantConfig, Fp8Variants) {
  auto q = parse_quant_config(json::parse(R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
      "weight_block_size": [128, 128]}})"));
  EXPECT_EQ(q.method, QuantConfig::Method::Fp8);
  EXPECT_EQ(q.describe(), "fp8 e4m3, 128x128 block scales");
  q = parse_quant_config(json::parse(R"({"quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}})"));
  EXPECT_EQ(q.describe(), "fp8 e4m3, per-channel scales");
}

TEST(QuantConfig, RefusesUnsupportedVariantsWithTheReason) {
  auto refuses = [](const char* text, const char* why) {
    try {
      parse_quant_config(json::parse(text));
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refuses(R"({"quantization": {"group_size": 64, "bits": 7}})", "7-bit");
  refuses(R"({"quantization": {"group_size": 64, "bits": 1}})", "1-bit");
  refuses(R"({"quantization": {"group_size": 16, "bits": 4}})", "group size 16");
  refuses(R"({"quantization": {"group_size": 64, "bits": 4, "x.down_proj": {"bits": 7, "group_size": 64}}})",
          "'x.down_proj'");
  refuses(R"({"quantization": {"group_size": 16, "bits": 4, "mode": "nvfp4"}})", "nvfp4");
  refuses(R"({"quantization_config": {"quant_method": "awq", "bits": 4}})", "'awq'");
  refuses(R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})", "'gptq'");
  refuses(R"({"quantization_config": {"quant_method": "fp8", "fmt": "e5m2"}})", "e5m2");
  refuses(R"({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g":
      {"weights": {"num_bits": 4, "type": "int", "strategy": "group"}}}}})",
          "4-bit int");
  // parse_spec (what `pull` and `info` call before downloading) refuses too.
  json cfg = json::parse(std::ifstream(std::string(TF_SOURCE_DIR) + "/tests/data/tiny/qwen3/config.json"));
  EXPECT_NO_THROW(parse_spec(cfg));
  cfg["quantization_config"] = {{"quant_method", "awq"}};
  EXPECT_THROW(parse_spec(cfg), Error);
}

TEST(QuantLinear, RowInvariantAndEqualToDenseOnDequantizedWeight) {
  auto f = SafetensorsFile::open(data("mlx_dequant.safetensors"));
  auto be = make_cpu_backend();
  for (const char* k : {"b4_g64_bf16", "b3_g32_f16", "b8_g128_f32"}) {
    SCOPED_TRACE(k);
    LinearWeight q;
    q.format = LinearWeight::Format::MlxAffine;
    q.weight = f.get(std::string(k) + ".weight");
    q.scales = (f.get(std::string(k) + ".scales"));
    q.biases = (f.get(std::string(k) + ".biases"));
    q.bits = k[1] - '0';
    q.group_size = std::atoi(std::strchr(k, 'g') + 1);
    q.out_features = q.weight.dim(0);
    q.in_features = 256;
    LinearWeight d;
    d.weight = dequantize_linear(q);
    d.out_features = q.out_features;
    d.in_features = q.in_features;
    LinearWeight qu = be->upload_linear(q), du = be->upload_linear(d);
    const int64_t N = q.out_features, K = 256;
    Tensor x = Tensor::empty({9, K}, DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(float(i) * 0.37f);
    Tensor y9 = Tensor::empty({9, N}, DType::F32), yd = Tensor::empty({9, N}, DType::F32);
    be->linear(x, qu, y9);
    be->linear(x, du, yd);
    EXPECT_EQ(std::memcmp(y9.raw(), yd.raw(), y9.nbytes()), 0);
    for (int64_t m = 0; m < 9; ++m) {  // each row alone gives the same bits as inside the batch
      Tensor x1 = x.slice_rows(m, m + 1), y1 = Tensor::empty({1, N}, DType::F32);
      be->linear(x1, qu, y1);
      EXPECT_EQ(std::memcmp(y1.raw(), y9.data<float>() + m * N, size_t(N) * 4), 0) << "row " << m;
    }
  }
}

namespace {

const std::vector<int32_t> kTokens = {1, 17, 42, 99, 5, 250, 7, 300, 64, 2, 128, 33};  // as the script

// All positions' logits of kTokens run as one sequence in forwards of `chunk` rows (CPU backend).
std::vector<float> run_logits(const std::string& dir, int chunk) {
  return test::run_logits(dir, kTokens, chunk);
}

class QuantModel : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(QuantModel, SameLogitsAsDequantizedDenseTwinAtAnyChunking) {
  const auto whole = run_logits(data(GetParam()), 12);
  const auto single = run_logits(data(GetParam()), 1);
  const auto dense = run_logits(data(GetParam() + "-dequant"), 5);
  ASSERT_EQ(whole.size(), kTokens.size() * 384);
  EXPECT_EQ(std::memcmp(whole.data(), single.data(), whole.size() * 4), 0) << "not row invariant";
  EXPECT_EQ(std::memcmp(whole.data(), dense.data(), whole.size() * 4), 0)
      << "differs from its dequantized twin";
  float spread = 0;
  for (float v : whole) spread = std::max(spread, std::fabs(v));
  EXPECT_GT(spread, 0.1f);  // a live model, not zeros
}

INSTANTIATE_TEST_SUITE_P(Tiny, QuantModel,
                         ::testing::Values("qwen3-mlx-mixed", "qwen3-mlx-5bit-g32", "qwen3-fp8-block",
                                           "qwen3-fp8-channel"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(QuantModelVsMlxLm, LogitsMatchWithinTolerance) {
  for (const char* name : {"qwen3-mlx-mixed", "qwen3-mlx-5bit-g32"}) {
    SCOPED_TRACE(name);
    auto f = SafetensorsFile::open(data(std::string(name) + "/logits_mlx.safetensors"));
    const Tensor tok = f.get("tokens");
    ASSERT_EQ(tok.numel(), int64_t(kTokens.size()));
    for (size_t i = 0; i < kTokens.size(); ++i) ASSERT_EQ(tok.data<int32_t>()[i], kTokens[i]);
    const std::vector<float> ref = f.get("logits").to_f32_vector();
    const auto ours = run_logits(data(name), 4);
    ASSERT_EQ(ours.size(), ref.size());
    double max_err = 0, max_ref = 0;
    int argmax_same = 0;
    for (size_t p = 0; p < kTokens.size(); ++p) {
      size_t a = 0, b = 0;
      for (size_t v = 0; v < 384; ++v) {
        const size_t i = p * 384 + v;
        max_err = std::max(max_err, double(std::fabs(ours[i] - ref[i])));
        max_ref = std::max(max_ref, double(std::fabs(ref[i])));
        if (ours[i] > ours[p * 384 + a]) a = v;
        if (ref[i] > ref[p * 384 + b]) b = v;
      }
      argmax_same += a == b;
    }
    std::cerr << name << ": max |ours - mlx-lm| = " << max_err << " (max |logit| " << max_ref << ")\n";
    EXPECT_LT(max_err, 1e-4 * std::max(1.0, max_ref));  // measured 3e-6
    EXPECT_EQ(argmax_same, int(kTokens.size()));
  }
}

namespace {

std::vector<int32_t> engine_greedy(const std::string& dir, const std::vector<int32_t>& prompt, int n) {
  EngineOptions o;
  o.model_path = dir;
  o.backend = "cpu";
  o.parallel = 2;
  o.prefill_chunk = 3;
  auto e = create_engine(o);
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.f;
  r.max_tokens = n;
  r.ignore_eos = true;
  auto h = e->submit(r);
  std::vector<int32_t> out;
  StreamEvent ev;
  while (h->next(ev, std::chrono::seconds(60))) {
    if (ev.kind != StreamEvent::Kind::Tokens) break;
    for (auto& t : ev.tokens) out.push_back(t.token);
  }
  return out;
}

}  // namespace

// The engine (scheduler, chunked prefill, sampler) on the converted checkpoints generates what mlx-lm does.
TEST(QuantModelVsMlxLm, EngineGreedyEqualsMlxLmGreedy) {
  for (const char* name : {"qwen3-mlx-mixed", "qwen3-mlx-5bit-g32"}) {
    SCOPED_TRACE(name);
    auto f = SafetensorsFile::open(data(std::string(name) + "/logits_mlx.safetensors"));
    const Tensor g = f.get("greedy");
    const std::vector<int32_t> want(g.data<int32_t>(), g.data<int32_t>() + g.numel());
    const std::vector<int32_t> prompt(kTokens.begin(), kTokens.begin() + 4);
    EXPECT_EQ(engine_greedy(data(name), prompt, int(want.size())), want);
  }
}
