"""Pre-tokenization: split patterns, special tokens, corpus readers, word counting.

A document is split into words with a pattern (GPT-2's by default); words never
cross documents or special tokens. Bytes that are not valid UTF-8 are carried
through the ``str`` world with ``surrogateescape`` and come back unchanged.

Corpora are read as batches of UTF-8 bytes cut into segments (a document, or
the text between special tokens). Word counting for the named patterns (gpt2,
cl100k, o200k, llama3, qwen2, tekken, deepseek) runs the exact Numba scanners of ``gpubpe.kernels.pretok`` in
threads (they release the GIL); a custom pattern uses ``regex``.

Bytes that are not valid UTF-8 (input given as bytes) are split as ``regex``
splits the ``surrogateescape``-decoded text: each byte that starts no valid
sequence is one character of no class ("other": not a letter, number, mark
or whitespace), so it joins punctuation runs and can prefix a letter run.
Every path (Numba scanners, ``regex`` for custom patterns, the oracle) agrees
on this. It is not what ``errors="replace"`` decoding would give: that merges
a broken sequence into one U+FFFD, so ``b"\\xe4\\xb8abc"`` would be one piece
there and is two here (``b"\\xe4\\xb8"``, ``b"abc"``).
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import threading
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import regex

from ._pystr import (
    bytes_objects,
    dict_of_words,
    str_list_utf8,
    str_span,
    untracked,
    utf8_bound_ends,
)
from ._threads import HelpedPool, thread_count
from .bytes_order import BYTE_TO_CHAR
from .errors import ConfigError, CorpusError
from .kernels.hashing import EMPTY_KEY, cells_grown, grown_like
from .kernels.jsonl import BLANK as JSONL_BLANK
from .kernels.jsonl import MAX_DEPTH as JSONL_MAX_DEPTH
from .kernels.jsonl import TEXT as JSONL_TEXT
from .kernels.jsonl import jsonl_texts, line_ends
from .kernels.pretok import (
    CHAR_CRLF,
    CHAR_L,
    CHAR_M,
    CHAR_N,
    CHAR_PS,
    CHAR_S,
    CHAR_U,
    CHAR_W,
    CL100K,
    DEEPSEEK,
    DEEPSEEK_CODER,
    DEEPSEEK_LLM,
    DS_CRLF,
    DS_L,
    DS_LET,
    DS_N,
    DS_P,
    DS_PUN,
    DS_R,
    DS_S,
    GPT2,
    LETTER,
    LLAMA3,
    NUMBER,
    O200K,
    QWEN2,
    QWEN35,
    SPACE,
    STARCODER,
    TEKKEN,
    count_scanned_words,
)
from .kernels.str_utf8 import any_ends_with
from .kernels.word_tally import (
    add_words,
    count_line_share,
    count_str_share,
    known_words,
    packed_bytes,
    packed_words,
)

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# Llama 3's split pattern (Meta's llama3/tokenizer.py): cl100k's without the possessive
# quantifiers and with o200k's whitespace alternatives (``kernels.pretok.cl100k_piece_end``).
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Qwen's (Qwen 1 to 3: the Qwen tiktoken file, transformers' Qwen2Tokenizer): Llama 3's
# with single digits.
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Mistral's Tekken (its tekken.json files: Nemo, Pixtral, Small 3...): o200k's without
# the contractions after a word, with single digits.
TEKKEN_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*""",
        r"""\p{N}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


def isolated(text: str) -> str:
    """The findall pattern of HF's Split(text, behavior="Isolated"): its matches and the
    text between them."""
    return f"(?:{text})|(?:(?!(?:{text}))[\\s\\S])+"


# DeepSeek's (V3, R1...: its tokenizer.json): three Splits, each Isolated, each run on the
# words of the one before (``split_words``; ``kernels.pretok.deepseek_piece_end``).
DEEPSEEK_SPLITS = (
    r"""\p{N}{1,3}""",
    r"""[一-龥぀-ゟ゠-ヿ]+""",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
    r"""| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""".replace(r"\r\n", "\r\n"),
)  # the file holds CR and LF themselves in the third, not escapes
DEEPSEEK_PATTERN = tuple(map(isolated, DEEPSEEK_SPLITS))
# DeepSeek LLM's letters (its file's second Split; six are written as escapes: they are
# singletons that NFC, and so some editors, would replace).
_DEEPSEEK_LLM_LETTERS = (
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷ"
    "ᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-"
    "ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
)
# DeepSeek LLM's (7B/67B, V2, Coder V2) and DeepSeek Coder's (1.3-33B) files: cascades of
# Isolated Splits, then bytes (``kernels.pretok.deepseek_llm_piece_end`` and
# ``deepseek_coder_piece_end``; the Split texts as llama.cpp's table has them).
_DEEPSEEK_CJK_RUNS = "[一-龥ࠀ-一가-퟿]+"
DEEPSEEK_LLM_SPLITS = ("[\r\n]", _DEEPSEEK_LLM_LETTERS, r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$",
                       _DEEPSEEK_CJK_RUNS, r"\p{N}+")
DEEPSEEK_CODER_SPLITS = ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DEEPSEEK_CJK_RUNS, r"\p{N}")
# StarCoder's (and Command-R's, SmolLM's, Refact's: their tokenizer.json): HF's Digits step
# with individual digits, then GPT-2's ByteLevel (``kernels.pretok.starcoder_piece_end``).
STARCODER_PATTERN = (isolated(r"\p{N}"), GPT2_PATTERN)
# Qwen 3.5's (its tokenizer.json, after llama.cpp's table): Qwen's with marks in the letter
# runs and out of the punctuation runs.
QWEN35_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
NAMED_PATTERNS = {"gpt2": GPT2_PATTERN, "cl100k": CL100K_PATTERN, "o200k": O200K_PATTERN,
                  "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN, "qwen35": QWEN35_PATTERN,
                  "tekken": TEKKEN_PATTERN, "deepseek": DEEPSEEK_PATTERN,
                  "starcoder": STARCODER_PATTERN,
                  "deepseek-llm": tuple(map(isolated, DEEPSEEK_LLM_SPLITS)),
                  "deepseek-coder": tuple(map(isolated, DEEPSEEK_CODER_SPLITS))}

# Bytes per batch handed to a counting thread.
_BATCH_BYTES = 8 << 20
# Bytes per batch counted on a device: two syncs and ~15 launches each.
_DEVICE_BATCH_BYTES = 64 << 20


def resolve_pattern(pattern):
    """The regex text of a pattern: a name (``NAMED_PATTERNS``) or a custom regex; a tuple of
    them for a sequence of regexes (``split_words``), given as a list or tuple; None (no split).
    """
    if pattern is None:
        return None
    if isinstance(pattern, list | tuple):
        if not pattern or not all(isinstance(step, str) for step in pattern):
            raise ConfigError(f"a pattern sequence must hold one or more names or regex strings, "
                              f"got {pattern!r}")
        steps = [resolve_pattern(step) for step in pattern]  # a named sequence joins whole
        steps = tuple(text for step in steps
                      for text in (step if isinstance(step, tuple) else (step,)))
        on_bytes = [step.startswith(BYTES_STEP) for step in steps]
        if on_bytes[0] or any(a and not b for a, b in zip(on_bytes, on_bytes[1:])):
            raise ConfigError(f"steps on bytes ({BYTES_STEP!r}) come after the steps on text, "
                              f"and after one of those at least: {pattern!r}")
        return steps if len(steps) > 1 else steps[0]
    if not isinstance(pattern, str):
        raise ConfigError(f"pattern must be a name, a regex string, a list of them or None, not "
                          f"{type(pattern).__name__}")
    text = NAMED_PATTERNS.get(pattern, pattern)
    if isinstance(text, tuple):  # a named sequence
        return text
    try:
        compiled_pattern(text)
    except regex.error as exc:
        raise ConfigError(
            f"pattern {pattern!r} is neither a known name {sorted(NAMED_PATTERNS)} nor a valid regex: {exc}"
        ) from None
    return text


def split_words(text: str, pattern) -> list[str]:
    """Split one piece of text (no special tokens in it) into words: the matches of a regex,
    or of a sequence of regexes (resolved, a tuple), each run on every word of the one
    before; HF's Sequence of Split pre-tokenizers works so (DeepSeek's: digits, then CJK
    runs, then the rest)."""
    if pattern is None:
        return [text] if text else []
    if isinstance(pattern, tuple) and has_bytes_steps(pattern):  # words may split a char
        data = text.encode("utf-8", "surrogateescape")
        return [data[a:b].decode("utf-8", "surrogateescape") for a, b in step_spans(pattern, text)]
    if isinstance(pattern, tuple):
        return [text[a:b] for a, b in step_spans(pattern, text)]
    return compiled_pattern(pattern).findall(text, concurrent=True)


# A step of a pattern sequence that runs on each word's GPT-2 byte-level string (a
# character per byte) instead of its text, as HF runs the steps after a ByteLevel one
# (Falcon's digits: the bytes' characters ², ³, ¹, ¼, ½, ¾ are numbers, so a word can end
# inside a character). Written before the step's regex (a regex comment).
BYTES_STEP = "(?#bytes)"
# str.translate's table from latin-1 characters (one per byte) to GPT-2's.
_BYTE_CHARS = dict(enumerate(BYTE_TO_CHAR))


def has_bytes_steps(steps: tuple[str, ...]) -> bool:
    """Whether a resolved pattern sequence holds a step on bytes (``BYTES_STEP``)."""
    return any(step.startswith(BYTES_STEP) for step in steps)


# A character class holding a set operation: ``[\p{L}&&[^\p{Han}]]`` (Kimi K2's tiktoken
# pattern has it), ``||``, ``~~``.
_SET_OPERATION = regex.compile(r"\[(?:\\.|[^\]\\])*?(?:&&|\|\||~~)")


@lru_cache(maxsize=64)
def compiled_pattern(text: str) -> regex.Pattern:
    """``regex``'s compiled form of a regex pattern, read as tiktoken and HF read it.

    Set operations in a character class need ``regex``'s VERSION1: under its default,
    VERSION0, they are literal characters, and a pattern holding one split silently
    otherwise than tiktoken (Kimi K2's: the ids of 2,314 of 3,000 documents differed, letters
    dropped). VERSION1's full case folding is turned off (``(?-f)``): tiktoken and HF fold
    case simply, as VERSION0 does.
    """
    if _SET_OPERATION.search(text):
        return regex.compile("(?-f)" + text, flags=regex.V1)
    return regex.compile(text)


def step_spans(steps: tuple[str, ...], text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the words a sequence of regexes (a resolved pattern
    tuple) makes of ``text``: each regex runs on each word of the one before as on a text
    of its own (its lookarounds and anchors see that word only); empty matches are no words.
    From the first step on bytes (``BYTES_STEP``) on, the steps run on the words' GPT-2
    strings and the spans are byte offsets (UTF-8, lone surrogates as the bytes they
    escape)."""
    spans = [(0, len(text))] if text else []
    in_bytes = False
    for whole, matches, on_bytes in compiled_steps(steps):
        if on_bytes and not in_bytes:
            text, spans = _as_gpt2_bytes(text, spans)
            in_bytes = True
        spans = [span for start, end in spans
                 for span in _word_spans(whole, matches, text, start, end)]
    return spans


