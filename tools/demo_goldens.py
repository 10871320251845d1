#!/usr/bin/env python3
"""Reference implementation of the demo model (Qwen3 + Qwen3-Next-style MTP head) and the generator of
its test data: logits/greedy goldens from transformers' Qwen3ForCausalLM, MTP and draft metrics, sample
outputs for the model card.

Used by tools/train_demo.py at the end of training (on the GPU machine), and runnable alone on a CPU
with torch + transformers to regenerate tests/data/demo/ from the committed models/demo/ files:

    python3 tools/demo_goldens.py --model models/demo --tests-dir tests/data/demo

Everything here reads the FINAL shipped files (bf16 safetensors) and computes in float32.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------------
# Model: a plain PyTorch Qwen3 decoder whose parameter names are the Hugging Face ones, plus the MTP
# head under `mtp.*` (Qwen3-Next tensor names, standard (non zero-centred) RMSNorm weights like the
# rest of a qwen3 checkpoint).
# ----------------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_tables(cfg, n, device):
    hd = cfg["head_dim"]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd))
    pos = torch.arange(n, dtype=torch.float32, device=device)
    f = torch.outer(pos, inv)
    emb = torch.cat((f, f), -1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos.to(x.dtype) + rot * sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, hd = cfg["hidden_size"], cfg["head_dim"]
        self.nh, self.nkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], hd
        self.q_proj = nn.Linear(h, self.nh * hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, cfg["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, cfg["rms_norm_eps"])

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.nh // self.nkv  # query head i reads kv head i // rep, as HF's repeat_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        q, k = q.to(v.dtype), k.to(v.dtype)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class MTPHead(nn.Module):
    """Predicts token t+2 at position t from the main model's hidden state at t (AFTER the final
    model.norm) and the embedding of token t+1:
        x = mtp.fc(concat(pre_fc_norm_embedding(embed(tok[t+1])), pre_fc_norm_hidden(h_t)))
        x = mtp.layers.0(x)   (causal self-attention over the fused states, RoPE position t)
        logits = lm_head(mtp.norm(x))   (lm_head = the tied embedding)"""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = RMSNorm(h, cfg["rms_norm_eps"])
        self.pre_fc_norm_hidden = RMSNorm(h, cfg["rms_norm_eps"])
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.get("mtp_num_hidden_layers", 1)))
        self.norm = RMSNorm(h, cfg["rms_norm_eps"])


class Qwen3LM(nn.Module):
    def __init__(self, cfg, with_mtp=False):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.mtp = MTPHead(cfg) if with_mtp else None
        self._rope = None

    def rope(self, t, device):
        if self._rope is None or self._rope[0].shape[0] < t or self._rope[0].device != device:
            self._rope = rope_tables(self.cfg, max(t, self.cfg["max_position_embeddings"]), device)
        return self._rope[0][:t], self._rope[1][:t]

    def hidden(self, ids):
        """Hidden states after the final norm, [B, T, H]."""
        cos, sin = self.rope(ids.shape[1], ids.device)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def lm_head(self, h):
        return F.linear(h, self.model.embed_tokens.weight)

    def forward(self, ids):
        return self.lm_head(self.hidden(ids))

    def mtp_hidden(self, h, next_ids):
        """h: main hidden (post final norm) at positions 0..T-1; next_ids: tokens at positions 1..T."""
        m = self.mtp
        cos, sin = self.rope(h.shape[1], h.device)
        e = self.model.embed_tokens(next_ids)
        x = m.fc(torch.cat((m.pre_fc_norm_embedding(e), m.pre_fc_norm_hidden(h)), -1))
        for layer in m.layers:
            x = layer(x, cos, sin)
        return m.norm(x)


def load_shipped(model_dir, device="cpu", with_mtp=None):
    """Loads config.json + model.safetensors (bf16) into a float32 Qwen3LM."""
    from safetensors.torch import load_file
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    sd = load_file(os.path.join(model_dir, "model.safetensors"))
    has_mtp = any(k.startswith("mtp.") for k in sd)
    if with_mtp is None:
        with_mtp = has_mtp
    m = Qwen3LM(cfg, with_mtp=with_mtp)
    if not with_mtp:
        sd = {k: v for k, v in sd.items() if not k.startswith("mtp.")}
    m.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    return m.to(device).eval(), cfg


# ----------------------------------------------------------------------------------------------------
# Goldens and metrics
# ----------------------------------------------------------------------------------------------------

CODE_PROMPTS = [
    ("code_fibonacci", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("code_module", "import torch\nimport torch.nn as nn\n\n\nclass MLP(nn.Module):\n    def __init__(self"),
]
CHAT_PROMPTS = [
    ("chat_nothink", [{"role": "user", "content": "What does `torch.nn.functional.relu` do?"}], False),
    ("chat_think_system",
     [{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Write a Python function that reverses a string."}], True),
]
SAMPLE_CHATS = [
    [{"role": "user", "content": "What does `numpy.argsort` do?"}],
    [{"role": "user", "content": "Explain `torch.nn.Linear`."}],
    [{"role": "user", "content": "Write a Python function `flatten` that flattens a nested list."}],
    [{"role": "user", "content": "Continue this Python code:\n```python\ndef mean(values):\n"
                                 "    \"\"\"Return the arithmetic mean of values.\"\"\"\n```"}],
]
SAMPLE_CODE = [
    "def is_prime(n):\n",
    "class Tokenizer:\n    \"\"\"Splits text into tokens.\"\"\"\n\n    def __init__(self",
]


def round_list(xs, digits=6):
    return [float(f"{x:.{digits}g}") for x in xs]


def hf_model(model_dir):
    from transformers import Qwen3ForCausalLM
    m = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    return m.eval()


@torch.no_grad()
def greedy(fwd, prompt_ids, n):
    """n argmax tokens (never stops at eos), with the smallest top1-top2 logit margin seen."""
    ids = list(prompt_ids)
    out, margin = [], float("inf")
    for _ in range(n):
        logits = fwd(torch.tensor([ids]))[0, -1]
        top = torch.topk(logits, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        tok = int(top.indices[0])
        out.append(tok)
        ids.append(tok)
    return out, margin


def render_chat(tok_hf, messages, thinking):
    return tok_hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                      enable_thinking=thinking)


def make_goldens(model_dir, tests_dir, log=print):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    torch.manual_seed(0)
    tk = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok_hf = AutoTokenizer.from_pretrained(model_dir)
    hf = hf_model(model_dir)
    ref, cfg = load_shipped(model_dir, "cpu")
    draft_dir = os.path.join(model_dir, "draft")
    hf_draft = hf_model(draft_dir) if os.path.isdir(draft_dir) else None

    def hf_logits(m):
        return lambda ids: m(input_ids=ids).logits

    cases = []
    prompts = [(n, t, None, None) for n, t in CODE_PROMPTS]
    prompts += [(n, render_chat(tok_hf, msgs, th), msgs, th) for n, msgs, th in CHAT_PROMPTS]
    max_diff_ref = 0.0
    for name, text, msgs, thinking in prompts:
        ids = tk.encode(text, add_special_tokens=False).ids
        ids_hf = tok_hf(text, add_special_tokens=False)["input_ids"]
        assert ids == ids_hf, f"tokenizers and transformers disagree on {name}"
        n = len(ids)
        pos = sorted(set([0, n // 3, (2 * n) // 3, n - 1]))
        with torch.no_grad():
            full = hf(input_ids=torch.tensor([ids])).logits[0]
            mine = ref(torch.tensor([ids]))[0]
        max_diff_ref = max(max_diff_ref, float((full - mine).abs().max()))
        g, margin = greedy(hf_logits(hf), ids, 32)
        case = {"name": name, "text": text, "input_ids": ids, "logits_positions": pos,
                "logits": [round_list(full[p].tolist()) for p in pos],
                "greedy_prompt_ids": ids, "greedy_tokens": g,
                "greedy_text": tk.decode(g, skip_special_tokens=False),
                "greedy_min_top2_margin": round(margin, 6)}
        if msgs is not None:
            case["messages"] = msgs
            case["enable_thinking"] = thinking
        # MTP head goldens (reference implementation above; transformers has no qwen3 MTP).
        with torch.no_grad():
            h = ref.hidden(torch.tensor([ids]))
            mh = ref.mtp_hidden(h[:, :-1], torch.tensor([ids[1:]]))
            ml = ref.lm_head(mh)[0]
        mpos = sorted(set([0, (n - 1) // 2, n - 2]))
        case["mtp"] = {"positions": mpos,
                       "note": "row p: MTP logits for token p+2 from main hidden h_p (post final norm) "
                               "and input_ids[p+1]",
                       "logits": [round_list(ml[p].tolist()) for p in mpos],
                       "argmax": [int(ml[p].argmax()) for p in mpos]}
        if hf_draft is not None and name == prompts[0][0]:
            with torch.no_grad():
                dl = hf_draft(input_ids=torch.tensor([ids])).logits[0]
            dpos = [0, n - 1]
            case["draft"] = {"logits_positions": dpos, "logits": [round_list(dl[p].tolist()) for p in dpos],
                             "greedy_tokens": greedy(hf_logits(hf_draft), ids, 32)[0]}
        cases.append(case)
        log(f"golden {name}: {n} prompt tokens, greedy margin {margin:.4f}, text {case['greedy_text']!r}")
    out = {"model": "models/demo", "dtype": "float32 (bf16 weights upcast)",
           "generator": "tools/demo_goldens.py with transformers Qwen3ForCausalLM (eager attention, CPU)",
           "max_abs_diff_reference_vs_transformers": max_diff_ref, "cases": cases}
    os.makedirs(tests_dir, exist_ok=True)
    with open(os.path.join(tests_dir, "goldens.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
    log(f"goldens: reference vs transformers max |logit diff| = {max_diff_ref:.3e}")
    return out


@torch.no_grad()
def draft_metrics(model_dir, tests_dir, heldout, device, log=print, n_ship=8, ship_len=256):
    """heldout: list of token-id lists (held-out documents, never trained on).
    mtp_top1_accuracy: argmax MTP(h_t, x[t+1]) == x[t+2] over t in [0, L-3].
    mtp_agreement_with_main: argmax MTP(h_t, x[t+1]) == argmax main(x[:t+2]).
    draft_top1_agreement: argmax draft(x[:t+1]) == argmax main(x[:t+1]) over t in [0, L-1].
    draft_greedy_agreement: main greedily continues the first 64 tokens by 32 tokens; share of those
    32 positions where the draft's argmax (fed the main's tokens) equals the main's token."""
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    main, cfg = load_shipped(model_dir, device)
    draft, _ = load_shipped(os.path.join(model_dir, "draft"), device)

    def measure(seqs):
        c = {"mtp_hit": 0, "mtp_n": 0, "mtp_main": 0, "d_hit": 0, "d_n": 0, "g_hit": 0, "g_n": 0}
        for s in seqs:
            x = torch.tensor([s], device=device)
            h = main.hidden(x)
            ml = main.lm_head(h)[0]
            ma = ml.argmax(-1)
            mt = main.lm_head(main.mtp_hidden(h[:, :-2], x[:, 1:-1]))[0].argmax(-1)
            c["mtp_hit"] += int((mt == x[0, 2:]).sum())
            c["mtp_main"] += int((mt == ma[1:-1]).sum())
            c["mtp_n"] += mt.numel()
            da = draft(x)[0].argmax(-1)
            c["d_hit"] += int((da == ma).sum())
            c["d_n"] += ma.numel()
            if len(s) >= 64:
                ids = list(s[:64])
                for _ in range(32):
                    ids.append(int(main(torch.tensor([ids], device=device))[0, -1].argmax()))
                y = torch.tensor([ids], device=device)
                dg = draft(y)[0, 63:-1].argmax(-1)
                c["g_hit"] += int((dg == y[0, 64:]).sum())
                c["g_n"] += 32
        r = lambda a, b: round(c[a] / max(1, c[b]), 4)
        return {"mtp_top1_accuracy": r("mtp_hit", "mtp_n"), "mtp_agreement_with_main": r("mtp_main", "mtp_n"),
                "draft_top1_agreement": r("d_hit", "d_n"), "draft_greedy_agreement": r("g_hit", "g_n"),
                "positions": {"mtp": c["mtp_n"], "draft": c["d_n"], "draft_greedy": c["g_n"]}}

    big = [s[:512] for s in heldout if len(s) >= 128][:64]
    ship = [s[:ship_len] for s in heldout if len(s) >= ship_len][:n_ship]
    full = measure(big)
    sub = measure(ship)
    out = {"description": draft_metrics.__doc__, "computed_in": "float32 from the shipped bf16 files",
           "heldout_large": {"sequences": len(big), "token_ids": big, **full},
           "shipped_sample": {"sequences": len(ship), "token_ids": ship, **sub},
           "suggested_floors": {k: round(max(0.0, sub[k] - 0.05), 3)
                                for k in ("mtp_top1_accuracy", "mtp_agreement_with_main",
                                          "draft_top1_agreement", "draft_greedy_agreement")}}
    os.makedirs(tests_dir, exist_ok=True)
    with open(os.path.join(tests_dir, "draft_metrics.json"), "w") as f:
        json.dump(out, f, indent=1)
    log(f"metrics (held-out, {len(big)} seqs): {json.dumps(full)}")
    log(f"metrics (shipped sample, {len(ship)} seqs): {json.dumps(sub)}")
    return out


