"""Batched BPE encoding: word references, unique-word encoding, ragged outputs, decoding.

A batch is UTF-8 bytes cut into *pieces*: runs of ordinary text, or one
special token each (``piece_special`` >= 0 holds its id). Pieces are handed
to threads in contiguous runs (*shards*); every step below is exact, so the
ids never depend on how many shards there are or where they start.

1. ``word_refs_scan_cpu`` / ``word_refs_given_cpu`` (one call per shard, no
   GIL): split the pieces into words and look each word up, by its
   ``word_key``, in the tokenizer's ``WordCache``; a miss goes into the
   shard's own table of new words. Each word occurrence becomes a *ref*: a
   cache slot (>= 0) or ``-1 - index`` of a new word.
2. ``merge_new_words_cpu``: the shards' new words, deduplicated across
   shards, in order of first occurrence in the batch.
3. ``encode_word_list_cpu`` (split over threads): BPE on each distinct new
   word (``bpe_word``), then the Scaffold demolish map when the vocabulary
   has one.
4. ``count_piece_tokens_cpu`` then ``write_piece_tokens_cpu`` (per shard):
   the id count of each piece, a prefix sum (host), and the ids written in
   place into one ``uint32`` array.
5. ``cache_admit_cpu``: the batch's new words enter the cache while it has
   room (the caller decides eviction).

``encode_pieces_serial_cpu`` runs steps 1-4 in one call for small batches.

On a GPU (``backend="cuda"``), step 3 runs as ``encode_word_list_cuda`` (a
thread per word, the same ``merge_by_scan``; see "CUDA target" below), and
decoding as ``gather_token_bytes_cuda``; ``gpubpe.device`` feeds them chunks.

One word is encoded with the priority-queue + linked-list algorithm of
``shared/seeds/002_*`` (``bpe_heap_word``): a min-heap of (rank, position)
over the word's adjacent pairs that have a rule; the smallest rank wins, the
leftmost at equal rank. A popped entry is stale when its left token died or
the pair under it changed; it is skipped. O(n log n) per word, so a 1 MB word
costs well under a second. Short words use a heap-free scan with the same
order (``bpe_short_word``). Rules are looked up in a uint64 hash table: pair
key -> rank.

Performance notes (thread CPU time on the 2-core build VM, 10 MB of English,
32K vocabulary; bench/encode_bench.py has the end-to-end numbers):

- The split dominates: ~7 ns/byte for the GPT-2 scanner, mostly mispredicted
  branches at word ends. Handling ASCII word starts inline
  (``gpt2_word_end_fast``) gave +35%. cl100k and o200k scan through the same
  kernel (``pretok.piece_end``, one branch per word on the scanner id).
- Cache lookups first cost ~45 ns per word: separate key and slot arrays,
  then two offset arrays and the pooled bytes to compare, 4-5 dependent
  loads. Words of up to 7 bytes are now their own key (no byte compare) and
  each cell holds (key, slot) side by side: ~13 ns per word.
- A NamedTuple of arrays passed to a helper that is really called costs
  seven machine words per array; the per-word helpers are inlined at Numba IR
  level (``inlined``): word refs 233 -> 163 ms per 10 MB with an empty cache.
  Compile time was the same without it (the scanner kernel takes ~10 s to
  compile once; it is cached on disk).
- In a kernel that uses the Numba runtime, picking one of two arrays inside
  the per-word loop (``a if c else b``) adds refcount traffic per word: the
  write step went from 25 to 172 ms; count and write now run without it.
- BPE of a distinct word: ~1 us for a 7-byte English word with the heap,
  ~0.5 us with the heap-free scan. It matters little: 40 MB of English hold
  ~160K distinct words for ~9M occurrences, and the cache keeps them.
- Python threads over ``nogil`` kernels, not ``parallel=True``: the
  workqueue threading layer aborts when two Python threads launch parallel
  kernels at once, and the thread count is then the caller's to choose.
- Tried and dropped: gathering Python int objects from an object array to
  build ``list[list[int]]`` faster than ``ndarray.tolist`` (no gain).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import cuda, njit, types
from numba.core.extending import intrinsic

from ._cuda import device_empty, device_function, exclusive_scan, launch, read_scalar
from ._jit import hot
from .hashing import (
    EMPTY_KEY,
    empty_table,
    grown_like,
    hash_bytes,
    mix64,
    table_find,
    table_find_inline,
    table_put,
)
from .pairs import pair_key
from .pretok import piece_end, safe_cut

# Small helpers called once per word or per pair, inlined into their callers at
# Numba IR level: a real call passes every array of a NamedTuple by value
# (seven machine words each), which cost more than the work itself.
inlined = njit(cache=True, _nrt=False, inline="always")
# Kernels that allocate nothing run without the Numba runtime too (see ``_jit.hot``).
hot_nogil = njit(cache=True, _nrt=False, nogil=True)


class RuleTable(NamedTuple):
    """Merge rules for encoding, and the Scaffold demolish map (both empty for plain BPE)."""

    keys: np.ndarray  # uint64 hash table of pair keys
    ranks: np.ndarray  # int64: the rank stored under each key
    result: np.ndarray  # int64: rank -> id the rule produces
    demolish_ids: np.ndarray  # uint32: output ids of internal id t at demolish_offsets[t:t+2]
    demolish_offsets: np.ndarray  # int64, one more than internal ids; empty: output == internal
    # Whole-token lookup (tiktoken; HF ignore_merges), all empty when off: a word that
    # is a token maps to it before any merge. Interleaved (word_key, internal id)
    # cells; the tokens' bytes, to compare long words, at token_offsets[t:t+2].
    whole_table: np.ndarray  # uint64
    token_pool: np.ndarray  # uint8
    token_offsets: np.ndarray  # int64


class WordCache(NamedTuple):
    """Encoded words kept across calls: word key -> slot, then each slot's bytes and ids."""

    table: np.ndarray  # uint64, 2 per cell: word key, slot (see ``word_key``)
    byte_offsets: np.ndarray  # int64, max_words + 1: slot s's bytes in pool_bytes
    id_offsets: np.ndarray  # int64, max_words + 1: slot s's ids in pool_ids
    pool_bytes: np.ndarray  # uint8
    pool_ids: np.ndarray  # uint32
    used: np.ndarray  # int64[1]: slots in use


