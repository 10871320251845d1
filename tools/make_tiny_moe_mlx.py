#!/usr/bin/env python3
"""MLX conversions of the tiny Qwen3-MoE (tests/data/tiny/qwen3-moe), made with the real tool: mlx-lm's
convert (pip install "mlx[cpu]" mlx-lm; runs on a Linux CPU). mlx-lm stacks the per-expert tensors into
`model.layers.N.mlp.switch_mlp.{gate,up,down}_proj.*` with a leading experts dimension.

Writes under --out (default tests/data/quant):
  qwen3-moe-mlx-4bit/   bf16, then 4-bit group 32 everywhere (mlx-lm's qwen3_moe predicate makes the router 8-bit
                        group 64), stacked quantized experts.
  qwen3-moe-mlx-bf16/   no quantization, bf16: stacked bf16 experts.
Each gets logits_mlx.safetensors: mlx-lm's logits (f32 activations, as our CPU backend) for `tokens` and
the greedy continuation (`greedy`) of their first 4 tokens, full recompute each step.

Deterministic. tests/models/test_moe_mlx.cpp reads the committed output; rerun this script after changing
the tiny model.
"""
import argparse
import json
import os
import shutil
import tempfile

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "data", "tiny", "qwen3-moe")
TOKENS = [1, 17, 42, 99, 5, 250, 7, 300, 64, 2, 128, 33, 380, 11, 0, 77]
GREEDY = 24


def mlx_ready_copy(tmp):
    """The tiny checkpoint with the config keys mlx-lm's ModelArgs wants (transformers 5 writes
    num_local_experts and rope_parameters; mlx-lm reads num_experts and rope_theta). Same model."""
    for f in os.listdir(TINY):
        shutil.copy(os.path.join(TINY, f), tmp)
    with open(os.path.join(TINY, "config.json")) as f:
        c = json.load(f)
    c["num_experts"] = c.get("num_experts", c.get("num_local_experts"))
    c["rope_theta"] = c.get("rope_theta", c.get("rope_parameters", {}).get("rope_theta", 10000.0))
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def goldens(dst):
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm import load

    model, _ = load(dst)
    # f32 activations, like our CPU backend: every bf16 parameter to f32 (quantized_matmul / gather_qmm on
    # f32 inputs use the weight dequantized in f32 whatever the scales' dtype) except the quantized
    # embedding's scales and biases, so that QuantizedEmbedding still dequantizes in bf16 as it does natively.
    model.update(tree_unflatten([(k, v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())
                                 if v.dtype == mx.bfloat16 and not ("embed_tokens" in k and
                                                                    k.endswith((".scales", ".biases")))]))
    logits = model(mx.array([TOKENS]))[0].astype(mx.float32)
    seq = list(TOKENS[:4])
    for _ in range(GREEDY):
        seq.append(int(mx.argmax(model(mx.array([seq]))[0, -1]).item()))
    save_file({"tokens": np.array(TOKENS, dtype=np.int32), "logits": np.array(logits),
               "greedy": np.array(seq[4:], dtype=np.int32)},
              os.path.join(dst, "logits_mlx.safetensors"))


def main():
    from mlx_lm import convert

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "quant"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mlx_ready_copy(tmp)
        for name, kw in (("qwen3-moe-mlx-4bit", dict(quantize=True, q_group_size=32, q_bits=4, dtype="bfloat16")),
                         ("qwen3-moe-mlx-bf16", dict(dtype="bfloat16"))):
            dst = os.path.join(args.out, name)
            shutil.rmtree(dst, ignore_errors=True)
            convert(tmp, mlx_path=dst, **kw)
            for f in os.listdir(dst):  # the engine does not read mlx-lm's README
                if f.endswith(".md"):
                    os.remove(os.path.join(dst, f))
            goldens(dst)


if __name__ == "__main__":
    main()
