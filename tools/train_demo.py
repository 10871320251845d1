#!/usr/bin/env python3
"""Trains TensorFold's built-in demo model from scratch, in one run of a few minutes on one GPU:

  1. corpus: the Python sources of packages installed next to this Python (site-packages), plus
     chat-formatted samples built from their docstrings and code (so the chat template means something);
  2. a byte-level BPE tokenizer (`tokenizers`, Qwen-style pre-tokenizer, chat special tokens);
  3. a Qwen3 decoder (GQA, q/k RMSNorm, tied embeddings) trained jointly with a Qwen3-Next-layout MTP
     head (`mtp.*`) and a separate 2-layer draft model (distilled from the main model as it trains);
  4. export in Hugging Face layout (bf16 safetensors), then goldens / metrics / samples through
     tools/demo_goldens.py (transformers' Qwen3ForCausalLM on the final files, float32).

Seeded: with the same packages installed and the same --steps, the data, tokenizer and batch order are
identical; GPU kernels are not bitwise deterministic. Without --steps the step count is chosen from a
time budget after timing the first steps, and printed (pass it back as --steps to repeat the run).

    python3 tools/train_demo.py --out /tmp/stage            # GPU: writes stage/models/demo, stage/tests/...
    python3 tools/train_demo.py --out /tmp/stage --tiny     # CPU smoke test of the whole pipeline
"""
import argparse
import ast
import hashlib
import importlib.metadata as md
import json
import math
import os
import random
import site
import sys
import sysconfig
import textwrap
import time
from multiprocessing import Pool

import numpy as np

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
           "</tool_call>", "<tool_response>", "</tool_response>"]
# As in Qwen3's tokenizer: these are added tokens that a detokenizer prints (special: false).
NOT_SPECIAL = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}
# Qwen2/Qwen3 pre-tokenizer split (digits one by one, letters with one leading non-letter, ...).
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# (import folder, distribution, licence if the metadata has none)
PACKAGES = [
    ("torch", "torch", "BSD-3-Clause"), ("transformers", "transformers", "Apache-2.0"),
    ("numpy", "numpy", "BSD-3-Clause"), ("scipy", "scipy", "BSD-3-Clause"),
    ("sympy", "sympy", "BSD-3-Clause"), ("pandas", "pandas", "BSD-3-Clause"),
    ("sklearn", "scikit-learn", "BSD-3-Clause"), ("networkx", "networkx", "BSD-3-Clause"),
    ("jax", "jax", "Apache-2.0"), ("flax", "flax", "Apache-2.0"), ("optax", "optax", "Apache-2.0"),
    ("statsmodels", "statsmodels", "BSD-3-Clause"), ("skimage", "scikit-image", "BSD-3-Clause"),
    ("torchvision", "torchvision", "BSD-3-Clause"), ("accelerate", "accelerate", "Apache-2.0"),
    ("peft", "peft", "Apache-2.0"), ("huggingface_hub", "huggingface-hub", "Apache-2.0"),
    ("lightning", "lightning", "Apache-2.0"), ("triton", "triton", "MIT"),
    ("requests", "requests", "Apache-2.0"), ("rich", "rich", "MIT"), ("jinja2", "jinja2", "BSD-3-Clause"),
    ("pygments", "pygments", "BSD-2-Clause"), ("numba", "numba", "BSD-2-Clause"),
]

CHAT_TEMPLATE = r"""{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- if tools -%}
<|im_start|>system
{% if messages and messages[0].role == 'system' -%}
{{ messages[0].content }}

{% endif -%}
# Tools

You may call the functions described inside <tools></tools>:
<tools>
{% for tool in tools -%}
{{ tool | tojson }}
{% endfor -%}
</tools>

To call one, reply with a JSON object inside <tool_call></tool_call> tags:
<tool_call>
{"name": <function-name>, "arguments": <arguments-object>}
</tool_call><|im_end|>
{% elif messages and messages[0].role == 'system' -%}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
{%- if not loop.first -%}{{ raise_exception('The system message must be the first message.') }}{%- endif -%}
{%- elif m.role == 'user' -%}
<|im_start|>user
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' -%}
<|im_start|>assistant
{% if m.reasoning_content is defined and m.reasoning_content and loop.index0 > ns.last_user -%}
<think>
{{ m.reasoning_content | trim }}
</think>

{% endif -%}
{%- if m.content is string -%}{{ m.content }}{%- endif -%}
{%- if m.tool_calls is defined and m.tool_calls -%}
{%- for tc in m.tool_calls -%}
{%- set f = tc.function if tc.function is defined else tc -%}
{%- if not loop.first or (m.content is string and m.content) -%}{{ "\n" }}{%- endif -%}
<tool_call>
{"name": "{{ f.name }}", "arguments": {% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}}
</tool_call>
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% elif m.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false -%}
<think>

</think>

{% endif -%}
{%- endif -%}
"""

