"""Binary max-heap of (priority, tie order, item) in plain arrays, for Numba.

An entry ranks higher when its priority (an int64 count) is larger; at equal
priority the smaller ``order`` (uint64) ranks higher. This is the trainer's one
documented comparison (DESIGN §3): ``order`` of a pair is the pair in HF's id
space, ``(hf_id(left) << 32) | hf_id(right)``, so ties go to the smaller pair,
as HF tokenizers' ``Merge::cmp`` does. Entries are never updated in place:
stale ones are skipped or re-pushed by the caller (lazy invalidation).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit import hot
from .train_policy import ranks_above


@hot
def heap_push(priorities, orders, items, size, priority, order, item):
    """Insert an entry; returns the new size (the arrays must have room)."""
    at = size
    while at > 0:
        parent = (at - 1) >> 1
        if not ranks_above(priority, order, priorities[parent], orders[parent]):
            break
        priorities[at] = priorities[parent]
        orders[at] = orders[parent]
        items[at] = items[parent]
        at = parent
    priorities[at] = priority
    orders[at] = order
    items[at] = item
    return size + 1


@hot
def heap_pop(priorities, orders, items, size):
    """Remove the top entry; returns the new size."""
    size -= 1
    priority, order, item = priorities[size], orders[size], items[size]
    at = 0
    while True:
        child = 2 * at + 1
        if child >= size:
            break
        if child + 1 < size and ranks_above(
            priorities[child + 1], orders[child + 1], priorities[child], orders[child]
        ):
            child += 1
        if not ranks_above(priorities[child], orders[child], priority, order):
            break
        priorities[at] = priorities[child]
        orders[at] = orders[child]
        items[at] = items[child]
        at = child
    if size > 0:
        priorities[at] = priority
        orders[at] = order
        items[at] = item
    return size


def empty_heap(capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrays for a heap of ``capacity`` entries: priorities, orders, items."""
    capacity = max(capacity, 16)
    return (
        np.zeros(capacity, dtype=np.int64),
        np.zeros(capacity, dtype=np.uint64),
        np.zeros(capacity, dtype=np.int64),
    )


@njit(cache=True)
def heap_of_counts(priorities, orders, items, counts, count_orders, n_items):
    """Push every item below ``n_items`` whose count is positive; returns the heap size."""
    size = 0
    for item in range(n_items):
        if counts[item] > 0:
            size = heap_push(priorities, orders, items, size, counts[item], count_orders[item],
                             item)
    return size