class NewWords(NamedTuple):
    """A shard's words that missed the cache: a table and, per word, where it was seen."""

    table: np.ndarray  # uint64, 2 per cell: word key, index of the word
    at: np.ndarray  # int64: byte offset of its first occurrence in the batch
    length: np.ndarray  # int64: its length in bytes
    count: np.ndarray  # int64: occurrences in the shard
    key: np.ndarray  # uint64: its word key


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


# ---------------------------------------------------------------- one word

NO_RULE = np.int64(1) << np.int64(62)
# Words up to this many bytes use the heap-free quadratic scan (measured faster).
SHORT_WORD = 32


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
    heap: faster than ``bpe_heap_word`` below about SHORT_WORD bytes, and what
    a CUDA thread runs on its word. ``pair_rank[start + i]`` holds the rank of
    the pair at i. Inlined, so CUDA kernels can call it (see ``hashing``).
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
def bpe_word(symbols, n, rules, nxt, prv, heap_rank, heap_pos):
    """Merge ``symbols[:n]`` (int64 ids) in place; returns how many ids remain, packed left."""
    if n <= SHORT_WORD:
        return bpe_short_word(symbols, n, rules, heap_rank)
    return bpe_heap_word(symbols, n, rules, nxt, prv, heap_rank, heap_pos)


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

    Launch: one call per thread on its own words. Scratch: five int64 arrays of
    the longest word's length, allocated once. Output ids never outnumber the
    input bytes (every output token holds at least one byte).
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
            n = bpe_word(symbols, n, rules, nxt, prv, heap_rank, heap_pos)
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


# ---------------------------------------------------------------- word keys and tables

# A word of up to 7 bytes is its own key: its length in the top byte, its bytes
# below, so equal keys mean equal words and no bytes are compared. A longer
# word's key is a 56-bit hash tagged LONG_WORD_TAG in the top byte; its bytes
# are compared on a key match.
LONG_WORD_TAG = np.uint64(8) << np.uint64(56)
_LOW_56 = (np.uint64(1) << np.uint64(56)) - np.uint64(1)


@inlined
def _equal_bytes(a, a_at, b, b_at, length):
    for k in range(length):
        if a[a_at + k] != b[b_at + k]:
            return False
    return True


@inlined
def word_key(data, start, stop):
    """The table key of ``data[start:stop]`` (never EMPTY_KEY)."""
    length = stop - start
    if length <= 7:
        key = np.uint64(length) << np.uint64(56)
        for k in range(length):
            key |= np.uint64(data[start + k]) << np.uint64(8 * k)
        return key
    return (hash_bytes(data, start, length) & _LOW_56) | LONG_WORD_TAG


@inlined
def _first_cell(table, key):
    return (mix64(key) & np.uint64((table.size >> 1) - 1)) << np.uint64(1)


@inlined
def _next_cell(table, cell):
    return (cell + np.uint64(2)) & np.uint64(table.size - 1)


