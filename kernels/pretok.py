"""Pre-tokenizers (GPT-2, cl100k, o200k, Llama 3, Qwen 2 and 3.5, Tekken, DeepSeek V3, Coder
and LLM, StarCoder) and word counter over UTF-8 bytes, in Numba.

Exact hand-written matchers of the eleven named split patterns, run on bytes:
GPT-2's ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``,
tiktoken's cl100k and o200k patterns, Llama 3's and Qwen's (cl100k's scanner with
switches), Mistral's Tekken (o200k's with one), DeepSeek's three regexes run in
sequence (``deepseek_piece_end``), DeepSeek Coder's and LLM's cascades of five and six
(``deepseek_coder_piece_end``, ``deepseek_llm_piece_end``), and StarCoder's digits then
GPT-2's (``starcoder_piece_end``) (``gpubpe.pretokenize``); and ``JOINS``, a vocabulary's own
cuts for one that splits no text (``joined_piece_end``). The
code-point classes come from tables the caller builds from the ``regex``
module itself (``code_point_classes`` for GPT-2, ``code_point_flags`` for the
others), so the split equals ``regex.findall`` on the same text (tested on
every Unicode general category and random text, ``tests/test_scanners.py``).
Bytes that are not valid UTF-8 count as one "other" character each (no
letter, number, mark or space class), as lone surrogates from
``surrogateescape`` do under ``regex``.

Words never cross segments: the caller passes ``(segment_start, segment_end)``
byte ranges (a document, or the text between special tokens). A scanner is
picked by a small int (``GPT2``, ``CL100K``, ``O200K``, ``LLAMA3``, ``QWEN2``, ``TEKKEN``,
``DEEPSEEK``) through ``piece_end``.

Shape for a device: each pattern is a "piece end" function, ``end =
*_piece_end(data, start, segment_end, table)``, built from scalar helpers that
allocate nothing; a per-position boundary test alone cannot decide these
patterns, because several boundaries depend on unbounded context: cl100k
digits go in threes from the start of their run, ``\\s*[\\r\\n]`` ends after the
last CR/LF of a whitespace run, ``\\s++$`` depends on whether the run reaches
the end, a punctuation char joins a following letter run only at a piece
start ("..a" -> "..", "a" but "x.a" -> "x", ".a"), and o200k's upper-case
run ends after its last Lm/Lo/M char unless a lower-case char follows the
run. What is local is ``is_safe_cut``: a position that is a piece boundary
whatever came before, read from the two characters around it (a space
after a non-space, a letter before punctuation, a newline before text...;
the proofs are in the notes above ``char_before``), so a device kernel cuts
the text there (one thread per position, bounded look-around), then one
thread per cut-out chunk runs the same piece-end function. The CPU does the
same to share one long document among threads; ``encode.pretok_cuda`` is the
device version. A CUDA kernel calls these ``@njit`` helpers as they are
(Numba compiles each as a device function); a PTX build without a device goes through
``cuda_kernels.compile_ptx``, which names the architecture Numba would ask a
device for. Tried before that: with every cl100k/o200k helper inlined at
Numba IR level, one-thread-per-chunk kernels took 53 s (cl100k) and 207 s
(o200k) to compile to PTX for sm_80 on the loaded VM; dropped.

Performance notes (thread CPU time, 2-core build VM, loaded): ``regex`` scans
~4-16 MB/s per core here and its ``findall`` + ``Counter`` held the GIL too
often to scale over threads. The GPT-2 scanner runs at ~100 MB/s per thread;
cl100k at 130-290 MB/s and o200k at 100-240 MB/s (English, code, zh, ja of
``tests/data/multiscript.txt``), both with ``nogil``. Inlining the ASCII word
starts (``*_piece_end_fast``) gave cl100k ~+10% and o200k ~+25% on English.
Counting hashes each word as it is found, into a per-thread table; only
distinct words go back to Python. In cold-cache encoding of Chinese and
Japanese the split is ~5% of the time: BPE of the distinct words dominates.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit import hot
from .hashing import EMPTY_KEY, LONG_WORD_TAG, cells_grown, grown_like, mix64, same_bytes, word_key

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
# ``piece_end``
(GPT2, CL100K, O200K, LLAMA3, QWEN2, TEKKEN, DEEPSEEK, STARCODER, QWEN35, DEEPSEEK_CODER,
 DEEPSEEK_LLM, JOINS) = range(12)
# code_point_flags: \p{L}, \p{N}, \s, o200k's upper and lower classes, [\r\n], \p{M},
# \p{P} or \p{S}
CHAR_L, CHAR_N, CHAR_S, CHAR_U, CHAR_W, CHAR_CRLF, CHAR_M, CHAR_PS = 1, 2, 4, 8, 16, 32, 64, 128


@hot
def decode_multibyte(data, i, end):
    """(code point, byte length) of a sequence with a lead byte >= 0x80; (-1, 1) if invalid."""
    b0 = np.int64(data[i])
    if 0xC2 <= b0 <= 0xDF:
        if i + 1 < end and (data[i + 1] & 0xC0) == 0x80:
            return ((b0 & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F), np.int64(2)
    elif 0xE0 <= b0 <= 0xEF:
        if i + 2 < end and (data[i + 1] & 0xC0) == 0x80 and (data[i + 2] & 0xC0) == 0x80:
            b1 = np.int64(data[i + 1])
            if not ((b0 == 0xE0 and b1 < 0xA0) or (b0 == 0xED and b1 >= 0xA0)):
                return (((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6)
                        | (np.int64(data[i + 2]) & 0x3F)), np.int64(3)
    elif 0xF0 <= b0 <= 0xF4:
        if (i + 3 < end and (data[i + 1] & 0xC0) == 0x80 and (data[i + 2] & 0xC0) == 0x80
                and (data[i + 3] & 0xC0) == 0x80):
            b1 = np.int64(data[i + 1])
            if not ((b0 == 0xF0 and b1 < 0x90) or (b0 == 0xF4 and b1 >= 0x90)):
                return (((b0 & 0x07) << 18) | ((b1 & 0x3F) << 12)
                        | ((np.int64(data[i + 2]) & 0x3F) << 6)
                        | (np.int64(data[i + 3]) & 0x3F)), np.int64(4)
    return np.int64(-1), np.int64(1)  # overlong, encoded surrogate, truncated or stray byte


@hot
def decode_utf8(data, i, end):
    """(code point, byte length) at i; (-1, 1) for a byte that starts no valid sequence."""
    if data[i] < 0x80:
        return np.int64(data[i]), np.int64(1)
    return decode_multibyte(data, i, end)


@hot
def char_class(data, i, end, classes):
    """(class, byte length) of the character at i."""
    if data[i] < 0x80:
        return np.int64(classes[data[i]]), np.int64(1)
    code_point, length = decode_multibyte(data, i, end)
    if code_point < 0:
        return np.int64(OTHER), length
    return np.int64(classes[code_point]), length


@hot
def run_end(data, i, end, classes, wanted):
    """End of the run of characters of class ``wanted`` starting at i."""
    while i < end:
        cls, length = char_class(data, i, end, classes)
        if cls != wanted:
            break
        i += length
    return i


@hot
def contraction_length(data, i, end):
    """Length of 's 't 're 've 'm 'll 'd at i (case-sensitive, as GPT-2), or 0."""
    if data[i] != 39 or i + 1 >= end:
        return 0
    c1 = data[i + 1]
    if c1 == 115 or c1 == 116 or c1 == 109 or c1 == 100:  # s t m d
        return 2
    if i + 2 < end:
        c2 = data[i + 2]
        if (c1 == 114 and c2 == 101) or (c1 == 118 and c2 == 101) or (c1 == 108 and c2 == 108):
            return 3  # re ve ll
    return 0


