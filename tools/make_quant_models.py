#!/usr/bin/env python3
"""Quantized test data, made with the real tools: MLX (pip install "mlx[cpu]" mlx-lm) for the MLX affine
format, numpy float64 for FP8.

Writes under --out (default tests/data/quant):
  mlx_dequant.safetensors   for every bits (2,3,4,5,6,8) x group (32,64,128) x dtype (bf16,f16,f32): a random
                            weight quantized by mx.quantize (`<k>.weight/.scales/.biases`) and mx.dequantize's
                            output (`<k>.dequant`). The C++ test requires bit equality.
  fp8_dequant/              (a checkpoint directory) e4m3 bytes with block / per-channel / per-tensor scales and the float64 product
                            rounded to f32 (`<k>.expect`).
  qwen3-mlx-mixed/          tests/data/tiny/qwen3 through mlx_lm.convert: 4-bit group 64 with per-layer
                            overrides (6-bit, 8-bit, 3-bit group 32, one layer left unquantized); down_proj
                            (160 inputs) is left unquantized by mlx-lm itself. logits_mlx.safetensors holds
                            mlx-lm's logits (f32 activations) for `tokens`
                            and its greedy continuation (`greedy`) of their first 4.
  qwen3-mlx-5bit-g32/       the same, 5-bit group 32 everywhere (down_proj quantized too).
  qwen3-fp8-block/          e4m3 with 32x32 weight_scale_inv blocks (quant_method fp8).
  qwen3-fp8-channel/        compressed-tensors per-channel e4m3.
Every quantized checkpoint also gets a sibling `<name>-dequant/` with the dequantized weights as F32
(the tests expect our logits on both to be identical).

Deterministic. With --dequant-only only the two dequant files are written (what the CI test regenerates live
when mlx is importable).
"""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "data", "tiny", "qwen3")
TOKENS = [1, 17, 42, 99, 5, 250, 7, 300, 64, 2, 128, 33]
GREEDY = 24


def mlx_dequant_goldens(out):
    import mlx.core as mx

    mx.random.seed(11)
    tensors = {}
    for dt_name, dt in (("bf16", mx.bfloat16), ("f16", mx.float16), ("f32", mx.float32)):
        w = (mx.random.normal((6, 256)) * 0.5 + mx.random.normal((6, 1))).astype(dt)
        for bits in (2, 3, 4, 5, 6, 8):
            for gs in (32, 64, 128):
                q, s, b = mx.quantize(w, group_size=gs, bits=bits)
                d = mx.dequantize(q, s, b, group_size=gs, bits=bits)
                k = f"b{bits}_g{gs}_{dt_name}"
                tensors[k + ".weight"] = ("U32", np.array(q))
                # numpy has no bf16: bf16 tensors go out as their raw bits, labelled BF16.
                # What quantized_matmul uses with f32 inputs: the weight dequantized in f32.
                d32 = mx.dequantize(q, s.astype(mx.float32), b.astype(mx.float32), group_size=gs, bits=bits)
                tensors[k + ".dequant_f32"] = ("F32", np.array(d32))
                for name, t in ((".scales", s), (".biases", b), (".dequant", d)):
                    tensors[k + name] = ("BF16", np.array(t.view(mx.uint16))) if dt == mx.bfloat16 else (
                        "F16" if dt == mx.float16 else "F32", np.array(t))
    save_raw(os.path.join(out, "mlx_dequant.safetensors"), tensors)


def e4m3_values():
    """All 256 e4m3fn codes decoded in float64 (NaN for 0x7f/0xff)."""
    v = np.zeros(256)
    for c in range(256):
        sign, exp, man = c >> 7, (c >> 3) & 15, c & 7
        if exp == 15 and man == 7:
            v[c] = np.nan
        elif exp == 0:
            v[c] = man * 2.0**-9
        else:
            v[c] = (1 + man / 8) * 2.0 ** (exp - 7)
        v[c] = -v[c] if sign else v[c]
    return v


def to_e4m3(x):
    """Nearest e4m3 code of each value (x already scaled into range)."""
    vals = e4m3_values()
    ok = np.where(np.isnan(vals), np.inf, vals)
    return np.abs(x[..., None] - ok).argmin(-1).astype(np.uint8)


