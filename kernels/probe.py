"""Two tiny kernels that prove this CUDA stack can build and run gpubpe's kinds of kernel.

``gpubpe.backend`` runs them once per process before it hands out the ``cuda``
backend: a grid-stride kernel like every kernel here, and a cooperative kernel
with a grid-wide sync (it links ``libcudadevrt``, which the device-resident
merge loop needs). A stack that imports but cannot compile (numba-cuda with a
numpy it does not support) or cannot link or launch fails here, with its
cause, rather than deep inside a training run.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ._cuda import to_host

PROBE_ITEMS = 64
# Compiled for sm_80 without a device (the oldest architecture gpubpe builds for; the
# installed NVVM may not support Numba's default); running them JITs for the device's own.
PROBE_PTX_ARCH = (8, 0)


@cuda.jit
def add_index_kernel(values):
    """values[i] += i. Launch: grid-stride, any shape."""
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
        values[i] += i


@cuda.jit
def grid_sum_kernel(values, total):
    """total[0] = sum(values) and, after a grid-wide sync, total[1] = total[0].

    Launch: cooperative, one thread per value (at most what fits on the device at once).
    """
    grid = cuda.cg.this_grid()
    i = cuda.grid(1)
    if i < values.size:
        cuda.atomic.add(total, 0, values[i])
    grid.sync()
    if i == 0:
        total[1] = total[0]


# Compiled to PTX before any device is touched. The grid-sync kernel is not listed:
# Numba types ``this_grid()`` for the current device only, so it compiles when it runs.
PROBE_SIGNATURES = {add_index_kernel: "void(int64[::1])"}


def compile_probe() -> None:
    """PTX for the listed probe kernels (no device needed); raises what the compiler raised."""
    for kernel, signature in PROBE_SIGNATURES.items():
        cuda.compile_ptx(kernel.py_func, signature, cc=PROBE_PTX_ARCH)


def run_probe() -> None:
    """Run both kernels on the current device; raise RuntimeError on a wrong result."""
    values = cuda.to_device(np.zeros(PROBE_ITEMS, dtype=np.int64))
    add_index_kernel[2, PROBE_ITEMS // 2](values)
    total = cuda.to_device(np.zeros(2, dtype=np.int64))
    grid_sum_kernel[2, PROBE_ITEMS // 2](values, total)
    got = to_host(total, "cuda probe").tolist()  # sync
    expected = PROBE_ITEMS * (PROBE_ITEMS - 1) // 2
    if got != [expected, expected]:
        raise RuntimeError(f"the probe kernels computed {got}, expected [{expected}, {expected}]")