# ----------------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------------


def hkey(s):
    return int(hashlib.sha1(s.encode()).hexdigest()[:12], 16)


def site_dirs():
    out = []
    for d in [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]] + site.getsitepackages():
        if d and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def licence_of(dist, fallback):
    try:
        m = md.metadata(dist)
    except md.PackageNotFoundError:
        return None, fallback
    lic = m.get("License-Expression") or ""
    if not lic:
        cls = [c.split("::")[-1].strip() for c in (m.get_all("Classifier") or []) if c.startswith("License ::")]
        lic = "; ".join(cls)
    if not lic:
        lic = (m.get("License") or "").strip().splitlines()[0][:60] if m.get("License") else ""
    return m.get("Version"), (lic or fallback)


def clean_code(text):
    # Literal chat markers inside library sources (chat templates in transformers...) must not become
    # control tokens in the training stream.
    for t in SPECIAL:
        text = text.replace(t, t[0] + " " + t[1:])
    return text


def read_and_extract(job):
    """Worker: read one file, return (relpath, text, doc items)."""
    path, rel = job
    try:
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return rel, None, []
    text = clean_code(text.replace("\r\n", "\n"))
    items = []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return rel, text, items
    lines = text.split("\n")
    mod = rel[:-3].replace("/", ".")
    if mod.endswith(".__init__"):
        mod = mod[: -len(".__init__")]

    def visit(node, prefix):
        for ch in node.body:
            if not isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if ch.name.startswith("_"):
                continue
            kind = "class" if isinstance(ch, ast.ClassDef) else ("method" if prefix else "function")
            doc = ast.get_docstring(ch)
            if doc:
                para = " ".join(doc.strip().split("\n\n")[0].split())
                if 30 <= len(para) <= 600:
                    src = None
                    if ch.end_lineno - ch.lineno < 40:
                        src = textwrap.dedent("\n".join(lines[ch.lineno - 1: ch.end_lineno]))
                        if len(src) > 1800:
                            src = None
                    items.append({"kind": kind, "name": ch.name, "qual": prefix + ch.name, "module": mod,
                                  "doc": para, "src": src})
            if isinstance(ch, ast.ClassDef) and not prefix:
                visit(ch, ch.name + ".")

    visit(tree, "")
    return rel, text, items


def collect_files(pkg_caps, max_file_bytes):
    """Returns [(path, rel)] picked per package in hash order up to its byte cap, and package stats."""
    dirs = site_dirs()
    jobs, stats = [], []
    for folder, dist, fallback in PACKAGES:
        root = next((os.path.join(d, folder) for d in dirs if os.path.isdir(os.path.join(d, folder))), None)
        if root is None:
            continue
        files = []
        for dp, dn, fn in os.walk(root):
            dn[:] = sorted(d for d in dn if d != "__pycache__")
            for n in fn:
                if n.endswith(".py"):
                    p = os.path.join(dp, n)
                    sz = os.path.getsize(p)
                    if 200 <= sz <= max_file_bytes:
                        rel = os.path.relpath(p, os.path.dirname(root))
                        files.append((hkey(rel), p, rel, sz))
        files.sort()
        used, picked = 0, 0
        for _, p, rel, sz in files:
            if used + sz > pkg_caps:
                continue
            jobs.append((p, rel))
            used += sz
            picked += 1
        ver, lic = licence_of(dist, fallback)
        stats.append({"package": dist, "folder": root, "version": ver, "licence": lic,
                      "files_total": len(files), "files_used": picked, "bytes_used": used})
    return jobs, stats


THINK_EXPLAIN = "The user asks about `{q}` from `{mod}`. I recall its docstring and summarize it."
THINK_WRITE = "I need a Python {kind} named `{name}`. I will write it with a docstring."
THINK_CONT = "The code should continue in the same style and indentation."
SYSTEMS = ["You are a helpful assistant.", "You are TensorFold's demo model, a small assistant that knows Python.",
           "Answer briefly."]
ASK_EXPLAIN = ["What does `{q}` do?", "Explain `{q}` from `{mod}`.", "What is `{q}` in `{mod}` for?",
               "Briefly describe the {kind} `{q}`.", "What is `{mod}.{q}`?"]


