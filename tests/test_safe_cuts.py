"""Safe cuts (``kernels.pretok.is_safe_cut``): cutting a segment there never changes its split.

For each pattern, the pieces of a segment split at every safe cut (each part
scanned alone, as the device's chunk threads and the CPU's long-document
threads do) must equal the pieces of the whole segment, and ``regex.findall``'s.
Checked around every pair of general categories in many left and right
contexts, on invalid UTF-8, random text, segments that start inside a
character and the real multilingual file. The positions the notes call unsafe
are shown to be so. The simulator's cuts are in ``test_cuda_pretok.py``.
"""

from __future__ import annotations

import itertools
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st
from numba import njit
from test_scanners import INVALID, byte_documents, category_samples

from gpubpe import pretokenize
from gpubpe.kernels.pretok import O200K, is_safe_cut, safe_cut, split_ends
from gpubpe.pretokenize import NAMED_PATTERNS, resolve_pattern, scanner_for, split_words, word_bytes

ROOT = Path(__file__).resolve().parent.parent
SCANNERS = {name: scanner_for(regex) for name, regex in NAMED_PATTERNS.items()}
NAMES = list(SCANNERS)


@cache
def table_of(name: str) -> np.ndarray:
    return pretokenize.scanner_table(SCANNERS[name])


def safe_cuts(document: bytes, name: str, start: int = 0) -> list[int]:
    """Every safe cut of the segment ``document[start:]``."""
    data = np.frombuffer(document, np.uint8)
    return [p for p in range(start + 1, len(document))
            if is_safe_cut(data, p, start, len(document), SCANNERS[name], table_of(name))]


def piece_ends(document: bytes, name: str, starts, stops) -> list[int]:
    data = np.frombuffer(document, np.uint8)
    return split_ends(data, np.asarray(starts, np.int64), np.asarray(stops, np.int64),
                      SCANNERS[name], table_of(name)).tolist()


def regex_ends(document: bytes, name: str) -> list[int]:
    text = document.decode("utf-8", "surrogateescape")
    lengths = [len(word_bytes(w)) for w in split_words(text, resolve_pattern(name))]
    return np.cumsum(lengths).tolist()


def check_cut_split(document: bytes, name: str, start: int = 0, with_regex: bool = False) -> int:
    """Split at every safe cut == split whole (== regex); returns the number of cuts."""
    cuts = safe_cuts(document, name, start)
    whole = piece_ends(document, name, [start], [len(document)])
    cut = piece_ends(document, name, [start, *cuts], [*cuts, len(document)])
    assert cut == whole, (name, document, start, cuts)
    if with_regex:
        assert [start + e for e in regex_ends(document[start:], name)] == whole, (name, document)
    return len(cuts)


# ---------------------------------------------------------------- every category around a cut

LEFT = ["", "a", "A", " ", "  ", "\n", "\r\n", ".", "'", "1", "\u4e2d", "\u0301", "a\u0301",
        " .", "x'", "\n/", "123"]
RIGHT = ["", "a", " ", "\n", "'s", "1", ".", "/", "\u0301"]
SPECIAL = " \t\n\r\x0b\x85\u3000'/sStTa1.,\uff0c\u3002\u4e2d\u30fc\u0301\u017f"


