"""Launch helpers shared by the CUDA kernels.

Kernels are Numba ``@cuda.jit`` functions over device arrays: CuPy arrays on a
GPU, NumPy arrays under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
Host orchestration uses only the NumPy API that CuPy shares, through an ``xp``
module argument. ``launch_counts`` records every launch by kernel name, so
tests can prove the CUDA kernels ran rather than a CPU fallback.

Every device-to-host read goes through :func:`to_host` (or :func:`read_scalar`
/ :func:`synchronize`), every host-to-device copy through :func:`to_device`,
and every launch through :func:`launch`; :func:`device_stats` counts them for
the code run inside it, the same under the simulator and on a GPU. On an H100
a launch costs 7-43 us and a sync 17 us (``shared/GPU_FACTS.md``): these
counts are the cost a device pays that CI can see.
"""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import numba
import numpy as np

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 1 << 16  # beyond this the threads loop (grid-stride) instead of adding blocks
SIMULATOR_THREADS = 4

launch_counts: Counter = Counter()


@dataclass
class DeviceStats:
    """What device work cost inside one ``device_stats()`` block.

    ``launches`` by kernel name, ``syncs`` (every host read of device data and
    every wait) by the site that made them, and bytes copied each way.
    """

    launches: Counter = field(default_factory=Counter)
    sync_sites: Counter = field(default_factory=Counter)
    bytes_to_host: int = 0
    bytes_to_device: int = 0

    @property
    def n_launches(self) -> int:
        return sum(self.launches.values())

    @property
    def syncs(self) -> int:
        return sum(self.sync_sites.values())

    def per(self, n: float) -> dict[str, float]:
        """Launches, syncs and bytes each way divided by ``n`` (merges, MB...)."""
        n = max(n, 1e-300)
        return {"launches": self.n_launches / n, "syncs": self.syncs / n,
                "bytes_to_host": self.bytes_to_host / n,
                "bytes_to_device": self.bytes_to_device / n}


_open_stats: list[DeviceStats] = []
_stats_lock = threading.Lock()


@contextmanager
def device_stats():
    """Count kernel launches, syncs and bytes moved by the code run inside.

    >>> with device_stats() as stats:
    ...     host = to_host(np.arange(4, dtype=np.int64), "example")
    >>> stats.syncs, stats.bytes_to_host
    (1, 32)
    """
    stats = DeviceStats()
    with _stats_lock:
        _open_stats.append(stats)
    try:
        yield stats
    finally:
        with _stats_lock:
            _open_stats.remove(stats)


def _record(launch_name: str | None = None, sync_site: str | None = None,
            to_host_bytes: int = 0, to_device_bytes: int = 0) -> None:
    with _stats_lock:
        for stats in _open_stats:
            if launch_name is not None:
                stats.launches[launch_name] += 1
            if sync_site is not None:
                stats.sync_sites[sync_site] += 1
            stats.bytes_to_host += to_host_bytes
            stats.bytes_to_device += to_device_bytes


def to_host(array, what: str = "read") -> np.ndarray:
    """A device array copied to the host: one counted sync (``what`` names the site).

    A NumPy array (the simulator's device arrays, or host data) is returned
    as it is, but counted the same, so the simulator shows the syncs a GPU
    would make.
    """
    host = array.get() if hasattr(array, "get") else np.asarray(array)
    _record(sync_site=what, to_host_bytes=host.nbytes)
    return host


def read_scalar(array, index: int = 0, what: str = "read scalar") -> int:
    """One element of a device array as a Python int: one counted sync."""
    return int(to_host(array[index:index + 1], what)[0])


def synchronize(xp, what: str = "wait") -> None:
    """Wait for the device to finish the work queued so far: one counted sync."""
    if xp is not np:
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    _record(sync_site=what)


def to_device(xp, array, dtype=None):
    """A host array copied to the device (``xp.asarray``), its bytes counted."""
    host = np.asarray(array, dtype=dtype)
    _record(to_device_bytes=host.nbytes)
    return xp.asarray(host)


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
    name = kernel.py_func.__name__
    launch_counts[name] += 1
    _record(launch_name=name)


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