def chat_samples_for(rng, rel, text, items, render):
    """A few chat documents built from one source file: explain / write / continue."""
    out = []
    pick = rng.sample(items, min(len(items), 5)) if items else []
    for it in pick:
        r = rng.random()
        if it["src"] and r < 0.35:
            first = it["doc"].split(". ")[0].rstrip(".")
            user = f"Write a Python {it['kind'] if it['kind'] != 'method' else 'function'} `{it['name']}`: {first}."
            answer = f"```python\n{it['src']}\n```"
            think = THINK_WRITE.format(kind=it["kind"], name=it["name"])
        else:
            user = rng.choice(ASK_EXPLAIN).format(q=it["qual"], mod=it["module"], kind=it["kind"])
            answer = f"`{it['qual']}` is a {it['kind']} in `{it['module']}`. {it['doc']}"
            think = THINK_EXPLAIN.format(q=it["qual"], mod=it["module"])
        out.append(render(rng, user, answer, think))
    lines = text.split("\n")
    for _ in range(2 if len(lines) > 40 else 0):
        a = rng.randrange(0, len(lines) - 32)
        k, m = rng.randint(6, 14), rng.randint(6, 14)
        head, tail = "\n".join(lines[a:a + k]), "\n".join(lines[a + k:a + k + m])
        if head.strip() and tail.strip() and len(head) + len(tail) < 2500:
            user = f"Continue this Python code:\n```python\n{head}\n```"
            out.append(render(rng, user, f"```python\n{tail}\n```", THINK_CONT))
    return out


def make_renderer():
    import jinja2
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)

    def raise_exception(msg):
        raise ValueError(msg)

    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    tpl = env.from_string(CHAT_TEMPLATE)

    def render(rng, user, answer, think):
        msgs = []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        msgs.append({"role": "user", "content": user})
        thinking = rng.random() < 0.5
        prompt = tpl.render(messages=msgs, add_generation_prompt=True, enable_thinking=thinking)
        body = f"<think>\n{think}\n</think>\n\n{answer}" if thinking else answer
        return prompt + body + "<|im_end|>\n"

    return render, tpl


def build_corpus(args):
    caps = args.pkg_cap_mb * 1e6
    jobs, stats = collect_files(caps, 400_000)
    if args.tiny:
        jobs = jobs[:: max(1, len(jobs) // 300)][:300]
    log(f"corpus: {len(jobs)} files picked from {len(stats)} packages")
    with Pool(args.workers) as pool:
        res = pool.map(read_and_extract, jobs, chunksize=16)
    render, _ = make_renderer()
    rng = random.Random(args.seed)
    train_docs, held_docs = [], []
    n_chat = {"train": 0, "held": 0}
    chat_bytes = 0
    per_pkg_bytes = {}
    for rel, text, items in res:
        if text is None:
            continue
        held = hkey("heldout:" + rel) % 100 < args.heldout_pct
        dst = held_docs if held else train_docs
        dst.append(text)
        top = rel.split("/")[0]
        per_pkg_bytes[top] = per_pkg_bytes.get(top, 0) + len(text.encode())
        for c in chat_samples_for(rng, rel, text, items, render):
            dst.append(c)
            n_chat["held" if held else "train"] += 1
            chat_bytes += len(c.encode())
    rng.shuffle(train_docs)
    rng.shuffle(held_docs)
    code_bytes = sum(per_pkg_bytes.values())
    log(f"corpus: {len(train_docs)} train docs, {len(held_docs)} held-out docs, code {code_bytes / 1e6:.1f} MB, "
        f"chat samples {n_chat} ({chat_bytes / 1e6:.1f} MB)")
    meta = {"packages": stats, "code_bytes": code_bytes, "chat_samples": n_chat, "chat_bytes": chat_bytes,
            "files_read": sum(1 for r in res if r[1] is not None), "python": sys.version.split()[0],
            "site_dirs": site_dirs()}
    return train_docs, held_docs, meta


# ----------------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------------


def train_tokenizer(docs, vocab, sample_bytes):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)

    def it():
        n = 0
        for d in docs:
            yield d
            n += len(d)
            if n > sample_bytes:
                return

    tok.train_from_iterator(it(), trainer=trainer)
    j = json.loads(tok.to_str())
    for t in j["added_tokens"]:
        if t["content"] in NOT_SPECIAL:
            t["special"] = False
    tok = Tokenizer.from_str(json.dumps(j))
    assert [tok.token_to_id(s) for s in SPECIAL] == list(range(len(SPECIAL)))
    assert tok.get_vocab_size() <= vocab
    return tok


def encode_all(tok, docs, eos):
    enc = tok.encode_batch_fast if hasattr(tok, "encode_batch_fast") else tok.encode_batch
    parts, lens = [], []
    for i in range(0, len(docs), 4096):
        for e in enc(docs[i:i + 4096], add_special_tokens=False):
            a = np.asarray(e.ids, dtype=np.int32)
            parts.append(a)
            parts.append(np.array([eos], dtype=np.int32))
            lens.append(len(a))
    return np.concatenate(parts), lens


# ----------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------


def model_config(a, vocab, layers, mtp):
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": vocab,
        "hidden_size": a.hidden, "intermediate_size": a.intermediate, "num_hidden_layers": layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
        "hidden_act": "silu", "max_position_embeddings": a.ctx, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": None, "tie_word_embeddings": True, "attention_bias": False, "attention_dropout": 0.0,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": layers,
        "initializer_range": 0.02, "use_cache": True, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": "bfloat16",
    }
    if mtp:
        cfg.update({"mtp_num_hidden_layers": 1, "num_nextn_predict_layers": 1,
                    "mtp_hidden_state": "post_final_norm",
                    "mtp_concat_order": "embedding,hidden",
                    "mtp_norm_style": "rmsnorm_weight (x * w, like the main model; not Qwen3-Next's 1+w)"})
    return cfg


