"""Numba decorators shared by the kernels.

``hot`` is for small helpers called from hot loops that take arrays but never
allocate. Compiled without the Numba runtime, a call skips the atomic
reference counting of each array argument: measured here, a byte-scanning
loop calling one such helper went from 20 ns to 0.6 ns per byte, and the merge
loop's helpers take a dozen arrays each. Numba's own ``inline="always"`` did
not remove that cost.

Signals (issue 18): Numba boxes each array a kernel returns by calling a Python
function (``numba.core.serialize._numba_unpickle``), and a signal that arrived during the
kernel had its Python handler run there; a handler that raises (``KeyboardInterrupt``,
the ``gpubpe`` command's SIGTERM exception) then broke Numba's boxing: SystemError or
SIGSEGV. ``_unpickle_without_bytecode`` below puts that function behind a C cache.
"""

import functools

import numba.core.serialize
from numba import njit

hot = njit(cache=True, _nrt=False)
# ``hot`` kernels that run without the GIL (whole kernels called from Python threads).
hot_nogil = njit(cache=True, _nrt=False, nogil=True)


def _unpickle_without_bytecode() -> None:
    """Numba boxes a kernel's array result through ``serialize._numba_unpickle``, a Python
    function it looks up once, on its first call in the process. Run there, a raising
    signal handler (``KeyboardInterrupt``, the ``gpubpe`` command's SIGTERM) broke the boxing:
    a SIGTERM while a loop called ``count_scanned_words`` ended 20 of 20 runs in SystemError
    or SIGSEGV. Behind ``functools.lru_cache`` (C code) a repeated call runs no bytecode, so
    the handler runs once the kernel's result is back in Python code. The first call for
    each constant still runs the function (a compile or the first call of a kernel)."""
    unpickle = getattr(numba.core.serialize, "_numba_unpickle", None)
    if unpickle is not None and not hasattr(unpickle, "cache_info"):  # another Numba: as is
        numba.core.serialize._numba_unpickle = functools.lru_cache(maxsize=None)(unpickle)


_unpickle_without_bytecode()
