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

The simulator guard, and how device code opts in: under the simulator,
:func:`to_device`, :func:`device_empty`, :func:`device_zeros` and
:func:`device_full` return a :class:`SimulatedDeviceArray`, and so does what is
computed from one (ufuncs, slices, sorts, scans, reductions). Reading such an
array on the host any other way than :func:`to_host` / :func:`read_scalar`
(``int()``, ``bool()``, ``.item()``, ``.tolist()``, ``.get()``, a boolean mask,
``nonzero``/``flatnonzero``/``argwhere``/one-argument ``where``/``unique``/
``compress``) raises :class:`HiddenDeviceRead` at the line that does it, where
a GPU would silently sync. Arrays made with plain ``xp.asarray``/``xp.empty``
are ordinary NumPy arrays, unguarded: code joins the guard by allocating its
device arrays through these helpers, and then fails loudly, never silently.
``GPUBPE_SIM_GUARD=0`` switches the guard off (to bisect a failure).
``tests/test_device_stats.py`` shows both the guard and exact sync counts.
"""

from __future__ import annotations

import os
import sys
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


class HiddenDeviceRead(RuntimeError):
    """Device data read by the host outside ``to_host`` / ``read_scalar`` (simulator guard)."""


class SimulatedDeviceArray(np.ndarray):
    """What the simulator hands out for a device array: reads by the host must be counted.

    On a GPU, ``int(x)``, ``bool(x)``, ``x.item()``, ``x.get()``, ``x.tolist()``, indexing
    by a boolean mask, and ``nonzero``/``flatnonzero``/``argwhere``/one-argument
    ``where``/``unique``/``compress`` of a CuPy array each wait for the device (a sync,
    ~17 us on an H100, often far more as it drains the queue). Under the simulator
    device arrays are NumPy arrays, so such reads would go unseen; this subclass
    raises :class:`HiddenDeviceRead` for each of them outside :func:`to_host` /
    :func:`read_scalar`. Element reads and reductions give 0-d arrays (as CuPy does),
    so ``int(x[-1])`` or ``bool(x.any())`` is caught too. Kernels and NumPy functions
    that keep the data on the "device" (ufuncs, slicing, sort, cumsum, fancy indexing
    by integer arrays) work as on NumPy and keep the subclass.

    ``np.asarray(x)`` cannot be intercepted for an ndarray subclass; CuPy itself
    refuses that conversion (TypeError), so it fails on a GPU rather than hiding.

    Where it comes from: :func:`to_device` and :func:`device_empty` /
    :func:`device_zeros` / :func:`device_full` under the simulator, and what is
    computed from such arrays. Code opts in by allocating through these helpers;
    ``GPUBPE_SIM_GUARD=0`` switches the guard off everywhere (to bisect).
    """

    def __array_wrap__(self, array, context=None, return_scalar=False):
        # Reductions give a 0-d device array, as on CuPy; reading it is then a counted read.
        return super().__array_wrap__(array, context, False)

    def __getitem__(self, index):
        if _is_boolean_mask(index):
            _hidden("indexing by a boolean mask (the output size depends on the data)")
        out = super().__getitem__(index)
        if isinstance(out, np.ndarray):
            return out
        as_tuple = index if isinstance(index, tuple) else (index,)
        return super().__getitem__((*as_tuple, Ellipsis))  # a 0-d view, as CuPy gives

    def __array_function__(self, func, types, args, kwargs):
        if func in _DATA_SIZED or (func is np.where and len(args) + len(kwargs) == 1):
            _hidden(f"numpy.{func.__name__} (the output size depends on the data)")
        return super().__array_function__(func, types, args, kwargs)

    def __int__(self):
        _hidden("int()")

    def __float__(self):
        _hidden("float()")

    def __index__(self):
        _hidden("use as an index")

    def __bool__(self):
        _hidden("bool() / an if or while on device data")

    def __iter__(self):
        _hidden("iterating in Python")

    def __repr__(self):  # for debugging and test reports only: not counted
        return f"SimulatedDeviceArray({self.view(np.ndarray)!r})"

    def item(self, *args):
        _hidden(".item()")

    def tolist(self):
        _hidden(".tolist()")

    def get(self, *args, **kwargs):
        _hidden(".get()")

    def nonzero(self):
        _hidden(".nonzero() (the output size depends on the data)")

    def compress(self, *args, **kwargs):
        _hidden(".compress() (the output size depends on the data)")


_DATA_SIZED = {np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.compress, np.extract}


def _hidden(how: str):
    raise HiddenDeviceRead(
        f"device data read by the host through {how}, outside kernels._cuda.to_host / "
        "read_scalar: on a GPU this is an uncounted sync (or a data-sized CuPy call that "
        "syncs for its size). Read through to_host/read_scalar, or keep the value on the "
        "device (a kernel writing into a preallocated buffer)")


def _is_boolean_mask(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(part, np.ndarray) and part.dtype == np.bool_ for part in parts)


def guard_enabled() -> bool:
    """Whether the simulator hands out :class:`SimulatedDeviceArray` (``GPUBPE_SIM_GUARD``)."""
    return bool(numba.config.ENABLE_CUDASIM) and os.environ.get("GPUBPE_SIM_GUARD", "1") != "0"


def _on_device(xp, array):
    """``array`` as the simulator's guarded device array (unchanged on a GPU or unguarded)."""
    if xp is np and guard_enabled() and isinstance(array, np.ndarray):
        return array.view(SimulatedDeviceArray)
    return array


