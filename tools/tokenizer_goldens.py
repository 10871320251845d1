#!/usr/bin/env python3
"""Computes tokenizer goldens with Hugging Face tokenizers (CPU, no torch) for the C++ tokenizer tests.

For every family in text-fixtures that ships a tokenizer.json, and for a few variants of them (VARIANTS:
a real file with other normalizers / pre-tokenizers / decoders / post-processors swapped in), tokenizes a
corpus (code, emoji, CJK, combining marks, whitespace runs, special tokens inside text, the
swift-transformers multilingual inputs, a slice of War and Peace, and seeded random texts) and decodes
seeded random id sequences, writing OUT_DIR/<family>.json:

  {"family", "model", "cleanup",
   "cases": [{"text", "ids", "ids_plain", "ids_split_special", "decode_skip", "decode_keep"}, ...],
   "decodes": [{"ids", "decode_skip", "decode_keep"}, ...]}

ids = Tokenizer.encode(text).ids, ids_plain = the same with add_special_tokens=False, ids_split_special =
ids_plain with encode_special_tokens=True (special tokens in the text tokenized as text),
decode_skip / decode_keep = Tokenizer.decode(ids, skip_special_tokens=True / False), followed by
transformers' clean_up_tokenization when tokenizer_config.json asks for it and the model is not BPE (what
transformers' decode does). The reference is the `tokenizers` pipeline read from tokenizer.json: that is
what transformers runs for these files (transformers 5 rebuilds some classes, e.g. LlamaTokenizer, from
vocab+merges, and fails on some of these files, so it is not used to load them). A file `tokenizers`
refuses to load gets {"family", "error"} instead.

Also writes OUT_DIR/regex_classes.json: the code points Oniguruma (inside `tokenizers`) puts in each
Unicode class the split patterns use, for the C++ test of its PCRE2 patterns.

Usage: tokenizer_goldens.py SHARED_DIR OUT_DIR [family ...]
"""
import gzip
import json
import os
import random
import shutil
import sys
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore")

FAMILIES = ["qwen3", "qwen2.5", "llama3", "llama2", "mistral-7b", "mistral-nemo", "gemma2", "gemma3",
            "deepseek-v3", "gpt-oss", "phi-3", "t5-small"]

BASE_CORPUS = [
    "",
    " ",
    "Hello world",
    " Hello world",
    "Hello  world   with    runs\t\tof\nwhitespace\n\n\n  end  ",
    "   leading and trailing spaces   ",
    "\n\nnewlines\r\nand\rcarriage returns\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { std::cout << i << \"\\n\"; }  // comment",
    "x = {'a': [1, 2, 3], \"b\": None}  # dict\n\tprint(x['a'][0]**2)",
    "I'm sure they'll say it's fine, we've done what you'd want. DON'T SHOUT, I'VE SEEN IT.",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000 2024-01-31 0x1F",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🧑🏻‍💻 done",
    "日本語のテキストと漢字。中文测试：你好，世界！한국어 문장입니다.",
    "Combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323 \u1e9b\u0323 Å Å ﬁ ① ｆｕｌｌｗｉｄｔｈ",
    "Zero width: a\u200bb\u200cc\u200dd \ufeffbom",
    "Arabic: مرحبا بالعالم. Hebrew: שלום עולם. Thai: สวัสดีชาวโลก Hindi: नमस्ते दुनिया",
    "Ελληνικά και Русский текст с ёжиком",
    "Tabs\tand\u00a0non-breaking\u2003em\u3000ideographic spaces",
    "<s>Hello</s> <unk> <pad> <|endoftext|> <|im_start|>user\nhi<|im_end|>",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>",
    "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "[INST] Hello [/INST] <s>[INST]x[/INST]",
    "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜><think>\nhmm\n</think>",
    "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>",
    "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>",
    "text<|endoftext|>more text <|im_end|>trailing",
    "....!!!???,,, --- ___ *** ### @@@ $$$ %%%",
    "https://example.com/path?query=1&b=2#frag user@example.org",
    "a" * 300,
    "ab " * 100,
    "\u2581leading metaspace\u2581char and ▁▁ double",
    "Mixed CASE Words and camelCase snake_case kebab-case PascalCase",
    "Rare bytes: \u0000\u0001\u007f\u0080 \ud7ff\ue000 \U0001f9ff\U0010fffd end",
    "  ",
    "\n",
    "a\n\n b \n\n\n  c",
]


def war_and_peace(shared, limit=24000):
    with gzip.open(os.path.join(shared, "text-fixtures/corpus/war-and-peace.txt.gz"), "rt",
                   encoding="utf-8") as f:
        text = f.read()
    start = text.find("CHAPTER I")
    chunk = text[start:start + limit]
    # Paragraphs, plus one long multi-paragraph piece.
    paras = [p for p in chunk.split("\n\n") if p.strip()]
    return paras + [chunk[:8000]]


