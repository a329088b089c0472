"""Open-addressing hash table over uint64 keys, and the byte-string hash.

The table is two arrays of a power-of-two size: ``keys`` (``EMPTY_KEY`` marks
a free cell) and ``values`` (int64). Linear probing; callers keep the load
below one half and call ``table_grown`` when it would pass that.

CUDA kernels call ``table_find_inline``: Numba-CUDA compiles a called ``@njit``
function as a device function only when it knows the device, so a kernel built
for PTX without a GPU must have its helpers inlined at Numba IR level
(``inline="always"``, as ``mix64`` is). CPU code keeps ``table_find``.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from ._cuda import device_phase, helper_cuda
from ._jit import hot
from ._raw import load as _load

EMPTY_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)
# Odd multiplier of the polynomial byte-string hash (mod 2**64).
STRING_HASH_BASE = np.uint64(0x100000001B3)


@njit(inline="always", cache=True)
def mix64(key):
    """splitmix64's finaliser: spreads the bits of a pair key over the table."""
    key = (key ^ (key >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    key = (key ^ (key >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return key ^ (key >> np.uint64(31))


def empty_table(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """A table with room for ``capacity // 2`` keys (capacity rounded up to a power of two)."""
    size = 1 << max(4, int(capacity - 1).bit_length())
    return np.full(size, EMPTY_KEY, dtype=np.uint64), np.zeros(size, dtype=np.int64)


def _table_find(keys, values, key):
    """The value stored under ``key``, or -1."""
    mask = np.uint64(keys.size - 1)
    cell = mix64(key) & mask
    while True:
        stored = keys[cell]
        if stored == key:
            return values[cell]
        if stored == EMPTY_KEY:
            return -1
        cell = (cell + np.uint64(1)) & mask


table_find = hot(_table_find)
# Not cached: it is only ever inlined, and a second cached dispatcher of one Python
# function would share the first one's cache file names.
table_find_inline = njit(inline="always")(_table_find)


@hot
def table_put(keys, values, key, value):
    """Store ``value`` under ``key`` (the key must not be present yet)."""
    mask = np.uint64(keys.size - 1)
    cell = mix64(key) & mask
    while keys[cell] != EMPTY_KEY:
        cell = (cell + np.uint64(1)) & mask
    keys[cell] = key
    values[cell] = value


@njit(cache=True)
def table_grown(keys, values):
    """A table twice the size holding the same entries."""
    new_keys = np.full(keys.size * 2, EMPTY_KEY, dtype=np.uint64)
    new_values = np.zeros(keys.size * 2, dtype=np.int64)
    for cell in range(keys.size):
        if keys[cell] != EMPTY_KEY:
            table_put(new_keys, new_values, keys[cell], values[cell])
    return new_keys, new_values


@njit(cache=True)
def cells_grown(cells):
    """A table of (key, value) cells (uint64, 2 a cell) twice the size, holding the same
    entries."""
    grown = np.full((2 * cells.shape[0], 2), EMPTY_KEY, dtype=np.uint64)
    mask = np.uint64(grown.shape[0] - 1)
    for old in range(cells.shape[0]):
        if cells[old, 0] != EMPTY_KEY:
            cell = mix64(cells[old, 0]) & mask
            while grown[cell, 0] != EMPTY_KEY:
                cell = (cell + np.uint64(1)) & mask
            grown[cell, 0], grown[cell, 1] = cells[old, 0], cells[old, 1]
    return grown


_LITTLE_ENDIAN = sys.byteorder == "little"


@njit(inline="always", cache=True)
def same_bytes(a, a_at, b, b_at, size):
    """Whether ``a[a_at:a_at + size]`` spells ``b[b_at:b_at + size]``: 8 bytes at a time
    where both arrays hold 8 more (the last chunk masked to the bytes left, the first in
    memory being the low ones on a little-endian CPU), so most words are one load each
    and one compare; else byte by byte."""
    if not _LITTLE_ENDIAN or a_at + size + 8 > a.size or b_at + size + 8 > b.size:
        for k in range(size):
            if a[a_at + k] != b[b_at + k]:
                return False
        return True
    a_address, b_address = a.ctypes.data + a_at, b.ctypes.data + b_at
    for k in range(0, size, 8):
        left = min(size - k, 8)
        mask = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - 8 * left)
        if (_load(a_address + k, np.uint64) ^ _load(b_address + k, np.uint64)) & mask:
            return False
    return True


@hot
def hash_bytes(data, start, length):
    """Polynomial hash of ``data[start:start+length]`` (mod 2**64)."""
    value = np.uint64(0)
    for i in range(start, start + length):
        value = value * STRING_HASH_BASE + np.uint64(data[i]) + np.uint64(1)
    return value


@hot
def hash_concat(left_hash, right_hash, right_length):
    """Hash of the concatenation, from the parts' hashes: no bytes re-read."""
    power = np.uint64(1)
    base = STRING_HASH_BASE
    n = right_length
    while n > 0:
        if n & 1:
            power *= base
        base *= base
        n >>= 1
    return left_hash * power + right_hash


# A word of up to 7 bytes is its own key: its length in the top byte, its bytes
# below, so equal keys mean equal words and no bytes are compared. A longer
# word's key is a 56-bit hash tagged LONG_WORD_TAG in the top byte; its bytes
# are compared on a key match. Keys below LONG_WORD_TAG are exact. The word
# cache and whole-token table of encoding (CPU and device), the counting kernel
# and the word tally all key words so.
LONG_WORD_TAG = np.uint64(8) << np.uint64(56)
_LOW_56 = (np.uint64(1) << np.uint64(56)) - np.uint64(1)


@njit(cache=True, _nrt=False, inline="always")
def word_key(data, start, stop):
    """The table key of ``data[start:stop]`` (never EMPTY_KEY)."""
    length = stop - start
    if length <= 7:
        key = np.uint64(length) << np.uint64(56)
        for k in range(length):
            key |= np.uint64(data[start + k]) << np.uint64(8 * k)
        return key
    return (hash_bytes(data, start, length) & _LOW_56) | LONG_WORD_TAG


@njit(cache=True)
def grown_like(array, min_size):
    """A copy of ``array`` with at least ``min_size`` elements (doubling)."""
    size = max(array.size * 2, min_size, 16)
    bigger = np.empty(size, dtype=array.dtype)
    bigger[: array.size] = array
    return bigger


cuda = helper_cuda()  # claim_cell runs in kernels of several modules


@device_phase
def claim_cell_within(keys, key, max_probes):
    """``key``'s cell in a device hash table (linear probing, a power-of-two size), claimed
    with atomicCAS when absent: (cell, 1 if this thread claimed it, 0 if it was there,
    -1 if ``max_probes`` cells all held other keys: the table is fuller than planned)."""
    mask = np.uint64(keys.size - 1)
    cell = mix64(key) & mask
    for _ in range(max_probes):
        stored = keys[cell]
        if stored == EMPTY_KEY:
            stored = cuda.atomic.cas(keys, cell, EMPTY_KEY, key)
            if stored == EMPTY_KEY:
                return cell, 1
        if stored == key:
            return cell, 0
        cell = (cell + np.uint64(1)) & mask
    return cell, -1


@device_phase
def claim_cell(keys, key):
    """``key``'s cell, claimed when absent: (cell, whether this thread claimed it). The
    table must have a free cell."""
    cell, outcome = claim_cell_within(keys, key, keys.size)
    return cell, outcome == 1