def to_host(array, what: str = "read") -> np.ndarray:
    """A device array copied to the host: one counted sync (``what`` names the site).

    A NumPy array (the simulator's device arrays, or host data) is copied (a
    guarded one) or returned as it is, and counted the same, so the simulator
    shows the syncs a GPU would make. On a GPU the copy goes to pageable host
    memory (see the notes at the end of this module).
    """
    if isinstance(array, SimulatedDeviceArray):
        host = np.array(array.view(np.ndarray))
    elif hasattr(array, "get"):  # CuPy
        host = array.get()
    elif hasattr(array, "copy_to_host"):  # a Numba device array (see kernel_view)
        host = array.copy_to_host()
    else:
        host = np.asarray(array)
    _record(sync_site=what, to_host_bytes=host.nbytes)
    return host


def read_scalar(array, index: int = 0, what: str = "read scalar") -> int:
    """One element of a device array as a Python int: one counted sync."""
    position = index if index >= 0 else array.size + index
    return int(to_host(array[position:position + 1], what)[0])


def synchronize(xp, what: str = "wait") -> None:
    """Wait for the device to finish the work queued so far: one counted sync."""
    if xp is not np:
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    _record(sync_site=what)


def to_device(xp, array, dtype=None):
    """A host array copied to the device (``xp.asarray``), its bytes counted.

    Under the simulator the result is a guarded :class:`SimulatedDeviceArray` copy.
    """
    host = np.asarray(array, dtype=dtype)
    _record(to_device_bytes=host.nbytes)
    if xp is np:
        return _on_device(xp, np.array(host))
    return xp.asarray(host)


def device_empty(xp, shape, dtype):
    """``xp.empty`` for a device buffer (guarded under the simulator); no copy, no count."""
    return _on_device(xp, xp.empty(shape, dtype=dtype))


def device_zeros(xp, shape, dtype):
    """``xp.zeros`` for a device buffer (guarded under the simulator)."""
    return _on_device(xp, xp.zeros(shape, dtype=dtype))


def device_full(xp, shape, value, dtype):
    """``xp.full`` for a device buffer (guarded under the simulator)."""
    return _on_device(xp, xp.full(shape, value, dtype=dtype))


# ---------------------------------------------------------------- streams and pinned copies
#
# For overlapping copies with device work (``gpubpe.device.DeviceBatchStream``). Under the
# simulator there is no concurrency: a stream is None, an event a placeholder, a copy an
# assignment; the counts are the GPU's (a wait on an event is a sync, a copy moves bytes).

_SIMULATED_EVENT = "simulated event"


def pinned_empty(xp, n: int, dtype) -> np.ndarray:
    """A host array in page-locked memory (``cupyx.empty_pinned``): copies from and into
    it run asynchronously at the bus's full speed. Under the simulator: ``np.empty``."""
    if xp is np:
        return np.empty(n, dtype=dtype)
    import cupyx

    return cupyx.empty_pinned(n, dtype=dtype)