def corpus(shared):
    texts = list(BASE_CORPUS)
    with open(os.path.join(shared, "text-fixtures/vocab-vectors/swift-transformers/multilingual/inputs.json"),
              encoding="utf-8") as f:
        texts += [e["text"] for e in json.load(f)]
    texts += war_and_peace(shared)
    return texts


# Character classes for the random texts: the places where regex engines, Unicode tables and
# whitespace rules tend to differ.
FUZZ_ALPHABET = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 3
    + list(" " * 12 + "\t\n\r" * 2 + ".,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+~`")
    + ["'s", "'LL", "'ve", "n't", "'D", "1234567", "  ", "\n\n", " \n ", "\r\n", "▁", "▁▁"]
    + list("éèêëàâäôöûüçñßøåæœÉÀÇŒ") + ["e\u0301", "a\u0308", "o\u0302\u0323", "\u0345", "\u0301"]
    + list("日本語中文漢字テストひらがなカタカナ한국어") + list("Привет мир Ελληνικά") + list("مرحبا שלום नमस्ते ไทย")
    + ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "\U0001f9ff", "\U0010fffd", "\ue000"]
    + ["\u00a0", "\u0085", "\u2028", "\u2029", "\u200b", "\u200d", "\u180e", "\u3000", "\u2003", "\ufeff",
       "\u000b", "\u000c", "\u001f", "\u007f", "\u0000"]
    + list("ﬁﬂ①②ｆｕｌｌ＠℃™½²³ℌİıſ")
)


def fuzz_texts(fam, specials, n=120):
    rng = random.Random("tokenizer-goldens-" + fam)
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 40)):
            if specials and rng.random() < 0.05:
                sp = rng.choice(specials)
                parts.append(rng.choice(["", " ", "  ", "\n"]) + sp + rng.choice(["", " ", "  ", "\n"]))
            else:
                parts.append(rng.choice(FUZZ_ALPHABET))
        texts.append("".join(parts))
    return texts


def random_id_lists(fam, vocab_size, special_ids, byte_ids, n=60):
    """Random id sequences for decode: byte tokens (invalid UTF-8 on purpose), specials, anything."""
    rng = random.Random("tokenizer-decode-" + fam)
    out = []
    for _ in range(n):
        ids = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if byte_ids and r < 0.35:
                ids.append(rng.choice(byte_ids))
            elif special_ids and r < 0.45:
                ids.append(rng.choice(special_ids))
            else:
                ids.append(rng.randrange(vocab_size))
        out.append(ids)
    return out


# Unicode classes the tokenizer.json split patterns use. Hugging Face runs them with Oniguruma; the
# C++ side uses PCRE2 with patched classes, and the golden test compares both over these code points
# (everything assigned in Unicode 16 outside the private-use planes).
REGEX_CLASSES = [r"\s", r"\p{L}", r"\p{N}", r"\p{M}", r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}",
                 r"\p{P}", r"\p{S}", r"\p{Mn}", r"\p{Nd}", r"\p{Zs}"]
CLASS_SPANS = [(0, 0x32400), (0xE0000, 0xE0200)]


def regex_classes():
    from tokenizers import Regex, pre_tokenizers
    sep = "\u0378"  # unassigned: in none of the classes
    chars = [c for a, b in CLASS_SPANS for c in range(a, b) if not (0xD800 <= c < 0xE000) and c != 0x378]
    out = {"spans": CLASS_SPANS, "classes": {}}
    for cl in REGEX_CLASSES:
        split = pre_tokenizers.Split(Regex(cl), behavior="removed", invert=False)
        kept = set()
        for i in range(0, len(chars), 50000):
            text = sep.join(chr(c) for c in chars[i:i + 50000])
            for piece, _ in split.pre_tokenize_str(text):
                kept.update(ord(ch) for ch in piece)
        ranges = []
        for c in chars:
            if c in kept:
                continue
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
        out["classes"][cl] = ranges
    return out


# Variants: a real tokenizer.json with its pipeline swapped for components that none of the stored
# files uses (or uses differently), so that those components are also compared live with HF.
def _variant_metaspace(j):  # Llama-2/Mistral "legacy=false" layout (e.g. Mistral v0.3)
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}


def _variant_gpt2(j):  # GPT-2/RoBERTa layout: ByteLevel with prefix space and its own regex
    ids = {a["content"]: a["id"] for a in j["added_tokens"]}
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    j["post_processor"] = {"type": "RobertaProcessing", "sep": ["<|im_end|>", ids["<|im_end|>"]],
                           "cls": ["<|im_start|>", ids["<|im_start|>"]], "trim_offsets": True,
                           "add_prefix_space": True}


def _variant_digits(j):
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Replace", "pattern": {"Regex": "\\p{Mn}+"}, "content": ""},
        {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": False}]}
    j["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Digits", "individual_digits": True})