def _as_gpt2_bytes(text: str, spans: list[tuple[int, int]]):
    """(the text's GPT-2 byte-level string, the character spans as byte spans)."""
    offsets = utf8_offsets(text).tolist()
    data = text.encode("utf-8", "surrogateescape")
    mapped = data.decode("latin-1").translate(_BYTE_CHARS)
    return mapped, [(offsets[a], offsets[b]) for a, b in spans]


def utf8_offsets(text: str) -> np.ndarray:
    """Byte offset of every character boundary of ``text`` (len(text) + 1 values)."""
    code_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    lengths = 1 + (code_points >= 0x80) + (code_points >= 0x800) + (code_points >= 0x10000)
    lengths[(code_points >= 0xD800) & (code_points <= 0xDFFF)] = 1  # surrogate-escaped bytes
    offsets = np.zeros(code_points.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


@lru_cache(maxsize=64)
def compiled_steps(steps: tuple[str, ...]) -> tuple:
    """(compiled step, its regex alone compiled when the step is ``isolated(regex)``, else
    None, whether it runs on bytes) of each step of a pattern sequence."""
    compiled = []
    for step in steps:
        on_bytes = step.startswith(BYTES_STEP)
        core = _isolated_core(step.removeprefix(BYTES_STEP))
        compiled.append((compiled_pattern(step), None if core is None else compiled_pattern(core),
                         on_bytes))
    return tuple(compiled)


_ISOLATED_FRAME = len(isolated(""))


def _isolated_core(text: str) -> str | None:
    """X when ``text`` is ``isolated(X)`` (a HF Split with Isolated behavior), else None."""
    size, odd = divmod(len(text) - _ISOLATED_FRAME, 2)
    core = text[3:3 + size]
    return core if size > 0 and not odd and isolated(core) == text else None


def _word_spans(whole, matches, text: str, start: int, end: int):
    """The spans of one word's words under one step. An Isolated step's are its regex's
    matches and the text between them: found so, 1.5x faster than by ``isolated``'s
    pattern, whose gap alternative tries the regex again at every character (DeepSeek LLM's
    six steps over 150 documents of 2 KB: 0.31 -> 0.21 s). A regex that matches empty
    somewhere leaves that word to the whole pattern (which drops a character there)."""
    word = text[start:end]
    if matches is not None:
        spans, at = [], 0
        for match in matches.finditer(word, concurrent=True):
            a, b = match.span()
            if a == b:
                break
            if a > at:
                spans.append((start + at, start + a))
            spans.append((start + a, start + b))
            at = b
        else:
            return spans + [(start + at, end)] if at < end - start else spans
    return [(start + match.start(), start + match.end())
            for match in whole.finditer(word, concurrent=True) if match.end() > match.start()]


def special_splitter(special_tokens: Iterable[str]) -> regex.Pattern | None:
    """A regex matching any special token, longest first, or None when there are none."""
    specials = sorted(set(special_tokens), key=len, reverse=True)
    if not specials:
        return None
    return regex.compile("|".join(regex.escape(s) for s in specials))


def as_bytes(document: str | bytes, where: str,
             fix: str = "clean the text or pass bytes") -> bytes:
    """A document as UTF-8 bytes (str subclasses such as ``np.str_`` included).

    A str with lone surrogates is a CorpusError (saying ``fix``), and so is anything but
    str or bytes.
    """
    if isinstance(document, str):
        try:
            return document.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CorpusError(
                f"{where} holds a lone surrogate {document[exc.start]!r} at character "
                f"{exc.start}: it is not encodable as UTF-8; {fix}"
            ) from None
    if isinstance(document, bytes | bytearray | memoryview):
        return bytes(document)
    raise CorpusError(f"{where} is a {type(document).__name__}; expected str or bytes")


def word_bytes(word: str) -> bytes:
    """A word found by ``regex`` in surrogateescape-decoded text, back to its bytes."""
    return word.encode("utf-8", "surrogateescape")


# The scanners' character classes are Unicode 16.0's, as tiktoken 0.14 (its Rust regex) and
# HF tokenizers' ByteLevel have them, whatever ``regex`` is installed: a table read from
# ``regex`` itself moved to Unicode 17 with regex 2025.10.22 (CJK Ext. J letters: ids
# unlike tiktoken's), and pinning ``regex`` below that made pip downgrade it under
# transformers >= 5.24, which then refused to import. The table was made with
# ``bench/make_unicode_table.py`` (``flags_from_regex`` under regex 2025.9.18); the 'dev'
# extra pins that Unicode so the tests compare it with ``regex``. Loading both tables takes
# ~7 ms where building them from ``regex`` took ~80 ms.
UNICODE_TABLE = Path(__file__).parent / "data" / "unicode16_flags.zlib"
UNICODE_PUNCTUATION = Path(__file__).parent / "data" / "unicode16_punctuation.zlib"
# What HF's Punctuation pre-tokenizer splits at: Rust's ``is_ascii_punctuation`` or the
# ``unicode_categories`` crate's ``is_punctuation``, whose tables are years older than
# any ``regex``'s (726 code points; ``\p{P}`` in Unicode 16 has 140 more, and two of
# its own moved out of P since). Read from HF by ``bench/make_unicode_table.py``.
HF_PUNCTUATION = Path(__file__).parent / "data" / "hf_punctuation.zlib"


@lru_cache(maxsize=1)
def code_point_flags() -> np.ndarray:
    """``CHAR_*`` bit flags of every code point, Unicode 16.0 (the scanners but GPT-2's).

    The table holds eight flags: ``\\p{L}``, ``\\p{N}``, ``\\s``, o200k's upper and lower
    classes, CR/LF, ``\\p{M}``, ``\\p{P}`` or ``\\p{S}`` (``_FLAG_CLASSES``)."""
    return np.frombuffer(bytearray(zlib.decompress(UNICODE_TABLE.read_bytes())), dtype=np.uint8)


@lru_cache(maxsize=1)
def code_point_classes() -> np.ndarray:
    """Class of every code point (other/letter/number/space), Unicode 16.0 (GPT-2's scanner)."""
    flags = code_point_flags()
    classes = np.zeros(flags.size, dtype=np.uint8)
    for cls, flag in ((LETTER, CHAR_L), (NUMBER, CHAR_N), (SPACE, CHAR_S)):  # disjoint
        classes[flags & flag != 0] = cls
    return classes


@lru_cache(maxsize=1)
def code_point_ds_flags() -> np.ndarray:
    """``kernels.pretok.DS_*`` flags of every code point (DeepSeek Coder's and LLM's
    scanners): ``\\p{L}``, ``\\p{N}``, ``\\s`` and CR/LF from the Unicode table,
    ``\\p{P}`` from its punctuation list, the CJK ranges and the LLM file's two classes
    (explicit code point ranges: the same in every Unicode)."""
    flags = code_point_flags()
    table = np.zeros(flags.size, dtype=np.uint8)
    for ds_flag, flag in ((DS_L, CHAR_L), (DS_N, CHAR_N), (DS_S, CHAR_S), (DS_CRLF, CHAR_CRLF)):
        table[flags & flag != 0] |= ds_flag
    table[unicode_punctuation()] |= DS_P
    for ds_flag, text in ((DS_R, _DEEPSEEK_CJK_RUNS), (DS_LET, DEEPSEEK_LLM_SPLITS[1][3:]),
                          (DS_PUN, DEEPSEEK_LLM_SPLITS[2][3:])):
        table[_members(text)] |= ds_flag
    return table


def _members(char_class_run: str) -> np.ndarray:
    """The code points of a ``[...]+`` pattern of plain characters and ranges (no escapes,
    no negation: the CJK runs and the DeepSeek LLM classes). Read so, not by running
    ``regex`` over every code point (0.16 s for the three); a test compares the two."""
    body = char_class_run[1:-2]
    if not (char_class_run.startswith("[") and char_class_run.endswith("]+")) or \
            "\\" in body or body.startswith("^"):
        raise ValueError(f"not a class of plain characters and ranges: {char_class_run!r}")
    members, k = [], 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            members.append(np.arange(ord(body[k]), ord(body[k + 2]) + 1))
            k += 3
        else:
            members.append(np.array([ord(body[k])]))
            k += 1
    return np.concatenate(members).astype(np.int64)


@lru_cache(maxsize=1)
def unicode_punctuation() -> np.ndarray:
    """The code points of ``\\p{P}`` in Unicode 16.0 (a list shipped beside the flags table,
    made by ``bench/make_unicode_table.py``)."""
    ranges = np.frombuffer(zlib.decompress(UNICODE_PUNCTUATION.read_bytes()), dtype=np.uint32)
    return np.concatenate([np.arange(lo, hi + 1) for lo, hi in ranges.reshape(-1, 2)])


@lru_cache(maxsize=1)
def hf_punctuation_class() -> str:
    """HF's Punctuation set as a ``regex`` character class of code point ranges.

    It was ``[\\p{P}!-/:-@\\[-`{-~]``, which a differential fuzz against HF found wrong on
    Falcon's file: U+11F4C (a Kawi sign, P since Unicode 15) is punctuation to
    ``regex`` and not to HF, so "  \\U00011f4c" split apart otherwise."""
    ranges = np.frombuffer(zlib.decompress(HF_PUNCTUATION.read_bytes()), dtype=np.uint32)
    spans = (escaped_char(lo) if lo == hi else f"{escaped_char(lo)}-{escaped_char(hi)}"
             for lo, hi in ranges.reshape(-1, 2).tolist())
    return "[" + "".join(spans) + "]"


def escaped_char(code_point: int) -> str:
    """The character itself, escaped where a class reads it otherwise: Oniguruma (HF's
    regex, where the export writes the class) reads no ``\\U`` escape and ``regex`` no
    ``\\x{...}``, but both read characters."""
    char = chr(code_point)
    return "\\" + char if char in "[]\\^-" else char


def punctuation_from_regex() -> np.ndarray:
    """(first, last) ranges of ``\\p{P}`` as the installed ``regex`` reads its Unicode."""
    code_points, text = _every_code_point()
    spans = [(code_points[m.start()], code_points[m.end() - 1])
             for m in regex.finditer(r"\p{P}+", text)]
    return np.array(spans, dtype=np.uint32)


def _every_code_point() -> tuple[np.ndarray, str]:
    """(every code point but the surrogates, the text of them all in that order)."""
    code_points = np.arange(0x110000, dtype=np.int64)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]
    return code_points, code_points.astype(np.uint32).tobytes().decode("utf-32-le")


