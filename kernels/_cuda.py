"""Launch helpers shared by the CUDA kernels.

Kernels are Numba ``@cuda.jit`` functions over device arrays: CuPy arrays on a
GPU, NumPy arrays under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
Host orchestration uses only the NumPy API that CuPy shares, through an ``xp``
module argument. ``launch_counts`` records every launch by kernel name, so
tests can prove the CUDA kernels ran rather than a CPU fallback.
"""

from __future__ import annotations

from collections import Counter

import numba
import numpy as np

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 1 << 16  # beyond this the threads loop (grid-stride) instead of adding blocks
SIMULATOR_THREADS = 4

launch_counts: Counter = Counter()


def array_module(array):
    """cupy for a CuPy array, numpy otherwise (the simulator runs kernels on NumPy arrays)."""
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def launch(kernel, n_items: int, *args) -> None:
    """Launch ``kernel`` over ``n_items`` items; every kernel loops grid-stride.

    On a GPU: one thread per item in blocks of THREADS_PER_BLOCK, up to
    MAX_BLOCKS blocks. The simulator runs every CUDA thread as a Python thread,
    so there two blocks of SIMULATOR_THREADS threads share the items: the same
    code, grid-stride loop and several blocks included, at a fraction of the cost.
    """
    if n_items == 0:
        return
    simulated = numba.config.ENABLE_CUDASIM
    threads = SIMULATOR_THREADS if simulated else THREADS_PER_BLOCK
    blocks = min((n_items + threads - 1) // threads, 2 if simulated else MAX_BLOCKS)
    kernel[blocks, threads](*args)
    launch_counts[kernel.py_func.__name__] += 1


def device_function(function):
    """An ``@njit(inline="always")`` helper as CUDA kernels call it.

    Built for a GPU (PTX), Numba inlines the helper into the kernel. The
    simulator runs kernels as Python over wrapped arrays that ``@njit`` code
    cannot take; there the helper gets the NumPy arrays underneath and runs
    compiled for the CPU: the same source, with the same argument types.
    """
    if not numba.config.ENABLE_CUDASIM:
        return function

    def on_simulator(*args):
        return function(*(_simulated_array(arg) for arg in args))

    return on_simulator


def _simulated_array(arg):
    item = getattr(arg, "__dict__", {}).get("_item")
    return item._ary if item is not None and hasattr(item, "_ary") else arg


def exclusive_scan(xp, values):
    """int64 exclusive prefix sums with the total appended (length n + 1)."""
    out = xp.zeros(values.size + 1, dtype=xp.int64)
    xp.cumsum(values, dtype=xp.int64, out=out[1:])
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
