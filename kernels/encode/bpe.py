"""BPE of one word (heap or scan) and of a list of distinct words."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import hot
from ..hashing import table_find_inline
from ..pairs import pair_key
from ._shared import inlined
from .rules import NO_PAIR_VALUE, pair_value, whole_token

# ---------------------------------------------------------------- one word

NO_RULE = np.int64(1) << np.int64(62)
_HEAP_END = np.int64(0x7FFFFFFFFFFFFFFF)  # above every heap key: the slot after the heap


@hot
def _sift_up(heap, at):
    """Move ``heap[at]`` up to its place (a min-heap of int64 keys)."""
    key = heap[at]
    while at > 0:
        parent = (at - 1) >> 1
        if heap[parent] <= key:
            break
        heap[at] = heap[parent]
        at = parent
    heap[at] = key


@hot
def _pop_min(heap, size):
    """Remove the smallest key; returns the new size. ``heap[size]`` may be overwritten
    (the heap array holds one entry more than the heap's bound).

    Bottom-up: the hole at the root moves down to a leaf along the smaller
    children (a select, no compare with the moving key, so no mispredicted exit),
    then the last key sifts up from there, where it mostly stays.
    """
    size -= 1
    key = heap[size]
    heap[size] = _HEAP_END
    hole = 0
    child = 1
    while child < size:
        child += heap[child + 1] < heap[child]
        heap[hole] = heap[child]
        hole = child
        child = 2 * hole + 1
    heap[hole] = key
    _sift_up(heap, hole)
    return size


@inlined
def _push_pair(symbols, left, right, rules, value, heap, size):
    """Set ``value[left]`` to the rule of the pair at left/right and push its heap key
    (rank << 32 | left) when there is one; returns the new heap size."""
    pair = pair_value(rules.pair_cells, rules.pair_signatures, symbols[left], symbols[right])
    value[left] = pair
    if pair == NO_PAIR_VALUE:
        return size
    heap[size] = ((pair >> np.int64(32)) << np.int64(32)) | left
    _sift_up(heap, size)
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
def bpe_word(symbols, n, rules, nxt, prv, heap, value, scan_keys):
    """Merge ``symbols[:n]`` (int64 ids) in place; returns how many ids remain, packed left.

    Scratch as ``bpe_heap_word``'s, and ``scan_keys`` (int32, n + 16 entries) for
    ``bpe_scan_word``.
    """
    if n <= SCAN_WORD and rules.result.size <= _SCAN_MAX_RANK:
        return bpe_scan_word(symbols, n, rules.pair_cells, rules.pair_signatures, value,
                             scan_keys, nxt, prv)
    return bpe_heap_word(symbols, n, rules, nxt, prv, heap, value)


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
def bpe_heap_word(symbols, n, rules, nxt, prv, heap, value):
    """Merge ``symbols[:n]`` (int64 ids, n < 2**32) in place; returns how many ids remain,
    packed left.

    ``value[i]`` holds the rule (``pair_value``: rank << 32 | result) of the pair
    starting at live position i, and the heap one key (rank << 32 | position) for
    each rule pushed: the smallest is the lowest rank, leftmost at equal rank. A
    popped key is stale when its position died or the pair there changed rank.
    Scratch: ``nxt``, ``prv``, ``value`` n entries, ``heap`` 2n (each merge pops one
    key and pushes at most two, so the heap never passes 2n).

    Was (to session 16): (rank, position) in two arrays, the rule table probed for
    each push and again for each pop (the staleness check), a top-down sift. With
    the pair signatures, ``value`` and the bottom-up pop (``_pop_min``), thread CPU
    time of ``encode_word_list_cpu`` on random letters, real cl100k: 300-byte words
    70.6 -> 47.9 ns/B, 64 KB words 137.6 -> 83.1; 100-character Han words 44.8 ->
    20.8 (bench/RESULTS.md, session 16).
    """
    size = 0
    for i in range(n):
        nxt[i] = i + 1 if i + 1 < n else -1
        prv[i] = i - 1
    value[n - 1] = NO_PAIR_VALUE
    for i in range(n - 1):
        size = _push_pair(symbols, i, i + 1, rules, value, heap, size)
    while size > 0:
        key = heap[0]
        size = _pop_min(heap, size)
        pos = key & np.int64(0xFFFFFFFF)
        if (value[pos] >> np.int64(32)) != (key >> np.int64(32)):
            continue
        right = nxt[pos]
        symbols[pos] = value[pos] & np.int64(0xFFFFFFFF)
        symbols[right] = -1
        value[right] = NO_PAIR_VALUE
        after = nxt[right]
        nxt[pos] = after
        if after >= 0:
            prv[after] = pos
            size = _push_pair(symbols, pos, after, rules, value, heap, size)
        else:
            value[pos] = NO_PAIR_VALUE
        if prv[pos] >= 0:
            size = _push_pair(symbols, prv[pos], pos, rules, value, heap, size)
    count = 0
    for i in range(n):
        if symbols[i] >= 0:
            symbols[count] = symbols[i]
            count += 1
    return count


@inlined
def word_symbols(data, start, n, rules, symbols):
    """Copy the word ``data[start:start + n]`` into ``symbols`` as byte ids, leaving out
    each byte that has no token; returns how many are kept.

    A byte has no token only in an imported vocabulary (its output list is empty: the
    file has no token for it, as StarCoder's has none for 0xF1 or Falcon's for 0x05).
    HF's BPE drops such a byte before it merges, so the bytes on either side of it merge
    as neighbours; dropped after merging, it kept them apart (found by a differential
    fuzz against HF: U+0342 U+589FB under StarCoder's file, CD 82 [F1] 98 A7 BB, where
    HF merges 82 98).
    """
    offsets = rules.demolish_offsets
    if rules.output_ids.size or offsets.size == 0:  # every byte has its one output id
        for i in range(n):
            symbols[i] = data[start + i]
        return n
    kept = 0
    for i in range(n):
        byte = np.int64(data[start + i])
        symbols[kept] = byte
        kept += offsets[byte + 1] > offsets[byte]
    return kept


@hot
def emit_output_ids(symbols, count, rules, out, out_at):
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

    Launch: one call per thread on its own words. Scratch: int64 and int32 arrays of
    the longest word's length (the heap twice that), allocated once. Output ids never
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
    heap = np.empty(2 * longest + 1, np.int64)
    value = np.empty(longest, np.int64)
    scan_keys = np.empty(longest + 16, np.int32)
    ids = np.empty(total, np.uint32)
    offsets = np.zeros(n_words + 1, np.int64)
    for w in range(n_words):
        n = word_len[w]
        start = word_at[w]
        token = whole_token(data, start, n, rules)
        if token >= 0:
            symbols[0] = token
            n = 1
        else:
            n = word_symbols(data, start, n, rules, symbols)
            if n > 1:
                n = bpe_word(symbols, n, rules, nxt, prv, heap, value, scan_keys)
        offsets[w + 1] = offsets[w] + emit_output_ids(symbols, n, rules, ids, offsets[w])
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
