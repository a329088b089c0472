"""Chunk lengths of the device pre-tokenizer on Chinese and Japanese text, old cuts vs new.

The device cuts each segment at safe cuts, then one thread scans each chunk
(``kernels/encode/pretok_cuda.py``), so the longest chunk bounds a thread's
work. "old": the one rule before (a space or tab after an ASCII non-space);
"new": ``kernels.pretok.is_safe_cut``. The text: the zh (no kana) and ja
(kana) lines of ``tests/data/multiscript.txt`` (LibreOffice help), as one
document each and as ~2 KB documents; a corpus of ``bench/corpora.py`` when
given (``--corpus bench/corpora/zh.txt``).

    python bench/chunk_lengths.py [--corpus FILE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import regex

from gpubpe import pretokenize
from gpubpe.kernels.pretok import CHAR_S, CL100K, GPT2, O200K, SPACE, is_safe_cut

ROOT = Path(__file__).resolve().parent.parent
SCANNERS = {"gpt2": GPT2, "cl100k": CL100K, "o200k": O200K}


def multiscript_cjk() -> dict[str, bytes]:
    lines = (ROOT / "tests" / "data" / "multiscript.txt").read_text("utf-8").splitlines(True)
    kana, han = regex.compile("[\u3040-\u30ff]"), regex.compile("[\u4e00-\u9fff]")
    return {"zh": "".join(s for s in lines if han.search(s) and not kana.search(s)).encode(),
            "ja": "".join(s for s in lines if kana.search(s)).encode()}


def documents_of(text: bytes, size: int) -> list[tuple[int, int]]:
    """(start, end) of ~``size``-byte documents made of whole lines."""
    bounds, start = [], 0
    for end in np.flatnonzero(np.frombuffer(text, np.uint8) == 10) + 1:
        if end - start >= size:
            bounds.append((start, int(end)))
            start = int(end)
    return bounds + ([(start, len(text))] if start < len(text) else [])


def old_cuts(data: np.ndarray, start: int, end: int, scanner: int, table) -> list[int]:
    before = data[start:end - 1]
    space = table[before] == SPACE if scanner == GPT2 else (table[before] & CHAR_S) != 0
    at = data[start + 1:end]
    hit = ((at == 32) | (at == 9)) & (before < 0x80) & ~space
    return (np.flatnonzero(hit) + start + 1).tolist()


def new_cuts(data: np.ndarray, start: int, end: int, scanner: int, table) -> list[int]:
    return [p for p in range(start + 1, end) if is_safe_cut(data, p, start, end, scanner, table)]


def chunk_stats(text: bytes, bounds, scanner: int, table, cuts_of) -> tuple[float, int, int]:
    data = np.frombuffer(text, np.uint8)
    lengths = np.concatenate([np.diff([a, *cuts_of(data, a, b, scanner, table), b])
                              for a, b in bounds])
    return float(lengths.mean()), int(lengths.max()), lengths.size


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="*", default=[], type=Path)
    args = parser.parse_args(argv)
    texts = multiscript_cjk()
    texts.update({path.stem: path.read_bytes() for path in args.corpus})
    print("| text | bytes | documents | pattern | old: chunks, mean, max bytes "
          "| new: chunks, mean, max bytes |")
    print("|---|---|---|---|---|---|")
    for label, text in texts.items():
        for docs, bounds in (("one", [(0, len(text))]), ("~2 KB", documents_of(text, 2000))):
            for name, scanner in SCANNERS.items():
                table = pretokenize.scanner_table(scanner)
                old = chunk_stats(text, bounds, scanner, table, old_cuts)
                new = chunk_stats(text, bounds, scanner, table, new_cuts)
                print(f"| {label} | {len(text)} | {docs} ({len(bounds)}) | {name} "
                      f"| {old[2]}, {old[0]:.0f}, {old[1]} | {new[2]}, {new[0]:.1f}, {new[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
