"""A running tally of word counts across batches: exact, in first-occurrence order, nogil.

``count_batch_words`` counts each thread share of a batch with
``pretok.count_scanned_words`` (distinct words with their first offset and count)
and adds the shares, in order, into one tally; the words come out once, at the end.

Issue 18 (py-spy, 2 threads, lines of multiscript.txt): each share used to become a
dict of bytes on its worker (~20% of the worker's time, under the GIL) and was
added into a ``Counter`` on the calling thread (``Counter.update`` loops in Python:
~23% of that thread, which also reads the corpus). ``add_words`` does the same
merge in a kernel without the GIL, ~30-50 ns a distinct word.

Layout: ``keys`` (uint64, ``EMPTY_KEY`` free) and ``slots`` (int64) an
open-addressing table keyed by the word's polynomial hash; a hash is only a hint:
a cell whose hash matches is the word only when its bytes match too, else the probe
goes on, so two words sharing a hash are both kept (no fallback needed). Word ``w``
is ``pool[word_at[w]:word_at[w] + word_len[w]]``, counted ``count[w]``.
"""

from __future__ import annotations

import numpy as np

from ._jit import hot
from .encode.words import equal_bytes
from .hashing import EMPTY_KEY, hash_bytes, mix64


@hot
def add_words(keys, slots, pool, word_at, word_len, count, cursor, data, at, length, counts):
    """Add words ``data[at[k]:at[k] + length[k]]`` (``counts[k]`` times) from ``cursor[2]``
    on. ``cursor``: (distinct words, pool bytes used, next word to add). Returns False when
    the table, the word arrays or the pool need room (grow, then call again)."""
    n_words, used = cursor[0], cursor[1]
    mask = np.uint64(keys.size - 1)
    for k in range(cursor[2], at.size):
        start, size = at[k], length[k]
        if 2 * (n_words + 1) > keys.size or n_words == word_at.size or used + size > pool.size:
            cursor[0], cursor[1], cursor[2] = n_words, used, k
            return False
        value = hash_bytes(data, start, size)
        if value == EMPTY_KEY:
            value = np.uint64(0)
        cell = mix64(value) & mask
        while keys[cell] != EMPTY_KEY:
            slot = slots[cell]
            if keys[cell] == value and word_len[slot] == size and equal_bytes(
                    pool, word_at[slot], data, start, size):
                break
            cell = (cell + np.uint64(1)) & mask
        if keys[cell] != EMPTY_KEY:
            count[slots[cell]] += counts[k]
            continue
        keys[cell] = value
        slots[cell] = n_words
        for j in range(size):
            pool[used + j] = data[start + j]
        word_at[n_words], word_len[n_words], count[n_words] = used, size, counts[k]
        n_words += 1
        used += size
    cursor[0], cursor[1], cursor[2] = n_words, used, at.size
    return True