@hot
def gpt2_word_end(data, i, end, classes):
    """End of the GPT-2 word starting at byte i of a segment ending at ``end``."""
    n = contraction_length(data, i, end)
    if n:
        return i + n
    cls, length = char_class(data, i, end, classes)
    if data[i] == 32 and i + 1 < end:
        next_cls, _ = char_class(data, i + 1, end, classes)
        if next_cls != SPACE:
            return run_end(data, i + 1, end, classes, next_cls)
    if cls != SPACE:
        return run_end(data, i, end, classes, cls)
    # \s+(?!\S) then \s+: a run followed by a non-space gives its last char back.
    j, last, _ = space_run(data, i, end, classes)
    if j < end and last > i:
        return last
    return j


@hot
def space_run(data, i, end, classes):
    """(end, start of its last char, class of the char after it or SPACE at the end) of the
    run of whitespace starting at i."""
    last = i
    after = np.int64(SPACE)
    while i < end:
        after, length = char_class(data, i, end, classes)
        if after != SPACE:
            break
        last = i
        i += length
    return i, last, after


# ---------------------------------------------------------------- cutting long segments
#
# A *safe cut* is a position p inside a segment where, whatever text comes
# before, (1) the pattern's split of the whole segment has a piece boundary at
# p, and (2) the text before p, split alone, gives the same pieces. (2) is
# needed because a chunk is scanned up to its end: end of text is not the char
# at p for ``(?!\S)`` and ``\s++$``. The split after p is the same anyway: a
# match starting at p reads only what follows (no pattern has a look-behind).
# Splitting a segment at safe cuts and scanning the parts gives the pieces of
# the whole; so one long document is shared among threads (``pieces``), or
# among device threads (``encode.pretok_cuda``, one thread per chunk).
#
# The test reads only b, the character before p, and c, the one at p (p a
# character start). Classes: L letter, M mark, N number, S whitespace (``\s``),
# CRLF "\r" "\n", Q anything else (punctuation, symbols, controls, marks for
# cl100k, an invalid byte). Every rule below holds for every left context.
# cl100k, o200k and Llama 3 cut by the first five (``_tiktoken_cut``; Llama 3 splits as
# cl100k does but for its whitespace, o200k's, so each rule holds there as for those two);
# GPT-2 by the last,
# which holds every case of the first four there (``_gpt2_cut``).
#
# - L then not L, M or "'": in every pattern a letter lies only in a letter
#   run (GPT-2 `` ?\p{L}+``, cl100k ``\p{L}++``, o200k's ``[U]*[W]+`` /
#   ``[U]+[W]*``, U and W holding only letters and marks) or in a contraction
#   (``'s`` ... whose letters are the last chars of the piece). A run ends at
#   the first char of none of its classes, and o200k's letter piece can only
#   go on with a contraction, which needs "'". So the piece holding b ends at
#   p; before p, end of text stops the run exactly as c does. (cl100k alone
#   would also allow M and "'"; one rule for both keeps the proof short.)
# - N then not N: numbers lie only in number runs (`` ?\p{N}+``,
#   ``\p{N}{1,3}``): no prefix class, punctuation class or letter class holds N.
# - Q then N, or Q then S other than CR/LF (b not whitespace, c one of those):
#   b lies in a punctuation run, which ends there (its tail takes only CR/LF,
#   and "/" in o200k), in an o200k letter run as a mark (ends: c is no letter
#   or mark, and no "'"), or could prefix a letter run / start a contraction,
#   which needs a letter next. GPT-2's optional space only leads a piece.
# - L or N then S: covered above (S is none of L, M, N, "'").
# - cl100k, o200k and Llama 3 only, CRLF then not S and not "/": b ends a run of
#   whitespace [r, p), possibly after a punctuation run's CR/LF tail (which
#   stops at c). From r, ``\s*[\r\n]`` (cl100k; ``\s++$`` fails, c being
#   no space) and ``\s*[\r\n]+`` (o200k, Llama 3) back off to the run's last CR/LF,
#   which is b: [r, p). Split alone, the run reaches the end: cl100k's
#   ``\s++$`` and o200k's same alternative give [r, p) again. No alternative
#   earlier in the list starts at r inside a whitespace run followed by a
#   whitespace char (a prefix or a space needs a non-space next). o200k's
#   ``[\r\n/]*`` would take a "/" at p, so not before "/".
# - GPT-2 only, b not S and c of another class (S included), unless b is "'"
#   and c a letter (a contraction may start there): GPT-2's non-space pieces
#   are runs of one class with an optional leading space, and contractions.
#
# Not safe (counterexamples in ``tests/test_safe_cuts.py``):
# - GPT-2 after CR/LF: "a \nb" splits as "a", " ", "\n", "b", but "a \n"
#   alone as "a", " \n" (``\s+(?!\S)`` gives nothing back at the end).
# - Between two letters of any script, CJK ideographs included: a letter run
#   never ends at a letter (Lo is in \p{L}, and in both o200k's U and W), so
#   "中文" is one piece in every pattern. Chinese and Japanese prose is cut at
#   its punctuation and newlines, not inside a clause.
# - Q then L (cl100k / o200k: "，中文" is one piece, the comma prefixing the
#   letters), Q then Q (one punctuation run), Q then CR/LF (cl100k's and
#   o200k's punctuation runs take trailing CR/LF), S then S (whitespace runs
#   depend on how they end), and any whitespace then a non-space in GPT-2.


@hot
def char_before(data, p, first):
    """Code point of the character ending at byte p (a character start), as a scan of a
    segment starting at ``first`` (or earlier) decodes it; -1 for an invalid byte."""
    z = p - 1
    while z > first and z > p - 4 and (data[z] & 0xC0) == 0x80:
        z -= 1
    code_point, length = decode_utf8(data, z, p)
    if z + length != p:  # p-1 is a continuation byte that no lead byte covers
        return np.int64(-1)
    return code_point


@hot
def _class_of(code_point, table):
    """A code point's entry in ``table``; 0 (``OTHER``, no flag) for an invalid byte."""
    if code_point < 0:
        return np.int64(0)
    return np.int64(table[code_point])


@hot
def _gpt2_cut(before, before_class, class_at):
    if before_class == SPACE or before_class == class_at:
        return False
    return not (before == 39 and class_at == LETTER)


@hot
def _tiktoken_cut(before, at, flags_before, flags_at):
    if flags_before & CHAR_L:
        return flags_at & (CHAR_U | CHAR_W) == 0 and at != 39
    if flags_before & CHAR_N:
        return flags_at & CHAR_N == 0
    if flags_before & CHAR_CRLF:
        return flags_at & CHAR_S == 0 and at != 47
    if flags_before & CHAR_S:
        return False
    return flags_at & CHAR_N != 0 or (flags_at & CHAR_S != 0 and flags_at & CHAR_CRLF == 0)