@inlined
def _put_cell(table, key, value):
    """Store ``value`` under ``key`` (absent) in an interleaved table."""
    cell = _first_cell(table, key)
    while table[cell] != EMPTY_KEY:
        cell = _next_cell(table, cell)
    table[cell] = key
    table[cell + np.uint64(1)] = np.uint64(value)


def empty_cells(n_cells: int) -> np.ndarray:
    """An interleaved (key, value) table of ``n_cells`` cells (a power of two), all free."""
    return np.full(2 * n_cells, EMPTY_KEY, dtype=np.uint64)


@inlined
def _cached_slot(data, start, length, key, cache):
    """Cache slot of the word ``data[start:start+length]`` (key ``key``), or -1."""
    table = cache.table
    cell = _first_cell(table, key)
    while table[cell] != EMPTY_KEY:
        if table[cell] == key:
            slot = np.int64(table[cell + np.uint64(1)])
            if key < LONG_WORD_TAG:
                return slot
            at = cache.byte_offsets[slot]
            if (cache.byte_offsets[slot + 1] - at == length
                    and _equal_bytes(data, start, cache.pool_bytes, at, length)):
                return slot
        cell = _next_cell(table, cell)
    return -1


@inlined
def _new_word_index(data, start, length, key, new, n_new):
    """(index of the word among the shard's new words, new n_new), adding it when absent."""
    table = new.table
    cell = _first_cell(table, key)
    while table[cell] != EMPTY_KEY:
        if table[cell] == key:
            index = np.int64(table[cell + np.uint64(1)])
            if key < LONG_WORD_TAG or (new.length[index] == length and _equal_bytes(
                    data, start, data, new.at[index], length)):
                new.count[index] += 1
                return index, n_new
        cell = _next_cell(table, cell)
    table[cell] = key
    table[cell + np.uint64(1)] = np.uint64(n_new)
    new.at[n_new] = start
    new.length[n_new] = length
    new.count[n_new] = 1
    new.key[n_new] = key
    return n_new, n_new + 1


@inlined
def _word_ref(data, start, stop, cache, new, n_new):
    """(ref of the word data[start:stop], new n_new): a cache slot, or -1 - new-word index."""
    key = word_key(data, start, stop)
    slot = _cached_slot(data, start, stop - start, key, cache)
    if slot >= 0:
        return slot, n_new
    index, n_new = _new_word_index(data, start, stop - start, key, new, n_new)
    return -1 - index, n_new


@inlined
def _has_room(refs, new, n_refs, n_new):
    return n_refs < refs.size and n_new < new.at.size and 4 * (n_new + 1) <= new.table.size


@inlined
def _save_cursor(cursor, piece, position, n_refs, n_new):
    cursor[0], cursor[1], cursor[2], cursor[3] = piece, position, n_refs, n_new


@hot
def _scanned_refs_into(data, piece_start, piece_end_at, piece_special, piece_hi, scanner, table,
                       cache, new, refs, piece_ref_end, cursor):
    """Split pieces with a Numba scanner (``pretok.piece_end``) and ref each word, from ``cursor`` on.

    ``cursor`` = (piece, byte, refs made, new words). Returns False when an
    array is full (the caller grows it and calls again), True when done.
    """
    piece, i, n_refs, n_new = cursor[0], cursor[1], cursor[2], cursor[3]
    while piece < piece_hi:
        if piece_special[piece] < 0:
            i = max(i, piece_start[piece])
            end = piece_end_at[piece]
            while i < end:
                if not _has_room(refs, new, n_refs, n_new):
                    _save_cursor(cursor, piece, i, n_refs, n_new)
                    return False
                stop = piece_end(scanner, data, i, end, table)
                ref, n_new = _word_ref(data, i, stop, cache, new, n_new)
                refs[n_refs] = ref
                n_refs += 1
                i = stop
        piece_ref_end[piece] = n_refs
        piece += 1
        i = 0
    _save_cursor(cursor, piece, 0, n_refs, n_new)
    return True


@hot
def _given_refs_into(data, word_starts, word_ends, piece_word_offsets, piece_hi, cache, new,
                     refs, piece_ref_end, cursor):
    """Ref each word of pieces already split (``word_starts``/``word_ends``), from ``cursor`` on.

    ``cursor`` = (piece, word, refs made, new words); returns as ``_scanned_refs_into``.
    """
    piece, w, n_refs, n_new = cursor[0], cursor[1], cursor[2], cursor[3]
    while piece < piece_hi:
        w = max(w, piece_word_offsets[piece])
        while w < piece_word_offsets[piece + 1]:
            if not _has_room(refs, new, n_refs, n_new):
                _save_cursor(cursor, piece, w, n_refs, n_new)
                return False
            ref, n_new = _word_ref(data, word_starts[w], word_ends[w], cache, new, n_new)
            refs[n_refs] = ref
            n_refs += 1
            w += 1
        piece_ref_end[piece] = n_refs
        piece += 1
    _save_cursor(cursor, piece, 0, n_refs, n_new)
    return True