@torch.no_grad()
def samples(model_dir, tests_dir, log=print):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    hf = hf_model(model_dir)
    gen = json.load(open(os.path.join(model_dir, "generation_config.json")))
    eos = gen["eos_token_id"]
    out = []

    def run(text, sample):
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        torch.manual_seed(1234)
        kw = dict(do_sample=True, temperature=gen["temperature"], top_p=gen["top_p"], top_k=gen["top_k"]) \
            if sample else dict(do_sample=False)
        o = hf.generate(ids, max_new_tokens=160, eos_token_id=eos, pad_token_id=eos[-1], **kw)
        return tok.decode(o[0, ids.shape[1]:], skip_special_tokens=False)

    for msgs in SAMPLE_CHATS:
        for thinking in (False, True):
            text = render_chat(tok, msgs, thinking)
            out.append({"kind": "chat", "messages": msgs, "enable_thinking": thinking,
                        "greedy": run(text, False), "sampled": run(text, True)})
    for text in SAMPLE_CODE:
        out.append({"kind": "code", "prompt": text, "greedy": run(text, False), "sampled": run(text, True)})
    with open(os.path.join(tests_dir, "samples.json"), "w") as f:
        json.dump({"generation": "transformers generate, float32 CPU; sampled: seed 1234 with "
                                 "generation_config.json's temperature/top_p/top_k; max 160 new tokens",
                   "samples": out}, f, indent=1)
    log(f"samples: {len(out)} written")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--tests-dir", default="tests/data/demo")
    ap.add_argument("--heldout", help="JSON file with held-out token id lists (written by train_demo.py); "
                                      "defaults to the shipped sample in draft_metrics.json")
    ap.add_argument("--skip-samples", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    make_goldens(a.model, a.tests_dir)
    if a.heldout:
        held = json.load(open(a.heldout))
    else:
        held = json.load(open(os.path.join(a.tests_dir, "draft_metrics.json")))["heldout_large"]["token_ids"]
    draft_metrics(a.model, a.tests_dir, held, "cuda" if torch.cuda.is_available() else "cpu")
    if not a.skip_samples:
        samples(a.model, a.tests_dir)


if __name__ == "__main__":
    main()