@hot
def is_safe_cut(data, p, first, end, scanner, table):
    """Whether byte p of a segment holding ``[first, end)`` is a safe cut (notes above).

    ``first < p < end``; the test reads bytes p-4 .. p+3, none outside
    ``[first, end)``. A byte that starts no character (a continuation byte)
    is never a cut, so a device kernel writing cuts never writes inside a
    character.
    """
    if (data[p] & 0xC0) == 0x80:
        return False
    before = char_before(data, p, first)
    at, _ = decode_utf8(data, p, end)
    if scanner == GPT2:
        return _gpt2_cut(before, _class_of(before, table), _class_of(at, table))
    if scanner == STARCODER:
        return _starcoder_cut(before, _class_of(before, table), _class_of(at, table))
    if scanner == DEEPSEEK_CODER or scanner == DEEPSEEK_LLM:
        return _deepseek_cascade_cut(_class_of(before, table), _class_of(at, table),
                                     scanner == DEEPSEEK_CODER)
    if scanner == DEEPSEEK:
        return _deepseek_cut(before, at, _class_of(before, table), _class_of(at, table))
    if scanner == JOINS:
        if table.size == JOINED_BYTE_PAIRS:
            return table[np.int64(data[p - 1]) * 256 + data[p]] == 0
        return not joined_chars(table, before, at)
    return _tiktoken_cut(before, at, _class_of(before, table), _class_of(at, table))


@hot
def safe_cut(data, first, at, end, scanner, table):
    """First safe cut p in [at, end) of a segment (or text) starting at ``first``, else ``end``.

    ``at`` must be past ``first``. Splitting there and scanning both parts gives
    the pieces of the whole (see the notes above).
    """
    for p in range(at, end):
        if is_safe_cut(data, p, first, end, scanner, table):
            return p
    return end


# Inlined into the caller at Numba IR level: called once per word, it is small
# and a real call (with the class table passed by value) cost a third of the scan.
_inlined = njit(cache=True, _nrt=False, inline="always")


@_inlined
def _ascii_run_end(data, i, end, classes, wanted):
    """End of the run of class ``wanted`` from i: an ASCII loop, decoding only non-ASCII."""
    while i < end:
        byte = data[i]
        if byte < 0x80:
            if classes[byte] != wanted:
                return i
            i += 1
        else:
            code_point, length = decode_multibyte(data, i, end)
            cls = classes[code_point] if code_point >= 0 else OTHER
            if cls != wanted:
                return i
            i += length
    return i


@_inlined
def gpt2_word_end_fast(data, i, end, classes):
    """``gpt2_word_end`` with the common ASCII starts handled inline (same results).

    A word starting with an ASCII letter, digit or symbol, or a space and one
    of those, is a run of one class; whitespace runs, contractions and
    non-ASCII starts go to ``gpt2_word_end``. About 1.4x faster on English.
    """
    byte = data[i]
    if byte >= 0x80:
        return gpt2_word_end(data, i, end, classes)
    cls = classes[byte]
    if byte == 32:
        if i + 1 < end and data[i + 1] < 0x80 and classes[data[i + 1]] != SPACE:
            return _ascii_run_end(data, i + 2, end, classes, classes[data[i + 1]])
        return gpt2_word_end(data, i, end, classes)
    if byte == 39 or cls == SPACE:
        return gpt2_word_end(data, i, end, classes)
    return _ascii_run_end(data, i + 1, end, classes, cls)


@hot
def starcoder_piece_end(data, i, end, classes):
    """End of the piece at byte i under HF's Digits(individual_digits) step then GPT-2's
    regex (StarCoder, Command-R, SmolLM, Refact: ``NAMED_PATTERNS["starcoder"]``).

    Every number char is a piece; GPT-2's regex splits the text between them, each such
    text on its own, so a number char is the end of the text there: a whitespace run
    before one is whole (``\\s+(?!\\S)`` at the end), and no space prefixes a number.
    Elsewhere the GPT-2 scanner decides: its runs of one class stop at a number anyway.
    """
    cls, length = char_class(data, i, end, classes)
    if cls == NUMBER:
        return i + length
    if cls != SPACE:
        return gpt2_word_end_fast(data, i, end, classes)
    j, last, next_cls = space_run(data, i, end, classes)
    if j == end or next_cls == NUMBER:
        return j
    if data[i] == 32 and j == i + 1:  # `` ?\p{L}+`` or `` ?[^\s\p{L}\p{N}]+``
        return run_end(data, j, end, classes, next_cls)
    return last if last > i else j


@hot
def _starcoder_cut(before, before_class, class_at):
    """Beside a number char (the Digits step cuts there), else where GPT-2 cuts."""
    if before_class == NUMBER or class_at == NUMBER:
        return True
    return _gpt2_cut(before, before_class, class_at)


# ---------------------------------------------------------------- cl100k and o200k
#
# The same scheme as the GPT-2 scanner: ``*_piece_end(data, i, end, flags)``
# returns where the piece starting at byte i of a segment ending at ``end``
# ends, exactly as ``regex.findall`` with tiktoken's pattern would cut it. The
# classes come from a table of bit flags per code point (``CHAR_*`` below,
# built by ``gpubpe.pretokenize.code_point_flags`` from ``regex`` itself). A
# byte that starts no valid UTF-8 sequence has no flag: one "other" character,
# as the lone surrogate ``surrogateescape`` makes of it is under ``regex``.
#
# How each alternative is decided (L letter, N number, S whitespace,
# Q = not L/N/S, P = not L/N/CR/LF):
# - cl100k ``[^\r\n\p{L}\p{N}]?+\p{L}++``: a letter run, or one P char then a letter run.
# - o200k ``P?[U]*[W]+C?`` (U = Lu Lt Lm Lo M, W = Ll Lm Lo M): greedy with
#   backtracking, see ``_o200k_a1``; the optional prefix is tried taken, then not
#   (a mark is both P and U/W), before the next alternative.
# - ``\p{N}{1,3}``: digit runs cut in threes from the start of the run.
# - `` ?[^\s\p{L}\p{N}]+[\r\n]*``: a space only when a Q char follows; o200k's
#   ``[\r\n/]*`` takes "/" again after a CR/LF (".\n/" is one piece).
# - whitespace: ``\s*[\r\n]`` ends after the last CR/LF of the run; ``\s+(?!\S)``
#   gives the run's last char back when a non-space follows; cl100k's ``\s++$``
#   takes a run reaching the end of the segment whole (o200k has no such
#   alternative, so its CR/LF rule comes first even there).
#
# Every helper is a scalar function of (data, position, end, flags) that
# allocates nothing, so a device kernel can call the same code (one thread per
# piece of text cut at ``safe_cut`` points, whose test is local).

_LNS = CHAR_L | CHAR_N | CHAR_S
_NOT_PREFIX = CHAR_L | CHAR_N | CHAR_CRLF


@hot
def char_flags(data, i, end, flags):
    """(flags, byte length) of the character at i; (0, 1) for an invalid byte."""
    if data[i] < 0x80:
        return np.int64(flags[data[i]]), np.int64(1)
    code_point, length = decode_multibyte(data, i, end)
    if code_point < 0:
        return np.int64(0), length
    return np.int64(flags[code_point]), length