@njit(cache=True)
def _empty_new_words(capacity):
    return NewWords(np.full(4 * capacity, EMPTY_KEY, dtype=np.uint64),
                    np.empty(capacity, np.int64), np.empty(capacity, np.int64),
                    np.empty(capacity, np.int64), np.empty(capacity, np.uint64))


@njit(cache=True)
def _grown_new_words(new, n_new):
    """The table at twice the capacity, holding the same words."""
    bigger = _empty_new_words(2 * new.at.size)
    for index in range(n_new):
        bigger.at[index] = new.at[index]
        bigger.length[index] = new.length[index]
        bigger.count[index] = new.count[index]
        bigger.key[index] = new.key[index]
        _put_cell(bigger.table, new.key[index], index)
    return bigger


@njit(cache=True)
def _refs_result(refs, new, cursor):
    n_refs, n_new = cursor[2], cursor[3]
    return (refs[:n_refs].copy(), new.at[:n_new].copy(), new.length[:n_new].copy(),
            new.count[:n_new].copy(), new.key[:n_new].copy())


@njit(cache=True, nogil=True)
def word_refs_scan_cpu(data, piece_start, piece_end, piece_special, piece_lo, piece_hi, scanner,
                       table, cache, piece_ref_end):
    """Step 1 for a named pattern on pieces [piece_lo, piece_hi) (one shard, one thread).

    ``scanner`` is ``pretok.GPT2``, ``CL100K`` or ``O200K``, ``table`` its class table.

    Writes ``piece_ref_end[p]`` (refs made up to the end of piece p, counted from
    the shard's first piece) and returns ``(refs, new_at, new_len, new_count,
    new_key)``. Scratch: refs start at a quarter of the shard's bytes, the
    new-word table at 1024 words; both double when full.
    """
    n_bytes = 0
    for piece in range(piece_lo, piece_hi):
        n_bytes += piece_end[piece] - piece_start[piece]
    refs = np.empty(max(n_bytes // 4, 16), np.int64)
    new = _empty_new_words(1024)
    cursor = np.array([piece_lo, 0, 0, 0], dtype=np.int64)
    while not _scanned_refs_into(data, piece_start, piece_end, piece_special, piece_hi, scanner,
                                 table, cache, new, refs, piece_ref_end, cursor):
        if cursor[2] == refs.size:
            refs = grown_like(refs, 0)
        else:
            new = _grown_new_words(new, cursor[3])
    return _refs_result(refs, new, cursor)


@njit(cache=True, nogil=True)
def word_refs_given_cpu(data, word_starts, word_ends, piece_word_offsets, piece_lo, piece_hi,
                        cache, piece_ref_end):
    """Step 1 for words already split (custom patterns, by ``regex``): as ``word_refs_scan_cpu``.

    Piece p's words are ``data[word_starts[w]:word_ends[w]]`` for w in
    ``piece_word_offsets[p]:piece_word_offsets[p+1]``; text between them
    (which a pattern may skip) is not encoded.
    """
    n_words = piece_word_offsets[piece_hi] - piece_word_offsets[piece_lo]
    refs = np.empty(max(n_words, 1), np.int64)
    new = _empty_new_words(1024)
    cursor = np.array([piece_lo, 0, 0, 0], dtype=np.int64)
    while not _given_refs_into(data, word_starts, word_ends, piece_word_offsets, piece_hi, cache,
                               new, refs, piece_ref_end, cursor):
        new = _grown_new_words(new, cursor[3])
    return _refs_result(refs, new, cursor)


@njit(cache=True, nogil=True)
def merge_new_words_cpu(data, word_at, word_len, word_count, word_keys):
    """Step 2: distinct words among the shards' new words, in order of first occurrence.

    Input: the shards' lists end to end (each already distinct within its
    shard). Returns ``(local_to_global, first, global_count)``: global word g
    is input word ``first[g]``.
    """
    n = word_at.size
    n_cells = 16
    while n_cells < 2 * n:
        n_cells *= 2
    table = np.full(2 * n_cells, EMPTY_KEY, dtype=np.uint64)
    local_to_global = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    global_count = np.zeros(n, np.int64)
    n_global = 0
    for w in range(n):
        key = word_keys[w]
        cell = _first_cell(table, key)
        found = -1
        while table[cell] != EMPTY_KEY:
            g = np.int64(table[cell + np.uint64(1)])
            if table[cell] == key and (key < LONG_WORD_TAG or (
                    word_len[first[g]] == word_len[w]
                    and _equal_bytes(data, word_at[w], data, word_at[first[g]], word_len[w]))):
                found = g
                break
            cell = _next_cell(table, cell)
        if found < 0:
            found = n_global
            table[cell] = key
            table[cell + np.uint64(1)] = np.uint64(found)
            first[found] = w
            n_global += 1
        local_to_global[w] = found
        global_count[found] += word_count[w]
    return local_to_global, first[:n_global].copy(), global_count[:n_global].copy()


# ---------------------------------------------------------------- ragged output


@inlined
def _ref_ids(ref, local_to_global, cache, new_offsets):
    """(source is the cache, first id, id count) of a word ref."""
    if ref >= 0:
        at = cache.id_offsets[ref]
        return True, at, cache.id_offsets[ref + 1] - at
    g = local_to_global[-1 - ref]
    return False, new_offsets[g], new_offsets[g + 1] - new_offsets[g]


@hot_nogil
def count_piece_tokens_cpu(refs, piece_ref_end, piece_special, piece_lo, piece_hi,
                           local_to_global, cache, new_offsets, piece_tokens):
    """Step 4a (one shard): ``piece_tokens[p]`` = ids piece p encodes to (a special: 1)."""
    r = 0
    for piece in range(piece_lo, piece_hi):
        if piece_special[piece] >= 0:
            piece_tokens[piece] = 1
            continue
        total = 0
        while r < piece_ref_end[piece]:
            _, _, n = _ref_ids(refs[r], local_to_global, cache, new_offsets)
            total += n
            r += 1
        piece_tokens[piece] = total


@hot_nogil
def write_piece_tokens_cpu(refs, piece_ref_end, piece_special, piece_lo, piece_hi,
                           local_to_global, cache, new_ids, new_offsets, piece_token_offsets,
                           ids):
    """Step 4b (one shard): write each piece's ids at ``ids[piece_token_offsets[p]:]``."""
    r = 0
    for piece in range(piece_lo, piece_hi):
        out = piece_token_offsets[piece]
        if piece_special[piece] >= 0:
            ids[out] = piece_special[piece]
            continue
        while r < piece_ref_end[piece]:
            from_cache, at, n = _ref_ids(refs[r], local_to_global, cache, new_offsets)
            if from_cache:
                for k in range(n):
                    ids[out + k] = cache.pool_ids[at + k]
            else:
                for k in range(n):
                    ids[out + k] = new_ids[at + k]
            out += n
            r += 1


@njit(cache=True, nogil=True)
def encode_pieces_serial_cpu(data, piece_start, piece_end, piece_special, scanner, table, cache,
                             rules):
    """Steps 1-4 for a named pattern (``scanner``) on one thread, in one call (small batches).

    Returns ``(ids, piece_offsets, n_words, new_ids, new_offsets, new_at,
    new_len, new_count, new_key)``: the batch's ids, each piece's first id, its
    word count, and its new words (already distinct: one shard) for
    ``cache_admit_cpu``.
    """
    n_pieces = piece_start.size
    piece_ref_end = np.empty(n_pieces, np.int64)
    refs, new_at, new_len, new_count, new_key = word_refs_scan_cpu(
        data, piece_start, piece_end, piece_special, 0, n_pieces, scanner, table, cache,
        piece_ref_end)
    new_ids, new_offsets = encode_word_list_cpu(data, new_at, new_len, rules)
    local_to_global = np.arange(new_at.size)
    piece_tokens = np.empty(n_pieces, np.int64)
    count_piece_tokens_cpu(refs, piece_ref_end, piece_special, 0, n_pieces, local_to_global,
                           cache, new_offsets, piece_tokens)
    piece_offsets = np.zeros(n_pieces + 1, np.int64)
    for piece in range(n_pieces):
        piece_offsets[piece + 1] = piece_offsets[piece] + piece_tokens[piece]
    ids = np.empty(piece_offsets[n_pieces], np.uint32)
    write_piece_tokens_cpu(refs, piece_ref_end, piece_special, 0, n_pieces, local_to_global,
                           cache, new_ids, new_offsets, piece_offsets, ids)
    return ids, piece_offsets, refs.size, new_ids, new_offsets, new_at, new_len, new_count, new_key


# ---------------------------------------------------------------- the word cache


def empty_word_cache(max_words: int, pool_bytes: int) -> WordCache:
    """A cache for ``max_words`` words holding ``pool_bytes`` bytes (and as many ids) in all."""
    n_cells = 1 << (2 * max_words - 1).bit_length()
    return WordCache(empty_cells(n_cells), np.zeros(max_words + 1, np.int64),
                     np.zeros(max_words + 1, np.int64), np.empty(pool_bytes, np.uint8),
                     np.empty(pool_bytes, np.uint32), np.zeros(1, np.int64))


def clear_word_cache(cache: WordCache) -> None:
    cache.table.fill(EMPTY_KEY)
    cache.used[0] = 0


@njit(cache=True, nogil=True)
def cache_admit_cpu(cache, data, word_at, word_len, word_keys, word_ids, word_id_offsets, order,
                    max_word_len):
    """Step 5: put words (in ``order``) into the cache until it is full.

    Returns True when every word fit (or was skipped), False when the cache filled up.

    Words longer than ``max_word_len`` bytes are skipped; a word already cached
    (another call may have added it) is not added twice.
    """
    used = cache.used[0]
    max_words = cache.byte_offsets.size - 1
    room = True
    for w in order:
        length = word_len[w]
        if length > max_word_len:
            continue
        id_at = word_id_offsets[w]
        n_ids = word_id_offsets[w + 1] - id_at
        byte_end = cache.byte_offsets[used] + length
        id_end = cache.id_offsets[used] + n_ids
        if (used == max_words or 4 * (used + 1) > cache.table.size
                or byte_end > cache.pool_bytes.size or id_end > cache.pool_ids.size):
            room = False
            break
        if _cached_slot(data, word_at[w], length, word_keys[w], cache) >= 0:
            continue
        byte_at = cache.byte_offsets[used]
        for k in range(length):
            cache.pool_bytes[byte_at + k] = data[word_at[w] + k]
        out_at = cache.id_offsets[used]
        for k in range(n_ids):
            cache.pool_ids[out_at + k] = word_ids[id_at + k]
        cache.byte_offsets[used + 1] = byte_end
        cache.id_offsets[used + 1] = id_end
        _put_cell(cache.table, word_keys[w], used)
        used += 1
    cache.used[0] = used
    return room


# ---------------------------------------------------------------- special tokens and pieces


@hot
def _special_at(data, i, end, token_bytes, token_offsets):
    """Index of the first token (the caller sorts them longest first) found at byte i, or -1."""
    for t in range(token_offsets.size - 1):
        length = token_offsets[t + 1] - token_offsets[t]
        if i + length <= end and _equal_bytes(data, i, token_bytes, token_offsets[t], length):
            return t
    return -1


@hot
def _scan_specials(data, seg_start, seg_end, token_bytes, token_offsets, first_byte, match_at,
                   match_token, limit):
    """Leftmost-longest, non-overlapping token matches inside segments; returns how many.

    Matches past ``match_at.size`` are counted, not written; the scan stops at ``limit``.
    """
    n = 0
    for s in range(seg_start.size):
        i = seg_start[s]
        end = seg_end[s]
        while i < end:
            if first_byte[data[i]]:
                t = _special_at(data, i, end, token_bytes, token_offsets)
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
def find_specials_cpu(data, seg_start, seg_end, token_bytes, token_offsets, first_byte, limit):
    """Special-token matches in the segments, as regex alternation longest-first finds them.

    Returns ``(match_at, match_token)`` (byte offset, index into the token
    list), at most ``limit`` of them. ``first_byte[b]`` is True when a token
    starts with byte b: other bytes cost one load each.
    """
    match_at = np.empty(64, np.int64)
    match_token = np.empty(64, np.int64)
    n = _scan_specials(data, seg_start, seg_end, token_bytes, token_offsets, first_byte,
                       match_at, match_token, limit)
    if n > match_at.size:
        match_at = np.empty(n, np.int64)
        match_token = np.empty(n, np.int64)
        _scan_specials(data, seg_start, seg_end, token_bytes, token_offsets, first_byte,
                       match_at, match_token, limit)
    return match_at[:n], match_token[:n]


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
            cut = safe_cut(data, start + cut_bytes, end, scanner, table)
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


# ---------------------------------------------------------------- decoding


@njit(cache=True, nogil=True)
def gather_token_bytes_cpu(ids, doc_offsets, table_bytes, table_offsets):
    """The bytes of every document's ids: ``(bytes uint8, doc_byte_offsets int64)``.

    Ids must be valid (the caller checks). Two passes: the total length, then one
    copy, in which a token of at most 8 bytes (nearly all) is one 8-byte move (LLVM
    makes the fixed 8-byte loop a single load and store); the bytes it writes past
    its end are overwritten by the next token's, or lie past the output.

    Measured (2 KB documents, 4,096-id vocabulary, one core, shared VM): a byte loop
    per token 0.24 GB/s, this ~1 GB/s (bench/RESULTS.md).
    """
    n_docs = doc_offsets.size - 1
    total = 0
    for k in range(ids.size):
        token = ids[k]
        total += table_offsets[token + 1] - table_offsets[token]
    out = np.empty(total + _COPY_WORD, np.uint8)
    doc_byte_offsets = np.empty(n_docs + 1, np.int64)
    doc_byte_offsets[0] = 0
    at = np.uint64(0)
    word, wide_end = np.uint64(_COPY_WORD), np.uint64(max(table_bytes.size - _COPY_WORD, 0))
    for d in range(n_docs):
        for k in range(doc_offsets[d], doc_offsets[d + 1]):
            token = ids[k]
            start = np.uint64(table_offsets[token])
            length = np.uint64(table_offsets[token + 1]) - start
            if length <= word and start <= wide_end:
                _move_word(table_bytes, start, out, at)
            else:
                for j in range(length):
                    out[at + np.uint64(j)] = table_bytes[start + np.uint64(j)]
            at += length
        doc_byte_offsets[d + 1] = at
    return out[:total], doc_byte_offsets


_COPY_WORD = 8  # bytes moved at once per token by gather_token_bytes_cpu


@intrinsic
def _move_word(typingctx, source, source_at, dest, dest_at):
    """dest[dest_at:dest_at + 8] = source[source_at:source_at + 8] (uint8 arrays, uint64
    positions) as one unaligned 8-byte load and store: written as a loop of 8 bytes,
    LLVM keeps 8 byte moves, not knowing that the two arrays never overlap."""
    def codegen(context, builder, signature, args):
        word = ir.IntType(64).as_pointer()
        pointers = []
        for array_type, array, at in ((signature.args[0], args[0], args[1]),
                                      (signature.args[2], args[2], args[3])):
            data = context.make_array(array_type)(context, builder, array).data
            pointers.append(builder.bitcast(builder.gep(data, [at]), word))
        value = builder.load(pointers[0], align=1)
        builder.store(value, pointers[1], align=1)
        return context.get_dummy_value()
    return types.void(source, source_at, dest, dest_at), codegen


# ---------------------------------------------------------------- CUDA target
#
# The device encodes the distinct new words the host found (steps 1-2 and 4
# are byte scans and lookups in the host's word cache and stay there). Words
# travel packed end to end: word w is ``word_bytes[word_start[w]:word_start[w
# + 1]]``; the per-byte scratch (symbols, pair ranks) shares those offsets, so
# a thread never touches another word's entries. ``gpubpe.device`` decides
# which words go, in chunks sized by free device memory.

# Device bytes per word byte (packed bytes 1, symbols 4, pair ranks 8, output
# ids 4) and per word (start, order, lengths, symbol count, output length and
# offset: 8 each, plus the sort's scratch).
ENCODE_DEVICE_BYTES_PER_BYTE = 17
ENCODE_DEVICE_BYTES_PER_WORD = 64
# Device bytes per id decoded (the id, its length, its output position), plus its bytes.
DECODE_DEVICE_BYTES_PER_ID = 24


@njit(cache=True, nogil=True)
def pack_words_cpu(data, word_at, word_len):
    """Words ``data[word_at[w]:word_at[w] + word_len[w]]`` end to end: (bytes, int64 starts)."""
    word_start = np.zeros(word_at.size + 1, np.int64)
    for w in range(word_at.size):
        word_start[w + 1] = word_start[w] + word_len[w]
    packed = np.empty(word_start[word_at.size], np.uint8)
    for w in range(word_at.size):
        packed[word_start[w]:word_start[w + 1]] = data[word_at[w]:word_at[w] + word_len[w]]
    return packed, word_start


_merge_by_scan_on_device = device_function(merge_by_scan)


@cuda.jit
def encode_words_kernel(word_bytes, word_start, order, rule_keys, rule_ranks, rule_result,
                        symbols, pair_rank, n_symbols):
    """n_symbols[w] = ids left in word w after BPE, packed at symbols[word_start[w]:].

    Launch: one thread per word, grid-stride over ``order`` (the words by length,
    so the threads of a warp do about the same work). Scratch: ``symbols``
    (int32) and ``pair_rank`` (int64), one entry per byte. The merge order is
    ``merge_by_scan``'s, the CPU's: lowest rank first, leftmost at equal rank.
    """
    for k in range(cuda.grid(1), order.size, cuda.gridsize(1)):
        w = order[k]
        start = word_start[w]
        n = word_start[w + 1] - start
        for i in range(start, start + n):
            symbols[i] = word_bytes[i]
        n_symbols[w] = _merge_by_scan_on_device(symbols, pair_rank, start, n, rule_keys,
                                                rule_ranks, rule_result)


@cuda.jit
def output_lengths_kernel(symbols, word_start, n_symbols, demolish_offsets, out_len):
    """out_len[w] = output ids of word w: its symbols, or their demolished parts (Scaffold).

    Launch: one thread per word, grid-stride. No scratch.
    """
    for w in range(cuda.grid(1), n_symbols.size, cuda.gridsize(1)):
        count = n_symbols[w]
        if demolish_offsets.size > 0:
            count = 0
            for i in range(word_start[w], word_start[w] + n_symbols[w]):
                token = symbols[i]
                count += demolish_offsets[token + 1] - demolish_offsets[token]
        out_len[w] = count


@cuda.jit
def write_output_kernel(symbols, word_start, n_symbols, demolish_ids, demolish_offsets,
                        out_start, out):
    """Write word w's output ids at out[out_start[w]:]. Launch: one thread per word, grid-stride."""
    for w in range(cuda.grid(1), n_symbols.size, cuda.gridsize(1)):
        at = out_start[w]
        for i in range(word_start[w], word_start[w] + n_symbols[w]):
            token = symbols[i]
            if demolish_offsets.size == 0:
                out[at] = token
                at += 1
            else:
                for j in range(demolish_offsets[token], demolish_offsets[token + 1]):
                    out[at] = demolish_ids[j]
                    at += 1


@cuda.jit
def copy_token_bytes_kernel(ids, table_bytes, table_offsets, positions, out):
    """Write the bytes of ids[k] at out[positions[k]:]. Launch: one thread per id, grid-stride."""
    for k in range(cuda.grid(1), ids.size, cuda.gridsize(1)):
        token = ids[k]
        at = positions[k]
        for j in range(table_offsets[token], table_offsets[token + 1]):
            out[at] = table_bytes[j]
            at += 1


def encode_word_list_cuda(word_bytes, word_start, rules: RuleTable, xp):
    """BPE on packed device words: device ``(ids uint32, offsets int64)``, no host read.

    ``rules`` holds device arrays. ``ids`` is allocated for the worst case (one id
    per byte: every output token holds a byte or more); ``offsets[-1]`` says how
    many are written. Device scratch: ENCODE_DEVICE_BYTES_PER_BYTE and _PER_WORD.
    """
    n_words = word_start.size - 1
    order = xp.argsort(xp.diff(word_start))
    symbols = device_empty(xp, word_bytes.size, xp.int32)
    pair_rank = device_empty(xp, word_bytes.size, xp.int64)
    n_symbols = device_empty(xp, n_words, xp.int64)
    launch(encode_words_kernel, n_words, word_bytes, word_start, order, rules.keys, rules.ranks,
           rules.result, symbols, pair_rank, n_symbols)
    out_len = device_empty(xp, n_words, xp.int64)
    launch(output_lengths_kernel, n_words, symbols, word_start, n_symbols,
           rules.demolish_offsets, out_len)
    offsets = exclusive_scan(xp, out_len)
    ids = device_empty(xp, word_bytes.size, xp.uint32)
    launch(write_output_kernel, n_words, symbols, word_start, n_symbols, rules.demolish_ids,
           rules.demolish_offsets, offsets, ids)
    return ids, offsets


def gather_token_bytes_cuda(ids, table_bytes, table_offsets, xp):
    """The bytes of device ids (int64, valid) end to end: device ``(bytes, positions)``.

    ``positions`` (int64, one more than the ids) is where each id's bytes start.
    One host read: the total, to size the output (its ``# sync``).
    """
    lengths = table_offsets[ids + 1] - table_offsets[ids]
    positions = exclusive_scan(xp, lengths)
    out = device_empty(xp, read_scalar(positions, -1, "decode output size"), xp.uint8)  # sync
    launch(copy_token_bytes_kernel, ids.size, ids, table_bytes, table_offsets, positions, out)
    return out, positions


# Every @cuda.jit kernel of this module with the signature it is launched with; the
# PTX test compiles each for sm_80 and sm_90 without a device.
ENCODE_CUDA_SIGNATURES = {
    encode_words_kernel: "void(uint8[::1], int64[::1], int64[::1], uint64[::1], int64[::1], "
                         "int64[::1], int32[::1], int64[::1], int64[::1])",
    output_lengths_kernel: "void(int32[::1], int64[::1], int64[::1], int64[::1], int64[::1])",
    write_output_kernel: "void(int32[::1], int64[::1], int64[::1], uint32[::1], int64[::1], "
                         "int64[::1], uint32[::1])",
    copy_token_bytes_kernel: "void(int64[::1], uint8[::1], int64[::1], int64[::1], uint8[::1])",
}