def flags_from_regex() -> np.ndarray:
    """``code_point_flags`` as the installed ``regex`` reads its Unicode (to make the table).

    Each flag is the set of one class the patterns name, read from ``regex``
    itself (Python's ``unicodedata`` lags behind its Unicode version).
    """
    code_points, text = _every_code_point()
    flags = np.zeros(0x110000, dtype=np.uint8)
    for flag, pattern in _FLAG_CLASSES:
        for match in regex.finditer(pattern + "+", text):
            flags[code_points[match.start():match.end()]] |= flag
    return flags


_FLAG_CLASSES = (
    (CHAR_L, r"\p{L}"),
    (CHAR_N, r"\p{N}"),
    (CHAR_S, r"\s"),
    (CHAR_U, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),
    (CHAR_W, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),
    (CHAR_CRLF, r"[\r\n]"),
    (CHAR_M, r"\p{M}"),
    (CHAR_PS, r"[\p{P}\p{S}]"),
)
_SCANNERS = {GPT2_PATTERN: GPT2, CL100K_PATTERN: CL100K, O200K_PATTERN: O200K,
             LLAMA3_PATTERN: LLAMA3, QWEN2_PATTERN: QWEN2, TEKKEN_PATTERN: TEKKEN,
             DEEPSEEK_PATTERN: DEEPSEEK, STARCODER_PATTERN: STARCODER, QWEN35_PATTERN: QWEN35,
             NAMED_PATTERNS["deepseek-llm"]: DEEPSEEK_LLM,
             NAMED_PATTERNS["deepseek-coder"]: DEEPSEEK_CODER}


def scanner_for(regex_text: str | None) -> int | None:
    """The Numba scanner id (``kernels.pretok.GPT2`` ...) of a named pattern, None for others."""
    return _SCANNERS.get(regex_text)


def scanner_table(scanner: int) -> np.ndarray:
    """The class table a scanner reads: classes for GPT-2's and StarCoder's, DeepSeek
    Coder's and LLM's own flags, the Unicode flags for the others."""
    if scanner in (DEEPSEEK_CODER, DEEPSEEK_LLM):
        return code_point_ds_flags()
    return code_point_classes() if scanner in (GPT2, STARCODER) else code_point_flags()


# ---------------------------------------------------------------- corpus readers
#
# The one corpus reader of gpubpe: training, stats, compare and encode_files all
# read documents through ``iter_batches``. It reads bytes and never decodes
# them, so "\r\n", a BOM and a missing final newline reach the tokenizer as
# they are in the file and come back exactly when the ids are decoded.

# A str item of a corpus is a path exactly when it has this shape (a corpus file
# name: no whitespace, ends in .txt, .jsonl or .parquet); the file system is
# never asked. pathlib.Path (any os.PathLike) items are always paths.
_CORPUS_NAME = regex.compile(r"^\S+\.(?:(?:txt|jsonl)(?:\.gz)?|parquet)$")
_CORPUS_SUFFIXES = (".txt", ".jsonl", ".gz", ".parquet")  # what _CORPUS_NAME can end with
# Compressed inputs: gzip only (zstandard is no dependency of gpubpe). A compressed file
# is read whole, from its start: it cannot be entered at a byte offset.
COMPRESSED_SUFFIXES = (".gz",)
_GZIP_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError


@dataclass
class Batch:
    """UTF-8 bytes cut into documents: document d is ``data[doc_ends[d-1]:doc_ends[d]]``.

    ``input_bytes``: bytes of the input this batch consumed (for progress bars;
    blank .jsonl lines and JSON syntax count, so it can differ from ``len(data)``).
    """

    data: bytes | memoryview
    doc_ends: np.ndarray  # int64, ascending, last == len(data)
    input_bytes: int = 0
    last: bool = False  # the corpus has no documents after these (where the reader knows it)

    @property
    def doc_starts(self) -> np.ndarray:
        return np.concatenate([[0], self.doc_ends]).astype(np.int64)[:-1]  # [] for no documents


def iter_batches(corpus, text_field: str = "text",
                 batch_bytes: int | None = None) -> Iterator[Batch]:
    """Read a corpus as batches of about ``batch_bytes`` of whole documents.

    ``corpus`` is a path (a ``str`` or ``pathlib.Path`` given alone is always
    a path), or an iterable of paths, ``str`` and ``bytes`` documents. Which
    items of an iterable are paths (never guessed from the file system):

    - a ``pathlib.Path`` (any ``os.PathLike``) is a path;
    - a ``str`` is a path when it reads as a corpus file name: no whitespace,
      ending in ``.txt``, ``.jsonl`` (either one ``.gz`` too) or ``.parquet`` (so ``train(["corpus.txt"])``
      reads the file, and a missing one is an error, not a one-line corpus);
    - any other ``str`` is a document (``"."``, ``"README.md"``, ``"a b.txt"``);
      ``bytes`` are always documents. Wrap a path of another shape in
      ``pathlib.Path``; pass a document that looks like a file name as bytes.

    ``batch_bytes``: about how many bytes a batch holds (None: ``_BATCH_BYTES``, 8 MB,
    read when called).

    A ``.jsonl`` file gives the ``text_field`` of each line (blank lines
    skipped); a ``.parquet`` file its ``text_field`` column (needs pyarrow); any
    other file gives each line as a document, its "\\n" kept (as HF's file
    trainer does), so the documents end to end are the file's bytes. A ``.gz``
    file is read decompressed, by the suffix before ``.gz`` (``a.jsonl.gz``).
    """
    batch_bytes = batch_bytes or _BATCH_BYTES
    pending = _PendingDocuments()
    limit = min(batch_bytes, _FIRST_DOCUMENT_BATCH_BYTES)  # grows, see there
    for chunk in _item_chunks(corpus, lambda _: _READ_CHUNK):
        yield from _read_items(chunk, pending, text_field, batch_bytes)
        if pending.size >= limit:
            yield pending.batch()
            limit = min(2 * limit, batch_bytes)
    if pending:
        batch = pending.batch()
        batch.last = True
        yield batch


@dataclass
class _Items:
    """Items of an iterable corpus, not yet read: ``items[lo:hi]`` (a chunk's list, shared
    by its shares: none copies it again); ``first``: the index of ``items[lo]``."""

    items: list
    first: int
    last: bool = False  # the corpus has no items after these
    lo: int = 0
    hi: int | None = None  # None: to the list's end
    approx_bytes: int = -1  # about their UTF-8 bytes when they look like str (-1: not)

    @property
    def span(self) -> tuple[int, int]:
        return self.lo, len(self.items) if self.hi is None else self.hi

    @property
    def texts(self) -> list:
        """The items themselves (a copy, unless they are the whole list)."""
        lo, hi = self.span
        return self.items if (lo, hi) == (0, len(self.items)) else self.items[lo:hi]


def _item_chunks(corpus, next_size) -> Iterator[_Items]:
    """The items of ``corpus`` (see ``iter_batches``) in chunks of ``next_size(the chunk
    before)`` items (``next_size(None)`` the first)."""
    if isinstance(corpus, str | os.PathLike):
        corpus = [Path(corpus)]
    if isinstance(corpus, bytes | bytearray | memoryview):
        raise CorpusError("corpus is a bytes object; pass a list of documents or a path")
    try:
        items = iter(corpus)
    except TypeError:
        raise CorpusError(
            f"corpus must be a path or an iterable of paths/str/bytes, not {type(corpus).__name__}"
        ) from None
    first, size = 0, next_size(None)
    while chunk := _taken(corpus, items, first, size):
        yield _Items(chunk, first, len(chunk) < size)
        first, size = first + len(chunk), next_size(chunk)


def _taken(corpus, items: Iterator, first: int, size: int) -> list:
    """The next ``size`` items (``first`` taken before): a slice of a list (issue 18: half
    the cost of ``islice``, 1.26 M lines 27.5 -> 13 ms on the calling thread)."""
    if type(corpus) is list:
        return untracked(corpus[first:first + size])
    return untracked(list(itertools.islice(items, size)))


def _read_items(chunk: _Items, pending: _PendingDocuments, text_field: str,
                batch_bytes: int, read_path=None) -> Iterator[Batch]:
    """Read a chunk: its documents into ``pending``; a path's batches yielded, after the
    documents pending before it (or what ``read_path(path)`` yields for it)."""
    documents = _str_documents(chunk)  # the common case: every item a str document
    if documents is None:
        documents = _bytes_documents(chunk)
    if documents is not None:
        pending.add(documents)
        return
    for index, item in enumerate(chunk.texts, chunk.first):  # paths, bytes, errors: one by one
        if is_corpus_path(item):
            if isinstance(item, str) and not os.path.exists(item):
                raise CorpusError(_missing_named_file(item, index))
            if pending:
                yield pending.batch()
            yield from (read_path or partial(read_file, text_field=text_field,
                                             batch_bytes=batch_bytes))(Path(item))
        else:
            pending.add(_Documents.of([as_bytes(item, f"document {index}")]))


