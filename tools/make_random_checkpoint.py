#!/usr/bin/env python3
"""Writes a random-weight checkpoint at a real model's shape, in Hugging Face layout, for speed runs on the
GPU machine (no download): weights are drawn on the GPU (torch, bf16, std 0.02, norms 1), saved with
safetensors in shards. A tokenizer directory (tokenizer.json[.gz] + tokenizer_config.json) is copied in so
that the engine can load it; the vocabulary must cover the shape's vocab_size or token ids are used as is.

    python3 tools/make_random_checkpoint.py --shape qwen3-8b --out /dev/shm/qwen3-8b --tokenizer DIR
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import save_file

SHAPES = {
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    s = SHAPES[a.shape]
    cfg = dict(s, model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_act="silu", rms_norm_eps=1e-6,
               max_position_embeddings=40960, rope_theta=1000000.0, attention_bias=False, torch_dtype="bfloat16",
               eos_token_id=151645, bos_token_id=151643)
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(a.seed)
    H, I, D = s["hidden_size"], s["intermediate_size"], s["head_dim"]
    Q, KV = s["num_attention_heads"] * D, s["num_key_value_heads"] * D

    def rnd(*shape):
        return (torch.randn(*shape, generator=g, device=dev) * 0.02).to(torch.bfloat16).cpu()

    index, shard = {}, 0
    tensors = {"model.embed_tokens.weight": rnd(s["vocab_size"], H), "model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    if not s["tie_word_embeddings"]:
        tensors["lm_head.weight"] = rnd(s["vocab_size"], H)

    def flush():
        nonlocal tensors, shard
        name = f"model-{shard:05d}.safetensors"
        save_file(tensors, os.path.join(a.out, name), metadata={"format": "pt"})
        index.update({k: name for k in tensors})
        tensors, shard = {}, shard + 1

    for l in range(s["num_hidden_layers"]):
        p = f"model.layers.{l}."
        tensors.update({p + "input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
                        p + "post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
                        p + "self_attn.q_norm.weight": torch.ones(D, dtype=torch.bfloat16),
                        p + "self_attn.k_norm.weight": torch.ones(D, dtype=torch.bfloat16),
                        p + "self_attn.q_proj.weight": rnd(Q, H), p + "self_attn.k_proj.weight": rnd(KV, H),
                        p + "self_attn.v_proj.weight": rnd(KV, H), p + "self_attn.o_proj.weight": rnd(H, Q),
                        p + "mlp.gate_proj.weight": rnd(I, H), p + "mlp.up_proj.weight": rnd(I, H),
                        p + "mlp.down_proj.weight": rnd(H, I)})
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