@hot
def run_with(data, i, end, flags, mask):
    """End of the run of characters having a flag of ``mask``, from i."""
    while i < end:
        if data[i] < 0x80:
            if flags[data[i]] & mask == 0:
                return i
            i += 1
        else:
            f, length = char_flags(data, i, end, flags)
            if f & mask == 0:
                return i
            i += length
    return i


@hot
def run_without(data, i, end, flags, mask):
    """End of the run of characters having no flag of ``mask``, from i."""
    while i < end:
        if data[i] < 0x80:
            if flags[data[i]] & mask != 0:
                return i
            i += 1
        else:
            f, length = char_flags(data, i, end, flags)
            if f & mask != 0:
                return i
            i += length
    return i


@hot
def _crlf_run_end(data, i, end, slash):
    """End of ``[\r\n]*`` (``[\r\n/]*`` with ``slash``) from i."""
    while i < end and (data[i] == 10 or data[i] == 13 or (slash and data[i] == 47)):
        i += 1
    return i


@hot
def _is_ascii_letter(byte, lower):
    return byte == lower or byte == lower - 32


@hot
def _folds_to_s(data, i, end):
    """Byte length of a char matching ``(?i:s)`` at i (s, S, U+017F long s), else 0."""
    if _is_ascii_letter(data[i], 115):
        return 1
    if data[i] == 0xC5 and i + 1 < end and data[i + 1] == 0xBF:
        return 2
    return 0


@hot
def contraction_length_ci(data, i, end):
    """Length of ``'(?i:[sdmt]|ll|ve|re)`` at i, else 0 (cl100k's and o200k's contractions).

    ``regex`` folds case simply: only "s" has a non-ASCII match (U+017F long s).
    """
    if data[i] != 39 or i + 1 >= end:
        return 0
    n = _folds_to_s(data, i + 1, end)
    if n:
        return 1 + n
    c1 = data[i + 1]
    if _is_ascii_letter(c1, 116) or _is_ascii_letter(c1, 109) or _is_ascii_letter(c1, 100):
        return 2  # t m d
    if i + 2 < end:
        c2 = data[i + 2]
        if ((_is_ascii_letter(c1, 108) and _is_ascii_letter(c2, 108))
                or (_is_ascii_letter(c1, 118) and _is_ascii_letter(c2, 101))
                or (_is_ascii_letter(c1, 114) and _is_ascii_letter(c2, 101))):
            return 3  # ll ve re
    return 0


@hot
def whitespace_piece_end(data, i, end, flags, whole_at_end):
    """End of the piece starting with whitespace at i (no letter, digit or Q char won).

    ``whole_at_end``: cl100k's ``\\s++$`` (a run reaching ``end`` is one piece)
    comes before its CR/LF rule; o200k has no such alternative.
    """
    j = i
    last = i
    after_crlf = np.int64(-1)
    while j < end:
        f, length = char_flags(data, j, end, flags)
        if f & CHAR_S == 0:
            break
        last = j
        j += length
        if f & CHAR_CRLF:
            after_crlf = j
    if j == end and whole_at_end:
        return j
    if after_crlf >= 0:
        return after_crlf
    if j < end and last > i:
        return last
    return j


@hot
def _digits_end(data, i, end, flags, most):
    """``\\p{N}{1,most}`` at i (a number char is there); ``most`` is 3 or 1."""
    _, length = char_flags(data, i, end, flags)
    j = i + length
    for _ in range(most - 1):
        if j >= end:
            break
        f, length = char_flags(data, j, end, flags)
        if f & CHAR_N == 0:
            break
        j += length
    return j


@hot
def _punctuation_end(data, i, end, flags, f, slash, words):
    """`` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*`` at i (o200k: ``[\\r\\n/]*``), or -1.

    ``f`` = flags of the char at i; ``words``: the classes no punctuation char has
    (``_LNS``; Qwen 3.5's adds marks).
    """
    if data[i] == 32 and i + 1 < end:
        f2, length = char_flags(data, i + 1, end, flags)
        if f2 & words == 0:
            stop = run_without(data, i + 1 + length, end, flags, words)
            return _crlf_run_end(data, stop, end, slash)
    if f & words == 0:
        return _crlf_run_end(data, run_without(data, i, end, flags, words), end, slash)
    return -1


@hot
def cl100k_piece_end(data, i, end, flags, whole_at_end, most_digits, letters):
    """End of the cl100k piece starting at byte i (see the notes above); with
    ``whole_at_end`` False, of the Llama 3 piece, and with ``most_digits`` 1 too, of the
    Qwen piece (Qwen's pattern is Llama 3's with ``\\p{N}`` for ``\\p{N}{1,3}``); with
    ``letters`` ``CHAR_L | CHAR_M`` too, of the Qwen 3.5 piece (marks join letter runs
    and leave punctuation: ``[\\p{L}\\p{M}]+`` and ``[^\\s\\p{L}\\p{M}\\p{N}]+``; a mark
    as the optional prefix char ends where the run it prefixes does).

    Llama 3's pattern is cl100k's without the possessive quantifiers, which change
    nothing there (no part of an alternative can give back what its possessive part
    took and still match), and with o200k's whitespace alternatives,
    ``\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`` for ``\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s``: they
    differ only on a whitespace run that reaches the end and holds CR/LF before other
    whitespace (cl100k: one piece; Llama 3: cut after its last CR/LF).
    """
    n = contraction_length_ci(data, i, end)
    if n:
        return i + n
    f, length = char_flags(data, i, end, flags)
    if f & letters:
        return run_with(data, i + length, end, flags, letters)
    if f & _NOT_PREFIX == 0 and i + length < end:
        f2, length2 = char_flags(data, i + length, end, flags)
        if f2 & letters:
            return run_with(data, i + length + length2, end, flags, letters)
    if f & CHAR_N:
        return _digits_end(data, i, end, flags, most_digits)
    stop = _punctuation_end(data, i, end, flags, f, False, _LNS | letters)
    if stop >= 0:
        return stop
    return whitespace_piece_end(data, i, end, flags, whole_at_end)


@hot
def _o200k_a1(data, j, end, flags):
    """End of ``[U]*[W]+`` at j, or -1.

    U* takes the longest run of U chars; W+ then needs a W char. If the char
    after the run is one, W+ takes the W run from there. Else the engine gives
    back U chars one by one until W+ can start on one that is also W (Lm, Lo,
    M): the match ends just after the last such char of the run.
    """
    last_both_end = np.int64(-1)
    k = j
    while k < end:
        f, length = char_flags(data, k, end, flags)
        if f & CHAR_U == 0:
            if f & CHAR_W:
                return run_with(data, k, end, flags, CHAR_W)
            break
        k += length
        if f & CHAR_W:
            last_both_end = k
    return last_both_end


@hot
def _o200k_a2(data, j, end, flags):
    """End of ``[U]+[W]*`` at j, or -1."""
    k = run_with(data, j, end, flags, CHAR_U)
    if k == j:
        return -1
    return run_with(data, k, end, flags, CHAR_W)