def init_weights(model, n_layers):
    import torch
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                std = 0.02 / math.sqrt(2 * n_layers)
            torch.nn.init.normal_(p, 0.0, std)
        else:
            torch.nn.init.ones_(p)


def make_opt(model, lr, wd):
    import torch
    decay = [p for p in model.parameters() if p.dim() == 2]
    no = [p for p in model.parameters() if p.dim() < 2]
    kw = {"fused": True} if next(model.parameters()).is_cuda else {}
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def train(a, cfg, dcfg, train_ids, held_ids, deadline):
    import torch
    import torch.nn.functional as F
    from demo_goldens import Qwen3LM
    dev = a.device
    torch.manual_seed(a.seed)
    main = Qwen3LM(cfg, with_mtp=True)
    init_weights(main, cfg["num_hidden_layers"])
    draft = Qwen3LM(dcfg, with_mtp=False)
    init_weights(draft, dcfg["num_hidden_layers"])
    main.to(dev).train()
    draft.to(dev).train()
    n_main = sum(p.numel() for n, p in main.named_parameters() if not n.startswith("mtp."))
    n_mtp = sum(p.numel() for n, p in main.named_parameters() if n.startswith("mtp."))
    n_draft = sum(p.numel() for p in draft.parameters())
    log(f"params: main {n_main:,}  mtp {n_mtp:,}  draft {n_draft:,}")
    opt = make_opt(main, a.lr, 0.1)
    dopt = make_opt(draft, a.lr, 0.1)
    stream = torch.from_numpy(train_ids.astype(np.int64)).to(dev)
    held = torch.from_numpy(held_ids.astype(np.int64)).to(dev)
    T, B = a.ctx, a.batch
    ar = torch.arange(T + 2, device=dev)
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    amp = dict(device_type="cuda", dtype=torch.bfloat16) if dev == "cuda" else dict(device_type="cpu",
                                                                                     enabled=False)
    V = cfg["vocab_size"]

    def losses(w, with_draft=True):
        inp, t1, t2 = w[:, :T], w[:, 1:T + 1], w[:, 2:T + 2]
        with torch.autocast(**amp):
            h = main.hidden(inp)
            lg = main.lm_head(h).float()
            l_main = F.cross_entropy(lg.view(-1, V), t1.reshape(-1))
            mh = main.mtp_hidden(h, t1)
            ml = main.lm_head(mh).float()
            l_mtp = F.cross_entropy(ml.view(-1, V), t2.reshape(-1))
            out = {"main": l_main, "mtp": l_mtp, "_lg": lg, "_ml": ml}
            if with_draft:
                dl = draft(inp).float()
                l_d = F.cross_entropy(dl.view(-1, V), t1.reshape(-1))
                kd = F.kl_div(F.log_softmax(dl, -1), F.log_softmax(lg.detach(), -1), log_target=True,
                              reduction="none").sum(-1).mean()
                out.update({"draft": l_d, "kd": kd, "_dl": dl})
        return out

    @torch.no_grad()
    def evaluate(n_windows):
        main.eval()
        draft.eval()
        n = min(n_windows, (held.numel() - 1) // (T + 2))
        tot = {"main": 0.0, "mtp": 0.0, "draft": 0.0, "mtp_acc": 0.0, "draft_agree": 0.0}
        for i in range(0, n, B):
            k = min(B, n - i)
            starts = (torch.arange(i, i + k, device=dev) * (T + 2))[:, None]
            w = held[starts + ar]
            o = losses(w)
            tot["main"] += float(o["main"]) * k
            tot["mtp"] += float(o["mtp"]) * k
            tot["draft"] += float(o["draft"]) * k
            tot["mtp_acc"] += float((o["_ml"].argmax(-1) == w[:, 2:T + 2]).float().mean()) * k
            tot["draft_agree"] += float((o["_dl"].argmax(-1) == o["_lg"].argmax(-1)).float().mean()) * k
        main.train()
        draft.train()
        return {kk: round(v / max(1, n), 4) for kk, v in tot.items()} | {"tokens": n * T}

    steps = a.steps
    warm = a.warmup
    t_cal = None
    hist = []
    step = 0
    t_train = time.time()
    run_avg = None
    while True:
        if steps is None and step == a.calibrate_steps:
            if dev == "cuda":
                torch.cuda.synchronize()
            per = (time.time() - t_cal) / (a.calibrate_steps - 3)
            left = deadline - time.time()
            steps = max(a.calibrate_steps + 10, int(left / per) + step)
            steps = min(steps, a.max_steps)
            log(f"calibration: {per * 1000:.1f} ms/step, {B * T / per / 1e6:.2f} M tok/s -> --steps {steps}")
        if steps is not None and step >= steps:
            break
        if step == 3:
            if dev == "cuda":
                torch.cuda.synchronize()
            t_cal = time.time()
        total = steps if steps is not None else a.max_steps
        lr_f = min(1.0, (step + 1) / warm) if step < warm else \
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))
        for o_ in (opt, dopt):
            for gr in o_.param_groups:
                gr["lr"] = a.lr * lr_f
        starts = torch.randint(0, stream.numel() - T - 2, (B,), generator=g).to(dev)[:, None]
        w = stream[starts + ar]
        o = losses(w)
        loss = o["main"] + a.mtp_weight * o["mtp"]
        dloss = 0.5 * o["draft"] + 0.5 * o["kd"]
        opt.zero_grad(set_to_none=True)
        dopt.zero_grad(set_to_none=True)
        (loss + dloss).backward()
        torch.nn.utils.clip_grad_norm_(main.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        dopt.step()
        step += 1
        if step % a.log_every == 0 or step == 1:
            vals = {k: float(v) for k, v in o.items() if not k.startswith("_")}
            log(f"step {step}/{steps if steps else '?'} lr {a.lr * lr_f:.2e} train loss main {vals['main']:.4f} "
                f"mtp {vals['mtp']:.4f} draft {vals['draft']:.4f} kd {vals['kd']:.4f}")
            hist.append({"step": step, "train": vals})
        if step % a.eval_every == 0:
            ev = evaluate(a.eval_windows_small)
            log(f"step {step} held-out: {json.dumps(ev)}")
            hist.append({"step": step, "heldout": ev})
    train_s = time.time() - t_train
    final_train = {k: float(v) for k, v in o.items() if not k.startswith("_")}
    ev = evaluate(a.eval_windows)
    log(f"final (step {step}, {train_s:.0f}s) train {json.dumps(final_train)}")
    log(f"final held-out ({ev['tokens']} tokens): {json.dumps(ev)}")
    return main, draft, {"steps": step, "train_seconds": round(train_s, 1), "final_train": final_train,
                         "final_heldout": ev, "history": hist, "tokens_seen": step * B * T,
                         "params": {"main": n_main, "mtp": n_mtp, "draft": n_draft}}


# ----------------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------------


def tokenizer_config(tok, ctx):
    added = {}
    for s in SPECIAL:
        added[str(tok.token_to_id(s))] = {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                         "single_word": False, "special": s not in NOT_SPECIAL}
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
            "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
            "errors": "replace", "model_max_length": ctx, "pad_token": "<|endoftext|>",
            "split_special_tokens": False, "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": None}