def fp8_dequant_goldens(out):
    os.makedirs(os.path.join(out, "fp8_dequant"), exist_ok=True)
    rng = np.random.default_rng(5)
    vals = e4m3_values()
    tensors = {}
    codes = rng.integers(0, 256, size=(40, 300)).astype(np.uint8)
    codes[codes & 0x7F == 0x7F] = 0x10  # no NaN codes
    cases = {
        "block": rng.uniform(1e-4, 2e-2, size=(2, 3)).astype(np.float32),  # 32x128 blocks
        "channel": rng.uniform(1e-4, 2e-2, size=(40, 1)).astype(np.float32),
        "tensor": np.array([0.0123], dtype=np.float32),
    }
    for k, s in cases.items():
        if k == "block":  # blocks of 32 rows x 128 columns: ceil(40/32)=2, ceil(300/128)=3
            full = np.repeat(np.repeat(s.astype(np.float64), 32, 0)[:40], 128, 1)[:, :300]
        else:
            full = np.broadcast_to(s.astype(np.float64).reshape(-1, 1), (40, 300)) if k == "channel" else float(s[0])
        tensors[k + ".weight"] = codes
        # Named as checkpoints name them: DeepSeek/Qwen FP8 blocks, compressed-tensors channel/tensor scales.
        tensors[k + (".weight_scale_inv" if k == "block" else ".weight_scale")] = s
        tensors[k + ".expect"] = (vals[codes] * full).astype(np.float32)
    save_fp8(os.path.join(out, "fp8_dequant", "model.safetensors"), tensors)
    with open(os.path.join(out, "fp8_dequant", "config.json"), "w") as f:
        json.dump({"model_type": "none", "quantization_config": {"quant_method": "fp8", "weight_block_size": [32, 128]}},
                  f, indent=2)


def copy_tiny_files(dst):
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(TINY):
        if f not in ("model.safetensors", "config.json"):
            shutil.copy(os.path.join(TINY, f), dst)


def save_dense_twin(src_dir, weights, config):
    """`<src>-dequant/`: the same model with dense F32 weights (what the quantized one must compute)."""
    dst = src_dir + "-dequant"
    copy_tiny_files(dst)
    for k in ("quantization", "quantization_config"):
        config.pop(k, None)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()},
              os.path.join(dst, "model.safetensors"))