@lru_cache(maxsize=1)
def around_chars() -> list[str]:
    """Two code points of every general category, one of every class combination the
    scanners read (``code_point_flags`` and GPT-2's classes: the scanners see nothing
    else of a character but these and the few characters they name), and those."""
    samples = category_samples()
    chars = {s[len(s) // 2] for s in samples.values()} | {s[-1] for s in samples.values()}
    for table in (pretokenize.code_point_flags(), pretokenize.code_point_classes()):
        valid = np.r_[0:0xD800, 0xE000:0x110000]
        _, first = np.unique(table[valid], return_index=True)
        chars |= {chr(valid[k]) for k in first}
    return sorted(chars | set(SPECIAL))


@njit
def cut_mask(data, doc_start, doc_end, scanner, table):
    """1 at every safe cut of every document (documents end to end in ``data``)."""
    mask = np.zeros(data.size, np.uint8)
    for d in range(doc_start.size):
        for p in range(doc_start[d] + 1, doc_end[d]):
            if is_safe_cut(data, p, doc_start[d], doc_end[d], scanner, table):
                mask[p] = 1
    return mask


def check_documents(documents: list[bytes], name: str) -> int:
    """``check_cut_split`` of many documents at once (one buffer, a segment each)."""
    data = np.frombuffer(b"".join(documents), np.uint8)
    bounds = np.cumsum([0] + [len(d) for d in documents])
    doc_start, doc_end = bounds[:-1], bounds[1:]
    cuts = np.flatnonzero(cut_mask(data, doc_start, doc_end, SCANNERS[name], table_of(name)))
    starts = np.union1d(doc_start[doc_start < doc_end], cuts)
    ends = np.append(starts[1:], data.size)
    whole = piece_ends(data.tobytes(), name, doc_start, doc_end)
    if piece_ends(data.tobytes(), name, starts, ends) != whole:
        for document in documents:  # name the first document that differs
            check_cut_split(document, name)
    return cuts.size


@pytest.mark.parametrize("name", NAMES)
def test_cuts_keep_the_split_around_every_pair_of_categories(name):
    documents = [(left + before + at + right).encode()
                 for before, at in itertools.product(around_chars(), repeat=2)
                 for left, right in itertools.product(LEFT, RIGHT)]
    assert check_documents(documents, name) > 100_000  # the rules do cut: not a vacuous pass


@pytest.mark.parametrize("name", NAMES)
def test_cuts_next_to_invalid_utf8(name):
    for bad, char in itertools.product(INVALID, around_chars()):
        x = char.encode()
        for document in (x + bad + x, bad + x + b"a", b"a" + x + bad, bad + bad + x + b" "):
            check_cut_split(document, name, with_regex=True)


@given(byte_documents, st.integers(0, 12), st.sampled_from(NAMES))
def test_cuts_on_random_text_and_segment_starts_anywhere(document, start, name):
    # A segment may start inside a character: its bytes before are no part of it.
    check_cut_split(document, name, start=min(start, len(document)))
    check_cut_split(document, name, with_regex=True)


def cjk_text(script: str) -> bytes:
    """The Chinese (no kana) or Japanese (kana) lines of tests/data/multiscript.txt."""
    lines = (ROOT / "tests" / "data" / "multiscript.txt").read_text("utf-8").splitlines(True)
    kana = regex.compile("[\u3040-\u30ff]")
    han = regex.compile("[\u4e00-\u9fff]")
    if script == "ja":
        return "".join(line for line in lines if kana.search(line)).encode()
    return "".join(line for line in lines if han.search(line) and not kana.search(line)).encode()


@pytest.mark.parametrize("name", NAMES)
def test_cuts_on_the_real_multilingual_file(name):
    text = (ROOT / "tests" / "data" / "multiscript.txt").read_bytes()
    n_cuts = check_cut_split(text, name, with_regex=True)
    assert n_cuts > len(text) // 20


def chunk_lengths(document: bytes, cuts: list[int]) -> np.ndarray:
    return np.diff([0, *cuts, len(document)])


@pytest.mark.parametrize("script", ["zh", "ja"])
@pytest.mark.parametrize("name", NAMES)
def test_chinese_and_japanese_prose_is_cut_into_clauses(name, script):
    text = cjk_text(script)
    cuts = safe_cuts(text, name)
    lengths = chunk_lengths(text, cuts)
    # Measured: mean 9-16 bytes, longest 100-180 (a space after ASCII alone: mean
    # 58 / 84, longest 1,961 / 2,855 bytes; bench/chunk_lengths.py).
    assert lengths.mean() < 20 and lengths.max() < 250, (lengths.mean(), lengths.max())
    check_cut_split(text, name)


def test_hand_worked_cuts_in_chinese():
    # 指0 定3 树6 控9 件12 。15 \n18 选19 择22 「25 是28 」31 ，34 将37 (end 40).
    # A letter, then punctuation: cuts at 15, 25, 31. A newline, then a letter:
    # cl100k / o200k cut at 19, not at 18 ("。\n" is one piece); GPT-2 cuts at
    # 18 (punctuation, then whitespace), not at 19 (after whitespace). Punctuation
    # then a letter: cl100k / o200k never ("「是", "，将" are pieces); GPT-2 at
    # 28 and 37. Punctuation then punctuation (34): never.
    document = "指定树控件。\n选择「是」，将".encode()
    assert safe_cuts(document, "cl100k") == safe_cuts(document, "o200k") == [15, 19, 25, 31]
    assert safe_cuts(document, "gpt2") == [15, 18, 25, 28, 31, 37]
    for name in NAMES:
        check_cut_split(document, name, with_regex=True)


def test_safe_cut_searches_forward_from_at():
    document = "指定树控件。\n选择".encode()
    data = np.frombuffer(document, np.uint8)
    table = table_of("o200k")
    assert safe_cut(data, 0, 1, len(document), O200K, table) == 15
    assert safe_cut(data, 0, 16, len(document), O200K, table) == 19
    assert safe_cut(data, 0, 20, len(document), O200K, table) == len(document)


# ---------------------------------------------------------------- the positions that are not safe


@pytest.mark.parametrize("name, text, at", [
    ("gpt2", "a \nb", 3),  # after a newline: "a", " ", "\n", "b" but "a \n" alone: "a", " \n"
    ("cl100k", "\u4e2d\u6587", 3),  # between ideographs: one letter run
    ("o200k", "\u4e2d\u6587", 3),
    ("gpt2", "\u4e2d\u6587", 3),
    ("cl100k", "\u4e2d\uff0c\u6587", 6),  # punctuation, then a letter: "，文" one piece
    ("o200k", "x.\u6587", 2),
    ("cl100k", "a.\n", 2),  # punctuation, then CR/LF: ".\n" one piece
    ("o200k", "a.\n/b", 3),  # o200k: a newline, then "/": ".\n/" one piece
    ("o200k", "a's", 1),  # o200k: a letter, then "'": "a's" one piece
    ("cl100k", "a\n \nb", 2),  # whitespace, then whitespace
    ("gpt2", "a   b", 2),  # ... GPT-2 too: "a", "  ", " b"
    ("gpt2", "x's", 2),  # GPT-2: "'" then a letter may start a contraction
])
def test_unsafe_positions_change_the_split(name, text, at):
    document = text.encode()
    whole = piece_ends(document, name, [0], [len(document)])
    cut = piece_ends(document, name, [0, at], [at, len(document)])
    assert whole == regex_ends(document, name)
    assert cut != whole
    assert at not in safe_cuts(document, name)
