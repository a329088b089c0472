"""A running tally of word counts across batches: exact, in first-occurrence order, nogil.

``count_batch_words`` counts each thread share of a batch with
``pretok.count_scanned_words`` (distinct words with their first offset, count and key),
packs the share's words on the counting thread (``packed_bytes``; ``packed_words`` where
the keys are still to make), and adds the shares, in order, into one tally; the words
come out once, at the end.

Issue 18 (py-spy, 2 threads, lines of multiscript.txt): each share used to become a
dict of bytes on its worker (~20% of the worker's time, under the GIL) and was
added into a ``Counter`` on the calling thread (``Counter.update`` loops in Python:
~23% of that thread, which also reads the corpus). ``add_words`` does the same
merge in a kernel without the GIL. It runs on the reading thread, in share order, so
it is on the 2-thread path's critical path: with the adds made free, counting a list
of str went 93 -> 71 ms on 2 threads. Each add first took ~65-90 ns, most of it
cache misses: a scattered read of the word in its batch, the key and the slot of the
table in two arrays, then the word's offset, length and count in three. Now the
shares' words come packed end to end with their keys (read in order, none hashed
here), a table cell holds key and word index side by side, and a word's record holds
its pool offset, length and count side by side: three misses an add where there were
seven.

Session 7: those three are asked for ahead (``_prefetch_ahead``: the cell of the word 24
on, the record its first cell names 12 on, the pool bytes 6 on), and a word's bytes are
compared 8 at a time (``same_bytes``). The adds of counting the sweep's 8.4 MB of lines
(``count_words`` on a list; 8 shares, 181 K words): one thread 13.1-13.4 -> 6.7 ms, two
threads 17.4-18.2 -> 8.7 ms (the prefetches alone: 8.1-8.4 / 11.2-12.6). Run alone on a
warm tally the adds took 39 ns a word, 28 with the wide compare: in the count, the
tally's lines are cold (the counting threads read through the batch in between).

Session 13: a word of up to 7 bytes is its own key (``hashing.word_key``; 4 words in 5
of the lines), so most adds read no pool bytes; the record and pool prefetches, each
behind a read of a cell, then cost more than they saved. Only the cell of the word
``CELL_AHEAD`` on is asked for: adds of a 1/8 share of the lines (27 K distinct words)
into the tally, all prefetches 22.5 ns a word warm and 25.3 cold (caches flushed),
the cell alone 13.8 and 16.5 (``bench/RESULTS.md``).

Layout: ``cells`` (uint64, 2 a cell: the word's key, ``hashing.word_key``, ``EMPTY_KEY``
free, then the word's index) an open-addressing table; a word of up to 7 bytes is its own
key; a longer word's key is a hash, only a hint: a cell whose key matches is the word
only when its bytes match too, else the probe goes on, so two words sharing a hash are
both kept (no fallback needed). Word ``w`` is
``pool[records[w, AT]:records[w, AT] + records[w, LENGTH]]``, counted
``records[w, COUNT]``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit import hot_nogil
from ._raw import call as _call
from ._raw import copy_bytes as _copy_bytes
from ._raw import load as _load
from ._raw import prefetch as _prefetch
from ._raw import put_new_item as _put_new_item
from .hashing import EMPTY_KEY, LONG_WORD_TAG, mix64, same_bytes, word_key
from .jsonl import line_ends
from .pretok import count_scanned_words
from .str_utf8 import any_ends_with, str_utf8_bound, write_str_utf8

AT, LENGTH, COUNT = 0, 1, 2  # the columns of a word's record
KEY, WORD = 0, 1  # the columns of a table cell


@njit(nogil=True, cache=True)
def packed_words(data, at, length):
    """The words ``data[at[k]:at[k] + length[k]]`` end to end (uint8, ``packed_bytes``) and
    their keys (``hashing.word_key``: a word of up to 7 bytes is its own key), as
    ``add_words`` takes them; made on the counting thread, so the adding thread reads its
    words in order and hashes none. (The counting kernel gives its words' keys: its
    shares take ``packed_bytes`` alone.)"""
    keys = np.empty(at.size, dtype=np.uint64)
    for k in range(at.size):
        keys[k] = word_key(data, at[k], at[k] + length[k])
    return packed_bytes(data, at, length), keys


@njit(nogil=True, cache=True)
def packed_bytes(data, at, length):
    """The words ``data[at[k]:at[k] + length[k]]`` end to end (uint8)."""
    packed = np.empty(length.sum(), dtype=np.uint8)
    _copy_words(data, at, length, packed)
    return packed


@hot_nogil
def _copy_words(data, at, length, packed):
    """Each word one memcpy (a slice assignment a word, with the runtime's reference
    counts, took ~0.4 ms more for a share's 27 K words)."""
    out = 0
    for k in range(at.size):
        _copy_bytes(packed.ctypes.data + out, data.ctypes.data + at[k], length[k])
        out += length[k]


@njit(inline="always", cache=True, _nrt=False)
def _cell_of(cells, records, pool, mask, key, packed, start, size):
    """The cell of the word ``packed[start:start + size]`` (key ``key``) in the tally, or
    the free cell where it would go: a key below ``LONG_WORD_TAG`` is the word itself, a
    longer word's key only a hint (its bytes compared with the word's in the pool)."""
    cell = mix64(key) & mask
    while cells[cell, KEY] != EMPTY_KEY:
        word = cells[cell, WORD]
        if cells[cell, KEY] == key and (key < LONG_WORD_TAG or (
                records[word, LENGTH] == size
                and same_bytes(pool, records[word, AT], packed, start, size))):
            return cell
        cell = (cell + np.uint64(1)) & mask
    return cell


@njit(inline="always", cache=True, _nrt=False)
def _first_cell_at(cells, key, mask):
    """The address of the first cell a probe for ``key`` reads (for a prefetch)."""
    return cells.ctypes.data + np.int64(mix64(key) & mask) * cells.strides[0]


CELL_AHEAD = 16  # words between a cell's prefetch and its probe (8-32 measured alike)


@hot_nogil
def add_words(cells, records, pool, cursor, packed, length, counts, keys, found):
    """Add the packed words (``length[k]`` bytes each, ``counts[k]`` times, key
    ``keys[k]``: exact below ``LONG_WORD_TAG``, else a hint whose words are compared)
    from word ``cursor[2]``, packed byte ``cursor[3]`` on; ``found`` (empty, or ``k``'s
    word in the tally, -1 for none: ``known_words``) spares the probe of words found
    before. ``cursor``:
    (distinct words, pool bytes used, next word to add, its packed offset). Returns False
    when the table, the records or the pool need room (grow, then call again).

    Without the GIL (it was held here): a counting thread needs the GIL to start and to
    end its share (``decode_batch``'s first 2-thread pipeline, a task a chunk, had its
    fills wait 3-5 ms for a kernel that held it). Here no change beyond this VM's noise
    (counting 8.4 MB of lines on 2 threads, two alternating pairs: 39.9-47.9 ms held,
    40.4-61.8 released)."""
    n_words, used, start = cursor[0], cursor[1], cursor[3]
    mask = np.uint64(cells.shape[0] - 1)
    n = length.size
    given = found.size > 0
    for k in range(cursor[2], n):
        if k + CELL_AHEAD < n:
            ahead = k + CELL_AHEAD
            if given and found[ahead] >= 0:
                _prefetch(records.ctypes.data + found[ahead] * records.strides[0])
            else:
                _prefetch(_first_cell_at(cells, keys[ahead], mask))
        size, value = length[k], keys[k]
        if given and found[k] >= 0:  # a word the tally had: no probe, no compare
            records[found[k], COUNT] += counts[k]
            start += size
            continue
        if 2 * (n_words + 1) > cells.shape[0] or n_words == records.shape[0] \
                or used + size > pool.size:
            cursor[0], cursor[1], cursor[2], cursor[3] = n_words, used, k, start
            return False
        cell = _cell_of(cells, records, pool, mask, value, packed, start, size)
        if cells[cell, KEY] != EMPTY_KEY:
            records[cells[cell, WORD], COUNT] += counts[k]
        else:
            cells[cell, KEY], cells[cell, WORD] = value, n_words
            for j in range(size):
                pool[used + j] = packed[start + j]
            records[n_words, AT], records[n_words, LENGTH] = used, size
            records[n_words, COUNT] = counts[k]
            n_words += 1
            used += size
        start += size
    cursor[0], cursor[1], cursor[2], cursor[3] = n_words, used, length.size, start
    return True


@hot_nogil
def known_words(cells, records, pool, packed, length, keys, found):
    """``found[k]``: the word of a tally (``cells``, ``records``, ``pool`` as ``add_words``
    takes them; cells no thread changes) that is packed word k (``length[k]`` bytes, key
    ``keys[k]``), or -1. Run on a counting thread against a copy of the tally's cells
    (``_WordTally.known``): the adding thread then adds the counts of the words found by
    index.

    Issue 18, session 13: on many threads the adds are the calling thread's longest step
    of its own (16 threads forced, 40 MB of lines: 5.0 of 19.3 ms); each share's distinct
    words, looked up here on the thread that counted them, leave it a count to add a
    word (bench/RESULTS.md)."""
    mask = np.uint64(cells.shape[0] - 1)
    n = length.size
    start = 0
    for k in range(n):
        if k + CELL_AHEAD < n:
            _prefetch(_first_cell_at(cells, keys[k + CELL_AHEAD], mask))
        cell = _cell_of(cells, records, pool, mask, keys[k], packed, start, length[k])
        found[k] = -1 if cells[cell, KEY] == EMPTY_KEY else np.int64(cells[cell, WORD])
        start += length[k]


@njit(cache=True)
def new_words(items_at, n, records, pool, first, hashes, api):
    """Put in item k < ``n`` of the list whose item pointers are at ``items_at`` (a list of
    ``n`` None) the bytes of word w = ``first + k``
    (``pool[records[w, AT]:records[w, AT] + records[w, LENGTH]]``), and in ``hashes[k]``
    its ``hash()`` (CPython's ``_Py_HashBytes``, which ``hash`` of bytes returns).
    ``api``: the addresses of CPython's PyBytes_FromStringAndSize, Py_DecRef, PyErr_Clear
    and _Py_HashBytes. Returns -1, or the first item no bytes could be made for (out of
    memory; it and those after it stay None). Not nogil: it calls CPython, which needs
    the GIL held.

    Issue 18: the tally's new words were made in Python as slices of one bytes object
    (~90 ns a word: 2.3 ms for the 27 K words of the sweep's 8.4 MB of lines, on the
    calling thread, after the counting threads of a one-batch corpus had finished)."""
    new_bytes, decref, clear_error, hash_of_bytes = api
    base = pool.ctypes.data
    for k in range(n):
        w = first + k
        at, length = base + records[w, AT], records[w, LENGTH]
        if not _put_new_item(items_at, k, _call(new_bytes, (at, length)), decref, clear_error):
            return k
        hashes[k] = _call(hash_of_bytes, (at, length))  # a length CPython took
    return -1


@njit(cache=True)
def filled_dict(dict_at, items_at, hashes, records, api):
    """Insert item k of the list whose item pointers are at ``items_at`` (the words of
    ``new_words``, all made) into the empty dict at ``dict_at``, with ``hashes[k]`` as its
    hash and ``records[k, COUNT]`` as its value, for every k < ``hashes.size``. ``api``:
    the addresses of CPython's PyLong_FromLongLong, _PyDict_SetItem_KnownHash, Py_DecRef
    and PyErr_Clear. Returns -1, or the first word not inserted (out of memory, the error
    cleared). Not nogil.

    Issue 18, session 13: the count's dict, built after the last add while every counting
    thread waits, took 1.7-1.9 ms for the 27 K words of the sweep's lines (``dict(zip(words,
    counts))``: each word hashed, the dict grown as it fills); made into a dict sized for
    them up front, their hashes known (made with the words, as they were added), 0.65 ms.
    """
    new_int, set_item, decref, clear_error = api
    for k in range(hashes.size):
        value = _call(new_int, (records[k, COUNT],))
        if value == 0:
            call_failed = True
        else:
            word = _load(items_at + 8 * k, np.int64)
            call_failed = np.int32(_call(set_item, (dict_at, word, value, hashes[k]))) != 0
            _call(decref, (value,))
        if call_failed:
            _call(clear_error, ())
            return k
    return -1


@njit(nogil=True, cache=True)
def count_str_share(items_at, n_items, layout, scanner, table, tails, tail_ends):
    """A share of a list of str (``n_items`` item pointers at ``items_at``) counted in one
    call without the GIL: its UTF-8 (``str_utf8.write_str_utf8``, into the str headers'
    bound + 1 bytes), a document a segment, split by ``scanner`` and counted
    (``pretok.count_scanned_words``), the words packed with their keys (``_packed_counts``).
    Returns ``(done, packed, length, count, keys, n_bytes)``; not ``done`` when an item
    is refused, a document ends like a corpus file name (``any_ends_with`` of ``tails``)
    or two long words share a key: the caller then counts the share its slower way.

    Issue 18: the share's steps as separate calls ran ~50 us of Python each share between
    the kernels, holding the GIL, serial on many threads (8.4 MB, 63 shares: ~3 ms). The
    share's bound is read here, on its thread: read for every item on the calling thread
    it was a third of that thread's own time (16 threads, 40 MB of lines)."""
    lengths = np.empty(n_items, np.int64)  # the bound's prefix ends first: not used
    no_words = np.empty(0, np.int64)
    bound = str_utf8_bound(items_at, n_items, layout, lengths, 1)
    data = np.empty(max(bound, 0) + 1, np.uint8)
    if bound < 0 or write_str_utf8(items_at, n_items, layout, data.ctypes.data, lengths) >= 0 \
            or any_ends_with(data, lengths, tails, tail_ends):
        return False, data[:0], no_words, no_words, np.empty(0, np.uint64), 0
    ends = np.cumsum(lengths)
    done, packed, length, count, keys = _packed_counts(data, ends - lengths, ends, scanner,
                                                       table)
    return done, packed, length, count, keys, ends[-1] if done else 0


@njit(nogil=True, cache=True)
def count_line_share(data, scanner, table):
    """The lines of ``data`` (uint8, a line a document) counted in one call without the
    GIL, as ``count_str_share`` gives them: ``(done, packed, length, count, keys)``; not
    ``done`` when two long words share a key (the caller counts it its slower way).

    Issue 18: a counting task's byte range of a file cut into lines, segments and words
    by separate calls ran ~60 us of Python a task, holding the GIL (16 threads, 8.4 MB)."""
    ends = line_ends(data)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1]
    return _packed_counts(data, starts, ends, scanner, table)


@njit(cache=True)
def _packed_counts(data, starts, ends, scanner, table):
    """The words of ``data``'s segments counted (``pretok.count_scanned_words``) and
    packed: ``(done, packed, length, count, keys)``, not ``done`` when two long words
    share a key."""
    word_at, word_len, word_count, keys, collided = count_scanned_words(
        data, starts, ends, scanner, table)
    if collided:
        no_words = np.empty(0, np.int64)
        return False, data[:0], no_words, no_words, np.empty(0, np.uint64)
    return True, packed_bytes(data, word_at, word_len), word_len, word_count, keys

