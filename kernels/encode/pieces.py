"""Stage 0: special tokens found and documents cut into pieces."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import hot
from ..pretok import safe_cut

# ---------------------------------------------------------------- special tokens and pieces


@hot
def _longest_special_at(data, i, end, token_bytes, token_offsets, lex, lo, hi):
    """The longest token spelled at byte i, or -1. ``lex[lo:hi]``: the tokens starting with
    the byte at i, in byte order, so those sharing the k bytes matched so far are a run
    whose byte k rises, the token of exactly those k bytes (if any) first: each further
    byte narrows the run by two binary searches."""
    best = -1
    k = 1
    while lo < hi:
        t = lex[lo]
        if token_offsets[t + 1] - token_offsets[t] == k:  # spelled whole: the longest so far
            best = t
            lo += 1
            continue
        if i + k >= end:
            break
        lo = _first_with_byte_at_least(token_bytes, token_offsets, lex, lo, hi, k, data[i + k])
        hi = _first_with_byte_at_least(token_bytes, token_offsets, lex, lo, hi, k,
                                       data[i + k] + 1)
        k += 1
    return best


@hot
def _first_with_byte_at_least(token_bytes, token_offsets, lex, lo, hi, k, byte):
    """The first of ``lex[lo:hi]`` (all longer than k bytes, byte k rising) whose byte k is
    at least ``byte``; ``hi`` when none is."""
    while lo < hi:
        middle = (lo + hi) // 2
        if token_bytes[token_offsets[lex[middle]] + k] < byte:
            lo = middle + 1
        else:
            hi = middle
    return lo


@hot
def _scan_specials(data, seg_start, seg_end, token_bytes, token_offsets, lex, match_at,
                   match_token, limit, bucket):
    """Leftmost-longest, non-overlapping token matches inside segments; returns how many.

    Matches past ``match_at.size`` are counted, not written; the scan stops at ``limit``.
    """
    n = 0
    for s in range(seg_start.size):
        i = seg_start[s]
        end = seg_end[s]
        while i < end:
            lo, hi = bucket[data[i]], bucket[data[i] + 1]
            if lo < hi:
                t = _longest_special_at(data, i, end, token_bytes, token_offsets, lex, lo, hi)
                if t >= 0:
                    if n < match_at.size:
                        match_at[n] = i
                        match_token[n] = t
                    n += 1
                    if n >= limit:
                        return n
                    i += token_offsets[t + 1] - token_offsets[t]
                    continue
            i += 1
    return n


@njit(cache=True, nogil=True)
def find_specials_cpu(data, seg_start, seg_end, token_bytes, token_offsets, lex, limit):
    """Special-token matches in the segments, as regex alternation longest-first finds them.

    Returns ``(match_at, match_token)`` (byte offset, index into the token
    list), at most ``limit`` of them. ``lex``: the token indices in byte order. Bytes no
    token starts with cost two loads; at the others the longest token spelled there is
    found by narrowing, a byte at a time, the run of tokens in byte order that share the
    bytes matched (``_longest_special_at``). Tried before: the tokens of the byte, longest
    first, each compared whole: with GPT-NeoX's 24 added runs of spaces every space tried
    those 24; with Mistral's tekken.json (982 of its 1,000 tokens start with "<") every "<"
    of HTML tried 982 (1.9 MB/s against 26 without the scan), with Llama 3's 256 (all
    "<|") 8.2 MB/s against 18.9.
    """
    bucket = _first_byte_buckets(token_bytes, token_offsets, lex)
    match_at = np.empty(64, np.int64)
    match_token = np.empty(64, np.int64)
    n = _scan_specials(data, seg_start, seg_end, token_bytes, token_offsets, lex,
                       match_at, match_token, limit, bucket)
    if n > match_at.size:
        match_at = np.empty(n, np.int64)
        match_token = np.empty(n, np.int64)
        _scan_specials(data, seg_start, seg_end, token_bytes, token_offsets, lex,
                       match_at, match_token, limit, bucket)
    return match_at[:n], match_token[:n]


@njit(cache=True)
def _first_byte_buckets(token_bytes, token_offsets, lex):
    """``lex[bucket[b]:bucket[b + 1]]``: the tokens starting with byte b (``lex`` is in byte
    order, so by first byte too)."""
    bucket = np.zeros(257, np.int64)
    for t in lex:
        bucket[token_bytes[token_offsets[t]] + 1] += 1
    for b in range(256):
        bucket[b + 1] += bucket[b]
    return bucket


@hot
def _emit_piece(pieces, n, start, end, special):
    piece_start, piece_end, piece_special = pieces
    if n < piece_start.size:
        piece_start[n] = start
        piece_end[n] = end
        piece_special[n] = special
    return n + 1


@hot
def _emit_text(data, start, end, cut_bytes, scanner, table, pieces, n):
    """Emit ordinary text as pieces, cut near every ``cut_bytes`` at ``pretok.safe_cut`` points."""
    if cut_bytes > 0:
        while end - start > cut_bytes:
            cut = safe_cut(data, start, start + cut_bytes, end, scanner, table)
            if cut >= end:
                break
            n = _emit_piece(pieces, n, start, cut, -1)
            start = cut
    return _emit_piece(pieces, n, start, end, -1)


@hot
def _pieces_into(data, doc_start, doc_end, match_at, match_len, match_id, cut_bytes, scanner,
                 table, pieces, doc_first_piece):
    """Cut documents into pieces at special-token matches; returns the piece count.

    Every document gets at least one piece (an empty text piece if need be),
    so ``doc_first_piece`` is defined for all. Writes only what fits.
    """
    n = 0
    k = 0
    for d in range(doc_start.size):
        if d < doc_first_piece.size:
            doc_first_piece[d] = n
        position = doc_start[d]
        while k < match_at.size and match_at[k] < doc_end[d]:
            n = _emit_text(data, position, match_at[k], cut_bytes, scanner, table, pieces, n)
            n = _emit_piece(pieces, n, match_at[k], match_at[k] + match_len[k], match_id[k])
            position = match_at[k] + match_len[k]
            k += 1
        n = _emit_text(data, position, doc_end[d], cut_bytes, scanner, table, pieces, n)
    return n


@njit(cache=True, nogil=True)
def build_pieces_cpu(data, doc_start, doc_end, match_at, match_len, match_id, cut_bytes, scanner,
                     table):
    """Pieces of a batch: ``(piece_start, piece_end, piece_special, doc_first_piece)``.

    ``match_*`` are the allowed special tokens found (sorted by position);
    ``cut_bytes`` > 0 cuts long text pieces at points safe for ``scanner`` (0: no cuts).
    """
    empty = np.empty(0, np.int64)
    n = _pieces_into(data, doc_start, doc_end, match_at, match_len, match_id, cut_bytes, scanner,
                     table, (empty, empty, empty), empty)
    pieces = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64))
    doc_first_piece = np.empty(doc_start.size + 1, np.int64)
    _pieces_into(data, doc_start, doc_end, match_at, match_len, match_id, cut_bytes, scanner,
                 table, pieces, doc_first_piece)
    doc_first_piece[doc_start.size] = n
    return pieces[0], pieces[1], pieces[2], doc_first_piece


# ---------------------------------------------------------------- prefix spaces, "▁"

PREFIX_NONE, PREFIX_UNLESS_SPACE, PREFIX_ALWAYS, PREFIX_FIRST, PREFIX_MARKED = -1, 0, 1, 2, 3


@hot
def _is_metaspace(data, i, end):
    """Whether "▁" (U+2581, E2 96 81) starts at byte i."""
    return i + 3 <= end and data[i] == 0xE2 and data[i + 1] == 0x96 and data[i + 2] == 0x81


@hot
def _gets_prefix(data, start, end, special, first, rule, metaspace):
    """Whether a piece gets a space before it under ``rule`` (``PREFIX_*``; ``PREFIX_MARKED``:
    the text pieces the host marked in ``first``, empty ones too)."""
    if special >= 0 or rule == PREFIX_NONE:
        return False
    if rule == PREFIX_MARKED:
        return first
    if end == start or (rule == PREFIX_FIRST and not first):
        return False
    if rule == PREFIX_ALWAYS:
        return True
    return not (data[start] == 0x20 or (metaspace and _is_metaspace(data, start, end)))


@njit(cache=True, nogil=True)
def source_piece_lengths(data, piece_start, piece_end, piece_special, first_piece, rule,
                         metaspace, lo, hi, lengths):
    """Pass 1 of the pieces as HF's normalizer and pre-tokenizer see them, for pieces
    [lo, hi) (a thread's share): each one's length once rewritten (``lengths[k]``): a
    space before those ``rule`` names (``first_piece``: whether each piece starts its
    document, for ``PREFIX_FIRST``), and with ``metaspace`` each "▁" of a text piece as one
    space; special pieces as they are."""
    for k in range(lo, hi):
        start, end, special = piece_start[k], piece_end[k], piece_special[k]
        length = end - start
        if special < 0 and metaspace:
            i = start
            while i < end:
                if _is_metaspace(data, i, end):
                    length -= 2
                    i += 3
                else:
                    i += 1
        if _gets_prefix(data, start, end, special, first_piece[k], rule, metaspace):
            length += 1
        lengths[k] = length


@njit(cache=True, nogil=True)
def write_source_pieces(data, piece_start, piece_end, piece_special, first_piece, rule,
                        metaspace, new_start, out, lo, hi):
    """Pass 2: pieces [lo, hi) rewritten into ``out`` from ``new_start`` (the lengths of
    pass 1 summed)."""
    for k in range(lo, hi):
        start, end, special = piece_start[k], piece_end[k], piece_special[k]
        at = new_start[k]
        if _gets_prefix(data, start, end, special, first_piece[k], rule, metaspace):
            out[at] = 0x20
            at += 1
        i = start
        while i < end:
            if special < 0 and metaspace and _is_metaspace(data, i, end):
                out[at] = 0x20
                i += 3
            else:
                out[at] = data[i]
                i += 1
            at += 1