def new_stream(xp):
    """A CUDA stream of its own (a blocking CuPy stream: still ordered against work on the
    legacy default stream); None under the simulator."""
    if xp is np:
        return None
    import cupy

    return cupy.cuda.Stream()


@contextmanager
def on_stream(stream):
    """Make ``stream`` current: CuPy calls and :func:`launch` queue work on it."""
    if stream is None:
        yield
        return
    with stream:
        yield


def record_event(stream):
    """An event marking the work queued on ``stream`` so far (no wait, no count)."""
    if stream is None:
        return _SIMULATED_EVENT
    import cupy

    event = cupy.cuda.Event(block=False, disable_timing=True)
    event.record(stream)
    return event


def wait_on_device(stream, event) -> None:
    """Make later work on ``stream`` wait for ``event`` on the device (the host does not wait)."""
    if stream is not None:
        stream.wait_event(event)


def wait_event(event, what: str = "wait") -> None:
    """The host waits until ``event`` has passed: one counted sync."""
    if event is not _SIMULATED_EVENT:
        event.synchronize()
    _record(sync_site=what)


def copy_to_device_async(host: np.ndarray, out, stream) -> None:
    """Queue a copy of ``host`` (pinned, see :func:`pinned_empty`) into the device array
    ``out`` of the same size on ``stream``; its bytes are counted. ``host`` must not change
    until an event recorded after it has passed."""
    _record(to_device_bytes=host.nbytes)
    if isinstance(out, np.ndarray):  # the simulator
        out[...] = host
    else:
        out.set(host, stream=stream)


def copy_to_host_async(array, out: np.ndarray, stream) -> None:
    """Queue a copy of device ``array`` into ``out`` (pinned, the same size) on ``stream``;
    its bytes are counted, the sync is the :func:`wait_event` on an event recorded after it:
    read ``out`` only then."""
    _record(to_host_bytes=out.nbytes)
    if isinstance(array, np.ndarray):  # the simulator's device arrays (or host data)
        out[...] = array.view(np.ndarray)
    else:
        import cupy

        cupy.asnumpy(array, stream=stream, out=out, blocking=False)


def kernel_view(array):
    """``array`` as kernels take it fastest: on a GPU a Numba device array over the
    CuPy memory (no copy, no stream sync), made once and reused for every launch;
    the array itself under the simulator.

    For arrays only kernels read (rule and byte tables): a Numba argument launches
    in ~17 us against ~43 us for a CuPy one (``shared/GPU_FACTS.md``). CuPy calls
    (``xp.cumsum``...) need the CuPy array, so keep that too where both are used.
    """
    if type(array).__module__.split(".")[0] != "cupy":
        return array
    from numba import cuda

    return cuda.as_cuda_array(array, sync=False)