def save_model_dir(path, model, cfg, tok, with_mtp):
    import torch
    from safetensors.torch import save_file
    os.makedirs(path, exist_ok=True)
    sd = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in model.state_dict().items()
          if with_mtp or not k.startswith("mtp.")}
    save_file(sd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(path, "model.safetensors"), 0o644)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    gen = {"bos_token_id": tok.token_to_id("<|endoftext|>"), "eos_token_id": eos,
           "pad_token_id": tok.token_to_id("<|endoftext|>"), "do_sample": True, "temperature": 0.7,
           "top_p": 0.8, "top_k": 20, "max_new_tokens": 512}
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(tok, cfg["max_position_embeddings"]), f, indent=2)
    return sum(v.numel() for v in sd.values())


def write_card(path, a, meta, tr, gold, metrics, samples, tok_stats):
    pk = "\n".join(f"| {p['package']} | {p['version']} | {p['licence']} | {p['files_used']} / {p['files_total']} "
                   f"| {p['bytes_used'] / 1e6:.2f} |" for p in meta["packages"])
    ev = tr["final_heldout"]
    hm = metrics["heldout_large"]
    sm = metrics["shipped_sample"]

    def fmt_sample(s):
        if s["kind"] == "chat":
            msgs = "\n".join(f"**{m['role']}:** {m['content']}" for m in s["messages"])
            return (f"{msgs}\n\n*enable_thinking={str(s['enable_thinking']).lower()}, greedy:*\n\n````text\n"
                    f"{s['greedy']}\n````\n\n*sampled:*\n\n````text\n{s['sampled']}\n````\n")
        return (f"Prompt:\n\n````python\n{s['prompt']}\n````\n\n*greedy continuation:*\n\n````text\n"
                f"{s['greedy']}\n````\n\n*sampled:*\n\n````text\n{s['sampled']}\n````\n")

    sample_md = "\n".join(fmt_sample(s) for s in samples) if samples else "(samples were not generated)"
    card = f"""---
library_name: transformers
pipeline_tag: text-generation
tags: [qwen3, demo, tiny, mtp]
---

# TensorFold demo model (Qwen3 architecture, {tr['params']['main'] / 1e6:.1f}M parameters)

A tiny model trained from scratch by `tools/train_demo.py` so that `tensorfold serve` / `generate`
answer with real text offline. It knows a little Python and the chat format, nothing else: **it is a
demo and a test fixture, not an assistant.** Expect plausible-looking but mostly wrong answers.

## Architecture

| | main (`model.safetensors`) | MTP head (`mtp.*`, same file) | draft (`draft/`) |
| --- | --- | --- | --- |
| parameters | {tr['params']['main']:,} | {tr['params']['mtp']:,} | {tr['params']['draft']:,} |
| layers | {a.layers} | 1 | {a.draft_layers} |

`model_type: qwen3` (`Qwen3ForCausalLM`): hidden {a.hidden}, intermediate {a.intermediate}, {a.heads} query heads
and {a.kv_heads} key/value heads (GQA) of dimension {a.head_dim}, per-head RMSNorm on q and k, SwiGLU MLP,
RoPE theta 1e6, tied input/output embeddings, context {a.ctx}, vocabulary {tok_stats['vocab']}. Weights are bf16.

**MTP head** (Qwen3-Next tensor layout, `mtp_num_hidden_layers: 1` / `num_nextn_predict_layers: 1`):
at position t it predicts token t+2 from

    x = mtp.fc( concat( mtp.pre_fc_norm_embedding(embed(token[t+1])),
                        mtp.pre_fc_norm_hidden(h[t]) ) )        # fc: [H, 2H], embedding half first
    x = mtp.layers.0(x)                                           # full decoder layer, RoPE position t,
                                                                  # causal attention over fused states 0..t
    logits = lm_head(mtp.norm(x))                                 # lm_head = tied embedding

where `h[t]` is the main model's hidden state **after** the final `model.norm` (what the lm_head sees).
All norms are plain RMSNorm with weight (x * w), as in the rest of a qwen3 checkpoint (Qwen3-Next itself
uses zero-centred 1+w norms). Trained jointly with the main model (loss = main + {a.mtp_weight} x MTP);
families without MTP support ignore the `mtp.*` tensors (transformers reports them as unused).

**Draft model** (`draft/`): a separate {a.draft_layers}-layer qwen3 model with the same tokenizer, trained on the
same batches with 0.5 x cross-entropy + 0.5 x KL to the main model's (live) distribution.

## Tokenizer

Byte-level BPE trained with `tokenizers` on {tok_stats['sample_mb']:.0f} MB of the corpus: NFC normalizer, Qwen2-style
regex split (digits one at a time), {tok_stats['vocab']} tokens. Added tokens: {', '.join(f'`{s}`' for s in SPECIAL)}
(ids 0-{len(SPECIAL) - 1}; `<think>`, `<tool_call>`, `<tool_response>` and their closers are not "special", so
detokenizers print them, as in Qwen3). The chat template (in `tokenizer_config.json`) is Qwen-style ChatML
with `enable_thinking` (false inserts an empty `<think>\\n\\n</think>\\n\\n` block) and optional `tools`.
Generation stops at `<|im_end|>` or `<|endoftext|>` (`generation_config.json`).

## Training data

All text came from the Python packages installed on the training machine (Python {meta['python']},
site-packages: {', '.join('`' + d + '`' for d in meta['site_dirs'])}). Files `*.py` of 200 B - 400 kB were
taken per package in a fixed hash order up to {a.pkg_cap_mb} MB per package:

| package | version | licence | files used / found | MB |
| --- | --- | --- | --- | --- |
{pk}

Source code: {meta['code_bytes'] / 1e6:.1f} MB in {meta['files_read']} files. Chat samples built from the
docstrings and code of those files ("What does `X` do?" -> docstring summary, "Write a Python function ..." ->
its source, "Continue this Python code" -> the next lines; half with a short `<think>` block, half with
thinking disabled; 30% with a system prompt): {meta['chat_samples']['train']} train /
{meta['chat_samples']['held']} held-out samples, {meta['chat_bytes'] / 1e6:.1f} MB. Literal chat markers inside the
sources were broken up so they never become control tokens. Documents are joined with `<|endoftext|>`.

Tokens: {tok_stats['train_tokens']:,} train, {tok_stats['held_tokens']:,} held-out ({a.heldout_pct}% of the files,
chosen by path hash, with their chat samples). The held-out files are distinct files, but packages contain
near-copies (transformers especially), so held-out loss is optimistic about generalization.

The sources' licences, as their package metadata states them, are in the table (permissive: BSD, MIT,
Apache-2.0 and the like); their copyright notices are in the packages named above.

## Training

Seed {a.seed}, AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), peak lr {a.lr}, {a.warmup} warm-up steps then
cosine to 10%, batch {a.batch} x {a.ctx} tokens, bf16 autocast, gradient clipping 1.0, on {a.device_name}:
**{tr['steps']} steps** ({tr['tokens_seen'] / 1e6:.0f}M tokens, {tr['train_seconds']:.0f} s). Repeat with
`python3 tools/train_demo.py --steps {tr['steps']}` (same installed packages give the same data).

| loss (nats/token) | train (last batch) | held-out ({ev['tokens']:,} tokens) |
| --- | --- | --- |
| main | {tr['final_train']['main']:.3f} | **{ev['main']:.3f}** |
| MTP (token t+2) | {tr['final_train']['mtp']:.3f} | {ev['mtp']:.3f} |
| draft | {tr['final_train']['draft']:.3f} | {ev['draft']:.3f} |

## Speculative decoding metrics (float32, shipped weights, held-out text)

Measured by `tools/demo_goldens.py` ({hm['sequences']} held-out sequences of up to 512 tokens; the
{sm['sequences']} x 256-token sample the C++ tests use is in `tests/data/demo/draft_metrics.json`):

| metric | held-out | shipped sample |
| --- | --- | --- |
| MTP top-1 accuracy on token t+2 | {hm['mtp_top1_accuracy']:.3f} | {sm['mtp_top1_accuracy']:.3f} |
| MTP top-1 agreement with the main model's t+2 prediction | {hm['mtp_agreement_with_main']:.3f} | {sm['mtp_agreement_with_main']:.3f} |
| draft top-1 agreement with the main model (teacher-forced) | {hm['draft_top1_agreement']:.3f} | {sm['draft_top1_agreement']:.3f} |
| draft agreement on the main model's greedy continuations | {hm['draft_greedy_agreement']:.3f} | {sm['draft_greedy_agreement']:.3f} |

## Samples

Generated with transformers from these files (float32, CPU); "sampled" uses `generation_config.json`
(temperature 0.7, top_p 0.8, top_k 20) with seed 1234. Outputs end at `<|im_end|>` or after 160 tokens.

{sample_md}
"""
    with open(os.path.join(path, "README.md"), "w") as f:
        f.write(card)


