#include "models/weights.h"

#include <cstring>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "models/decoder_layer.h"
#include "models/quant_config.h"
#include "ops/cpu/quant.h"

namespace tf {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

std::string where(const Checkpoint& ckpt, const std::string& name) {
  return ckpt.dir() + ": tensor '" + name + "'";
}

// Validates an MLX affine weight whose packed weight, scales and biases are set: bits and group size
// follow from the shapes; config.json's quantization block (for `base`) must agree.
void check_mlx(const Checkpoint& ckpt, const std::string& base, LinearWeight& w) {
  const int64_t out = w.out_features, in = w.in_features;
  w.format = LinearWeight::Format::MlxAffine;
  if (w.weight.ndim() != 2 || w.weight.dim(0) != out || w.weight.dtype() != DType::U32 ||
      (w.weight.dim(1) * 32) % in)
    throw Error(where(ckpt, base + ".weight") + " is " + w.weight.describe() + ", not MLX-packed U32 [" +
                std::to_string(out) + ", " + std::to_string(in) + " * bits / 32]");
  w.bits = int(w.weight.dim(1) * 32 / in);
  if (w.scales.ndim() != 2 || w.scales.dim(0) != out || w.scales.dim(1) == 0 || in % w.scales.dim(1))
    throw Error(where(ckpt, base + ".scales") + " has shape " + shape_str(w.scales.shape()) +
                ", which is no grouping of " + std::to_string(in) + " inputs");
  w.group_size = int(in / w.scales.dim(1));
  const QuantConfig qc = parse_quant_config(ckpt.config());
  const LayerQuant lq = qc.layer(base);
  if (qc.method == QuantConfig::Method::MlxAffine &&
      (!lq.quantized || lq.bits != w.bits || lq.group_size != w.group_size))
    throw Error(where(ckpt, base + ".weight") + " is " + std::to_string(w.bits) + "-bit, group " +
                std::to_string(w.group_size) + ", but config.json's quantization block says " +
                (lq.quantized ? std::to_string(lq.bits) + "-bit, group " + std::to_string(lq.group_size)
                              : "unquantized"));
  check_quantized_linear(w);
}

// MLX affine as stored next to `<base>.weight`.
void read_mlx(const Checkpoint& ckpt, const std::string& base, LinearWeight& w) {
  w.weight = ckpt.get(base + ".weight");
  w.scales = ckpt.get(base + ".scales");
  w.biases = fetch_tensor(ckpt, base + ".biases", w.scales.shape());
  check_mlx(ckpt, base, w);
}

// FP8 e4m3 with `scale` (weight_scale_inv or compressed-tensors weight_scale): per-tensor [] / [1],
// per-channel [out] / [out, 1], or blocks [ceil(out/bo), ceil(in/bi)] — normalised to F32 [out, groups].
void read_fp8(const Checkpoint& ckpt, const std::string& base, const std::string& scale_name,
              LinearWeight& w) {
  const int64_t out = w.out_features, in = w.in_features;
  w.format = LinearWeight::Format::Fp8Block;
  w.bits = 8;
  w.weight = fetch_tensor(ckpt, base + ".weight", {out, in});
  if (w.weight.dtype() != DType::F8_E4M3)
    throw Error(where(ckpt, base + ".weight") + " has a scale but is " + dtype_name(w.weight.dtype()) +
                ", not F8_E4M3 (the only FP8 encoding supported)");
  const Tensor s = ckpt.get(scale_name);
  const std::vector<float> sv = s.to_f32_vector();
  const QuantConfig qc = parse_quant_config(ckpt.config());
  int64_t bo = 0, bi = 0;  // block sizes
  if (s.numel() == 1)
    bo = out, bi = in;
  else if (s.numel() == out && (s.ndim() == 1 || (s.ndim() == 2 && s.dim(1) == 1)))
    bo = 1, bi = in;
  else if (s.ndim() == 2) {
    bo = qc.block_out > 0 ? qc.block_out : 128;
    bi = qc.block_in > 0 ? qc.block_in : 128;
    if (s.dim(0) != ceil_div(out, bo) || s.dim(1) != ceil_div(in, bi))
      throw Error(where(ckpt, scale_name) + " has shape " + shape_str(s.shape()) + ", but " +
                  std::to_string(bo) + "x" + std::to_string(bi) + " blocks of [" + std::to_string(out) +
                  ", " + std::to_string(in) + "] need [" + std::to_string(ceil_div(out, bo)) + ", " +
                  std::to_string(ceil_div(in, bi)) + "]");
  } else {
    throw Error(where(ckpt, scale_name) + " has shape " + shape_str(s.shape()) +
                ", which is no FP8 scale layout");
  }
  w.group_size = int(bi);
  const int64_t groups = ceil_div(in, bi), src_cols = s.numel() == 1 ? 1 : ceil_div(in, bi);
  w.scales = Tensor::empty({out, groups}, DType::F32);
  for (int64_t r = 0; r < out; ++r)
    for (int64_t g = 0; g < groups; ++g)
      w.scales.data<float>()[r * groups + g] = sv[size_t((r / bo) * src_cols + g)];
  check_quantized_linear(w);
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const auto& p : parts) {
    TF_CHECK(p.dtype() == parts[0].dtype() && p.ndim() == 2 && p.dim(1) == parts[0].dim(1),
             "concat_rows: incompatible " + parts[0].describe() + " and " + p.describe());
    rows += p.dim(0);
  }
  Tensor out = Tensor::empty({rows, parts[0].dim(1)}, parts[0].dtype());
  size_t off = 0;
  for (const auto& p : parts) {
    std::memcpy(static_cast<char*>(out.raw()) + off, p.raw(), p.nbytes());
    off += p.nbytes();
  }
  return out;
}