@hot
def _o200k_letters_end(data, i, end, flags, f, length):
    """The first two alternatives at i (without the contraction), or -1.

    Order of attempts: first alternative with the prefix char, then without it
    (only a mark can be both prefix and U/W), then the second alternative the same way.
    """
    if f & _NOT_PREFIX == 0:
        stop = _o200k_a1(data, i + length, end, flags)
        if stop >= 0:
            return stop
        if f & CHAR_U:
            stop = _o200k_a1(data, i, end, flags)
            if stop >= 0:
                return stop
        stop = _o200k_a2(data, i + length, end, flags)
        if stop >= 0 or f & CHAR_U == 0:
            return stop
        return _o200k_a2(data, i, end, flags)
    if f & CHAR_L:
        stop = _o200k_a1(data, i, end, flags)
        if stop >= 0:
            return stop
        return _o200k_a2(data, i, end, flags)
    return -1


@hot
def o200k_piece_end(data, i, end, flags, is_o200k):
    """End of the o200k piece starting at byte i (see the notes above); with ``is_o200k``
    False, of the Tekken piece (Mistral's pattern is o200k's without the contractions after
    a word and with ``\\p{N}`` for ``\\p{N}{1,3}``)."""
    f, length = char_flags(data, i, end, flags)
    stop = _o200k_letters_end(data, i, end, flags, f, length)
    if stop >= 0:
        if stop < end and is_o200k:
            stop += contraction_length_ci(data, stop, end)
        return stop
    if f & CHAR_N:
        return _digits_end(data, i, end, flags, 3 if is_o200k else 1)
    stop = _punctuation_end(data, i, end, flags, f, True, _LNS)
    if stop >= 0:
        return stop
    return whitespace_piece_end(data, i, end, flags, False)


@_inlined
def cl100k_piece_end_fast(data, i, end, flags, whole_at_end, most_digits, letters):
    """``cl100k_piece_end`` with ASCII letter starts, bare or after one prefix char, inline
    (no ASCII char is a mark)."""
    byte = data[i]
    if byte >= 0x80 or byte == 39:
        return cl100k_piece_end(data, i, end, flags, whole_at_end, most_digits, letters)
    f = flags[byte]
    if f & CHAR_L:
        return run_with(data, i + 1, end, flags, letters)
    if (f & _NOT_PREFIX == 0 and i + 1 < end and data[i + 1] < 0x80
            and flags[data[i + 1]] & CHAR_L):
        return run_with(data, i + 2, end, flags, letters)
    return cl100k_piece_end(data, i, end, flags, whole_at_end, most_digits, letters)


@_inlined
def o200k_piece_end_fast(data, i, end, flags, is_o200k):
    """``o200k_piece_end`` with ASCII words (``Word``, `` word``, ``WORD``...) inline.

    On ASCII, U is upper case and W lower case, and no char is both, so the
    first two alternatives reduce to: the upper-case run, then the lower-case
    run if one follows. Anything non-ASCII on the way goes to the full function.
    """
    byte = data[i]
    if byte >= 0x80:
        return o200k_piece_end(data, i, end, flags, is_o200k)
    f = flags[byte]
    j = i
    if f & _NOT_PREFIX == 0:
        j = i + 1
    elif f & CHAR_L == 0:
        return o200k_piece_end(data, i, end, flags, is_o200k)
    k = j
    while k < end and data[k] < 0x80 and flags[data[k]] & CHAR_U:
        k += 1
    if k < end and data[k] >= 0x80:
        return o200k_piece_end(data, i, end, flags, is_o200k)
    if k < end and flags[data[k]] & CHAR_W:
        k = run_with(data, k + 1, end, flags, CHAR_W)
    elif k == j:
        return o200k_piece_end(data, i, end, flags, is_o200k)
    if k < end and is_o200k:
        k += contraction_length_ci(data, k, end)
    return k


# ---------------------------------------------------------------- DeepSeek's three steps
#
# DeepSeek's pre-tokenizer (its tokenizer.json) is a sequence of three HF Splits, each
# Isolated (the text between matches is kept as words too) and each run on every word of
# the one before: digits ``\p{N}{1,3}`` (in threes from the start of a run), then CJK runs
# ``[一-龥぀-ゟ゠-ヿ]+`` (U+4E00-U+9FA5, U+3040-U+30FF), then, inside each remaining piece,
#   A1 ``[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+``  (ASCII P/S, ASCII letters)
#   A2 ``[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+``
#   A3 `` ?[\p{P}\p{S}]+[\r\n]*``
#   A4-A6 ``\s*[\r\n]+|\s+(?!\S)|\s+``
# and what none of them matches (numbers, controls, unassigned...) up to where one does.
# So the text is first cut into segments of one kind (a digit chunk, a CJK run, other
# text); the third step runs inside a segment as on a text of its own: a char of another
# kind ends every run and counts as the end of the text for ``(?!\S)``. A digit chunk
# holds no letter or mark, so the third step keeps it whole. Chars that are both (none:
# no number is in the CJK ranges) would need more care; the tests compare every general
# category against ``regex`` running the three steps.
# Split alone, one thread (split_ends, ~2 KB documents of pattern_bench, 2026-11-27):
# English 97 MB/s, code 93, zh 127, ja 189 (cl100k's scanner: 103, 99, 173, 266); with no
# ASCII fast path yet, each char goes through _ds_char.

_DS_LM = CHAR_L | CHAR_M
_DS_OTHER_KIND = 1 << 8  # a char of another segment: in no class mask


@hot
def _is_deepseek_cjk(code_point):
    return 0x4E00 <= code_point <= 0x9FA5 or 0x3040 <= code_point <= 0x30FF


@hot
def _ds_char(data, k, end, flags, cjk):
    """(flags, byte length) of the char at k in a CJK (``cjk``) or other-text segment;
    ``_DS_OTHER_KIND`` alone for a char of another segment (a number, or CJK against other)."""
    if data[k] < 0x80:
        f = np.int64(flags[data[k]])
        if cjk or f & CHAR_N:
            return np.int64(_DS_OTHER_KIND), np.int64(1)
        return f, np.int64(1)
    code_point, length = decode_multibyte(data, k, end)
    if code_point < 0:
        return (np.int64(_DS_OTHER_KIND) if cjk else np.int64(0)), length
    f = np.int64(flags[code_point])
    if f & CHAR_N or _is_deepseek_cjk(code_point) != cjk:
        return np.int64(_DS_OTHER_KIND), length
    return f, length


@hot
def _ds_run(data, k, end, flags, cjk, mask):
    """End of the run of the segment's chars having a flag of ``mask``, from k."""
    while k < end:
        f, length = _ds_char(data, k, end, flags, cjk)
        if f & mask == 0:
            return k
        k += length
    return k


@hot
def _is_ascii_alpha(byte):
    return 65 <= byte <= 90 or 97 <= byte <= 122


@hot
def _ds_whitespace_end(data, i, end, flags):
    """A4-A6 at i (whitespace is other text): ``(?!\\S)`` holds at a segment's end."""
    run_end = run_with(data, i, end, flags, CHAR_S)
    if run_end < end and _ds_char(data, run_end, end, flags, False)[0] == _DS_OTHER_KIND:
        end = run_end  # another segment starts there: the third step's text ends
    return whitespace_piece_end(data, i, end, flags, False)


