"""HF's Unicode normalizers (NFC, NFD, NFKC, NFKD), as HF ``tokenizers`` writes them.

HF normalizes with the unicode-normalization-alignments crate, whose tables are Unicode
9.0's; Python's ``unicodedata`` is newer (14.0 in 3.11, 15.1 in 3.13). A character HF
does not know is, to HF, a starter that decomposes into nothing and composes with
nothing: HF leaves it as it is and never reorders or composes across it. So HF's form
is Python's, applied to the pieces of text between such characters, with those
characters kept as they are. Which characters those are is read at run time from
Python's tables and two lists probed from HF (``bench/make_unicode_table.py``):

- ``hf_combining_marks.zlib``: the code points HF gives a combining class above 0 (814;
  Python 3.11 has 912). A differential fuzz against HF found U+089C U+0338 on Qwen 2's
  file (NFC): HF keeps that order, Python puts U+0338 (class 1) first.
- ``hf_decomposable.zlib``: the code points HF's NFKD changes (5,722; Python 3.11
  decomposes 5,795). U+32FF (a square era name, Unicode 12.1) is 令和 in Python's NFKC
  and stays U+32FF in HF's; U+11935 U+11930 compose to U+11938 (Unicode 13) in Python's
  NFC, HF keeps the two.

Text Python leaves unchanged, HF's form leaves too, so only text Python changes is
searched for the characters HF lacks; in long text, only the runs of characters that may
change are normalized. Characters that compose or decompose only in a Unicode newer than
the running Python's are not covered.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
import zlib
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .pretokenize import escaped_char

FORMS = ("NFC", "NFD", "NFKC", "NFKD")
HF_COMBINING_MARKS = Path(__file__).parent / "data" / "hf_combining_marks.zlib"
HF_DECOMPOSABLE = Path(__file__).parent / "data" / "hf_decomposable.zlib"


def hf_normalize(text: str, form: str) -> str:
    """``text`` in ``form`` (one of ``FORMS``) as HF's normalizer of that name writes it:
    Python's, of the pieces between the characters HF does not know (the module's
    docstring), those characters kept as they are.

    Text Python's quick check passes (6.5 GB/s on Chinese) is returned as it is. In longer
    text that changes, only the runs of characters that may change are normalized."""
    if unicodedata.is_normalized(form, text):
        return text
    if len(text) < _RUNS_MIN_CHARS:
        return _hf_form(text, form)
    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    kinds = _kinds(form)[code_points]
    if (kinds & _HF_LACKS).any():
        return _hf_form(text, form)
    moving = np.zeros(kinds.size + 2, dtype=np.bool_)
    moving[1:-1] = kinds
    edges = np.flatnonzero(moving[1:] != moving[:-1])
    pieces, at = [], 0
    for start, end in zip(np.maximum(edges[0::2] - 1, 0).tolist(), edges[1::2].tolist()):
        pieces += [text[at:start], unicodedata.normalize(form, text[start:end])]
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def _hf_form(text: str, form: str) -> str:
    """``hf_normalize`` of any text, normalized whole but for the characters HF lacks.

    These are searched for in 3 ns a character for those of the BMP (a class ``re``
    tests in one lookup); the others, in ranges ``re`` tests one by one at 48 ns a
    character, only where the text holds the first bytes of one."""
    normal = unicodedata.normalize(form, text)
    if normal == text:
        return normal
    lacking = _lacking(form)
    if lacking.bmp.search(text) is None and not _holds_astral(text, lacking):
        return normal
    pieces = lacking.both.split(text)  # the characters HF lacks at odd places
    return "".join(piece if k % 2 else unicodedata.normalize(form, piece)
                   for k, piece in enumerate(pieces))


# Texts shorter than this are normalized whole (the table lookup costs ~10 us). Longer
# ones by runs: Python's NFKC of whole 2 KB Chinese documents, whose full-width
# punctuation is all that changes, ran at 30 MB/s.
_RUNS_MIN_CHARS = 256
_MAY_CHANGE, _HF_LACKS = 1, 2  # ``_kinds``


def hf_normalize_bytes(data: bytes, form: str) -> bytes:
    """:func:`hf_normalize` of UTF-8 bytes (invalid bytes kept as they are)."""
    return hf_normalize(data.decode("utf-8", "surrogateescape"), form).encode(
        "utf-8", "surrogateescape")


@lru_cache(maxsize=len(FORMS))
def _kinds(form: str) -> np.ndarray:
    """uint8 per code point: ``_MAY_CHANGE`` for a character ``form`` may change, reorder
    or compose with the one before it (which is why that one is normalized with it; text
    splits before every other into parts normalized alone), ``_HF_LACKS`` for one of
    ``characters_hf_lacks`` (once a form, from ``_decomposable_or_marks``)."""
    table = np.zeros(0x110000, dtype=np.uint8)
    for c, parts, mark in _decomposable_or_marks():
        char = chr(c)
        if mark or parts and not unicodedata.is_normalized(form, char):
            table[c] = _MAY_CHANGE
        if parts and _composes(char, parts):
            table[int(parts.split()[1], 16)] = _MAY_CHANGE
    table[0x1161:0x1176] = table[0x11A8:0x11C3] = _MAY_CHANGE  # Hangul vowels, finals compose
    if form.endswith("D"):
        table[0xAC00:0xD7A4] = _MAY_CHANGE  # Hangul syllables decompose (none listed)
    table[sorted(characters_hf_lacks(form))] |= _HF_LACKS
    return table


def _holds_astral(text: str, lacking: _Lacking) -> bool:
    """Whether ``text`` holds one of the characters HF lacks outside the BMP, searched for
    only where its UTF-8 holds the first two bytes of one."""
    data = text.encode("utf-8", "surrogateescape")
    return any(prefix in data for prefix in lacking.astral_prefixes) and \
        lacking.astral.search(text) is not None


class _Lacking(NamedTuple):
    bmp: re.Pattern  # one of those in the BMP
    astral: re.Pattern  # one of the others
    astral_prefixes: tuple[bytes, ...]  # the first two UTF-8 bytes of the others
    both: re.Pattern  # any, as a group (``split`` keeps it as a piece of its own)


@lru_cache(maxsize=len(FORMS))
def _lacking(form: str) -> _Lacking:
    """The characters of this Python's Unicode that ``form`` changes or moves and HF does
    not know (once a form)."""
    chars = sorted(characters_hf_lacks(form))
    bmp = "".join(escaped_char(c) for c in chars if c <= 0xFFFF)
    astral = "".join(escaped_char(c) for c in chars if c > 0xFFFF)
    return _Lacking(re.compile(f"[{bmp}]" if bmp else "(?!)"),
                    re.compile(f"[{astral}]" if astral else "(?!)"),
                    tuple(sorted({chr(c).encode()[:2] for c in chars if c > 0xFFFF})),
                    re.compile(f"([{bmp}{astral}])" if chars else "(?!)"))


@lru_cache(maxsize=len(FORMS))
def characters_hf_lacks(form: str) -> frozenset[int]:
    """The code points Python's ``form`` reorders, decomposes or composes and HF's does
    not: marks HF gives no class, characters it does not decompose, and (NFC, NFKC) the
    parts of compositions it does not make (once a form: ``_kinds`` and
    ``_lacking`` both read it)."""
    if form not in FORMS:
        raise ValueError(f"normal form {form!r}: expected one of {', '.join(FORMS)}")
    marks, decomposable = _hf_code_points(HF_COMBINING_MARKS), _hf_code_points(HF_DECOMPOSABLE)
    compatible = form.startswith("NFK")
    lacking = set()
    for c, parts, mark in _decomposable_or_marks():
        char = chr(c)
        if mark and c not in marks:
            lacking.add(c)
        if not parts or c in decomposable or (parts.startswith("<") and not compatible):
            continue
        lacking.add(c)
        if form.endswith("C") and _composes(char, parts):
            lacking.update(int(part, 16) for part in parts.split())
    return frozenset(lacking)


# Planes 4-13 hold no character in any Unicode so far, and 15-16 are private use (no
# decomposition, no class): the tables skip them. The first NFKC normalizing of a process,
# which builds them, 0.37-0.40 -> 0.04-0.09 s (every code point read per table before;
# session 28).
_PLANES_WITH_CHARACTERS = (range(0x40000), range(0xE0000, 0xF0000))


@lru_cache(maxsize=1)
def _decomposable_or_marks() -> tuple[tuple[int, str, int], ...]:
    """(code point, its decomposition, its combining class) of every character Python's
    tables give one or the other: the only ones a form changes, moves or composes."""
    found = []
    for c in itertools.chain(*_PLANES_WITH_CHARACTERS):
        char = chr(c)
        parts, mark = unicodedata.decomposition(char), unicodedata.combining(char)
        if parts or mark:
            found.append((c, parts, mark))
    return tuple(found)


def _composes(char: str, parts: str) -> bool:
    """Whether ``char`` is a composition Python's NFC makes of its two ``parts``."""
    if parts.startswith("<"):
        return False
    pair = "".join(chr(int(part, 16)) for part in parts.split())
    return len(pair) == 2 and unicodedata.normalize("NFC", pair) == char


@lru_cache(maxsize=2)
def _hf_code_points(path: Path) -> frozenset[int]:
    """The code points of a list of (first, last) ranges probed from HF."""
    ranges = np.frombuffer(zlib.decompress(path.read_bytes()), dtype=np.uint32)
    return frozenset(c for lo, hi in ranges.reshape(-1, 2).tolist() for c in range(lo, hi + 1))
