"""BPE of one word (heap or scan) and of a list of distinct words."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import hot
from ..hashing import (
    table_find,
    table_find_inline,
)
from ..pairs import pair_key
from ._shared import inlined
from .rules import pair_value, whole_token

# ---------------------------------------------------------------- one word

NO_RULE = np.int64(1) << np.int64(62)


@hot
def _sift_up(heap_rank, heap_pos, size):
    at = size
    rank, pos = heap_rank[at], heap_pos[at]
    while at > 0:
        parent = (at - 1) >> 1
        if heap_rank[parent] < rank or (heap_rank[parent] == rank and heap_pos[parent] < pos):
            break
        heap_rank[at], heap_pos[at] = heap_rank[parent], heap_pos[parent]
        at = parent
    heap_rank[at], heap_pos[at] = rank, pos


@hot
def _pop_min(heap_rank, heap_pos, size):
    """Remove the smallest (rank, pos); returns the new size."""
    size -= 1
    rank, pos = heap_rank[size], heap_pos[size]
    at = 0
    while True:
        child = 2 * at + 1
        if child >= size:
            break
        if child + 1 < size and (heap_rank[child + 1] < heap_rank[child] or (
                heap_rank[child + 1] == heap_rank[child] and heap_pos[child + 1] < heap_pos[child])):
            child += 1
        if rank < heap_rank[child] or (rank == heap_rank[child] and pos < heap_pos[child]):
            break
        heap_rank[at], heap_pos[at] = heap_rank[child], heap_pos[child]
        at = child
    heap_rank[at], heap_pos[at] = rank, pos
    return size


@inlined
def _push_pair(symbols, left, right, rules, heap_rank, heap_pos, size):
    """Push (rank, left) when the pair at left/right has a rule; returns the new size."""
    rank = table_find(rules.keys, rules.ranks, pair_key(symbols[left], symbols[right]))
    if rank < 0:
        return size
    heap_rank[size], heap_pos[size] = rank, left
    _sift_up(heap_rank, heap_pos, size)
    return size + 1


@njit(inline="always", cache=True)
def _rule_rank(rule_keys, rule_ranks, left, right):
    """Rank of the rule merging (left, right), or NO_RULE."""
    rank = table_find_inline(rule_keys, rule_ranks, pair_key(left, right))
    return NO_RULE if rank < 0 else rank


@njit(inline="always", cache=True)
def merge_by_scan(symbols, pair_rank, start, n, rule_keys, rule_ranks, rule_result):
    """Merge ``symbols[start:start + n]`` in place by scanning for the lowest rank.

    Returns the new length (ids packed from ``start``). O(n^2) but without a
    heap: what a CUDA thread runs on its word (the CPU runs ``bpe_scan_word``).
    ``pair_rank[start + i]`` holds the rank of the pair at i. Inlined, so CUDA
    kernels can call it (see ``hashing``).
    """
    for i in range(start, start + n - 1):
        pair_rank[i] = _rule_rank(rule_keys, rule_ranks, symbols[i], symbols[i + 1])
    while n > 1:
        best = NO_RULE
        at = -1
        for i in range(start, start + n - 1):
            if pair_rank[i] < best:
                best = pair_rank[i]
                at = i
        if at < 0:
            break
        symbols[at] = rule_result[best]
        last = start + n - 1
        for k in range(at + 1, last):
            symbols[k] = symbols[k + 1]
            pair_rank[k] = pair_rank[k + 1]
        n -= 1
        if at > start:
            pair_rank[at - 1] = _rule_rank(rule_keys, rule_ranks, symbols[at - 1], symbols[at])
        if at < start + n - 1:
            pair_rank[at] = _rule_rank(rule_keys, rule_ranks, symbols[at], symbols[at + 1])
    return n


@hot
def bpe_short_word(symbols, n, rules, pair_rank):
    """``merge_by_scan`` on ``symbols[:n]``; returns the new length."""
    return merge_by_scan(symbols, pair_rank, 0, n, rules.keys, rules.ranks, rules.result)


@hot
def bpe_word(symbols, n, rules, nxt, prv, heap_rank, heap_pos, scan_keys):
    """Merge ``symbols[:n]`` (int64 ids) in place; returns how many ids remain, packed left.

    Scratch as ``bpe_heap_word``'s, and ``scan_keys`` (int32, n + 16 entries) for
    ``bpe_scan_word``, which also takes ``heap_rank`` for its pair values.
    """
    if n <= SCAN_WORD and rules.result.size <= _SCAN_MAX_RANK:
        return bpe_scan_word(symbols, n, rules.pair_cells, rules.pair_signatures, heap_rank,
                             scan_keys, nxt, prv)
    return bpe_heap_word(symbols, n, rules, nxt, prv, heap_rank, heap_pos)


# Words up to this many bytes use ``bpe_scan_word`` (a position fits in the 8 low bits
# of the int32 key it minimises, the rank in the 23 above: vocabularies of up to
# _SCAN_MAX_RANK rules); longer words, or more rules, the heap.
SCAN_WORD = 255
_SCAN_MAX_RANK = np.int64(0x7FFFFF)
_SCAN_NONE = np.int32(0x7FFFFFFF)
_SCAN_STOP = np.int32(_SCAN_MAX_RANK << np.int64(8))


@inlined
def _scan_key(value, position):
    """int32 (rank << 8) | position, >= _SCAN_STOP for no rule: the smallest is the
    lowest rank, leftmost at equal rank."""
    return np.int32((min(value >> np.int64(32), _SCAN_MAX_RANK) << np.int64(8)) | position)


@inlined
def _set_pair(symbols, cells, signatures, value, scan_keys, left, right):
    pair = pair_value(cells, signatures, symbols[left], symbols[right])
    value[left] = pair
    scan_keys[left] = _scan_key(pair, left)


@hot
def bpe_scan_word(symbols, n, cells, signatures, value, scan_keys, nxt, prv):
    """Merge ``symbols[:n]`` (int64 ids, n <= SCAN_WORD) in place; returns the ids left.

    The same order as ``merge_by_scan`` (lowest rank, then leftmost), but no id
    moves: ``value[i]`` holds the rule (``pair_value``) of the pair starting at
    live position i and ``scan_keys[i]`` its rank and position; dead positions
    hold "none", and ``nxt``/``prv`` link the live ones. Each merge is one
    branch-free minimum over ``scan_keys`` (16 int32 lanes a step) and two
    lookups. Scratch: ``value`` n, ``scan_keys`` n + 16, ``nxt``/``prv`` n entries.
    """
    for i in range(n - 1):
        _set_pair(symbols, cells, signatures, value, scan_keys, i, i + 1)
        nxt[i] = i + 1
        prv[i] = i - 1
    nxt[n - 1] = n
    prv[n - 1] = n - 2
    padded = (n + 15) & ~15
    for i in range(n - 1, padded):
        scan_keys[i] = _SCAN_NONE
    while True:
        best = _SCAN_NONE
        for i in range(padded):
            best = min(best, scan_keys[i])
        if best >= _SCAN_STOP:
            break
        at = np.int64(best & np.int32(0xFF))
        symbols[at] = value[at] & 0xFFFFFFFF
        right = nxt[at]
        scan_keys[right] = _SCAN_NONE
        after = nxt[right]
        nxt[at] = after
        scan_keys[at] = _SCAN_NONE
        if after < n:
            prv[after] = at
            _set_pair(symbols, cells, signatures, value, scan_keys, at, after)
        before = prv[at]
        if before >= 0:
            _set_pair(symbols, cells, signatures, value, scan_keys, before, at)
    count = 0
    i = 0
    while i < n:
        symbols[count] = symbols[i]
        count += 1
        i = nxt[i]
    return count


@hot
def bpe_heap_word(symbols, n, rules, nxt, prv, heap_rank, heap_pos):
    """Merge ``symbols[:n]`` (int64 ids) in place; returns how many ids remain, packed left.

    Scratch: ``nxt``, ``prv`` hold n entries, ``heap_rank``/``heap_pos`` 2n (each
    merge pops one entry and pushes at most two, so the heap never passes 2n).
    """
    size = 0
    for i in range(n):
        nxt[i] = i + 1 if i + 1 < n else -1
        prv[i] = i - 1
    for i in range(n - 1):
        size = _push_pair(symbols, i, i + 1, rules, heap_rank, heap_pos, size)
    while size > 0:
        rank, pos = heap_rank[0], heap_pos[0]
        size = _pop_min(heap_rank, heap_pos, size)
        right = nxt[pos]
        if symbols[pos] < 0 or right < 0:
            continue
        if table_find(rules.keys, rules.ranks, pair_key(symbols[pos], symbols[right])) != rank:
            continue
        symbols[pos] = rules.result[rank]
        symbols[right] = -1
        nxt[pos] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = pos
        if prv[pos] >= 0:
            size = _push_pair(symbols, prv[pos], pos, rules, heap_rank, heap_pos, size)
        if nxt[pos] >= 0:
            size = _push_pair(symbols, pos, nxt[pos], rules, heap_rank, heap_pos, size)
    count = 0
    for i in range(n):
        if symbols[i] >= 0:
            symbols[count] = symbols[i]
            count += 1
    return count


@hot
def _emit_output_ids(symbols, count, rules, out, out_at):
    """Write the output ids of ``symbols[:count]`` at ``out[out_at:]``; returns how many."""
    if rules.output_ids.size:
        for k in range(count):
            out[out_at + k] = rules.output_ids[symbols[k]]
        return count
    offsets = rules.demolish_offsets
    if offsets.size == 0:
        for k in range(count):
            out[out_at + k] = symbols[k]
        return count
    written = 0
    for k in range(count):
        token = symbols[k]
        for j in range(offsets[token], offsets[token + 1]):
            out[out_at + written] = rules.demolish_ids[j]
            written += 1
    return written


@njit(cache=True, nogil=True)
def encode_word_list_cpu(data, word_at, word_len, rules):
    """BPE-encode words ``data[word_at[w]:word_at[w] + word_len[w]]``: (ids uint32, offsets int64).

    Launch: one call per thread on its own words. Scratch: five int64 arrays and
    an int32 one of the longest word's length, allocated once. Output ids never
    outnumber the input bytes (every output token holds at least one byte).
    """
    n_words = word_at.size
    longest = 1
    total = 0
    for w in range(n_words):
        longest = max(longest, word_len[w])
        total += word_len[w]
    symbols = np.empty(longest, np.int64)
    nxt = np.empty(longest, np.int64)
    prv = np.empty(longest, np.int64)
    heap_rank = np.empty(2 * longest, np.int64)
    scan_keys = np.empty(longest + 16, np.int32)
    heap_pos = np.empty(2 * longest, np.int64)
    ids = np.empty(total, np.uint32)
    offsets = np.zeros(n_words + 1, np.int64)
    for w in range(n_words):
        n = word_len[w]
        start = word_at[w]
        for i in range(n):
            symbols[i] = data[start + i]
        token = whole_token(data, start, n, rules)
        if token >= 0:
            symbols[0] = token
            n = 1
        elif n > 1:
            n = bpe_word(symbols, n, rules, nxt, prv, heap_rank, heap_pos, scan_keys)
        offsets[w + 1] = offsets[w] + _emit_output_ids(symbols, n, rules, ids, offsets[w])
    return ids[:offsets[n_words]], offsets


def join_word_lists(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive ``(ids, offsets)`` results of word lists as one (offsets shifted)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.zeros(0, dtype=np.uint32), np.zeros(1, dtype=np.int64)
    shifts = np.cumsum([0] + [ids.size for ids, _ in parts[:-1]])
    offsets = np.concatenate([[0]] + [o[1:] + s for (_, o), s in zip(parts, shifts)])
    return np.concatenate([ids for ids, _ in parts]), offsets.astype(np.int64)


def interleaved_word_lists(parts, n_words: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, (ids, offsets))`` parts, each the encodings of the words its boolean mask
    selects (the masks disjoint), as one ``(ids, offsets)`` in word order."""
    lengths = np.zeros(n_words, dtype=np.int64)
    for mask, (_, offsets) in parts:
        lengths[mask] = np.diff(offsets)
    out_offsets = np.zeros(n_words + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint32)
    for mask, (ids, offsets) in parts:
        words = np.flatnonzero(mask)
        where = np.repeat(out_offsets[words] - offsets[:-1], np.diff(offsets))
        out[where + np.arange(ids.size)] = ids
    return out, out_offsets