# ----------------------------------------------------------------------------------------------------


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="stage folder: writes models/demo and tests/data/demo under it")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny data, model and steps")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: from --budget-s)")
    ap.add_argument("--budget-s", type=float, default=360, help="whole-run wall-clock target (auto steps)")
    ap.add_argument("--post-reserve-s", type=float, default=75, help="time kept for export/goldens")
    ap.add_argument("--max-steps", type=int, default=6000)
    ap.add_argument("--calibrate-steps", type=int, default=25)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--pkg-cap-mb", type=float, default=16)
    ap.add_argument("--tok-sample-mb", type=float, default=48)
    ap.add_argument("--heldout-pct", type=int, default=1)
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-windows-small", type=int, default=16)
    ap.add_argument("--eval-windows", type=int, default=64)
    a = ap.parse_args()
    if a.tiny:
        a.vocab, a.hidden, a.intermediate, a.layers, a.draft_layers = 1024, 64, 128, 2, 1
        a.heads, a.kv_heads, a.head_dim, a.ctx, a.batch = 2, 1, 32, 128, 4
        a.steps = a.steps or 30
        a.warmup, a.log_every, a.eval_every, a.eval_windows_small, a.eval_windows = 10, 10, 20, 4, 8
        a.pkg_cap_mb, a.tok_sample_mb, a.heldout_pct = 2, 2, 5
    return a


