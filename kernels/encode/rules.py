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
    _next_cell,
    _put_cell,
    empty_cells,
    equal_bytes,
    interleaved_find,
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
    demolish_ids = np.ascontiguousarray(demolish_ids, dtype=np.uint32)
    demolish_offsets = np.ascontiguousarray(demolish_offsets, dtype=np.int64)
    return RuleTable(keys, ranks, results, demolish_ids, demolish_offsets,
                     *_whole_token_table(whole_tokens), *_pair_lookup(keys, ranks, rules),
                     _one_output_each(demolish_ids, demolish_offsets))


def _one_output_each(demolish_ids, demolish_offsets) -> np.ndarray:
    """The output id of each internal id when the map gives exactly one each, else empty."""
    if demolish_offsets.size == 0 or np.any(np.diff(demolish_offsets) != 1):
        return np.zeros(0, dtype=np.uint32)
    return demolish_ids


def _pair_lookup(keys, ranks, rules: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pair_cells, pair_signatures) of ``RuleTable``: the CPU's lookup of the same rules."""
    results = np.ascontiguousarray(rules[:, 2], dtype=np.int64)
    n_ids = max(256, int(rules[:, :3].max()) + 1 if len(rules) else 0)
    if n_ids > 1 << 32 or len(rules) >= 1 << 31:
        raise ValueError(f"{len(rules)} rules over {n_ids} ids: the pair lookup holds at most "
                         "2**31 rules and 2**32 ids")
    cells = empty_cells(keys.size // 2)
    signatures = np.zeros(2 * n_ids, dtype=np.uint64)
    _fill_pair_lookup(keys, ranks, results, cells, signatures)
    return cells, signatures


@njit(cache=True)
def _fill_pair_lookup(keys, ranks, results, cells, signatures):
    for at in range(keys.size):
        key = keys[at]
        if key == EMPTY_KEY:
            continue
        rank = ranks[at]
        cell = pair_first_cell(cells, key)
        while cells[cell] != EMPTY_KEY:
            cell = _next_cell(cells, cell)
        cells[cell] = key
        cells[cell + np.uint64(1)] = np.uint64((rank << np.int64(32)) | results[rank])
        left, right = key >> np.uint64(32), key & np.uint64(0xFFFFFFFF)
        signatures[2 * left] |= np.uint64(1) << pair_signature_bit(right)
        signatures[2 * right + np.uint64(1)] |= np.uint64(1) << pair_signature_bit(left)


# Odd multiplier of Fibonacci hashing (2**64 / golden ratio): pair cells and signature bits.
FIBONACCI = np.uint64(0x9E3779B97F4A7C15)
# The value of "no rule" in the pair lookup: above every rank << 32 | result.
NO_PAIR_VALUE = np.int64(0x7FFFFFFF) << np.int64(32)


@inlined
def pair_first_cell(cells, key):
    """First cell to probe for a pair key (cells interleaved: key, value)."""
    n_cells = np.uint64(cells.size >> 1)
    return (((key * FIBONACCI) >> np.uint64(32)) & (n_cells - np.uint64(1))) << np.uint64(1)


@inlined
def pair_signature_bit(token):
    """Which of 64 bits stands for ``token`` in a pair signature."""
    return (np.uint64(token) * FIBONACCI) >> np.uint64(58)


@inlined
def pair_value(cells, signatures, left, right):
    """``rank << 32 | result`` of the rule merging (left, right), or NO_PAIR_VALUE.

    The signatures first: bit(right) of left's "as left" word and bit(left) of
    right's "as right" word are set whenever the rule exists, so a clear bit
    answers "no rule" from two words the batch keeps in cache.
    """
    maybe = (signatures[2 * left] >> pair_signature_bit(right)) \
        & (signatures[2 * right + 1] >> pair_signature_bit(left))
    if (maybe & np.uint64(1)) == 0:
        return NO_PAIR_VALUE
    key = pair_key(left, right)
    cell = pair_first_cell(cells, key)
    while True:
        stored = cells[cell]
        if stored == key:
            return np.int64(cells[cell + np.uint64(1)])
        if stored == EMPTY_KEY:
            return NO_PAIR_VALUE
        cell = _next_cell(cells, cell)


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


@njit(cache=True, nogil=True)
def first_misspelt_rule(pool, offsets, rules):
    """The first rank whose left and right tokens' bytes (``pool[offsets[t]:offsets[t+1]]``)
    do not spell its result's, or -1. Ids must lie below ``offsets.size - 1``.

    What loading an imported vocabulary checks; Python's bytes joins took 0.37 s of
    cl100k's 0.52 s ``Tokenizer.load``."""
    for rank in range(rules.shape[0]):
        left, right, result = rules[rank, 0], rules[rank, 1], rules[rank, 2]
        left_at, left_len = offsets[left], offsets[left + 1] - offsets[left]
        right_at, right_len = offsets[right], offsets[right + 1] - offsets[right]
        at = offsets[result]
        if (offsets[result + 1] - at != left_len + right_len
                or not equal_bytes(pool, left_at, pool, at, left_len)
                or not equal_bytes(pool, right_at, pool, at + left_len, right_len)):
            return rank
    return -1


def _whole_token_table(token_bytes: list[bytes] | None) -> tuple[np.ndarray, ...]:
    """(cells, pool, offsets, shapes) of the whole-token lookup; empty arrays when off."""
    if token_bytes is None:
        return (np.zeros(0, np.uint64), np.zeros(0, np.uint8), np.zeros(0, np.int64),
                np.zeros(0, np.uint8))
    lengths = np.fromiter(map(len, token_bytes), dtype=np.int64, count=len(token_bytes))
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    pool = np.frombuffer(b"".join(token_bytes), dtype=np.uint8).copy()
    n_cells = 1 << int(2 * max(lengths.size, 1) - 1).bit_length()
    cells = empty_cells(n_cells)
    _fill_whole_tokens(cells, pool, offsets)
    shapes = np.zeros(256 * 256, dtype=np.uint8)
    starts = offsets[256:-1][lengths[256:] > 0]
    shapes[np.minimum(lengths[256:][lengths[256:] > 0], 255) * 256 + pool[starts]] = 1
    return cells, pool, offsets, shapes


def all_splits(token_bytes: list[bytes]) -> np.ndarray:
    """Rules ``(left, right, token)`` (int64) for every split of every token past the 256
    bytes (ids 0-255, in order) into two tokens, by token then by cut: tiktoken's rules of
    a rank table (``interop.vocabulary_from_ranks``).

    A Python loop of dict lookups took 0.32 s of cl100k's import (907 K lookups); this
    kernel, the whole-token table's lookups, 0.07 s, the table's build 0.01 of it
    (bench/RESULTS.md, session 22). The tokenizer builds that table again for its
    whole-token lookup: shared, it would save those 0.01 s."""
    if token_bytes[:256] != _BYTE_TOKENS:
        raise ValueError("all_splits: the first 256 tokens must be the bytes, in order")
    cells, pool, offsets, _ = _whole_token_table(token_bytes)
    return _all_splits_cpu(cells, pool, offsets)


_BYTE_TOKENS = [bytes([b]) for b in range(256)]


@njit(cache=True)
def _all_splits_cpu(cells, pool, offsets):
    rules = np.empty((max(pool.size, 1), 3), np.int64)  # fewer splits than bytes
    n_rules = 0
    for token in range(256, offsets.size - 1):
        start, length = offsets[token], offsets[token + 1] - offsets[token]
        for cut in range(1, length):
            left = _token_of(pool, start, cut, cells, offsets)
            if left >= 0:
                right = _token_of(pool, start + cut, length - cut, cells, offsets)
                if right >= 0:
                    rules[n_rules, 0], rules[n_rules, 1], rules[n_rules, 2] = left, right, token
                    n_rules += 1
    return rules[:n_rules].copy()


@inlined
def _token_of(pool, start, length, cells, offsets):
    """The token spelled by ``pool[start:start + length]`` (a byte is its own id), or -1."""
    if length == 1:
        return np.int64(pool[start])
    return interleaved_find(pool, start, length, word_key(pool, start, start + length), cells,
                            pool, offsets)


@njit(cache=True)
def _fill_whole_tokens(cells, pool, offsets):
    for token in range(256, offsets.size - 1):
        key = word_key(pool, offsets[token], offsets[token + 1])
        if interleaved_find(pool, offsets[token], offsets[token + 1] - offsets[token], key,
                           cells, pool, offsets) < 0:
            _put_cell(cells, key, token)


@hot
def whole_token(data, start, length, rules):
    """Internal id of the token equal to the word, -1 when none or the lookup is off."""
    if rules.whole_table.size == 0 or length < 2:
        return -1
    if rules.whole_shapes[min(length, 255) * 256 + data[start]] == 0:
        return -1
    return interleaved_find(data, start, length, word_key(data, start, start + length),
                           rules.whole_table, rules.token_pool, rules.token_offsets)


@njit(cache=True, nogil=True)
def whole_tokens_of_words_cpu(data, word_at, word_len, rules):
    """int64 per word: the internal id of the token it equals (whole-token lookup), or -1."""
    found = np.empty(word_at.size, np.int64)
    for w in range(word_at.size):
        found[w] = whole_token(data, word_at[w], word_len[w], rules)
    return found