def _missing_named_file(item: str, index: int) -> str:
    """Why a str item shaped like a corpus file name, naming no file, is refused."""
    return (f"corpus item {index}, {item[:200]!r}, reads as a corpus file name (no "
            "whitespace, ending in .txt, .jsonl, .gz or .parquet) but no such file exists; "
            "pass a document of that shape as bytes, or a file as an existing path")


_READ_CHUNK = 4096  # items of an iterable corpus taken at once by iter_batches
# Documents given in memory: the first batch is this many bytes, each next one twice
# the last, up to ``batch_bytes`` (a line file's first chunk too: ``_line_chunks``).
# Issue 18, 2-thread counting of 8.4 MB of lines: threads start on the first batch, and
# reading 8 MB first (~40 ms, GIL-bound) was a serial start; 1 MB batches throughout cost
# as much in merging the threads' shares
# (~15K distinct words a share, ~100 ns each on the reading thread: 8 -> 29 ms).
# Wall, 2 threads: 8 MB batches ~110 ms, 1 MB ~105, 4 MB ~85, growing from 1 MB: RESULTS.
_FIRST_DOCUMENT_BATCH_BYTES = 1 << 20


@dataclass
class _Documents:
    """Documents end to end: their UTF-8 and their byte lengths (int64)."""

    data: bytes | memoryview
    lengths: np.ndarray

    @classmethod
    def of(cls, encoded: list[bytes]) -> _Documents:
        return cls(b"".join(encoded), np.fromiter(map(len, encoded), np.int64, len(encoded)))

    @classmethod
    def joined(cls, parts: list[_Documents]) -> _Documents:
        return cls(b"".join(part.data for part in parts),
                   np.concatenate([part.lengths for part in parts]))

    def as_batch(self, input_bytes: int) -> Batch:
        return Batch(self.data, np.cumsum(self.lengths), input_bytes)


class _PendingDocuments:
    """The documents read since the last batch: parts joined once, into one Batch."""

    def __init__(self):
        self.parts: list[_Documents] = []
        self.size = 0

    def __bool__(self) -> bool:
        return bool(self.parts)

    def add(self, documents: _Documents) -> None:
        self.parts.append(documents)
        self.size += len(documents.data)

    def batch(self) -> Batch:
        batch = _Documents.joined(self.parts).as_batch(self.size)
        self.parts, self.size = [], 0
        return batch


_PATH_TAILS = np.frombuffer("".join(_CORPUS_SUFFIXES).encode(), np.uint8)
_PATH_TAIL_ENDS = np.cumsum([len(suffix) for suffix in _CORPUS_SUFFIXES]).astype(np.int64)


def _str_documents(chunk: _Items) -> _Documents | None:
    """A chunk whose items are all str documents (none shaped like a corpus path) as
    documents, else None: the caller then takes the items one by one, with their rules and
    messages.

    Issue 18: the reader of a list of str runs on the calling thread under the GIL and
    bounds 2-thread counting. Per item it did a type check, an ``endswith``, an encode,
    an append and a ``len`` in the interpreter loop (~340 ns for a 53-byte line, most of
    it not the encode); now: ``utf8_documents`` and a path-name test on the documents'
    last bytes by a kernel (``str.endswith`` mapped over the chunk cost ~60-130 ns an
    item). bench/RESULTS.md has the measured rate.
    """
    documents = utf8_documents(chunk.items, private=True, span=chunk.span)  # a list of its own
    if documents is None or (_may_end_like_a_path(documents)
                             and any(map(is_corpus_path, chunk.texts))):
        return None
    return documents


def _bytes_documents(chunk: _Items) -> _Documents | None:
    """A chunk whose items are all bytes (always documents) in one join, else None. One
    by one, the reader's rules took ~6 us an item (300 K lines of a binary stream, such as
    ``gpubpe encode``'s standard input: 1.79 s)."""
    texts = chunk.texts
    return _Documents.of(texts) if all(type(text) is bytes for text in texts) else None


# A list of fewer str than this, on one thread, is encoded by ``str.encode``: the kernels'
# fixed cost (the runs' bounds, two calls, their buffers: ~20 us) passed ``str.encode``'s
# from ~250 English lines of 40+ characters and from ~250 Chinese ones of 64 (session 23:
# 8 lines 20.6 -> 1.3 us, 64 lines 19.8 -> 5.2, 1,024 lines 30.5 against 68.4). A counting
# task's share (``private``) keeps the kernels: they read it without the GIL.
_KERNEL_MIN_ITEMS = 256


def utf8_documents(texts: list, run_all=None, parts: int = 1, private: bool = False,
                   span: tuple[int, int] | None = None) -> _Documents | None:
    """The UTF-8 of a list of str (subclasses too) end to end with each one's byte length,
    or None when an item is no str or holds a lone surrogate (the caller names it).

    Lists of exact str are encoded by ``kernels.str_utf8`` without the GIL (issue 18; a
    mixed-script line ~70 ns, an English one ~15, against ~115 and ~70 by ``str.encode``
    4,096 items at a time, which the reading thread paid under the GIL); others (str
    subclasses such as ``np.str_``, another Python, a short list on one thread) by
    ``str.encode``. ``run_all`` and ``parts``: encode runs of the list at once;
    ``private``, ``span``: see ``_pystr.str_list_utf8``.
    """
    kernels = parts > 1 or private or len(texts) >= _KERNEL_MIN_ITEMS
    encoded = str_list_utf8(texts, run_all, parts, private, span) if kernels else None
    if encoded is not None:
        return _Documents(*encoded)
    if span is not None:
        texts = texts[span[0]:span[1]]
    try:
        return _Documents.of(list(map(str.encode, texts)))
    except (TypeError, UnicodeEncodeError):  # a bytes item, a Path, a lone surrogate
        return None


def _may_end_like_a_path(documents: _Documents) -> bool:
    """Whether a document's bytes end with a corpus file suffix (a cheap superset of
    ``is_corpus_path``: the caller checks the few it finds). A nogil kernel: in the
    counting tasks of many threads, NumPy's passes over the lengths held the GIL (~3 ms
    of 8.4 MB of lines)."""
    return any_ends_with(np.frombuffer(documents.data, np.uint8), documents.lengths,
                         _PATH_TAILS, _PATH_TAIL_ENDS)


def is_corpus_path(item) -> bool:
    """The rule of :func:`iter_batches`: Path objects, and str shaped like a corpus file name."""
    if isinstance(item, str):  # endswith first: ~40 ns where the regex takes ~560 ns
        return (item.endswith(_CORPUS_SUFFIXES) and len(item) <= 4096
                and bool(_CORPUS_NAME.match(item)))
    return isinstance(item, os.PathLike)


def corpus_paths(paths) -> list[Path]:
    """Paths (a path or an iterable of them) as a list, each checked readable up front."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    try:
        paths = [Path(p) for p in paths]
    except TypeError as exc:
        raise CorpusError(f"input files must be paths: {exc}") from None
    if not paths:
        raise CorpusError("no input files given")
    for path in paths:
        check_readable(path)
    return paths


def read_file(path: Path, text_field: str = "text", batch_bytes: int = _BATCH_BYTES,
              byte_range: tuple[int, int] | None = None) -> Iterator[Batch]:
    """The documents of one corpus file (checked readable first), by its suffix.

    ``byte_range=(start, end)``: only the documents whose first byte lies in
    ``[start, end)`` (line files and ``.jsonl``; a document is a line), so
    ranges that tile a file give each document exactly once (``gpubpe.dask``
    splits large files this way). A ``.parquet`` file and a compressed file
    (``.gz``) are read whole. ``Batch.input_bytes`` counts the file's own
    bytes (compressed ones for a ``.gz``), as progress bars over file sizes need.
    """
    check_readable(path)
    start, end = (0, None) if byte_range is None else byte_range
    kind = content_suffix(path)
    whole_only = kind == ".parquet" or is_compressed(path)
    if whole_only and byte_range is not None and (start, end) != (0, path.stat().st_size):
        raise CorpusError(f"{path}: a {path.suffix} file is read whole, not by byte range")
    if kind == ".parquet":
        if is_compressed(path):
            raise CorpusError(f"{path}: Parquet compresses its own pages; pass the .parquet "
                              "file itself")
        return _read_parquet(path, text_field, batch_bytes)
    if kind == ".jsonl":
        batches = _read_jsonl(path, text_field, batch_bytes, start, end)
    else:
        batches = _read_lines(path, batch_bytes, start, end)
    return _decompressed(path, batches) if is_compressed(path) else batches


def is_compressed(path) -> bool:
    """Whether the corpus reader decompresses this file (its suffix is ``.gz``)."""
    return Path(path).suffix in COMPRESSED_SUFFIXES


def content_suffix(path) -> str:
    """The suffix that says how a file's documents are read: ``a.jsonl.gz`` -> ``.jsonl``."""
    path = Path(path)
    return Path(path.stem).suffix if is_compressed(path) else path.suffix


def _open_input(path: Path):
    """The file's bytes (decompressed for a ``.gz``), as a binary handle."""
    return gzip.open(path, "rb") if is_compressed(path) else path.open("rb")


def _file_bytes_read(handle, last: int) -> tuple[int, int]:
    """(bytes of the file itself read since ``last``, the position now) of a gzip handle."""
    position = handle.fileobj.tell()
    return position - last, position


def _decompressed(path: Path, batches: Iterator[Batch]) -> Iterator[Batch]:
    """``batches``, with a damaged or truncated gzip stream said as a CorpusError."""
    try:
        yield from batches
    except _GZIP_ERRORS as exc:
        raise CorpusError(f"{path}: the gzip data is damaged or cut short ({exc}); "
                          "decompress it again or drop the file") from None