def array_module(array):
    """cupy for a CuPy array, numpy otherwise (the simulator runs kernels on NumPy arrays)."""
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def launch(kernel, n_items: int, *args) -> None:
    """Launch ``kernel`` over ``n_items`` items; every kernel loops grid-stride.

    On a GPU: one thread per item in blocks of THREADS_PER_BLOCK, up to
    MAX_BLOCKS blocks; CuPy arrays are handed to Numba without its stream sync
    (see ``_without_stream_sync``). The simulator runs every CUDA thread as a
    Python thread, so there two blocks of SIMULATOR_THREADS threads share the
    items: the same code, grid-stride loop and several blocks included, at a
    fraction of the cost.
    """
    if n_items == 0:
        return
    simulated = numba.config.ENABLE_CUDASIM
    threads = SIMULATOR_THREADS if simulated else THREADS_PER_BLOCK
    blocks = min((n_items + threads - 1) // threads, 2 if simulated else MAX_BLOCKS)
    if simulated:
        kernel[blocks, threads](*_unguarded(args))
    else:
        kernel[blocks, threads, _current_numba_stream()](*_without_stream_sync(args))
    name = kernel.py_func.__name__
    launch_counts[name] += 1
    _record(launch_name=name)


_numba_streams: dict[int, object] = {}


def _current_numba_stream():
    """CuPy's current stream as Numba names it (0: the default stream), so kernels queue
    behind the CuPy work of the same stream (``on_stream``); wrapped once per stream."""
    cupy = sys.modules.get("cupy")
    pointer = cupy.cuda.get_current_stream().ptr if cupy is not None else 0
    if pointer == 0:
        return 0
    if pointer not in _numba_streams:
        from numba import cuda

        _numba_streams[pointer] = cuda.external_stream(pointer)
    return _numba_streams[pointer]


def _unguarded(args) -> tuple:
    """Simulator kernel arguments as plain NumPy views (a kernel's reads are device reads)."""
    return tuple(arg.view(np.ndarray) if isinstance(arg, SimulatedDeviceArray) else arg
                 for arg in args)


def _without_stream_sync(args) -> tuple:
    """CuPy arguments as Numba device arrays made with ``sync=False``.

    Numba synchronises the stream a ``__cuda_array_interface__`` names, once per
    array argument, at every launch (a hidden sync each); CuPy and these kernels
    share CuPy's current stream (``launch`` passes it), so the order of work is kept
    without it.
    """
    from numba import cuda

    return tuple(cuda.as_cuda_array(arg, sync=False)
                 if type(arg).__module__.split(".")[0] == "cupy" else arg for arg in args)


class _RunningKernelCuda:
    """The simulated ``cuda`` module of the kernel that is running (see ``helper_cuda``)."""

    def __getattr__(self, name):
        from numba.cuda.simulator.kernel import _get_kernel_context

        return getattr(_get_kernel_context(), name)


def helper_cuda():
    """``numba.cuda`` for a ``device_phase`` helper that other modules' kernels call.

    The simulator runs a device function with its module's ``cuda`` global swapped
    for the kernel's fake module and swaps it back on return; simulated threads
    calling a helper of another module at once race on that (one thread's return
    puts the real module back under another: "no attribute 'atomic'"). A proxy to
    the running kernel's fake module is never swapped. On a GPU: ``numba.cuda``.
    """
    from numba import cuda

    return _RunningKernelCuda() if numba.config.ENABLE_CUDASIM else cuda


def device_phase(function):
    """A device helper of these kernels that uses CUDA intrinsics (atomics, block syncs).

    Built for a GPU it is inlined at Numba IR level, as the ``@njit`` rules are: a
    ``cuda.jit(device=True)`` function would need a device to compile, so a PTX
    build without one could not call it. The simulator runs it as its device function.
    """
    from numba import cuda, njit

    if numba.config.ENABLE_CUDASIM:
        return cuda.jit(device=True)(function)
    return njit(inline="always")(function)


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
    array = item._ary if item is not None and hasattr(item, "_ary") else arg
    return array.view(np.ndarray) if isinstance(array, SimulatedDeviceArray) else array


def exclusive_scan(xp, values):
    """int64 exclusive prefix sums with the total appended (length n + 1)."""
    out = xp.zeros(values.size + 1, dtype=xp.int64)
    if isinstance(values, SimulatedDeviceArray):
        out = out.view(SimulatedDeviceArray)
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


# Performance notes
# -----------------
# - Syncs: every read of device data by the host waits for the queue to drain. The
#   encoding path reads twice per chunk (offsets, then the ids they size), decoding
#   three times (the output size, bytes, positions), the bit-level codec once for its
#   size plus its two results; a batch that fits one chunk pays exactly that, counted
#   in tests/test_device_stats.py. Reading only the size and then one buffer was kept
#   over copying the worst-case buffer in one read: the worst case is ~4x the bytes.
# - Numba's launch syncs the stream that a CuPy array's __cuda_array_interface__
#   names, once per array argument (a hidden sync each). ``launch`` hands CuPy arrays
#   over with ``as_cuda_array(..., sync=False)`` and launches on CuPy's current stream
#   (the legacy default stream unless ``on_stream`` chose another), so order is
#   kept. Tables that only kernels read are wrapped once (``kernel_view``) and reused.
# - ``to_device``/``to_host`` copy through pageable host memory (NumPy arrays in,
#   ``.get()`` out): the driver stages them, so they cannot overlap kernels. A stream
#   of batches (``gpubpe.encode_files`` through ``gpubpe.device.DeviceBatchStream``)
#   copies through reused pinned buffers on streams of its own instead
#   (``copy_to_device_async``/``copy_to_host_async``), so one batch's copies overlap
#   another's kernels; one-off calls keep the pageable copies (a pinned allocation
#   costs more than it saves on one copy). Bytes each way are counted either way.