def mlx_models(out):
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm import convert, load

    def mixed(path, module, *_):
        table = {
            "model.layers.0.self_attn.v_proj": {"group_size": 64, "bits": 6},
            "model.layers.0.mlp.up_proj": {"group_size": 64, "bits": 8},
            "model.layers.1.mlp.gate_proj": {"group_size": 32, "bits": 3},
            "model.layers.1.self_attn.o_proj": False,
        }
        return table.get(path, True)

    for name, gs, bits, pred in (("qwen3-mlx-mixed", 64, 4, mixed), ("qwen3-mlx-5bit-g32", 32, 5, None)):
        dst = os.path.join(out, name)
        shutil.rmtree(dst, ignore_errors=True)
        convert(TINY, mlx_path=dst, quantize=True, q_group_size=gs, q_bits=bits, quant_predicate=pred)
        for f in os.listdir(dst):  # keep what the engine reads; mlx-lm's README/tokenizer copies are not needed
            if f.endswith(".md"):
                os.remove(os.path.join(dst, f))
        model, _ = load(dst)
        # f32 activations, like our CPU backend: every bf16 parameter to f32 except the embedding's scales and
        # biases, so that QuantizedEmbedding still dequantizes in bf16 as it does natively (the linears'
        # quantized_matmul on f32 inputs uses the weight in f32 whatever the scales' dtype).
        model.update(tree_unflatten([(k, v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())
                                     if v.dtype == mx.bfloat16 and not ("embed_tokens" in k and
                                                                        k.endswith((".scales", ".biases")))]))
        logits = model(mx.array([TOKENS]))[0].astype(mx.float32)
        seq = list(TOKENS[:4])
        for _ in range(GREEDY):  # greedy continuation of the first 4 tokens, full recompute each step
            seq.append(int(mx.argmax(model(mx.array([seq]))[0, -1]).item()))
        save_file({"tokens": np.array(TOKENS, dtype=np.int32), "logits": np.array(logits),
                   "greedy": np.array(seq[4:], dtype=np.int32)},
                  os.path.join(dst, "logits_mlx.safetensors"))
        # Dense twin: linears dequantized in f32 (as quantized_matmul on f32 inputs uses them), the embedding
        # through mx.dequantize in its scales' dtype (as QuantizedEmbedding); a tied head becomes lm_head.
        raw = mx.load(os.path.join(dst, "model.safetensors"))
        with open(os.path.join(dst, "config.json")) as f:
            config = json.load(f)
        dense = {}
        for k, v in raw.items():
            if k.endswith((".scales", ".biases")):
                continue
            base = k[: -len(".weight")]
            if base + ".scales" in raw:
                q = config["quantization"].get(base, config["quantization"])
                b = int(v.shape[1] * 32 // (raw[base + ".scales"].shape[1] * q["group_size"]))
                s, bi = raw[base + ".scales"], raw[base + ".biases"]
                if base.endswith("embed_tokens") and config.get("tie_word_embeddings"):
                    dense["lm_head.weight"] = np.array(mx.dequantize(
                        v, s.astype(mx.float32), bi.astype(mx.float32), group_size=q["group_size"], bits=b))
                if not base.endswith("embed_tokens"):
                    s, bi = s.astype(mx.float32), bi.astype(mx.float32)
                v = mx.dequantize(v, s, bi, group_size=q["group_size"], bits=b)
            dense[k] = np.array(v.astype(mx.float32))
        if "lm_head.weight" in dense:
            config["tie_word_embeddings"] = False
        save_dense_twin(dst, dense, config)


def fp8_checkpoints(out):
    """FP8 versions of the tiny Qwen3: linears quantized to e4m3 with 32x32 blocks (fp8) or per channel
    (compressed-tensors). Embeddings and norms stay dense, as those exports ship them."""
    vals = e4m3_values()
    weights = read_bf16_safetensors(os.path.join(TINY, "model.safetensors"))
    with open(os.path.join(TINY, "config.json")) as f:
        base_config = json.load(f)
    for name, strategy in (("qwen3-fp8-block", "block"), ("qwen3-fp8-channel", "channel")):
        dst = os.path.join(out, name)
        shutil.rmtree(dst, ignore_errors=True)
        copy_tiny_files(dst)
        config = dict(base_config)
        if strategy == "block":
            config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                             "weight_block_size": [32, 32]}
        else:
            config["quantization_config"] = {
                "quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
                "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "weights": {
                    "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False}}}}
        q, dense = {}, {}
        for k, w in weights.items():
            is_linear = w.ndim == 2 and "embed_tokens" not in k
            if not is_linear:
                q[k] = w.astype(np.float32)
                dense[k] = q[k]
                continue
            if strategy == "block":
                bo = bi = 32
                sb = np.zeros(((w.shape[0] + bo - 1) // bo, (w.shape[1] + bi - 1) // bi), np.float32)
                for i in range(sb.shape[0]):
                    for j in range(sb.shape[1]):
                        sb[i, j] = np.float32(np.abs(w[i * bo:(i + 1) * bo, j * bi:(j + 1) * bi]).max() / 448.0 + 1e-12)
                full = np.repeat(np.repeat(sb.astype(np.float64), bo, 0)[: w.shape[0]], bi, 1)[:, : w.shape[1]]
                q[k[: -len(".weight")] + ".weight_scale_inv"] = sb
            else:
                sb = (np.abs(w).max(1, keepdims=True) / 448.0 + 1e-12).astype(np.float32)
                full = sb.astype(np.float64)
                q[k + "_scale"] = sb.astype(np.float32)
            codes = to_e4m3(w / full)
            q[k] = codes
            dense[k] = (vals[codes] * full).astype(np.float32)
        save_fp8(os.path.join(dst, "model.safetensors"), q)
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        save_dense_twin(dst, dense, dict(config))


def read_bf16_safetensors(path):
    """safetensors.numpy cannot read BF16: parse the header ourselves and widen to f32."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, info in header.items():
        if k == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = np.frombuffer(data[a:b], dtype={"BF16": np.uint16, "F32": np.float32, "F16": np.float16}[info["dtype"]])
        if info["dtype"] == "BF16":
            buf = (buf.astype(np.uint32) << 16).view(np.float32)
        out[k] = buf.astype(np.float32).reshape(info["shape"])
    return out


def save_fp8(path, tensors):
    """uint8 arrays written as F8_E4M3 (numpy has no float8 dtype), the rest as F32."""
    save_raw(path, {k: ("F8_E4M3", a) if a.dtype == np.uint8 else ("F32", np.asarray(a, np.float32))
                    for k, a in tensors.items()})


def save_raw(path, tensors):
    """safetensors from {name: (dtype label, array of that width)}: labels numpy cannot express (BF16, F8)."""
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        dtype, a = tensors[k]
        raw = np.ascontiguousarray(a).tobytes()
        header[k] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "quant"))
    ap.add_argument("--dequant-only", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mlx_dequant_goldens(args.out)
    fp8_dequant_goldens(args.out)
    if not args.dequant_only:
        mlx_models(args.out)
        fp8_checkpoints(args.out)


if __name__ == "__main__":
    main()