def check_readable(path: Path) -> None:
    """Raise CorpusError unless ``path`` is a readable file (text, or Parquet by its suffix;
    a ``.gz`` must decompress to text)."""
    path = Path(path)
    try:
        exists = path.exists()
    except (OSError, ValueError) as exc:  # a name too long, a NUL in it
        raise CorpusError(f"{str(path)[:80]!r} is not a usable file name ({exc})") from None
    if not exists:
        raise CorpusError(f"{path}: no such file")
    if path.is_dir():
        raise CorpusError(f"{path} is a directory; pass the files inside it")
    try:
        with _open_input(path) as handle:
            head = handle.read(8192)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # only a .gz raises these
        raise CorpusError(f"{path}: not a readable gzip file ({exc})") from None
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read ({exc.strerror})") from None
    if b"\x00" in head and content_suffix(path) != ".parquet":
        raise CorpusError(f"{path} looks binary (NUL bytes in its first 8 KiB); expected text")


def _read_lines(path: Path, batch_bytes: int, start: int = 0,
                end: int | None = None) -> Iterator[Batch]:
    """Whole lines, about ``batch_bytes`` at a time; each line with its "\\n" is a document.

    Only lines starting in ``[start, end)`` (``end`` None: to the end of the file).
    """
    for data, _, consumed in _line_chunks(path, batch_bytes, start, end):
        yield Batch(data, _line_ends(data), consumed)


def _line_chunks(path: Path, batch_bytes: int, start: int,
                 end: int | None) -> Iterator[tuple[bytes | memoryview, int, int]]:
    """Whole lines starting in ``[start, end)``, about ``batch_bytes`` at a time:
    ``(data, its offset in the file, file bytes consumed)`` (compressed bytes for a .gz).
    The first chunk is ``_FIRST_DOCUMENT_BATCH_BYTES``: the counting threads start on it
    while the next is read (issue 18, 8.4 MB of lines on 2 threads: 33.0-33.4 -> 30.6-31.5
    ms; chunks growing 1, 2, 4 MB were slower, 41.2 against 37.8 ms, as they split into
    more shares, each added on the reading thread). A file not compressed is read as the
    counting tasks read their byte ranges (``_range_lines``)."""
    size, compressed = min(batch_bytes, _FIRST_DOCUMENT_BATCH_BYTES), is_compressed(path)
    if not compressed and _PREAD:
        file = _OpenFile(path)
        stop = os.fstat(file.fd).st_size
        stop = stop if end is None else min(end, stop)
        while start < stop:
            limit = min(start + size, stop)
            data, at = _range_lines(file.fd, start, limit)
            if data:  # (none: a line longer than the batch began before it)
                yield data, at, len(data)
            start, size = limit, batch_bytes
        return
    file_position = 0
    with _open_input(path) as handle:
        position = _first_line_at(handle, start)
        while end is None or position < end:
            data = handle.read(size if end is None else min(size, end - position))
            size = batch_bytes
            if data and data[-1] != 10:  # finish the line begun before the limit
                data += handle.readline()  # (a gzip stream seeks back by reading again)
            if not data:
                return
            consumed = len(data)
            if compressed:
                consumed, file_position = _file_bytes_read(handle, file_position)
            yield data, position, consumed
            position += len(data)


_LINE_SLACK = 64 << 10


def _range_lines(fd: int, start: int, end: int) -> tuple[bytes | memoryview, int]:
    """The lines of the file open as ``fd`` that start in ``[start, end)``, whole, and the
    offset of the first: read by ``os.pread`` (no shared position: a counting task a
    range), with ``_LINE_SLACK`` bytes more, in which the line cut at ``end`` mostly ends.

    Issue 18: a batch's line cut at its limit used to be finished by ``data +=
    handle.readline()``, a copy of each batch into new pages under the GIL (reading 40 MB
    of lines 12.3-13.4 -> 9.9-10.6 ms without it)."""
    base = max(start - 1, 0)  # the byte before the range says whether a line starts there
    data = os.pread(fd, end - base + _LINE_SLACK, base)
    first = data.find(b"\n") + 1 if start > 0 else 0
    if (start > 0 and first == 0) or base + first >= end:
        return b"", end  # no line starts in the range
    cut = data.find(b"\n", end - 1 - base) + 1
    while not cut:  # the line cut at ``end`` goes on past what was read: as much again
        more = os.pread(fd, len(data), base + len(data))
        if not more:
            break
        newline = more.find(b"\n")
        cut = len(data) + newline + 1 if newline >= 0 else 0
        data += more
    cut = cut or len(data)  # the file ends without a "\n"
    return memoryview(data)[first:cut], base + first


_PREAD = hasattr(os, "pread")


class _OpenFile:
    """A file open for ``os.pread`` while this is held (the counting tasks of its byte
    ranges hold it: closed when the last of them is dropped, run or cancelled)."""

    fd = -1

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self):
        if self.fd >= 0:
            os.close(self.fd)


def _file_size(path: Path) -> int:
    """``path``'s size in bytes, -1 where it cannot be asked (``read_file`` then says why).
    Issue 18: a small file counted on 4+ threads was checked readable twice, ~25 us."""
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return -1


def _line_ends(data: bytes) -> np.ndarray:
    """int64 ends of the lines of ``data`` (the last one may lack its "\\n")."""
    return line_ends(np.frombuffer(data, dtype=np.uint8))


def _read_jsonl(path: Path, text_field: str, batch_bytes: int, start: int = 0,
                end: int | None = None) -> Iterator[Batch]:
    """The ``text_field`` of each non-blank line starting in ``[start, end)``.

    Lines are read about ``batch_bytes`` at a time and their fields taken by
    ``kernels.jsonl`` without the GIL; ``json.loads`` reads the lines it leaves (and
    names their errors). Issue 18, 8.8 MB of ~1.5 KB documents: json.loads on every line
    read 157 MB/s of text on the reading thread.
    """
    key = _field_key(text_field)
    lines_before = 0
    for data, offset, consumed in _line_chunks(path, batch_bytes, start, end):
        line_end = _line_ends(data)
        place = _JsonlPlace(path, text_field, None if start else lines_before, offset)
        yield _jsonl_documents(data, line_end, key, place).as_batch(consumed)
        lines_before += line_end.size


def _field_key(text_field: str) -> np.ndarray:
    """The JSON key ``kernels.jsonl`` looks for, as bytes."""
    return np.frombuffer(text_field.encode("utf-8", "surrogatepass"), np.uint8)


@dataclass
class _JsonlPlace:
    """Where a chunk of JSON lines comes from, to name a bad line."""

    path: Path
    text_field: str
    lines_before: int | None  # lines of the file before the chunk; None: counted if needed
    offset: int  # the chunk's first byte in the file

    def text(self, line: bytes, k: int, line_start: int) -> bytes:
        """``_jsonl_text`` of line k of the chunk, an error naming its line in the file."""
        number = (self.lines_before + k + 1 if self.lines_before is not None
                  else _line_number(self.path, self.offset + line_start))
        return _jsonl_text(line, self.path, number, self.text_field)


def _jsonl_documents(data: bytes | memoryview, line_end: np.ndarray, key: np.ndarray,
                     place: _JsonlPlace) -> _Documents:
    """The field of each non-blank line of ``data`` as documents."""
    array = np.frombuffer(data, dtype=np.uint8)
    line_start = np.concatenate([[0], line_end[:-1]]).astype(np.int64)
    out = np.empty(len(data) + 3, dtype=np.uint8)  # an escaped character stores 4 bytes
    kind, text_start, text_end = (np.empty(line_end.size, dtype=np.int64) for _ in range(3))
    others = jsonl_texts(array, line_start, line_end, key, out, kind, text_start, text_end,
                         np.empty(JSONL_MAX_DEPTH, dtype=np.uint8))
    if not others:
        texts = kind == JSONL_TEXT
        size = int(text_end[texts][-1]) if texts.any() else 0
        return _Documents(out[:size].tobytes(), (text_end - text_start)[texts])  # Batch: bytes
    pieces = []  # a line json.loads must read: the documents one by one, in order
    for k in np.flatnonzero(kind != JSONL_BLANK).tolist():
        if kind[k] == JSONL_TEXT:
            pieces.append(out[text_start[k]:text_end[k]].tobytes())
        else:
            pieces.append(place.text(bytes(data[line_start[k]:line_end[k]]), k,
                                     int(line_start[k])))
    return _Documents.of(pieces)


def _first_line_at(handle, start: int) -> int:
    """Seek ``handle`` to the first line starting at or after byte ``start``; its offset."""
    if start <= 0:
        return 0
    handle.seek(start - 1)
    if handle.read(1) != b"\n":  # ``start`` is inside a line that began before it
        handle.readline()
    return handle.tell()


def _line_number(path: Path, offset: int) -> int:
    """The 1-based number of the line starting at byte ``offset`` of ``path``."""
    newlines = 0
    with path.open("rb") as handle:
        while offset > 0:
            chunk = handle.read(min(offset, 1 << 20))
            newlines += chunk.count(b"\n")
            offset -= len(chunk)
    return newlines + 1


def _jsonl_text(line: bytes, path: Path, number: int, text_field: str) -> bytes:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise CorpusError(f"{path}:{number}: not valid JSON ({exc})") from None
    if not isinstance(record, dict) or text_field not in record:
        raise CorpusError(f"{path}:{number}: no {text_field!r} field; choose the field with "
                          "text_field= (--text-field)")
    text = record[text_field]
    if not isinstance(text, str):
        raise CorpusError(f"{path}:{number}: field {text_field!r} is a {type(text).__name__}, "
                          "not a string")
    return as_bytes(text, f"{path}:{number} field {text_field!r}",
                    "the line has a \\uXXXX escape of half a surrogate pair: replace it in the "
                    "file (with \\ufffd, say) or drop the line")