@hot
def _deepseek_third_step_end(data, i, end, flags, cjk):
    """End of the third step's word at i, in a segment of CJK (``cjk``) or other text."""
    f, length = _ds_char(data, i, end, flags, cjk)
    if data[i] < 0x80 and f & CHAR_PS and i + 1 < end and _is_ascii_alpha(data[i + 1]):
        k = i + 2  # A1 (not in a CJK segment: no ASCII char is in one)
        while k < end and _is_ascii_alpha(data[k]):
            k += 1
        return k
    if f & _DS_LM:  # A2 without its prefix char (a mark taken as the prefix ends the same)
        return _ds_run(data, i + length, end, flags, cjk, _DS_LM)
    if f & (CHAR_CRLF | CHAR_L | CHAR_PS) == 0 and i + length < end:
        f2, length2 = _ds_char(data, i + length, end, flags, cjk)
        if f2 & _DS_LM:  # A2 with its prefix char
            return _ds_run(data, i + length + length2, end, flags, cjk, _DS_LM)
    if data[i] == 32 and i + 1 < end:
        f2, length2 = _ds_char(data, i + 1, end, flags, cjk)
        if f2 & CHAR_PS:  # A3 with its space
            return _crlf_run_end(data, _ds_run(data, i + 1 + length2, end, flags, cjk, CHAR_PS),
                                 end, False)
    if f & CHAR_PS:  # A3 (CR and LF are not in a CJK segment)
        k = _ds_run(data, i + length, end, flags, cjk, CHAR_PS)
        return k if cjk else _crlf_run_end(data, k, end, False)
    if f & CHAR_S:
        return _ds_whitespace_end(data, i, end, flags)
    k = i + length  # no match at i: the words between matches, up to where one starts
    while k < end:
        f, length = _ds_char(data, k, end, flags, cjk)
        if f & (_DS_LM | CHAR_PS | CHAR_S | _DS_OTHER_KIND):
            return k
        if k + length < end:
            f2, _ = _ds_char(data, k + length, end, flags, cjk)
            if f2 & _DS_LM:
                return k  # a prefix char of A2
        k += length
    return k


@hot
def deepseek_piece_end(data, i, end, flags):
    """End of the DeepSeek piece starting at byte i (see the notes above)."""
    if data[i] < 0x80:
        if flags[data[i]] & CHAR_N:
            return _digits_end(data, i, end, flags, 3)
        return _deepseek_third_step_end(data, i, end, flags, False)
    code_point, _ = decode_multibyte(data, i, end)
    if code_point >= 0 and flags[code_point] & CHAR_N:
        return _digits_end(data, i, end, flags, 3)
    return _deepseek_third_step_end(data, i, end, flags,
                                    code_point >= 0 and _is_deepseek_cjk(code_point))


@hot
def _deepseek_cut(before, at, flags_before, flags_at):
    """A DeepSeek piece boundary whatever came before: where the segment kind changes (digit,
    CJK, other), or after a letter or mark when no letter or mark follows (A1 and A2 end
    at the end of their letters; no other word holds a letter)."""
    before_digit, at_digit = flags_before & CHAR_N != 0, flags_at & CHAR_N != 0
    if before_digit != at_digit:
        return True
    if before_digit:
        return False  # digits go in threes from the start of their run
    if (before >= 0 and _is_deepseek_cjk(before)) != (at >= 0 and _is_deepseek_cjk(at)):
        return True
    return flags_before & _DS_LM != 0 and flags_at & _DS_LM == 0


# ---------------------------------------------------------------- DeepSeek Coder's and LLM's
#
# Their files (DeepSeek Coder 1.3-33B; DeepSeek LLM 7B/67B, V2, Coder V2) split with a
# cascade of Isolated Splits, each on every piece of the one before, then bytes:
#   Coder: [\r\n] | \s?\p{L}+ | \s?\p{P}+ | CJK runs | \p{N}
#   LLM:   [\r\n] | \s?LET+ | \s?PUN+ | \s+$ | CJK runs | \p{N}+
# CJK runs: ``[一-龥ࠀ-一가-퟿]+``, U+0800-U+9FA5 and U+AC00-U+D7FF (Indic scripts, Thai,
# general punctuation, kana, ideographs, Hangul...); LET and PUN are the explicit classes
# of the LLM file (Latin, Greek, Cyrillic... letters; ASCII and fullwidth punctuation,
# which take ASCII and fullwidth letters too, quotes, U+3000-U+3002). One flag table
# (``DS_*``, ``pretokenize.code_point_ds_flags``) serves both.
# At a piece start the steps' state is read from the char there and the next one: a
# letter (or a space before one) is in a step-2 run; a punctuation char (or a space
# before one) outside it starts a step-3 run; anything else is in a gap, which ends where
# such a run starts. Inside, a piece ends where the CJK-range status changes (step 5 of
# the LLM, 4 of Coder) and at numbers. The LLM's ``\s+$`` takes a gap's trailing
# whitespace apart: a run of spaces is trailing when a CR/LF, the segment's end, or a
# letter or punctuation run (which takes its last space) follows it. Inside a letter run
# the LLM's third step cuts where a letter stops or starts being in PUN (ASCII and
# fullwidth letters are), the run's leading space going with its first part; U+3000 is
# both a space and PUN. The scanner tests compare both with ``regex`` running the steps.

DS_L, DS_N, DS_S, DS_CRLF, DS_P, DS_R, DS_LET, DS_PUN = 1, 2, 4, 8, 16, 32, 64, 128


@hot
def _next_flags(data, k, end, table, mask):
    """The ``mask`` flags of the char at k, 0 at the end."""
    if k >= end:
        return np.int64(0)
    f, _ = char_flags(data, k, end, table)
    return f & mask


@hot
def _run_alike(data, k, stop, table, mask, want):
    """End of the run from k (before ``stop``) of chars whose ``mask`` flags are ``want``."""
    while k < stop:
        f, length = char_flags(data, k, stop, table)
        if f & mask != want:
            break
        k += length
    return k


@hot
def deepseek_coder_piece_end(data, i, end, table):
    """End of the DeepSeek Coder piece starting at byte i (the notes above)."""
    f, length = char_flags(data, i, end, table)
    if f & (DS_CRLF | DS_N):
        return i + length
    r = f & DS_R
    kind = f & (DS_L | DS_P)
    if kind == 0 and f & DS_S:
        kind = _next_flags(data, i + length, end, table, DS_L | DS_P)
    if kind:  # a letter or punctuation run (L and P are disjoint), or a space before one
        return _run_alike(data, i + length, end, table, kind | DS_R, kind | r)
    k = i + length
    while k < end:  # a gap: to a run's start, a CR/LF, a number or a CJK-status change
        g, length = char_flags(data, k, end, table)
        if g & (DS_CRLF | DS_N | DS_L | DS_P) or g & DS_R != r:
            break
        if g & DS_S and _next_flags(data, k + length, end, table, DS_L | DS_P):
            break
        k += length
    return k


@hot
def _dsl_spaces_end(data, k, end, table):
    """(end, start of the last char) of the run of spaces that are neither PUN nor CR/LF,
    from k."""
    last = k
    while k < end:
        f, length = char_flags(data, k, end, table)
        if f & (DS_S | DS_PUN | DS_CRLF) != DS_S:
            break
        last = k
        k += length
    return k, last


