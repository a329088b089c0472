"""Merge rules as hash tables, and the whole-token lookup (tiktoken, HF ignore_merges)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import hot
from ..hashing import (
    EMPTY_KEY,
    empty_table,
    table_find,
    table_put,
)
from ..pairs import pair_key
from ._shared import RuleTable, inlined
from .words import (
    LONG_WORD_TAG,
    _equal_bytes,
    _first_cell,
    _next_cell,
    _put_cell,
    empty_cells,
    word_key,
)

# ---------------------------------------------------------------- rules


def rule_table(rules: np.ndarray, demolish_ids=None, demolish_offsets=None, *,
               rank_by_token: bool = False, whole_tokens: list[bytes] | None = None
               ) -> RuleTable:
    """The encoding tables of a vocabulary's rules (first rank wins when a pair repeats).

    ``rank_by_token`` (tiktoken's rule): every rule making one token gets the
    rank of the first of them, so any split of a token merges at the token's
    rank and equal ranks go leftmost. ``whole_tokens``: the bytes of every
    token by internal id, for the whole-token lookup before BPE.
    """
    keys, ranks = empty_table(4 * max(len(rules), 1))
    results = np.ascontiguousarray(rules[:, 2], dtype=np.int64)
    _fill_rule_table(keys, ranks, np.ascontiguousarray(rules[:, 0]),
                     np.ascontiguousarray(rules[:, 1]), _rule_priorities(results, rank_by_token))
    if demolish_offsets is None:
        demolish_ids = np.zeros(0, dtype=np.uint32)
        demolish_offsets = np.zeros(0, dtype=np.int64)
    return RuleTable(keys, ranks, results,
                     np.ascontiguousarray(demolish_ids, dtype=np.uint32),
                     np.ascontiguousarray(demolish_offsets, dtype=np.int64),
                     *_whole_token_table(whole_tokens))


def _rule_priorities(results: np.ndarray, rank_by_token: bool) -> np.ndarray:
    """The rank stored for each rule: its own, or the first rank making the same token."""
    if not rank_by_token or results.size == 0:
        return np.arange(results.size, dtype=np.int64)
    _, first, inverse = np.unique(results, return_index=True, return_inverse=True)
    return first[inverse].astype(np.int64)


@njit(cache=True)
def _fill_rule_table(keys, values, left, right, priority):
    for rank in range(left.size):
        key = pair_key(left[rank], right[rank])
        if table_find(keys, values, key) < 0:
            table_put(keys, values, key, priority[rank])


def _whole_token_table(token_bytes: list[bytes] | None) -> tuple[np.ndarray, ...]:
    """(cells, pool, offsets) of the whole-token lookup; three empty arrays when off."""
    if token_bytes is None:
        return (np.zeros(0, np.uint64), np.zeros(0, np.uint8), np.zeros(0, np.int64))
    lengths = np.fromiter(map(len, token_bytes), dtype=np.int64, count=len(token_bytes))
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    pool = np.frombuffer(b"".join(token_bytes), dtype=np.uint8).copy()
    n_cells = 1 << int(2 * max(lengths.size, 1) - 1).bit_length()
    cells = empty_cells(n_cells)
    _fill_whole_tokens(cells, pool, offsets)
    return cells, pool, offsets


@njit(cache=True)
def _fill_whole_tokens(cells, pool, offsets):
    for token in range(256, offsets.size - 1):
        key = word_key(pool, offsets[token], offsets[token + 1])
        if _whole_token_at(pool, offsets[token], offsets[token + 1] - offsets[token], key,
                           cells, pool, offsets) < 0:
            _put_cell(cells, key, token)


@inlined
def _whole_token_at(data, start, length, key, cells, pool, offsets):
    """Internal id of the token spelling ``data[start:start+length]``, or -1."""
    cell = _first_cell(cells, key)
    while cells[cell] != EMPTY_KEY:
        if cells[cell] == key:
            token = np.int64(cells[cell + np.uint64(1)])
            if key < LONG_WORD_TAG:
                return token
            at = offsets[token]
            if offsets[token + 1] - at == length and _equal_bytes(data, start, pool, at, length):
                return token
        cell = _next_cell(cells, cell)
    return -1


@hot
def whole_token(data, start, length, rules):
    """Internal id of the token equal to the word, -1 when none or the lookup is off."""
    if rules.whole_table.size == 0 or length < 2:
        return -1
    return _whole_token_at(data, start, length, word_key(data, start, start + length),
                           rules.whole_table, rules.token_pool, rules.token_offsets)


@njit(cache=True, nogil=True)
def whole_tokens_of_words_cpu(data, word_at, word_len, rules):
    """int64 per word: the internal id of the token it equals (whole-token lookup), or -1."""
    found = np.empty(word_at.size, np.int64)
    for w in range(word_at.size):
        found[w] = whole_token(data, word_at[w], word_len[w], rules)
    return found
