"""Numba decorators shared by the kernels.

``hot`` is for small helpers called from hot loops that take arrays but never
allocate. Compiled without the Numba runtime, a call skips the atomic
reference counting of each array argument: measured here, a byte-scanning
loop calling one such helper went from 20 ns to 0.6 ns per byte, and the merge
loop's helpers take a dozen arrays each. Numba's own ``inline="always"`` did
not remove that cost.

Signals (issue 18): Numba boxes each array a kernel returns by calling a Python
function (``numba.core.serialize._numba_unpickle``), and a signal that arrived during the
kernel has its Python handler run there. A handler that raises (``KeyboardInterrupt``,
the ``gpubpe`` command's SIGTERM exception) then breaks Numba's boxing: SystemError or
SIGSEGV. A kernel the main thread spends long in should take its outputs as arguments
and return a number (``jsonl.jsonl_texts``: 10 of 25 interrupted runs failed before, 0
after). Most kernels still return arrays.
"""

from numba import njit

hot = njit(cache=True, _nrt=False)