def _read_parquet(path: Path, text_field: str, batch_bytes: int) -> Iterator[Batch]:
    """Record batches of a string column, read from Arrow's buffers without a str per row."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(f"{path}: reading .parquet needs pyarrow; pip install "
                          "'gpubpe[parquet]' (or pyarrow)") from None
    try:
        reader = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise CorpusError(f"{path}: not a readable Parquet file ({exc})") from None
    if text_field not in reader.schema_arrow.names:
        raise CorpusError(f"{path}: no column {text_field!r} (columns: "
                          f"{reader.schema_arrow.names}); choose it with text_field=")
    file_bytes = path.stat().st_size
    total_rows = max(reader.metadata.num_rows, 1)
    first_row = 0
    rows = max(256, min(1 << 16, batch_bytes // 256))
    for record_batch in reader.iter_batches(batch_size=rows, columns=[text_field]):
        column = record_batch.column(0)
        yield _arrow_strings_batch(column, path, text_field, first_row,
                                   file_bytes * len(column) // total_rows)
        first_row += len(column)


def _arrow_strings_batch(column, path: Path, text_field: str, first_row: int,
                         input_bytes: int) -> Batch:
    import pyarrow as pa

    if column.null_count:
        row = first_row + column.is_null().to_numpy(zero_copy_only=False).argmax()
        raise CorpusError(f"{path}: column {text_field!r} is null at row {row}")
    if pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        offset_type = np.int32
    elif pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        offset_type = np.int64
    else:
        raise CorpusError(f"{path}: column {text_field!r} holds {column.type}, not strings")
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[column.offset:]
    offsets = offsets[:len(column) + 1].astype(np.int64)
    data = b"" if data_buffer is None else memoryview(data_buffer)[offsets[0]:offsets[-1]]
    return Batch(bytes(data), offsets[1:] - offsets[0], input_bytes)


def segments(batch: Batch, specials: regex.Pattern | None) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) byte ranges of the batch's text: documents, minus special tokens."""
    ends = batch.doc_ends
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    if specials is None:
        return starts, ends
    spans = np.array([m.span() for m in specials.finditer(batch.data)], dtype=np.int64)
    if spans.size == 0:
        return starts, ends
    cuts = np.unique(np.concatenate([[0], ends, spans[:, 0], spans[:, 1]]))
    starts, ends = cuts[:-1], cuts[1:]
    inside = np.searchsorted(spans[:, 0], starts, side="right") - 1
    in_special = (inside >= 0) & (starts < spans[np.maximum(inside, 0), 1])
    return starts[~in_special], ends[~in_special]


# ---------------------------------------------------------------- word counting


def count_words(
    corpus,
    pattern: str | None = "gpt2",
    special_tokens: Iterable[str] = (),
    text_field: str = "text",
    num_threads: int | None = None,
    progress=None,
    backend: str = "cpu",
) -> dict[bytes, int]:
    """Count pre-tokenized words over a corpus: ``{word_bytes: count}``.

    Special-token text is cut out and never counted. ``progress`` (a tqdm-like
    object) is advanced by the number of bytes read: a file's own (so a bar whose total
    is the files' sizes ends full, for JSON lines and ``.gz`` too), a document's UTF-8.
    ``backend="cuda"`` counts the named patterns on the device (the same counts, in the
    same order).
    """
    xp = _counting_device(backend, resolve_pattern(pattern))
    if xp is not None:
        counts = _count_on_device(iter_batches(corpus, text_field, _DEVICE_BATCH_BYTES),
                                  resolve_pattern(pattern), special_tokens, xp, progress)
        if counts is not None:
            return counts
        if progress is not None and hasattr(progress, "reset"):
            progress.reset()  # a 56-bit word key collided on the device: count exactly
    counting = _WordCounting(pattern, special_tokens, num_threads, progress, text_field)
    counting.run(counting.corpus_tasks(corpus))
    return counting.tally.as_dict()


def count_batch_words(batches: Iterable[Batch], pattern: str | None = "gpt2",
                      special_tokens: Iterable[str] = (), num_threads: int | None = None,
                      progress=None) -> dict[bytes, int]:
    """:func:`count_words` over batches already read (``gpubpe.dask`` reads a split's)."""
    counting = _WordCounting(pattern, special_tokens, num_threads, progress)
    counting.run(map(counting.batch_tasks, batches))
    return counting.tally.as_dict()


class _WordCounting:
    """One word count: share tasks (a function and its arguments) counted on the threads,
    their words added into one tally in task order, so the counts and their order are the
    same on every thread count.

    Threads (issue 18, py-spy and CPU times on 2 cores): counting is a nogil kernel; each
    share's words are added into the tally by a nogil kernel (kernels.word_tally) on the
    calling thread. How a corpus is read depends on the threads (``corpus_tasks``).
    """

    def __init__(self, pattern, special_tokens, num_threads, progress, text_field="text"):
        self.regex_text = resolve_pattern(pattern)
        specials = special_splitter(special_tokens)
        self.special_bytes = regex.compile(specials.pattern.encode("utf-8")) if specials else None
        scanner = scanner_for(self.regex_text)
        self.counter = _count_scanned_batch if scanner is not None else _count_regex_batch
        self.scanner = None if scanner is None else (scanner, scanner_table(scanner))
        self.one_kernel = self.scanner is not None and self.special_bytes is None
        self.threads = thread_count(num_threads)
        self.progress, self.text_field = progress, text_field
        self.tally = _WordTally(share_known=self.threads > 1)

    def corpus_tasks(self, corpus) -> Iterator[list[tuple]]:
        """The tasks of a corpus, a list of them at a time.

        Up to ``_READ_IN_SHARES_FROM`` threads, the calling thread reads the corpus into
        batches (``iter_batches``: a list of str turned into UTF-8 by ``_pystr``, nogil,
        ~9 of 59 ms for 8.4 MB of lines on one thread) while the others count, and each
        batch is cut into a share a thread. That reading is serial: it bounds the speedup
        near 6x (and its adding with it, lower) whatever the cores. From that many threads
        on, each share of a chunk of items is read by the task that counts it
        (``_ShareSizes``), and the calling thread only takes the items and adds.

        On the 2-core VM reading in the tasks was slower (2 threads, the same 8.4 MB:
        38-40 ms against 34-37, 65-72 ms of CPU against 62-66): two counting kernels at
        once cost ~10% more CPU each than one (the batches read beforehand, 1 thread 47.5
        ms, 2 threads 52 ms of CPU), and a reading thread beside one counting thread
        overlaps less of that. With 16 threads forced on the VM (``bench/serial_steps.py``)
        what stays serial (the calling thread's own time, the tasks' GIL-held Python)
        bounds 16 cores at 6-7.5x for 8.4 MB of lines and 14-15x for 40 MB (session 14);
        reading on the calling thread, its reading and adds alone bounded them at ~3x:
        RESULTS.md.

        A file of lines or JSON lines is read the same way from that many threads: each
        task reads the lines that start in a byte range of it (``_path_tasks``). On 2
        threads that was slower (8.4 MB of lines, 280-289 MB/s against 289-307: the
        ranges' merges cost more than the calling thread's reading, ~0.3 ms a MB).
        """
        if self.threads < _READ_IN_SHARES_FROM:
            return map(self.batch_tasks, iter_batches(corpus, self.text_field))
        if isinstance(corpus, str | os.PathLike):  # one file: no chunk of items to share
            return self._read_tasks(_Items([Path(corpus)], 0, True))
        sizes = _ShareSizes(self.threads)
        return (_ChunkShares(len(shares)).tasks(self._counted_items, shares)
                for shares in map(sizes.shares, _item_chunks(corpus, sizes.after)))

    def batch_tasks(self, batch: Batch) -> list[tuple]:
        """A task a thread's share of a batch already read (the corpus's last batch, when
        known, in two a thread: no thread is left with a long share after the others
        ended); the first one counts its bytes."""
        split = 2 if batch.last and self.threads > 1 else 1
        shares = _segment_shares(*segments(batch, self.special_bytes), split * self.threads)
        return [(int(ends.sum() - starts.sum()), self._counted_share, batch.data, starts, ends,
                 0 if k else batch.input_bytes) for k, (starts, ends) in enumerate(shares)]

    def run(self, task_lists: Iterable[list[tuple]]) -> None:
        """Run the tasks (``(cost, function, *args)``) on the threads and add their words in
        order. A list is submitted whole before this thread waits (2 threads: a chunk's
        shares given one at a time left the pool thread idle while this one ran a share it
        had taken to help)."""
        if self.threads == 1:  # on the calling thread: one thread means one
            for _, function, *args in itertools.chain.from_iterable(task_lists):
                self._add(function(*args))
            return
        shares = HelpedPool(self.threads - 1)  # and this thread: see HelpedPool
        try:
            for tasks in task_lists:
                if len(tasks) == 1 and not shares and tasks[0][0] < _MIN_SEGMENT_SHARE_BYTES:
                    self._add(self._looked_up(*tasks[0][1:]))  # no hand-off (~25 us) for it
                    continue
                for cost, *task in tasks:
                    shares.submit(self._looked_up, *task, cost=cost)
                while len(shares) > 2 * self.threads:
                    self._add(shares.oldest_result())
            while shares:
                self._add(shares.oldest_result())
        finally:
            shares.cancel()  # after an error: no share starts, none runs on once this returns
        # Tried (issue 18), to take the adding off the calling thread: each share added
        # on its pool thread in share order (a turn condition): slower (2 threads 111-128
        # ms against 86-105; a pool thread waiting for its turn is a counting thread lost);
        # one adder thread taking the shares in order: slower too (108-140 ms; four threads
        # on two cores). The tally in one part a thread by word hash, each share's parts
        # added as pool tasks once the share before was in (no thread waits for a turn; what
        # many cores would want: one ordered tally adds threads x a share's distinct words a
        # batch): slower on 2 cores, 1 thread 103-109 -> 110-116 ms, 2 threads 68-73 ->
        # 78-85 (the partition pass, first-seen keys and the merge by them at the end).

    def _looked_up(self, function, *args):
        """A task's shares (``function(*args)``: a share, a list of them, or a chunk left
        to read here), each with its words looked up, on the thread that ran it, among the
        words the tally had at its last copy (``_WordTally.known``)."""
        counted, known = function(*args), self.tally.known
        if known is None:
            return counted
        if isinstance(counted, list):
            return [_with_known_words(share, known) for share in counted]
        return _with_known_words(counted, known)

    def _add(self, counted) -> None:
        if isinstance(counted, list):  # a chunk's shares (_ChunkShares), or [] (not last)
            for share in counted:
                self._add(share)
            return
        if isinstance(counted, _Items):  # not all str documents: read here, in order
            self.run(self._read_tasks(counted))
            return
        *words, n_bytes = counted
        self.tally.add(*words)
        if self.progress is not None and n_bytes:
            self.progress.update(n_bytes)

    def _read_tasks(self, chunk: _Items) -> Iterator[list[tuple]]:
        """The tasks of a chunk read one item at a time (paths, bytes, errors)."""
        pending = _PendingDocuments()
        reads = _read_items(chunk, pending, self.text_field, _BATCH_BYTES, self._path_tasks)
        yield from map(self._tasks_of, reads)
        if pending:
            yield self.batch_tasks(pending.batch())

    def _tasks_of(self, read: Batch | list[tuple]) -> list[tuple]:
        """The tasks of a batch read here, or of a file's byte ranges (``_path_tasks``)."""
        return read if isinstance(read, list) else self.batch_tasks(read)

    def _path_tasks(self, path: Path) -> Iterator[Batch | list]:
        """A file's tasks: the batches of one read here, or, a file of lines or JSON lines
        not compressed, lists of tasks that each read and count the lines starting in a
        byte range of it (``_byte_ranges``; the file open while any of them is held).

        Issue 18: read here, a 40 MB file of lines took the calling thread ~30 ms (the
        reads into new pages, the line ends), 1/7 of a one-thread count: 16 threads could
        count such a file no more than ~7x as fast as one (bench/RESULTS.md)."""
        if not (is_compressed(path) or content_suffix(path) == ".parquet" or not _PREAD):
            if _file_size(path) >= _MIN_SHARE_BYTES:  # (else too small to share: read_file)
                check_readable(path)
                file = _OpenFile(path)
                key = _field_key(self.text_field) if content_suffix(path) == ".jsonl" else None
                for ranges in _byte_ranges(os.fstat(file.fd).st_size, self.threads):
                    yield _ChunkShares(len(ranges)).tasks(
                        partial(self._counted_range, path, file, key), ranges)
                return
        yield from read_file(path, self.text_field)

    def _counted_range(self, path: Path, file: _OpenFile, key: np.ndarray | None,
                       byte_range: tuple[int, int]) -> tuple:
        """The words of the documents of ``path`` (``file``; JSON lines whose field is
        ``key``, or lines where None) whose lines start in ``byte_range``."""
        data, at = _range_lines(file.fd, *byte_range)
        if not data:
            no_words = np.empty(0, np.int64)
            return self._counted_share(b"", no_words, no_words, 0)
        if self.one_kernel and key is None:
            done, *counted = count_line_share(np.frombuffer(data, np.uint8), *self.scanner)
            if done:
                return (*counted, len(data))
        line_end = _line_ends(data)
        if key is not None:
            place = _JsonlPlace(path, self.text_field, None, at)
            batch = _jsonl_documents(data, line_end, key, place).as_batch(len(data))
        else:
            batch = Batch(data, line_end, len(data))
        return self._counted_share(batch.data, *segments(batch, self.special_bytes),
                                   batch.input_bytes)

    def _counted_items(self, chunk: _Items) -> tuple | _Items:
        """A chunk's words counted, or the chunk when its items are not all str documents.
        In one nogil kernel where it can (``count_str_share``: a named pattern, no special
        tokens, every item an exact str of a checked layout)."""
        span = (str_span(chunk.items, chunk.lo) if self.one_kernel and chunk.approx_bytes >= 0
                else None)
        if span is not None:
            items_at, layout = span
            done, *counted = count_str_share(items_at, chunk.span[1] - chunk.lo, layout,
                                             *self.scanner, _PATH_TAILS, _PATH_TAIL_ENDS)
            if done:
                return tuple(counted)
        documents = _str_documents(chunk)
        if documents is None:
            return chunk
        batch = documents.as_batch(len(documents.data))
        return self._counted_share(batch.data, *segments(batch, self.special_bytes),
                                   len(batch.data))

    def _counted_share(self, data, starts, ends, n_bytes: int) -> tuple:
        """A share's word counts as ``_WordTally.add`` takes them (words packed, keyed),
        and the bytes it read."""
        return (*self.counter(data, starts, ends, self.regex_text), n_bytes)