def _variant_whitespace(j):
    j["normalizer"] = {"type": "NFC"}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "[,.;]"}, "behavior": "Contiguous", "invert": False},
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{N}+"}, "behavior": "Removed", "invert": True},
        {"type": "WhitespaceSplit"},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]}
    j["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}


def _variant_strip(j):  # Strip after Fuse (stop > 0 makes HF panic on empty output), regex Replace
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"Regex": "\u2581+"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 2, "stop": 0}]}


def _variant_plain(j):  # no decoder (tokens joined by spaces), NFKC instead of the precompiled charsmap
    j["normalizer"] = {"type": "NFKC"}
    j["decoder"] = None


VARIANTS = {
    "phi-3+strip": ("phi-3", _variant_strip),
    "t5-small+plain": ("t5-small", _variant_plain),
    "mistral-7b+metaspace": ("mistral-7b", _variant_metaspace),
    "qwen2.5+gpt2": ("qwen2.5", _variant_gpt2),
    "llama3+digits": ("llama3", _variant_digits),
    "mistral-7b+whitespace": ("mistral-7b", _variant_whitespace),
}


def stage_variant(name, stage_root, out):
    base, mutate = VARIANTS[name]
    with open(os.path.join(stage_root, base, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    mutate(j)
    dst = os.path.join(out, "variants", name)
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return dst


def stage_family(shared, fam, stage_root):
    """AutoTokenizer needs a plain tokenizer.json: copy/decompress the family's files into stage_root."""
    src = os.path.join(shared, "text-fixtures", fam)
    dst = os.path.join(stage_root, fam)
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if not os.path.isfile(path):
            continue
        if name == "tokenizer.json.gz":
            with gzip.open(path, "rb") as fi, open(os.path.join(dst, "tokenizer.json"), "wb") as fo:
                shutil.copyfileobj(fi, fo)
        elif name.endswith(".json"):
            shutil.copyfile(path, os.path.join(dst, name))
    return dst


def golden(fam, path, texts):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase
    try:
        tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    except Exception as e:  # llama2: its merges contain pieces with spaces, which tokenizers rejects
        return {"family": fam, "error": f"tokenizers cannot load this file: {e}"}
    config = {}
    if os.path.exists(os.path.join(path, "tokenizer_config.json")):
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    serialized = tok.to_str()
    spec = json.loads(serialized)
    model_type = spec["model"].get("type", "Unigram")
    cleanup = bool(config.get("clean_up_tokenization_spaces", False)) and model_type != "BPE"

    def decode(ids, skip):
        text = tok.decode(ids, skip_special_tokens=skip)
        return PreTrainedTokenizerBase.clean_up_tokenization(None, text) if cleanup else text

    added = spec["added_tokens"]
    specials = [a["content"] for a in added]
    vocab = tok.get_vocab(with_added_tokens=True)
    byte_ids = [vocab[f"<0x{b:02X}>"] for b in range(256) if f"<0x{b:02X}>" in vocab]
    if not byte_ids:  # byte-level vocabularies: single-byte symbols (Ġ, Ċ, and raw 0x80.. bytes)
        byte_ids = [i for t, i in vocab.items() if len(t) == 1][:400]
    plain = Tokenizer.from_str(serialized)
    plain.encode_special_tokens = True
    cases = []
    for text in texts + fuzz_texts(fam, specials):
        ids = tok.encode(text).ids
        cases.append({
            "text": text,
            "ids": ids,
            "ids_plain": tok.encode(text, add_special_tokens=False).ids,
            "ids_split_special": plain.encode(text, add_special_tokens=False).ids,
            "decode_skip": decode(ids, True),
            "decode_keep": decode(ids, False),
        })
    decodes = []
    for ids in random_id_lists(fam, max(vocab.values()) + 1, [a["id"] for a in added], byte_ids):
        decodes.append({"ids": ids, "decode_skip": decode(ids, True), "decode_keep": decode(ids, False)})
    return {"family": fam, "model": model_type, "cleanup": cleanup, "cases": cases, "decodes": decodes}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    shared, out = sys.argv[1], sys.argv[2]
    fams = sys.argv[3:] or FAMILIES + list(VARIANTS)
    os.makedirs(out, exist_ok=True)
    texts = corpus(shared)
    with open(os.path.join(out, "regex_classes.json"), "w", encoding="utf-8") as f:
        json.dump(regex_classes(), f)
    stage = os.path.join(out, "stage")
    for fam in fams:
        if fam in VARIANTS:
            base = VARIANTS[fam][0]
            if not os.path.exists(os.path.join(stage, base, "tokenizer.json")):
                stage_family(shared, base, stage)
            path = stage_variant(fam, stage, out)
        else:
            path = stage_family(shared, fam, stage)
        data = golden(fam, path, texts)
        with open(os.path.join(out, fam + ".json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        print(f"{fam}: {data['error']}" if "error" in data else f"{fam}: {len(data['cases'])} cases ({data['model']})")
    shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":
    main()
