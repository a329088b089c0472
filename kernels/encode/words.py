"""Stage 1-2: word keys, cache lookups, each shard's new words and their merge across shards."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._jit import hot
from ..hashing import (
    EMPTY_KEY,
    LONG_WORD_TAG,
    grown_like,
    mix64,
    word_key,
)
from ..pretok import piece_end
from ._shared import NewWords, inlined

# ---------------------------------------------------------------- word keys and tables
# Word keys: ``hashing.word_key`` (exact below LONG_WORD_TAG).


@inlined
def equal_bytes(a, a_at, b, b_at, length):
    """Whether ``a[a_at:a_at + length]`` spells ``b[b_at:b_at + length]``."""
    for k in range(length):
        if a[a_at + k] != b[b_at + k]:
            return False
    return True


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
def interleaved_find(data, start, length, key, cells, pool, offsets):
    """Value under word key ``key`` in interleaved (key, value) cells whose value v
    spells ``pool[offsets[v]:offsets[v + 1]]`` (bytes compared for long words), or -1.

    The word cache and the whole-token table (``rules``) share this layout, on
    the CPU and on the device (``batch_cuda`` calls this function). No cells (an
    empty table): -1.
    """
    if cells.size == 0:
        return -1
    cell = _first_cell(cells, key)
    while cells[cell] != EMPTY_KEY:
        if cells[cell] == key:
            value = np.int64(cells[cell + np.uint64(1)])
            if key < LONG_WORD_TAG:
                return value
            at = offsets[value]
            if offsets[value + 1] - at == length and equal_bytes(data, start, pool, at, length):
                return value
        cell = _next_cell(cells, cell)
    return -1


@inlined
def _cached_slot(data, start, length, key, cache):
    """Cache slot of the word ``data[start:start+length]`` (key ``key``), or -1."""
    if cache.used[0] == 0:  # an empty cache: no probe (a cache miss per word in 4 MB)
        return -1
    return interleaved_find(data, start, length, key, cache.table, cache.pool_bytes,
                            cache.byte_offsets)


@inlined
def _new_word_index(data, start, length, key, new, n_new):
    """(index of the word among the shard's new words, new n_new), adding it when absent."""
    table = new.table
    cell = _first_cell(table, key)
    while table[cell] != EMPTY_KEY:
        if table[cell] == key:
            index = np.int64(table[cell + np.uint64(1)])
            if key < LONG_WORD_TAG or (new.length[index] == length and equal_bytes(
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

    ``scanner`` is a ``pretok`` scanner id (``piece_end``), ``table`` its class table.

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


@inlined
def _part_of(key, n_parts):
    """Which of ``n_parts`` parts a word key falls in (the table cells take the low bits
    of the same mix)."""
    return np.int64((mix64(key) >> np.uint64(40)) % np.uint64(n_parts))


@njit(cache=True, nogil=True)
def word_parts(word_keys, word_count, n_parts, lo, hi, order, part_keys, part_count,
               part_runs):
    """Words ``lo:hi`` (one shard's) ordered by their part (by key), stably: ``order[i]``
    is a word, ``part_keys[i]`` and ``part_count[i]`` its key and count, and part p's
    run of them is ``part_runs[p]:part_runs[p + 1]`` (all within ``lo:hi``). A part then
    reads its words in a few runs (read through ``order`` instead, 16 parts read every
    cache line of the word arrays each: 16 parts 19.6 ms, one 7.2)."""
    runs = np.zeros(n_parts + 1, np.int64)
    part_of = np.empty(hi - lo, np.int64)
    for w in range(lo, hi):
        part_of[w - lo] = _part_of(word_keys[w], n_parts)
        runs[part_of[w - lo] + 1] += 1
    for p in range(n_parts):
        runs[p + 1] += runs[p]
    part_runs[:] = runs + lo
    for w in range(lo, hi):
        i = lo + runs[part_of[w - lo]]
        order[i], part_keys[i], part_count[i] = w, word_keys[w], word_count[w]
        runs[part_of[w - lo]] += 1


@njit(cache=True, nogil=True)
def new_words_of_part(data, word_at, word_len, order, part_keys, part_count, part_runs, part,
                      n_parts, part_slot):
    """Step 2 for one of ``n_parts`` parts of the shards' new words (``word_parts``; a row
    of ``part_runs`` a shard): the part's distinct words in order of first occurrence, as
    ``(first, count)``: the input index of each one's first occurrence and its count over
    the batch.

    Input: the shards' lists end to end (each already distinct within its shard). For
    each of the part's words (position i of ``order``), ``part_slot[i]`` = its distinct
    word's index in the part times ``n_parts``, plus ``part``. Parts write disjoint
    positions: they run at once.
    """
    in_part = (part_runs[:, part + 1] - part_runs[:, part]).sum()
    n_cells = 16
    while n_cells < 2 * in_part:
        n_cells *= 2
    table = np.full(2 * n_cells, EMPTY_KEY, dtype=np.uint64)
    first = np.empty(in_part, np.int64)
    count = np.zeros(in_part, np.int64)
    n_distinct = 0
    for shard in range(part_runs.shape[0]):
        for i in range(part_runs[shard, part], part_runs[shard, part + 1]):
            key = part_keys[i]
            cell = _first_cell(table, key)
            found = -1
            while table[cell] != EMPTY_KEY:
                d = np.int64(table[cell + np.uint64(1)])
                if table[cell] == key and (key < LONG_WORD_TAG or _same_word(
                        data, word_at, word_len, order[i], first[d])):
                    found = d
                    break
                cell = _next_cell(table, cell)
            if found < 0:
                found = n_distinct
                table[cell] = key
                table[cell + np.uint64(1)] = np.uint64(found)
                first[found] = order[i]
                n_distinct += 1
            part_slot[i] = found * n_parts + part
            count[found] += part_count[i]
    return first[:n_distinct].copy(), count[:n_distinct].copy()


@inlined
def _same_word(data, word_at, word_len, w, v):
    return word_len[w] == word_len[v] and equal_bytes(data, word_at[w], data, word_at[v],
                                                      word_len[w])


@njit(cache=True, nogil=True)
def global_word_slots(order, part_slot, n_parts, part_base, rank, lo, hi, local_to_global):
    """``local_to_global[order[i]]`` for positions ``lo:hi`` of ``order`` (one shard's
    words: written by one thread) from their ``part_slot`` (see ``new_words_of_part``): the
    rank, in order of first occurrence over the batch, of their part's distinct word
    (``part_base[p]``: part p's first in the parts end to end)."""
    for i in range(lo, hi):
        s = part_slot[i]
        local_to_global[order[i]] = rank[part_base[s % n_parts] + s // n_parts]
