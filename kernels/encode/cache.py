"""Stage 5: the word cache kept across calls."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._raw import compare_swap, prefetch
from ..hashing import (
    EMPTY_KEY,
)
from ._shared import WordCache, inlined
from .words import _cached_slot, _first_cell, _next_cell, _put_cell, empty_cells

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


def cache_has_room(cache: WordCache, n_words: int, n_bytes: int, n_ids: int) -> bool:
    """Whether ``n_words`` more words (``n_bytes`` bytes, ``n_ids`` ids in all) fit for sure."""
    used = int(cache.used[0])
    return (used + n_words < cache.byte_offsets.size and 4 * (used + n_words) <= cache.table.size
            and cache.byte_offsets[used] + n_bytes <= cache.pool_bytes.size
            and cache.id_offsets[used] + n_ids <= cache.pool_ids.size)


# Words ahead whose cache cell and bytes ``cache_admit_cpu`` asks for. Issue 18: the
# admission runs on the calling thread while the others write ids, the longest step
# there on many threads; ~200 ns a word (a miss in the 4 MB table, one in the batch's
# bytes). 8.4 MB of lines, cold cache, 27 K words: 5.6 -> 2.7 ms.
ADMIT_AHEAD = 16


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
    for i in range(order.size):
        if i + ADMIT_AHEAD < order.size:
            _ask_for_word(cache, data, word_at, word_keys, order[i + ADMIT_AHEAD])
        w = order[i]
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
        cache.byte_offsets[used + 1] = byte_end
        cache.id_offsets[used + 1] = id_end
        _fill_slot(cache, used, data, word_at[w], word_ids, id_at)
        _put_cell(cache.table, word_keys[w], used)
        used += 1
    cache.used[0] = used
    return room


@inlined
def _ask_for_word(cache, data, word_at, word_keys, w):
    """Prefetch word ``w``'s first table cell and its bytes (ADMIT_AHEAD words early)."""
    prefetch(cache.table.ctypes.data + np.int64(_first_cell(cache.table, word_keys[w])) * 8)
    prefetch(data.ctypes.data + word_at[w])


@inlined
def _fill_slot(cache, slot, data, start, word_ids, first_id):
    """Copy a word's bytes (from ``data[start:]``) and ids (from ``word_ids[first_id:]``)
    into cache ``slot``, whose byte and id offsets (slot and slot + 1) are set."""
    byte_at, id_at = cache.byte_offsets[slot], cache.id_offsets[slot]
    for k in range(cache.byte_offsets[slot + 1] - byte_at):
        cache.pool_bytes[byte_at + k] = data[start + k]
    for k in range(cache.id_offsets[slot + 1] - id_at):
        cache.pool_ids[id_at + k] = word_ids[first_id + k]


# Issue 18, many threads: the admission above runs on the calling thread while the others
# write ids; on 16 cores the writes end long before it (8.4 MB of lines, cold cache: 2.7 ms
# of admission against ~5 ms of writes on all threads together), so it was the longest of
# that thread's serial steps (bench/serial_steps.py). From this many threads on, when every
# word fits, the words are admitted in parts, as tasks among the writes: their slots and
# offsets first (``admission_slots``, one pass), then each part's bytes, ids and table cells
# (``cache_admit_part``). Fewer threads keep the admission beside the writes (2 threads: the
# calling thread admits while the pool thread writes; nothing to gain).
ADMIT_IN_PARTS_FROM = 4


@njit(cache=True, nogil=True)
def admission_slots(cache, word_len, word_id_offsets, max_word_len):
    """The cache slot of each word (-1: longer than ``max_word_len``, skipped), in order
    from the first free one, with the slots' byte and id offsets written and the cache's
    count of words advanced past them: what ``cache_admit_cpu`` gives words in first-seen
    order when all of them fit (``cache_has_room``: the caller checks). The bytes, ids and
    table cells are then ``cache_admit_part``'s."""
    used = cache.used[0]
    slots = np.empty(word_len.size, np.int64)
    for w in range(word_len.size):
        if word_len[w] > max_word_len:
            slots[w] = -1
            continue
        slots[w] = used
        cache.byte_offsets[used + 1] = cache.byte_offsets[used] + word_len[w]
        cache.id_offsets[used + 1] = (cache.id_offsets[used]
                                      + word_id_offsets[w + 1] - word_id_offsets[w])
        used += 1
    cache.used[0] = used
    return slots


@njit(cache=True, nogil=True)
def cache_admit_part(cache, data, word_at, word_keys, word_ids, word_id_offsets, slots, lo, hi):
    """Words ``lo`` to ``hi - 1`` into their ``admission_slots``: bytes and ids copied, a
    table cell claimed by compare-and-swap (other parts insert at once; each word is absent
    and distinct, so only where a word lands in its probe run depends on the timing)."""
    table = cache.table
    at = table.ctypes.data
    for w in range(lo, hi):
        if w + ADMIT_AHEAD < hi:
            _ask_for_word(cache, data, word_at, word_keys, w + ADMIT_AHEAD)
        slot = slots[w]
        if slot < 0:
            continue
        _fill_slot(cache, slot, data, word_at[w], word_ids, word_id_offsets[w])
        cell = _first_cell(table, word_keys[w])
        while not compare_swap(at + np.int64(cell) * 8, EMPTY_KEY, word_keys[w]):
            cell = _next_cell(table, cell)
        table[cell + np.uint64(1)] = np.uint64(slot)
