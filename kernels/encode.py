"""Batched BPE encoding of unique words.

Each word is encoded with the priority-queue + linked-list algorithm of
``shared/seeds/002_*``: a min-heap of (rank, position) over the word's
adjacent pairs that have a rule; the smallest rank wins, the leftmost at equal
rank (positions keep their original left-to-right order). A popped entry is
stale when its left token died or the pair under it changed; it is skipped.
O(n log n) per word, so a 1 MB word costs well under a second.

Rules are looked up in a uint64 hash table: pair key -> rank; ``rule_result``
maps a rank to the id the rule produces.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._jit import hot
from .hashing import empty_table, table_find, table_put
from .pairs import pair_key


def rule_table(rules: np.ndarray):
    """Hash table pair key -> rank (the first rank when a pair repeats), and results."""
    keys, values = empty_table(4 * max(len(rules), 1))
    _fill_rule_table(keys, values, np.ascontiguousarray(rules[:, 0]),
                     np.ascontiguousarray(rules[:, 1]))
    return keys, values, np.ascontiguousarray(rules[:, 2])


@njit(cache=True)
def _fill_rule_table(keys, values, left, right):
    for rank in range(left.size):
        key = pair_key(left[rank], right[rank])
        if table_find(keys, values, key) < 0:
            table_put(keys, values, key, rank)


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


@hot
def encode_word_cpu(symbols, table_keys, table_values, rule_result, nxt, prv, heap_rank, heap_pos):
    """Encode one word in place: ``symbols`` (int64 ids) -> its merged ids, returns the count.

    Scratch arrays (``nxt``, ``prv``, ``heap_*``) have at least ``symbols.size`` entries.
    """
    n = symbols.size
    size = 0
    for i in range(n):
        nxt[i] = i + 1 if i + 1 < n else -1
        prv[i] = i - 1
    for i in range(n - 1):
        rank = table_find(table_keys, table_values, pair_key(symbols[i], symbols[i + 1]))
        if rank >= 0:
            heap_rank[size], heap_pos[size] = rank, i
            _sift_up(heap_rank, heap_pos, size)
            size += 1
    while size > 0:
        rank, pos = heap_rank[0], heap_pos[0]
        size = _pop_min(heap_rank, heap_pos, size)
        right = nxt[pos]
        if symbols[pos] < 0 or right < 0:
            continue
        if table_find(table_keys, table_values, pair_key(symbols[pos], symbols[right])) != rank:
            continue
        symbols[pos] = rule_result[rank]
        symbols[right] = -1
        nxt[pos] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = pos
        for left in (prv[pos], pos):
            if left >= 0 and nxt[left] >= 0:
                found = table_find(table_keys, table_values,
                                   pair_key(symbols[left], symbols[nxt[left]]))
                if found >= 0:
                    heap_rank[size], heap_pos[size] = found, left
                    _sift_up(heap_rank, heap_pos, size)
                    size += 1
    count = 0
    for i in range(n):
        if symbols[i] >= 0:
            symbols[count] = symbols[i]
            count += 1
    return count


@njit(parallel=True, cache=True)
def encode_words_cpu(data, offsets, table_keys, table_values, rule_result):
    """Encode many words: bytes ``data`` split by ``offsets`` -> (ids uint32, id offsets int64)."""
    n_words = offsets.size - 1
    encoded = np.empty(data.size, dtype=np.int64)
    lengths = np.zeros(n_words, dtype=np.int64)
    for w in prange(n_words):
        start, stop = offsets[w], offsets[w + 1]
        n = stop - start
        symbols = encoded[start:stop]
        for i in range(n):
            symbols[i] = data[start + i]
        if n > 1:
            nxt = np.empty(n, np.int64)
            prv = np.empty(n, np.int64)
            heap_rank = np.empty(2 * n, np.int64)
            heap_pos = np.empty(2 * n, np.int64)
            n = encode_word_cpu(symbols, table_keys, table_values, rule_result, nxt, prv,
                                heap_rank, heap_pos)
        lengths[w] = n
    out_offsets = np.zeros(n_words + 1, dtype=np.int64)
    for w in range(n_words):
        out_offsets[w + 1] = out_offsets[w] + lengths[w]
    ids = np.empty(out_offsets[n_words], dtype=np.uint32)
    for w in prange(n_words):
        for i in range(lengths[w]):
            ids[out_offsets[w] + i] = encoded[offsets[w] + i]
    return ids, out_offsets
