"""Every ``@cuda.jit`` kernel of gpubpe with the signature it is built for.

``gpubpe doctor --ptx`` and the tests compile each of these to PTX for real
architectures (sm_80, sm_90) without a device, which catches typing errors the
simulator lets through. A new kernel must be listed here. Compile through
:func:`compile_ptx`: a kernel that calls ``@njit`` helpers needs it without a device.
"""

from __future__ import annotations

from contextlib import contextmanager


def all_cuda_kernels() -> list[tuple[object, str]]:
    """(kernel, signature) for every CUDA kernel, in module order."""
    from . import bitpack, encode, pairs, train_device
    from .encode import pretok_cuda

    kernels = list(pairs.PAIRS_CUDA_SIGNATURES.items())
    kernels += list(train_device.TRAIN_CUDA_SIGNATURES.items())
    kernels += list(encode.ENCODE_CUDA_SIGNATURES.items())
    kernels += list(pretok_cuda.PRETOK_CUDA_SIGNATURES.items())
    kernels += [(getattr(bitpack, name), signature)
                for name, signature in bitpack.CUDA_KERNEL_SIGNATURES.items()]
    return kernels


@contextmanager
def _target_architecture(arch):
    """Numba compiles the ``@njit`` helpers a kernel calls as device functions for the
    current device's compute capability; with no device, give it ``arch`` instead.

    Without this, such a kernel cannot be built to PTX where there is no device (the
    driver is asked for a context); inlining every helper at Numba IR level instead
    took minutes per kernel (``kernels.pretok`` notes). The helpers compile once each
    and NVVM inlines them into the kernel, as on a device of that architecture.
    """
    from numba.cuda import dispatcher

    class _Target:
        compute_capability = tuple(arch)

    current = dispatcher.get_current_device
    dispatcher.get_current_device = _Target
    try:
        yield
    finally:
        dispatcher.get_current_device = current


def compile_ptx(kernel, signature: str, arch) -> str:
    """PTX of a ``@cuda.jit`` kernel for ``arch`` ((8, 0)...), with or without a device."""
    from numba import cuda

    with _target_architecture(arch):
        ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=arch)
    return ptx


def compile_all_ptx(architectures=((8, 0), (9, 0))) -> list[tuple[str, str, str]]:
    """Compile every kernel for each architecture: (arch, kernel name, 'ok' or the error)."""
    results = []
    for arch in architectures:
        for kernel, signature in all_cuda_kernels():
            name = kernel.py_func.__name__
            try:
                compile_ptx(kernel, signature, arch)
                results.append((f"sm_{arch[0]}{arch[1]}", name, "ok"))
            except Exception as exc:  # report every failure, not just the first
                results.append((f"sm_{arch[0]}{arch[1]}", name, f"{type(exc).__name__}: {exc}"))
    return results
