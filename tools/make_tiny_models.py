#!/usr/bin/env python3
"""Writes the tiny random-weight checkpoints the C++ tests load, in real Hugging Face layout, with goldens
computed by transformers (float32): logits at several positions and 64 greedy tokens.

Needs torch + transformers + tokenizers (not needed in CI: the outputs are committed under
tests/data/tiny/). Deterministic: re-running reproduces the files.

    python3 tools/make_tiny_models.py [--out tests/data/tiny]
"""
import argparse
import gzip
import json
import os
import shutil

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3MoeConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared")

CHATML = (
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def training_text():
    with gzip.open(os.path.join(SHARED, "text-fixtures", "corpus", "war-and-peace.txt.gz"), "rt", encoding="utf-8") as f:
        text = f.read(400_000)
    code = "def main(argv):\n    for i in range(10):\n        print(f'{i}: {argv[i]!r}')\n    return 0\n"
    return [text[i : i + 2000] for i in range(0, len(text), 2000)] + [code] * 20


def make_tokenizer(out_dir, vocab_size=384):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(out_dir)
    return fast


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5))


def greedy(model, ids, steps=64):
    ids = list(ids)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1].double()
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            ids.append(nxt)
    return out, min(margins)


def build(name, config, tok, out_root, seed, dtype, shard=None):
    out_dir = os.path.join(out_root, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    model = model.to(dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(out_dir, safe_serialization=True, **kwargs)
    tok.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")],
                   "temperature": 0.8, "top_p": 0.95}, f, indent=2)
    # Goldens: reload the saved files in float32 (as the engine computes) and run transformers.
    ref = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    cases = []
    for cname, text in [("prose", "Well, Prince, so Genoa and Lucca are now just family estates"),
                        ("code", "def main(argv):\n    for i in range(3):")]:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            logits = ref(torch.tensor([ids])).logits[0]
        positions = sorted({0, len(ids) // 2, len(ids) - 1})
        tokens, margin = greedy(ref, ids)
        assert margin > 1e-3, f"{name}/{cname}: greedy margin {margin} too small for an exact test; change the seed"
        cases.append({"name": cname, "input_ids": ids, "logits_positions": positions,
                      "logits": [[float(x) for x in logits[p]] for p in positions],
                      "greedy_prompt_ids": ids, "greedy_tokens": tokens, "min_greedy_margin": margin})
    with open(os.path.join(out_root, f"{name}.goldens.json"), "w") as f:
        json.dump({"model": name, "transformers_dtype": "float32", "cases": cases}, f)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} params, dtype {dtype}, margins "
          f"{[round(c['min_greedy_margin'], 4) for c in cases]}")


def add_mtp_head(src_dir, out_dir, seed):
    """A copy of a checkpoint with a random Qwen3-Next-layout MTP head (mtp.*) added, as the demo model ships
    one; transformers ignores the extra tensors, so the goldens of `src_dir` hold for it too."""
    from safetensors.torch import load_file, save_file
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(src_dir, out_dir)
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    tensors = load_file(os.path.join(out_dir, "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    H = cfg["hidden_size"]
    dtype = next(iter(tensors.values())).dtype
    new = {"mtp.fc.weight": torch.randn(H, 2 * H, generator=g) / (2 * H) ** 0.5,
           "mtp.pre_fc_norm_embedding.weight": 1 + 0.2 * torch.randn(H, generator=g),
           "mtp.pre_fc_norm_hidden.weight": 1 + 0.2 * torch.randn(H, generator=g),
           "mtp.norm.weight": 1 + 0.2 * torch.randn(H, generator=g)}
    for name, t in tensors.items():
        if name.startswith("model.layers.0."):
            new["mtp.layers.0." + name[len("model.layers.0."):]] = t.float() + 0.05 * torch.randn(t.shape, generator=g)
    tensors.update({k: v.to(dtype).contiguous() for k, v in new.items()})
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg.update({"mtp_num_hidden_layers": 1, "num_nextn_predict_layers": 1})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def rope_goldens(out_root):
    """inv_freq and attention factor for each rope type, from transformers' own init functions."""
    cases = []
    base = dict(hidden_size=256, num_attention_heads=4, head_dim=64, max_position_embeddings=4096, rope_theta=10000.0)
    variants = [
        ("default", {}),
        ("linear", {"rope_type": "linear", "factor": 4.0}),
        ("dynamic", {"rope_type": "dynamic", "factor": 2.0}),
        ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 1024}),
        ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}),
        ("yarn_mscale", {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}),
    ]
    for name, scaling in variants:
        cfg = dict(base)
        if scaling:
            cfg["rope_scaling"] = dict(scaling, rope_theta=10000.0)
        config = LlamaConfig(**cfg)
        rope_type = scaling.get("rope_type", "default")
        if rope_type == "default":
            dim = 64
            inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
            factor = 1.0
        else:
            fn = ROPE_INIT_FUNCTIONS[rope_type]
            inv, factor = fn(config, "cpu", seq_len=4096) if rope_type == "dynamic" else fn(config, "cpu")
        cases.append({"name": name, "config": cfg, "inv_freq": [float(x) for x in inv], "attention_factor": float(factor)})
    with open(os.path.join(out_root, "rope.goldens.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "tiny"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tok_dir = os.path.join(args.out, "_tokenizer")
    tok = make_tokenizer(tok_dir)
    vocab = len(tok)
    common = dict(vocab_size=vocab, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=None,
                  eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    qwen3 = Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                        intermediate_size=160, tie_word_embeddings=True, rope_theta=10000.0, **common)
    build("qwen3", qwen3, tok, args.out, seed=1, dtype=torch.bfloat16)
    llama = LlamaConfig(hidden_size=96, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2,
                        intermediate_size=192, tie_word_embeddings=False, attention_bias=True, rope_theta=50000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64, "rope_theta": 50000.0}, **common)
    build("llama", llama, tok, args.out, seed=2, dtype=torch.float32, shard="200KB")
    qwen3_yarn = Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                             intermediate_size=128, tie_word_embeddings=False, rope_theta=1000000.0,
                             rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                                           "rope_theta": 1000000.0}, **common)
    build("qwen3-yarn", qwen3_yarn, tok, args.out, seed=4, dtype=torch.float32)
    add_mtp_head(os.path.join(args.out, "qwen3"), os.path.join(args.out, "qwen3-mtp"), seed=5)
    qwen3_moe = Qwen3MoeConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=32, intermediate_size=96, moe_intermediate_size=32, num_experts=8,
                               num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                               tie_word_embeddings=False, rope_theta=10000.0, **common)
    build("qwen3-moe", qwen3_moe, tok, args.out, seed=7, dtype=torch.float32)
    shutil.rmtree(tok_dir)
    rope_goldens(args.out)


if __name__ == "__main__":
    main()