Tensor dense_f32(const Tensor& t) {
  std::vector<float> v = t.to_f32_vector();
  Tensor out = Tensor::empty(t.shape(), DType::F32);
  std::memcpy(out.raw(), v.data(), v.size() * sizeof(float));
  return out;
}

bool same_layout(const LinearWeight& a, const LinearWeight& b) {
  if (a.format != b.format || a.weight.dtype() != b.weight.dtype()) return false;
  if (a.format == LinearWeight::Format::Dense) return true;
  return a.bits == b.bits && a.group_size == b.group_size && a.scales.dtype() == b.scales.dtype() &&
         a.biases.dtype() == b.biases.dtype();
}

bool has_bias(const LinearWeight& w) {
  return w.bias.defined() && w.bias.numel() > 0;
}

}  // namespace

bool same_layout(const std::vector<LinearWeight>& parts) {
  for (const auto& p : parts)
    if (!same_layout(parts[0], p)) return false;
  return true;
}

LinearWeight read_linear(const Checkpoint& ckpt, const std::string& base, int64_t out, int64_t in,
                         bool bias) {
  LinearWeight w;
  w.in_features = in;
  w.out_features = out;
  if (ckpt.has(base + ".scales"))
    read_mlx(ckpt, base, w);
  else if (ckpt.has(base + ".weight_scale_inv"))
    read_fp8(ckpt, base, base + ".weight_scale_inv", w);
  else if (ckpt.has(base + ".weight_scale"))
    read_fp8(ckpt, base, base + ".weight_scale", w);
  else
    w.weight = fetch_tensor(ckpt, base + ".weight", {out, in});
  if (bias) w.bias = fetch_tensor(ckpt, base + ".bias", {out});
  return w;
}

LinearWeight load_linear(const Checkpoint& ckpt, Backend& be, const std::string& base, int64_t out,
                         int64_t in, bool bias) {
  return be.upload_linear(read_linear(ckpt, base, out, in, bias));
}

LinearWeight load_fused_linear(const Checkpoint& ckpt, Backend& be, const std::vector<std::string>& bases,
                               const std::vector<int64_t>& outs, int64_t in) {
  TF_CHECK(!bases.empty() && bases.size() == outs.size(), "load_fused_linear: one output size per part");
  std::vector<LinearWeight> parts;
  for (size_t i = 0; i < bases.size(); ++i) parts.push_back(read_linear(ckpt, bases[i], outs[i], in, false));
  return be.upload_linear(fuse_linears(std::move(parts)));
}