@hot
def _dsl_trailing_end(data, stop, last, end, table):
    """Where a gap's run of spaces (to ``stop``, its last char at ``last``) ends as the gap's
    trailing spaces, which ``\\s+$`` takes apart; -1 when more of the gap follows. A space
    before a letter, or before punctuation, starts that run (U+3000 before a letter
    starts a letter run itself)."""
    if stop == end:
        return stop
    f, length = char_flags(data, stop, end, table)
    if f & DS_CRLF:
        return stop
    if f & DS_LET:
        return last
    if f & DS_PUN:
        if f & DS_S and _next_flags(data, stop + length, end, table, DS_LET):
            return stop
        return last
    return np.int64(-1)


@hot
def _dsl_gap_end(data, k, end, table, r, number):
    """End of a gap piece going on from k (CJK status ``r``, ``number`` its N flag)."""
    while k < end:
        g, length = char_flags(data, k, end, table)
        if g & (DS_CRLF | DS_LET | DS_PUN) or g & DS_R != r or g & DS_N != number:
            return k
        if g & DS_S:
            stop, last = _dsl_spaces_end(data, k, end, table)
            if _dsl_trailing_end(data, stop, last, end, table) >= 0:
                return k  # trailing spaces (or a run takes the last of them)
            k = _run_alike(data, k, stop, table, DS_R, r)
            if k < stop:
                return k
            continue
        k += length
    return k


@hot
def _dsl_punctuation_piece(data, i, first, end, table, r):
    """End of the piece at i of a PUN run (``first``: where the run's PUN chars start, past
    a leading space), its trailing spaces (U+3000s) apart unless it is all spaces."""
    k = first
    spaces_from = i if first > i else np.int64(-1)
    while k < end:
        f, length = char_flags(data, k, end, table)
        if f & DS_PUN == 0 or f & DS_LET:
            break
        if f & DS_S and _next_flags(data, k + length, end, table, DS_LET):
            break  # U+3000 before a letter starts a letter run
        if f & DS_S == 0:
            spaces_from = -1
        elif spaces_from < 0:
            spaces_from = k
        k += length
    stop = k if spaces_from <= i else spaces_from
    return _run_alike(data, i, stop, table, DS_R, r)


@hot
def deepseek_llm_piece_end(data, i, end, table):
    """End of the DeepSeek LLM piece starting at byte i (the notes above)."""
    f, length = char_flags(data, i, end, table)
    if f & DS_CRLF:
        return i + length
    r = f & DS_R
    if f & DS_LET:  # in a letter run: alike in PUN and CJK status
        return _run_alike(data, i + length, end, table, DS_LET | DS_PUN | DS_R,
                          f & (DS_LET | DS_PUN) | r)
    after = _next_flags(data, i + length, end, table, DS_LET | DS_PUN)
    if f & DS_S and after & DS_LET:  # the space starting a letter run
        if f & DS_PUN and not after & DS_PUN:
            return i + length  # U+3000 is PUN alone there
        return _run_alike(data, i + length, end, table, DS_LET | DS_PUN | DS_R,
                          after | r)
    if f & DS_PUN:
        return _dsl_punctuation_piece(data, i, i, end, table, r)
    if f & DS_S:
        stop, last = _dsl_spaces_end(data, i, end, table)
        trailing = _dsl_trailing_end(data, stop, last, end, table)
        if trailing == i:  # the space starts a punctuation run
            return _dsl_punctuation_piece(data, i, i + length, end, table, r)
        if trailing > i:
            return _run_alike(data, i + length, trailing, table, DS_R, r)
    return _dsl_gap_end(data, i + length, end, table, r, f & DS_N)


@hot
def _deepseek_cascade_cut(flags_before, flags_at, coder):
    """A piece boundary of DeepSeek Coder's or LLM's steps whatever came before: beside a
    CR/LF; after a letter before a non-letter (Coder: also after punctuation before other);
    at a change of CJK status or number status after a char that is no space (the LLM's
    ``\\s+$`` reads where the text ends; Coder: beside any number)."""
    if (flags_before | flags_at) & DS_CRLF:
        return True
    if coder:
        if (flags_before | flags_at) & DS_N:
            return True
        if flags_before & DS_L and not flags_at & DS_L:
            return True
        if flags_before & DS_P and not flags_at & DS_P:
            return True
    elif flags_before & DS_LET and not flags_at & DS_LET:
        return True
    if flags_before & DS_S:
        return False
    if not coder and (flags_before | flags_at) & DS_LET == 0 and \
            (flags_before ^ flags_at) & DS_PUN:
        return True  # a punctuation run's end or start beside other text
    return (flags_before ^ flags_at) & (DS_R | DS_N) != 0


# ---------------------------------------------------------------- a vocabulary's own cuts


JOINED_BYTE_PAIRS = 1 << 16  # the byte-pair part of a ``JOINS`` table


@hot
def joined_piece_end(data, i, end, joins):
    """End of the run from byte i whose neighbours ``joins`` marks as joined: its first
    ``JOINED_BYTE_PAIRS`` bytes are 1 at ``256 * left + right`` where the byte pair lies
    inside some token; a longer table goes on with a hash set of the character pairs that
    lie inside some token (``joined_chars``; a vocabulary whose tokens are whole characters,
    a SentencePiece-style one), and the run then ends at the first pair of characters it
    lacks (asked only where the byte pair is marked and a character is not ASCII). No BPE
    symbol spans an unmarked pair, so BPE of these runs is BPE of the whole text
    (``JOINS``: a vocabulary that splits no text).

    Measured (``bench/hf_file_bench.py --gguf``, one thread, cold cache): the character
    pairs asked at every boundary, Gemma 4's zh / ja went 2.40x / 2.01x -> 3.06x / 3.20x
    HF but Llama 2's English 8.90x -> 7.17x (the hash probe at each boundary, where the
    byte pairs cut as well); asked only past the byte test, both gain (RESULTS)."""
    if joins.size == JOINED_BYTE_PAIRS:
        i += 1
        while i < end and joins[np.int64(data[i - 1]) * 256 + data[i]]:
            i += 1
        return i
    before, length = decode_utf8(data, i, end)
    i += length
    while i < end:
        byte = data[i]
        if not joins[np.int64(data[i - 1]) * 256 + byte]:  # no token joins these bytes
            return i
        if byte < 0x80 and before < 0x80:  # two ASCII characters: the bytes said it
            before = np.int64(byte)
            i += 1
            continue
        at, length = decode_utf8(data, i, end)
        if not joined_chars(joins, before, at):
            return i
        before = at
        i += length
    return i


@hot
def char_pair_key(left, right):
    """The hash-set key of two code points (-1, an invalid byte, included; never 0)."""
    return (np.uint64(left + 1) << np.uint64(21)) | np.uint64(right + 1)


