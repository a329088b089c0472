"""Encoding text full of "<" under vocabularies with many special tokens that start so.

Mistral's tekken.json has 1,000 special tokens (982 start with "<"), Llama 3 256 (all
"<|"). Encoding looks for them in the text by default (tiktoken's rule: special-token text
raises unless allowed), and HTML or code has a "<" every few bytes. Rows: gpubpe's
``encode_batch`` by default, with ``allowed_special="all"`` and with
``disallowed_special=()`` (no search), one thread, cold word cache; beside them the
reference tool with the same special tokens: tiktoken's ``encode_batch`` (which searches
for them the same way by default) for tekken, HF ``tokenizers`` (which matches its added
tokens always) for Llama 3. Documents: ~2 KB of HTML made from ``gpubpe/data/demo.txt``'s
lines (each line a <p> with <b> and <a href> tags). Ids are checked equal first.

    python bench/special_scan_bench.py --tekken FILE --llama3 GGUF [--repeats 5]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import gpubpe

DEMO = Path(gpubpe.__file__).parent / "data" / "demo.txt"


def html_documents(megabytes: float = 1.0) -> list[str]:
    """Demo lines as HTML paragraphs, joined into ~2 KB documents."""
    lines = [line for line in DEMO.read_text(encoding="utf-8").splitlines() if line.strip()]
    paragraphs = [f'<p class="doc"><b>{k}</b> {html.escape(line)} <a href="#l{k}">link</a></p>\n'
                  for k, line in enumerate(lines)]
    documents, current, total = [], "", 0
    for paragraph in paragraphs:
        current += paragraph
        if len(current) >= 2048:
            documents.append(current)
            total += len(current.encode())
            current = ""
            if total >= megabytes * 1e6:
                break
    return documents


def tekken_reference(path: str):
    """tiktoken with Mistral's ids (``pattern_bench.tekken_encoding``) and its special tokens."""
    import tiktoken

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pattern_bench import tekken_encoding

    plain = tekken_encoding(path)
    specials = gpubpe.load(path, backend="cpu").special_tokens
    encoding = tiktoken.Encoding("tekken", pat_str=plain._pat_str,
                                 mergeable_ranks=plain._mergeable_ranks, special_tokens=specials)
    return ("tiktoken encode_batch", lambda docs: encoding.encode_batch(docs, num_threads=1),
            lambda docs: encoding.encode_batch(docs, allowed_special="all", num_threads=1))


def llama3_reference(path: str):
    """HF tokenizers on the tokenizer.json gpubpe reads the GGUF file as."""
    os.environ["RAYON_RS_NUM_CPUS"] = "1"
    from tokenizers import Tokenizer as HfTokenizer

    from gpubpe.gguf import hf_tokenizer_json, read_metadata

    hf = HfTokenizer.from_str(json.dumps(hf_tokenizer_json(read_metadata(path), path)))

    def encode(docs):
        return [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    return "HF tokenizers encode_batch", encode, encode


def best_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return float(np.min(times))


def rows(name: str, path: str, reference, documents, repeats: int) -> list[str]:
    tok = gpubpe.load(path, backend="cpu")
    ref_name, ref_default, ref_all = reference(path)
    megabytes = sum(len(d.encode()) for d in documents) / 1e6
    expected = ref_all(documents)
    if tok.encode_batch(documents, allowed_special="all", num_threads=1) != expected:
        raise SystemExit(f"{name}: ids differ from {ref_name}'s")

    def cold(**kwargs):
        def call():
            tok.clear_cache()
            tok.encode_batch(documents, num_threads=1, **kwargs)
        return call
    out = []
    for label, call in (("reference, default", lambda: ref_default(documents)),
                        ("gpubpe, default", cold()),
                        ("gpubpe, allowed_special='all'", cold(allowed_special="all")),
                        ("gpubpe, disallowed_special=() (no search)",
                         cold(disallowed_special=()))):
        seconds = best_seconds(call, repeats)
        shown = f"{ref_name}" if label.startswith("reference") else label
        out.append(f"| {name} ({len(tok.special_tokens)} special) | {shown} "
                   f"| {megabytes / seconds:.1f} |")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tekken", help="a Mistral tekken*.json")
    parser.add_argument("--llama3", help="llama.cpp's ggml-vocab-llama-bpe.gguf")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    documents = html_documents()
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()},"
          f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, one thread, best of"
          f" {args.repeats}; {len(documents)} HTML documents, ids equal to the reference's")
    print("| vocabulary | call | MB/s |")
    print("|---|---|---:|")
    if args.llama3:
        print("\n".join(rows("Llama 3", args.llama3, llama3_reference, documents, args.repeats)))
    if args.tekken:
        print("\n".join(rows("tekken", args.tekken, tekken_reference, documents, args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
