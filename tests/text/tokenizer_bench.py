#!/usr/bin/env python3
"""Hugging Face tokenizers throughput on the same input as bench/tokenizer_bench.cpp (one thread).

Usage: tokenizer_bench.py TOKENIZER_DIR CORPUS.txt.gz [bytes=1000000] [repeats=5]
"""
import gzip
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("RAYON_NUM_THREADS", "1")
from tokenizers import Tokenizer  # noqa: E402


def main():
    d, corpus = sys.argv[1], sys.argv[2]
    nbytes = int(sys.argv[3]) if len(sys.argv) > 3 else 1000000
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    data = gzip.open(corpus).read() if corpus.endswith(".gz") else open(corpus, "rb").read()
    data = data[:nbytes]
    while data and (data[-1] & 0xC0) == 0x80 or (data and data[-1] >= 0xC0):
        data = data[:-1]
    text = data.decode("utf-8")
    path = os.path.join(d, "tokenizer.json")
    t0 = time.thread_time()  # CPU time of this thread: the machine is often shared
    if os.path.exists(path):
        tok = Tokenizer.from_file(path)
    else:
        tok = Tokenizer.from_str(gzip.open(path + ".gz").read().decode("utf-8"))
    load = time.thread_time() - t0
    best, n = 1e30, 0
    for _ in range(repeats):
        a = time.process_time()  # process: counts any worker thread tokenizers might use
        n = len(tok.encode(text, add_special_tokens=False).ids)
        best = min(best, time.process_time() - a)
    print(f"{d}: {len(data)} bytes -> {n} tokens, best of {repeats}: {best:.3f} s CPU, {n / best:.0f} tokens/s, "
          f"{len(data) / best / 1e6:.2f} MB/s (load {load:.2f} s)")


if __name__ == "__main__":
    main()