LinearWeight fuse_linears(std::vector<LinearWeight> parts) {
  TF_CHECK(!parts.empty(), "fuse_linears: no parts");
  bool uniform = true;
  for (const auto& p : parts) uniform = uniform && same_layout(parts[0], p);
  LinearWeight f = parts[0];
  f.out_features = 0;
  for (auto& p : parts) {
    f.out_features += p.out_features;
    if (!uniform && p.format != LinearWeight::Format::Dense) {  // e.g. gate 4-bit, up 6-bit
      p.weight = dequantize_linear(p);
      p.format = LinearWeight::Format::Dense;
    } else if (!uniform) {
      p.weight = dense_f32(p.weight);
    }
  }
  if (!uniform) f.format = LinearWeight::Format::Dense, f.scales = f.biases = Tensor();
  auto gather = [&](Tensor LinearWeight::*member) {
    std::vector<Tensor> ts;
    for (const auto& p : parts) ts.push_back(p.*member);
    return concat_rows(ts);
  };
  f.weight = gather(&LinearWeight::weight);
  if (f.format != LinearWeight::Format::Dense) f.scales = gather(&LinearWeight::scales);
  if (f.format == LinearWeight::Format::MlxAffine) f.biases = gather(&LinearWeight::biases);
  f.bias = Tensor();
  if (has_bias(parts[0])) {
    bool same_dtype = true;
    for (const auto& p : parts) {
      TF_CHECK(has_bias(p) && p.bias.numel() == p.out_features,
               "fuse_linears: every part needs an [out] bias");
      same_dtype = same_dtype && p.bias.dtype() == parts[0].bias.dtype();
    }
    std::vector<Tensor> bs;
    for (const auto& p : parts) {
      const Tensor b = same_dtype ? p.bias : dense_f32(p.bias);
      bs.push_back(b.view({p.out_features, 1}));
    }
    f.bias = concat_rows(bs).view({f.out_features});
  } else {
    for (const auto& p : parts) TF_CHECK(!has_bias(p), "fuse_linears: some parts have a bias, some not");
  }
  return f;
}

LinearWeight read_expert_linear(const Checkpoint& ckpt, const std::string& base, int expert, int64_t experts,
                                int64_t out, int64_t in) {
  auto stacked = [&](const std::string& name) {
    Tensor t = ckpt.get(name);
    if (t.ndim() != 3 || t.dim(0) != experts || t.dim(1) != out)
      throw Error(where(ckpt, name) + " is " + t.describe() + ", not stacked experts [" +
                  std::to_string(experts) + ", " + std::to_string(out) + ", ...]");
    return t.row(expert);
  };
  LinearWeight w;
  w.in_features = in;
  w.out_features = out;
  w.weight = stacked(base + ".weight");
  if (ckpt.has(base + ".scales")) {
    w.scales = stacked(base + ".scales");
    w.biases = stacked(base + ".biases");
    check_mlx(ckpt, base, w);
  } else if (w.weight.dim(1) != in || (w.weight.dtype() != DType::F32 && w.weight.dtype() != DType::BF16 &&
                                       w.weight.dtype() != DType::F16)) {
    throw Error(where(ckpt, base + ".weight") + " is " + w.weight.describe() + ", not dense [" +
                std::to_string(experts) + ", " + std::to_string(out) + ", " + std::to_string(in) + "]");
  }
  return w;
}

Tensor load_embedding(const Checkpoint& ckpt, Backend& be, const std::string& base, int64_t vocab,
                      int64_t hidden) {
  if (!ckpt.has(base + ".scales")) return be.upload(fetch_tensor(ckpt, base + ".weight", {vocab, hidden}));
  LinearWeight w = read_linear(ckpt, base, vocab, hidden, false);
  return be.upload(dequantize(w, w.scales.dtype()));
}

}  // namespace tf