@hot
def joined_chars(joins, left, right):
    """Whether the character pair is in the hash set after a ``JOINS`` table's byte pairs
    (uint64 keys, little-endian, linear probing from ``mix64``, 0 a free slot)."""
    key = char_pair_key(left, right)
    mask = np.uint64(((joins.size - JOINED_BYTE_PAIRS) >> 3) - 1)
    slot = mix64(key) & mask
    while True:
        at = JOINED_BYTE_PAIRS + 8 * np.int64(slot)
        found = np.uint64(0)
        for k in range(8):
            found |= np.uint64(joins[at + k]) << np.uint64(8 * k)
        if found == key or found == 0:
            return found == key
        slot = (slot + np.uint64(1)) & mask


@njit(cache=True)
def char_pair_set(keys):
    """The hash set ``joined_chars`` reads, of ``char_pair_key`` keys, as bytes (a power of
    two of slots, at least twice the keys)."""
    n_slots = 1
    while n_slots < 2 * keys.size:
        n_slots *= 2
    slots = np.zeros(n_slots, np.uint64)
    mask = np.uint64(n_slots - 1)
    for key in keys:
        slot = mix64(key) & mask
        while slots[slot] != 0 and slots[slot] != key:
            slot = (slot + np.uint64(1)) & mask
        slots[slot] = key
    return slots.view(np.uint8)


# ---------------------------------------------------------------- any named pattern


@_inlined
def piece_end(scanner, data, i, end, table):
    """End of the piece starting at byte i, for any scanner id above (``GPT2`` ...)."""
    if scanner == GPT2:
        return gpt2_word_end_fast(data, i, end, table)
    if scanner == STARCODER:
        return starcoder_piece_end(data, i, end, table)
    if scanner == DEEPSEEK:
        return deepseek_piece_end(data, i, end, table)
    if scanner == DEEPSEEK_CODER:
        return deepseek_coder_piece_end(data, i, end, table)
    if scanner == DEEPSEEK_LLM:
        return deepseek_llm_piece_end(data, i, end, table)
    if scanner == JOINS:
        return joined_piece_end(data, i, end, table)
    if scanner == O200K or scanner == TEKKEN:
        return o200k_piece_end_fast(data, i, end, table, scanner == O200K)
    return cl100k_piece_end_fast(data, i, end, table, scanner == CL100K,
                                 1 if scanner == QWEN2 or scanner == QWEN35 else 3,
                                 CHAR_L | CHAR_M if scanner == QWEN35 else CHAR_L)


@njit(cache=True)
def split_ends(data, segment_start, segment_end, scanner, table):
    """Piece ends (int64; a piece starts where the previous ended or at its segment).

    ``scanner`` is ``GPT2``, ``CL100K`` or ``O200K``; ``table`` its class table
    (``code_point_classes`` for GPT2, ``code_point_flags`` for the others).
    """
    ends = np.empty(16, dtype=np.int64)
    n = 0
    for s in range(segment_start.size):
        i = segment_start[s]
        while i < segment_end[s]:
            i = piece_end(scanner, data, i, segment_end[s], table)
            if n == ends.size:
                ends = grown_like(ends, n + 1)
            ends[n] = i
            n += 1
    return ends[:n]


WORD_AT, WORD_LEN, WORD_COUNT, WORD_KEY = 0, 1, 2, 3  # the columns of a word's record


@hot
def _count_into(data, segment_start, segment_end, scanner, table, cells, records, cursor):
    """Count words from ``cursor`` (segment, byte, n_words, collided) on; stop when full.

    ``cells``: an open-addressing table of (word key, word) pairs (uint64, 2 a cell:
    ``word_key``, ``EMPTY_KEY`` free); ``records``: (first offset, length, count, key) a
    word.
    Returns True when every segment is done, False when the tables need room.
    Allocates nothing, so it runs without the Numba runtime (see ``_jit.hot``).

    A long word (8 bytes on) met again is compared with its first occurrence
    (``same_bytes``, 8 bytes at a time); a shorter one is its own key. Byte by byte, a
    loop whose end mispredicted at each change of word length, this kernel took
    67.5-70.8 ms for the sweep's 8.4 MB of lines on one thread, then 58.0-59.6 (session 7).

    Issue 18, session 13: half of the kernel's time was the lookup (the lines' 1.74 M
    words scanned and hashed alone: 23 ms of 46), ~5 cache misses a word met again:
    keys, slots, the word's length and offset (three arrays), its first occurrence. Now
    a word's key and index share a cell and its offset, length and count a record, and 4
    words in 5 (1 in 3 distinct ones) are at most 7 bytes, their own keys, none
    compared: 46 -> 41 ms for the one-thread count (bench/RESULTS.md).
    """
    n_words = cursor[2]
    mask = np.uint64(cells.shape[0] - 1)
    while cursor[0] < segment_start.size:
        i = max(cursor[1], segment_start[cursor[0]])
        end = segment_end[cursor[0]]
        while i < end:
            if n_words == records.shape[0] or 2 * (n_words + 1) > cells.shape[0]:
                cursor[1], cursor[2] = i, n_words
                return False
            stop = piece_end(scanner, data, i, end, table)
            key = word_key(data, i, stop)
            cell = mix64(key) & mask
            while cells[cell, 0] != EMPTY_KEY and cells[cell, 0] != key:
                cell = (cell + np.uint64(1)) & mask
            if cells[cell, 0] == key:
                word = cells[cell, 1]
                if key >= LONG_WORD_TAG and (records[word, WORD_LEN] != stop - i or not same_bytes(
                        data, records[word, WORD_AT], data, i, stop - i)):
                    cursor[2], cursor[3] = n_words, 1
                    return True
                records[word, WORD_COUNT] += 1
            else:
                cells[cell, 0], cells[cell, 1] = key, n_words
                records[n_words, WORD_AT], records[n_words, WORD_LEN] = i, stop - i
                records[n_words, WORD_COUNT], records[n_words, WORD_KEY] = 1, key
                n_words += 1
            i = stop
        cursor[0] += 1
        cursor[1] = 0
    cursor[2] = n_words
    return True


@njit(cache=True, nogil=True)
def count_scanned_words(data, segment_start, segment_end, scanner, table):
    """Distinct words of the segments, split by ``scanner`` (as ``split_ends``): (first byte offset, length, count) per word.

    Returns ``(word_at, word_len, word_count, word_keys, collided)`` (the keys:
    ``hashing.word_key``'s, uint64); ``collided`` is True when two different long words
    shared a 56-bit key (the caller then counts another way). Launch: one call per thread
    on its own segments (nogil); the hash table doubles at half load.

    Issue 18, session 13: the keys come from here, made as the words were met (they were
    made again with the words packed: ~0.5 of ``packed_words``' 0.95 ms a share of 27 K
    distinct words, a share of each thread's work more on 2 threads, which count the
    sweep's lines in 10 shares against 4).
    """
    cells = np.full((1 << 16, 2), EMPTY_KEY, dtype=np.uint64)
    records = np.empty((1 << 15, 4), dtype=np.int64)
    cursor = np.zeros(4, dtype=np.int64)
    while not _count_into(data, segment_start, segment_end, scanner, table, cells, records,
                          cursor):
        cells = cells_grown(cells)
        records = np.concatenate((records, np.empty_like(records)))
    n = cursor[2]
    words = records[:n]
    return (words[:, WORD_AT].copy(), words[:, WORD_LEN].copy(), words[:, WORD_COUNT].copy(),
            words[:, WORD_KEY].copy().view(np.uint64), cursor[3] == 1)
