"""Every ``@cuda.jit`` kernel of gpubpe with the signature it is built for.

``gpubpe doctor --ptx`` and the tests compile each of these to PTX for real
architectures (sm_80, sm_90) without a device, which catches typing errors the
simulator lets through. A new kernel must be listed here.
"""

from __future__ import annotations


def all_cuda_kernels() -> list[tuple[object, str]]:
    """(kernel, signature) for every CUDA kernel, in module order."""
    from . import bitpack, encode, pairs, train_device

    kernels = list(pairs.PAIRS_CUDA_SIGNATURES.items())
    kernels += list(train_device.TRAIN_CUDA_SIGNATURES.items())
    kernels += list(encode.ENCODE_CUDA_SIGNATURES.items())
    kernels += [(getattr(bitpack, name), signature)
                for name, signature in bitpack.CUDA_KERNEL_SIGNATURES.items()]
    return kernels


def compile_all_ptx(architectures=((8, 0), (9, 0))) -> list[tuple[str, str, str]]:
    """Compile every kernel for each architecture: (arch, kernel name, 'ok' or the error)."""
    from numba import cuda

    results = []
    for arch in architectures:
        for kernel, signature in all_cuda_kernels():
            name = kernel.py_func.__name__
            try:
                cuda.compile_ptx(kernel.py_func, signature, cc=arch)
                results.append((f"sm_{arch[0]}{arch[1]}", name, "ok"))
            except Exception as exc:  # report every failure, not just the first
                results.append((f"sm_{arch[0]}{arch[1]}", name, f"{type(exc).__name__}: {exc}"))
    return results
