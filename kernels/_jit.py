"""Numba decorators shared by the kernels.

``hot`` is for small helpers called from hot loops that take arrays but never
allocate. Compiled without the Numba runtime, a call skips the atomic
reference counting of each array argument: measured here, a byte-scanning
loop calling one such helper went from 20 ns to 0.6 ns per byte, and the merge
loop's helpers take a dozen arrays each. Numba's own ``inline="always"`` did
not remove that cost.
"""

from numba import njit

hot = njit(cache=True, _nrt=False)