def _with_known_words(counted, known: tuple):
    """A counted share with each word's index among the tally's ``known`` words (-1: not
    among them) before its byte count; anything else as it is."""
    if not isinstance(counted, tuple):
        return counted
    *share, n_bytes = counted
    packed, length, _, keys = share
    found = np.empty(length.size, np.int64)
    known_words(*known, packed, length, keys, found)
    return (*share, found, n_bytes)


class _ChunkShares:
    """The shares of one chunk of items, counted on the threads: the thread that ends the
    last of them adds their words into one share, in order, and gives it; the others give
    an empty list. So the calling thread adds a chunk's distinct words once, not once a
    share (the adding of 16 shares a chunk was most of its own steps on 16 threads).
    """

    def __init__(self, n_shares: int):
        self.counted: list = [None] * n_shares
        self.left = n_shares
        self.lock = threading.Lock()

    def tasks(self, count, shares: list) -> list[tuple]:
        """A task a share (an ``_Items``, or a byte range of a file): ``count(share)``."""
        return [(_cost(share), self._counted, k, count, share) for k, share in enumerate(shares)]

    def _counted(self, k: int, count, share: _Items) -> list:
        self.counted[k] = count(share)
        with self.lock:
            self.left -= 1
            if self.left:
                return []
        return _merged_runs(self.counted)


def _cost(share) -> int:
    """About a share's bytes (``HelpedPool``'s cost: the costliest unstarted runs first)."""
    return share.approx_bytes if isinstance(share, _Items) else share[1] - share[0]


