"""Launch helpers shared by the CUDA kernels.

Kernels are Numba ``@cuda.jit`` functions over device arrays: CuPy arrays on a
GPU, NumPy arrays under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
Host orchestration uses only the NumPy API that CuPy shares, through an ``xp``
module argument. ``launch_counts`` records every launch by kernel name, so
tests can prove the CUDA kernels ran rather than a CPU fallback.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

THREADS_PER_BLOCK = 256

launch_counts: Counter = Counter()


def array_module(array):
    """cupy for a CuPy array, numpy otherwise (the simulator runs kernels on NumPy arrays)."""
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def launch(kernel, n_items: int, *args) -> None:
    """Launch ``kernel`` with one thread per item, in blocks of THREADS_PER_BLOCK."""
    if n_items == 0:
        return
    threads = min(THREADS_PER_BLOCK, 32 * ((n_items + 31) // 32))
    kernel[(n_items + threads - 1) // threads, threads](*args)
    launch_counts[kernel.py_func.__name__] += 1


def exclusive_scan(xp, values):
    """int64 exclusive prefix sums with the total appended (length n + 1)."""
    out = xp.zeros(values.size + 1, dtype=xp.int64)
    xp.cumsum(values, out=out[1:])
    return out


def sum_by_key(xp, keys, values):
    """(unique keys ascending, int64 sum of the values of each key): sort and reduce."""
    if keys.size == 0:
        return keys, values.astype(xp.int64)
    order = xp.argsort(keys)
    keys, values = keys[order], values[order]
    first = xp.flatnonzero(xp.concatenate([xp.ones(1, dtype=bool), keys[1:] != keys[:-1]]))
    totals = exclusive_scan(xp, values)
    ends = xp.concatenate([first[1:], xp.full(1, keys.size, dtype=first.dtype)])
    return keys[first], totals[ends] - totals[first]