def main():
    a = parse()
    import torch
    a.device = "cuda" if torch.cuda.is_available() and not a.tiny else "cpu"
    a.device_name = "the CPU" if a.device == "cpu" else "one GPU"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import demo_goldens
    model_dir = os.path.join(a.out, "models", "demo")
    tests_dir = os.path.join(a.out, "tests", "data", "demo")
    os.makedirs(tests_dir, exist_ok=True)
    log(f"args: {vars(a)}")

    random.seed(a.seed)
    np.random.seed(a.seed)
    train_docs, held_docs, meta = build_corpus(a)
    tok = train_tokenizer(train_docs, a.vocab, a.tok_sample_mb * 1e6)
    log(f"tokenizer: {tok.get_vocab_size()} tokens")
    eos = tok.token_to_id("<|endoftext|>")
    train_ids, _ = encode_all(tok, train_docs, eos)
    held_ids, held_lens = encode_all(tok, held_docs, eos)
    tok_stats = {"vocab": a.vocab, "sample_mb": min(a.tok_sample_mb, sum(len(d) for d in train_docs) / 1e6),
                 "train_tokens": int(train_ids.size), "held_tokens": int(held_ids.size),
                 "bytes_per_token": round((meta["code_bytes"] + meta["chat_bytes"]) /
                                          max(1, train_ids.size + held_ids.size), 3)}
    log(f"tokens: {json.dumps(tok_stats)}")
    # Held-out documents as separate sequences for the metrics (longest first, deterministic).
    held_seqs, off = [], 0
    for n in held_lens:
        held_seqs.append(held_ids[off:off + n].tolist())
        off += n + 1
    held_seqs.sort(key=lambda s: (-min(len(s), 512), s[:8]))

    if a.device == "cuda":  # first CUDA use: after the corpus workers were forked
        a.device_name = f"one {torch.cuda.get_device_name()} (torch {torch.__version__})"
        log(f"device: {a.device_name}")
    cfg = model_config(a, a.vocab, a.layers, True)
    dcfg = model_config(a, a.vocab, a.draft_layers, False)
    for c in (cfg, dcfg):
        c["bos_token_id"] = c["pad_token_id"] = eos
        c["eos_token_id"] = tok.token_to_id("<|im_end|>")
    deadline = T0 + a.budget_s - a.post_reserve_s
    main_m, draft_m, tr = train(a, cfg, dcfg, train_ids, held_ids, deadline)

    n = save_model_dir(model_dir, main_m, cfg, tok, True)
    nd = save_model_dir(os.path.join(model_dir, "draft"), draft_m, dcfg, tok, False)
    log(f"saved: {n:,} params in model.safetensors, {nd:,} in draft/")
    del main_m, draft_m
    if a.device == "cuda":
        torch.cuda.empty_cache()
    with open(os.path.join(tests_dir, "train_log.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(a).items()}, "corpus": meta, "tokens": tok_stats,
                   "training": tr}, f, indent=1)

    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    gold = metrics = samples = None
    try:
        gold = demo_goldens.make_goldens(model_dir, tests_dir, log)
    except Exception as e:  # keep the trained files even if a later step breaks
        log(f"ERROR goldens: {e!r}")
    try:
        metrics = demo_goldens.draft_metrics(model_dir, tests_dir, held_seqs, a.device, log,
                                             n_ship=8, ship_len=256 if not a.tiny else 64)
    except Exception as e:
        log(f"ERROR metrics: {e!r}")
    try:
        samples = demo_goldens.samples(model_dir, tests_dir, log)
    except Exception as e:
        log(f"ERROR samples: {e!r}")
    if metrics is not None:
        write_card(model_dir, a, meta, tr, gold, metrics, samples, tok_stats)
        dcard = (f"# TensorFold demo draft model\n\nA {a.draft_layers}-layer qwen3 model sharing the tokenizer of "
                 f"the demo model one folder up, for speculative decoding. See ../README.md.\n")
        with open(os.path.join(model_dir, "draft", "README.md"), "w") as f:
            f.write(dcard)
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(model_dir) for f in fs)
    log(f"done: models/demo is {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