def _byte_ranges(size: int, threads: int) -> Iterator[list[tuple[int, int]]]:
    """A file of ``size`` bytes as ``_ShareSizes`` cuts a list: chunks from
    ``_FIRST_DOCUMENT_BATCH_BYTES`` doubling to ``threads x _MAX_SHARE_BYTES``, each in
    ``threads`` byte ranges (the last in ``2 x threads``), none under ``_MIN_SHARE_BYTES``."""
    start, chunk = 0, _FIRST_DOCUMENT_BATCH_BYTES
    while start < size:
        end = min(size, start + chunk)
        shares = threads * (2 if end == size else 1)
        n = max(1, min(shares, (end - start) // _MIN_SHARE_BYTES))
        cuts = np.linspace(start, end, n + 1).astype(np.int64).tolist()
        yield list(zip(cuts, cuts[1:]))
        start, chunk = end, min(2 * chunk, threads * _MAX_SHARE_BYTES)


def _merged_runs(counted: list) -> list:
    """Counted shares in order, each run of two or more (not chunks left to read here)
    added into one share by a tally of its own (nogil, no bytes objects)."""
    merged = []
    for is_share, run in itertools.groupby(counted, lambda c: not isinstance(c, _Items)):
        run = list(run)
        if not is_share or len(run) == 1:
            merged += run
            continue
        tally = _WordTally(keep_words=False, words=1 << 15)
        for *words, _ in run:
            tally.add(*words)
        merged.append((*tally.as_share(), sum(n_bytes for *_, n_bytes in run)))
    return merged


class _ShareSizes:
    """A corpus's items counted on ``threads`` threads: read in batches of items that
    double from about 1 MB up to ``threads`` x ``_MAX_SHARE_BYTES`` of UTF-8 (the item count
    from the bytes an item of the batch before), each cut into ``threads`` shares of about
    equal bytes (estimated from a sample of the str headers, ``_pystr.utf8_bound_ends``).

    Issue 18: each share's distinct words are added on the calling thread (~30-100 ns
    each), so smaller shares cost more there: 8.4 MB of lines in 16 shares a batch added
    in 7.5 ms, in one share a batch 3.0. Batches of 8 MB cut into 16 kept the adding at
    that rate however long the corpus; now shares grow to 4 MB.
    """

    def __init__(self, threads: int):
        self.threads = threads
        self.batch_bytes = _FIRST_DOCUMENT_BATCH_BYTES
        self.item_bytes = 0.0  # UTF-8 bytes an item of the last batch (estimated)

    def after(self, chunk: list | None) -> int:
        """Items in the batch after ``chunk`` (None: the first), from ``item_bytes``, which
        ``shares`` of that chunk set (``corpus_tasks`` cuts a chunk before it asks for the
        next)."""
        if chunk is None:
            return _READ_CHUNK
        self.batch_bytes = min(2 * self.batch_bytes, self.threads * _MAX_SHARE_BYTES)
        return max(self.threads, int(self.batch_bytes / max(self.item_bytes, 1.0)))

    def shares(self, chunk: _Items) -> list[_Items]:
        """``chunk`` in ``threads`` runs of about equal bytes (of equal items when the
        items are not all str); the corpus's last chunk in ``2 x threads``, so that no
        thread is left with a long share after the others ended (2 threads, 8.4 MB of
        lines: one thread idle the last 5 of 38 ms); no share under ``_MIN_SHARE_BYTES``.
        The bytes are estimated from the str headers of ``_SAMPLED_A_SHARE`` items a share
        (``utf8_bound_ends``); each share's task reads its own (``count_str_share``)."""
        n_items = len(chunk.items)
        step = max(1, n_items // (self.threads * _SAMPLED_A_SHARE))
        sampled = utf8_bound_ends(chunk.items, step)
        looks_like_str = sampled is not None
        if not looks_like_str:  # read one item at a time (_counted_items) or by str.encode
            sampled = np.arange(1, -(-n_items // step) + 1, dtype=np.int64)
        total = int(sampled[-1]) * step  # about the chunk's bytes
        self.item_bytes = total / n_items
        n = min(self.threads * (2 if chunk.last else 1), max(1, total // _MIN_SHARE_BYTES))
        at = np.searchsorted(sampled, sampled[-1] * np.arange(1, n) / n)  # samples before
        cuts = np.unique(np.concatenate([[0], np.minimum(at * step, n_items), [n_items]]))
        before = np.concatenate([[0], sampled])[-(-cuts // step)] * step  # bytes before a cut
        sizes = np.diff(before) if looks_like_str else np.full(cuts.size - 1, -1)
        return [_Items(chunk.items, chunk.first + a, chunk.last, a, b, size)
                for a, b, size in zip(cuts.tolist(), cuts[1:].tolist(), sizes.tolist())]


# Threads from which a corpus's items are read in the counting tasks (see corpus_tasks):
# the calling thread reads ~1 GB/s of lines, a counting thread ~0.2, so from about 5
# counting threads on the reader alone is the bound.
_READ_IN_SHARES_FROM = 4
_MAX_SHARE_BYTES = _BATCH_BYTES // 2
# A task's Python between its kernels holds the GIL, so on many threads it is serial: the
# first chunk (4,096 lines, ~200 KB) was cut into 16 shares of ~13 KB.
_MIN_SHARE_BYTES = 128 << 10  # 16 threads: ~16 x 4 MB of UTF-8 and word arrays
_SAMPLED_A_SHARE = 512  # str headers read a share to cut a chunk (every one below that)
_MIN_SEGMENT_SHARE_BYTES = 32 << 10  # fewer threads' shares of a batch read beforehand
_KNOWN_FROM_WORDS = 8192  # a tally copies its cells for the lookups once it has this many


_NONE_FOUND = np.empty(0, np.int64)  # no word looked up (``_WordTally.add``)


class _WordTally:
    """Word counts added share by share (``kernels.word_tally``), as one dict at the end."""

    def __init__(self, keep_words: bool = True, share_known: bool = False,
                 words: int = 1 << 13):
        self.keep_words = keep_words  # make each new word's bytes object as it is added
        # Room for ``words`` words at first, grown by doubling as more come. A count's
        # tally starts small (a 1 MB table filled for each count was 30 of the 100 us of
        # counting 10 lines); a chunk's merge, in a task, at the size of a chunk's words
        # (grown from small, its copies under the GIL added ~1.4 ms a count of 8.4 MB to
        # the tasks' GIL-held time on 16 threads).
        self._room_for(words)
        self.cursor = np.zeros(4, dtype=np.int64)  # words, pool bytes, next word, its offset
        self.words: list[bytes] = []  # word w's bytes, made as it is added
        self.hashes: list[np.ndarray] | None = []  # their hash(), made with them (or None)
        # Other threads look words up in ``known`` (``known_words``): a copy of the cells,
        # with the records and pool of then, made from ``_KNOWN_FROM_WORDS`` words and
        # remade each time the words grew by a quarter.
        self.share_known = share_known
        self.known: tuple | None = None
        self.n_known = 0

    def add(self, packed: np.ndarray, length: np.ndarray, counts: np.ndarray,
            keys: np.ndarray, found: np.ndarray = _NONE_FOUND) -> None:
        """Add the words of ``packed`` (``length[k]`` bytes each, end to end), ``counts[k]``
        times each, in order; ``keys``: ``packed_words``' (exact for short words);
        ``found``: their indices among the ``known`` words (``known_words``), if looked up."""
        first_new = int(self.cursor[0])
        if not first_new and length.size > self.records.shape[0]:  # sized once, not grown
            self._room_for(1 << (2 * int(length.size) - 1).bit_length())
        self.cursor[2:] = 0
        while not add_words(self.cells, self.records, self.pool, self.cursor, packed, length,
                            counts, keys, found):
            self._grow(int(length[self.cursor[2]]))
        if self.keep_words:
            self._keep_words_from(first_new)
        if self.share_known and self.cursor[0] > max(self.n_known * 5 // 4, _KNOWN_FROM_WORDS):
            self.n_known = int(self.cursor[0])
            self.known = (self.cells.copy(), self.records, self.pool)

    def _room_for(self, words: int) -> None:
        """Empty arrays with room for ``words`` words (cells at most half full)."""
        self.cells = np.full((2 * words, 2), EMPTY_KEY, dtype=np.uint64)
        self.records = np.empty((words, 3), dtype=np.int64)  # pool offset, length, count
        self.pool = np.empty(32 * words, dtype=np.uint8)

    def _keep_words_from(self, first: int) -> None:
        """The new words' bytes objects and their hashes, made now: the dict at the end
        then only inserts them (issue 18: bytes objects made at the end were ~3 of its ~5
        ms, 27 K words, on the calling thread after every counting thread had finished)."""
        made = bytes_objects(self.pool, self.records, first, int(self.cursor[0]))
        if made is None:  # not an interpreter whose list layout was checked
            at = self.records[first:self.cursor[0], 0]
            length = self.records[first:self.cursor[0], 1]
            self.words += [self.pool[a:a + n].tobytes() for a, n in zip(at.tolist(),
                                                                       length.tolist())]
            self.hashes = None
            return
        self.words += made[0]
        if self.hashes is not None:
            self.hashes.append(made[1])

    def _grow(self, word_bytes: int) -> None:
        n_words, used = int(self.cursor[0]), int(self.cursor[1])
        if 2 * (n_words + 1) > self.cells.shape[0]:  # words sharing a hash stay apart
            self.cells = cells_grown(self.cells)
        if n_words == self.records.shape[0]:
            self.records = np.concatenate([self.records, np.empty_like(self.records)])
        if used + word_bytes > self.pool.size:
            self.pool = grown_like(self.pool, used + word_bytes)

    def as_dict(self) -> dict[bytes, int]:
        """``{word: count}`` in the order the words were first added."""
        records = self.records[:self.cursor[0]]
        made = None
        if self.hashes is not None and self.keep_words:
            made = dict_of_words(self.words, np.concatenate([np.empty(0, np.int64),
                                                             *self.hashes]), records)
        return dict(zip(self.words, records[:, 2].tolist())) if made is None else made

    def as_share(self) -> tuple:
        """The words so far as a counted share: packed in order, lengths, counts, keys."""
        words = self.records[:self.cursor[0]]
        packed, keys = packed_words(self.pool, words[:, 0].copy(), words[:, 1].copy())
        return packed, words[:, 1].copy(), words[:, 2].copy(), keys


def _segment_shares(starts, ends, threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The segments of one batch in ``threads`` runs of about equal bytes.

    One task per batch left all but one thread idle on a corpus of a few batches
    (a list of lines is read in 8 MB batches); a batch's shares keep every thread
    busy. Counts are merged in order, so each word keeps its place of first
    occurrence and the result is the same for every thread count. No run is cut under
    ``_MIN_SEGMENT_SHARE_BYTES`` (issue 18: 10 lines on 2 threads were counted in 4
    shares, 3x the time of one thread).
    """
    cumulative = np.cumsum(ends - starts)
    threads = min(threads, int(cumulative[-1]) // _MIN_SEGMENT_SHARE_BYTES if starts.size else 1)
    if starts.size < 2 * threads or threads <= 1:
        return [(starts, ends)]
    cuts = np.searchsorted(cumulative, cumulative[-1] * np.arange(1, threads) / threads)
    cuts = np.unique(np.concatenate([[0], cuts + 1, [starts.size]]).clip(0, starts.size))
    return [(starts[a:b], ends[a:b]) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _count_scanned_batch(data: bytes, starts, ends, regex_text) -> tuple:
    """Word counts of a batch by the Numba scanner of a named pattern, as
    ``(packed words, word_len, word_count, word_keys)`` for ``_counted_share``."""
    array = np.frombuffer(data, dtype=np.uint8)
    scanner = scanner_for(regex_text)
    word_at, word_len, word_count, word_keys, collided = count_scanned_words(
        array, starts, ends, scanner, scanner_table(scanner)
    )
    if collided:  # two long words shared a 56-bit key: count this batch exactly instead
        return _count_regex_batch(data, starts, ends, regex_text)
    return packed_bytes(array, word_at, word_len), word_len, word_count, word_keys


def _counting_device(backend: str, regex_text) -> object | None:
    """The array module of the device that counts, or None to count on the CPU.

    A custom pattern has no device scanner: it is counted by ``regex`` on the CPU.
    """
    from .backend import resolve_backend

    chosen = resolve_backend(backend)
    if not chosen.on_device or scanner_for(regex_text) is None:
        return None
    return chosen.xp


@lru_cache(maxsize=4)
def _device_scanner_table(xp, scanner: int):
    """A scanner's class table on the device, copied once (1.1 MB)."""
    from .kernels._cuda import to_device

    return to_device(xp, scanner_table(scanner))


def _count_on_device(batches: Iterable[Batch], regex_text: str, special_tokens, xp,
                     progress) -> dict[bytes, int] | None:
    """Word counts of every batch in one device table (``kernels.encode.pretok_cuda``):
    the CPU counter's words, counts and order; the words come back to the host once.

    None when two long words shared a 56-bit key (the caller counts on the CPU).
    """
    from .kernels._cuda import to_device
    from .kernels.encode.pretok_cuda import DeviceWordCounter, WordCollision

    specials = special_splitter(special_tokens)
    special_bytes = regex.compile(specials.pattern.encode("utf-8")) if specials else None
    scanner = scanner_for(regex_text)
    counter = DeviceWordCounter(scanner, _device_scanner_table(xp, scanner), xp)
    for batch in batches:
        starts, ends = segments(batch, special_bytes)
        try:
            counter.add(to_device(xp, np.frombuffer(batch.data, dtype=np.uint8)),
                        to_device(xp, starts, np.int64), to_device(xp, ends, np.int64))
        except WordCollision:
            return None
        if progress is not None:
            progress.update(batch.input_bytes)
    counts = counter.result()
    pool = counts.pool.tobytes()
    return {pool[at:at + length]: count for at, length, count in zip(
        counts.pool_start.tolist(), counts.length.tolist(), counts.count.tolist())}


def _count_regex_batch(data: bytes, starts, ends, regex_text) -> tuple:
    """Word counts of a batch by ``regex`` (a custom pattern, or None: a segment is a word),
    as ``_count_scanned_batch`` gives them."""
    counts: Counter = Counter()
    data = bytes(data)  # a memoryview of a list's UTF-8 (_counted_items) has no decode
    for start, end in zip(starts.tolist(), ends.tolist()):
        counts.update(split_words(data[start:end].decode("utf-8", "surrogateescape"), regex_text))
    words = [word_bytes(word) for word in counts]
    length = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    packed, keys = packed_words(np.frombuffer(b"".join(words), dtype=np.uint8),
                                np.cumsum(length) - length, length)
    return packed, length, np.fromiter(counts.values(), dtype=np.int64, count=len(words)), keys
