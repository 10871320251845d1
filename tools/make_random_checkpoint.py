#!/usr/bin/env python3
"""Writes a random-weight checkpoint at a real model's shape, in Hugging Face layout, for speed runs on the
GPU machine (no download): weights are drawn on the GPU (torch, bf16, std 0.02, norms 1), saved with
safetensors in shards. A tokenizer directory (tokenizer.json[.gz] + tokenizer_config.json) is copied in so
that the engine can load it; the vocabulary must cover the shape's vocab_size or token ids are used as is.
With --mlx-bits B the linears, the embedding and lm_head are stored as mlx-lm writes an MLX affine conversion
(packed uint32 `weight`, bf16 `scales` and `biases` per group of --group-size inputs along the input
dimension, config.json's "quantization" block): each group's min / max affine grid, as mx.quantize draws it
up to its rounding details (speed runs only; the format's bit-exact tests use mlx itself).

    python3 tools/make_random_checkpoint.py --shape qwen3-8b --out /dev/shm/qwen3-8b --tokenizer DIR
    python3 tools/make_random_checkpoint.py --shape qwen3-8b --out /dev/shm/q8b-4bit --tokenizer DIR --mlx-bits 4
    python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --out /dev/shm/moe-4bit --tokenizer DIR --mlx-bits 4

qwen3-30b-a3b is the Qwen3-MoE shape of issue 12 (~61 GB in bf16, ~17 GB in 4-bit); --layers N writes fewer
layers (checks of this tool on a CPU).
"""
import argparse
import json
import os
import shutil

import numpy as np
import torch

SHAPES = {
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    # Qwen3-MoE: every layer sparse (decoder_sparse_step 1, no mlp_only_layers); bf16 experts as transformers
    # writes them (mlp.experts.N.*), MLX experts stacked as mlx-lm writes them (mlp.switch_mlp.*, [E, out, in]);
    # the router (mlp.gate) stays bf16 either way.
    "qwen3-30b-a3b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, vocab_size=151936, tie_word_embeddings=False,
                          num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                          decoder_sparse_step=1, mlp_only_layers=[]),
}


def mlx_quantize(w, bits, group):
    """MLX affine: w ~ scales * q + biases a group of `group` inputs; q packed little-endian into uint32."""
    lead, cols = w.shape[:-1], w.shape[-1]  # [out, in], or stacked experts [E, out, in]
    rows = int(np.prod(lead))
    g = w.float().reshape(rows, cols // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-8).to(torch.bfloat16)
    bias = lo.to(torch.bfloat16)
    q = torch.round((g - bias.float()[..., None]) / scale.float()[..., None]).clamp(0, 2 ** bits - 1)
    q = q.to(torch.int64).reshape(rows, cols * bits // 32, 32 // bits)
    shifts = torch.arange(0, 32, bits, device=q.device, dtype=torch.int64)
    packed = (q << shifts).sum(-1).to(torch.int64)  # < 2^32: the fields do not overlap
    return {"weight": packed.reshape(*lead, -1).cpu().numpy().astype(np.uint32),
            "scales": scale.reshape(*lead, -1).cpu(), "biases": bias.reshape(*lead, -1).cpu()}


def save_file(tensors, path, metadata):
    """safetensors, written directly: bf16 torch tensors and uint32 numpy arrays in one file."""
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for k, v in tensors.items():
        if isinstance(v, np.ndarray):
            dtype, raw = "U32", np.ascontiguousarray(v).tobytes()
        else:
            dtype, raw = "BF16", v.contiguous().view(torch.int16).numpy().tobytes()
        header[k] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mlx-bits", type=int, choices=(2, 4, 8), default=0,
                    help="store the linears, embedding and lm_head as MLX affine (bits dividing 32)")
    ap.add_argument("--group-size", type=int, choices=(32, 64, 128), default=64)
    ap.add_argument("--layers", type=int, default=0, help="fewer layers than the shape's (checks of this tool)")
    a = ap.parse_args()
    s = dict(SHAPES[a.shape])
    if a.layers:
        s["num_hidden_layers"] = a.layers
    moe = "num_experts" in s
    cfg = dict(s, model_type="qwen3_moe" if moe else "qwen3",
               architectures=["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"], hidden_act="silu", rms_norm_eps=1e-6,
               max_position_embeddings=40960, rope_theta=1000000.0, attention_bias=False, torch_dtype="bfloat16",
               eos_token_id=151645, bos_token_id=151643)
    if a.mlx_bits:
        cfg["quantization"] = {"group_size": a.group_size, "bits": a.mlx_bits}
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(a.seed)
    H, I, D = s["hidden_size"], s["intermediate_size"], s["head_dim"]
    Q, KV = s["num_attention_heads"] * D, s["num_key_value_heads"] * D

    def rnd(*shape):
        return (torch.randn(*shape, generator=g, device=dev) * 0.02).to(torch.bfloat16).cpu()

    index, shard = {}, 0
    tensors = {"model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}

    def flush():
        nonlocal tensors, shard
        name = f"model-{shard:05d}.safetensors"
        save_file(tensors, os.path.join(a.out, name), metadata={"format": "pt"})
        index.update({k: name for k in tensors})
        tensors, shard = {}, shard + 1

    def put(name, w):  # a linear or the embedding: bf16, or its MLX affine triple
        if not a.mlx_bits:
            tensors[name + ".weight"] = w
            return
        if w.shape[-1] % a.group_size:  # as mlx-lm: a weight its groups do not divide stays unquantized
            tensors[name + ".weight"] = w
            return
        tensors.update({name + "." + k: v for k, v in mlx_quantize(w.to(dev), a.mlx_bits, a.group_size).items()})

    put("model.embed_tokens", rnd(s["vocab_size"], H))
    if not s["tie_word_embeddings"]:
        put("lm_head", rnd(s["vocab_size"], H))
    for l in range(s["num_hidden_layers"]):
        p = f"model.layers.{l}."
        tensors.update({p + "input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
                        p + "post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
                        p + "self_attn.q_norm.weight": torch.ones(D, dtype=torch.bfloat16),
                        p + "self_attn.k_norm.weight": torch.ones(D, dtype=torch.bfloat16)})
        for name, shape in (("self_attn.q_proj", (Q, H)), ("self_attn.k_proj", (KV, H)),
                            ("self_attn.v_proj", (KV, H)), ("self_attn.o_proj", (H, Q))):
            put(p + name, rnd(*shape))
        if not moe:
            for name, shape in (("mlp.gate_proj", (I, H)), ("mlp.up_proj", (I, H)), ("mlp.down_proj", (H, I))):
                put(p + name, rnd(*shape))
        else:
            E, MI = s["num_experts"], s["moe_intermediate_size"]
            tensors[p + "mlp.gate.weight"] = rnd(E, H)
            for name, shape in (("gate_proj", (MI, H)), ("up_proj", (MI, H)), ("down_proj", (H, MI))):
                if a.mlx_bits:
                    put(p + "mlp.switch_mlp." + name, rnd(E, *shape))
                else:
                    for e in range(E):
                        put(p + f"mlp.experts.{e}." + name, rnd(*shape))
        if l % 4 == 3:
            flush()
    if tensors:
        flush()
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in os.listdir(a.tokenizer):
        if name.startswith("tokenizer"):
            shutil.copy(os.path.join(a.tokenizer, name), a.out)
    print(f"wrote {a.shape} to {a.out}: {shard} shards")


if __name__ == "__main__":
    main()
