"""Every ``@cuda.jit`` kernel of gpubpe with the signature it is built for.

``gpubpe doctor --ptx`` and the tests compile each of these to PTX for real
architectures (sm_80, sm_90) without a device, which catches typing errors the
simulator lets through, and, where CUDA's ``ptxas`` is installed, assemble that PTX to
machine code as the driver would on a device (:func:`assembled`): a kernel that does not
assemble would fail to load on a real GPU, and ``ptxas`` says what each thread costs
(registers, stack, spills), which bounds how many blocks share a multiprocessor. A new
kernel must be listed here. Compile through :func:`compile_ptx`: a kernel that calls
``@njit`` helpers needs it without a device.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path


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


CACHE_VARIABLE = "GPUBPE_CUDA_CACHE"


def enable_disk_cache() -> list[str]:
    """With ``GPUBPE_CUDA_CACHE=1``: every kernel's build kept on disk (Numba's
    ``cache=True``: ``__pycache__`` beside the module, else ``~/.cache/numba``), so a new
    process loads it instead of compiling; the names of the kernels switched.

    Opt-in, and not yet tried on a GPU: on the H200 lent in session 20 each process compiled
    every kernel it used (``gpubpe bench`` printed nothing in 60 s), and
    ``bench/gpu_node.sh --steps cache`` times a second process against a first. The
    persistent training kernel is left out: it needs a cooperative launch, which a build
    loaded from the cache is not known to keep (its grid syncs would then never return).
    """
    if os.environ.get(CACHE_VARIABLE) != "1":
        return []
    from . import train_device

    switched = []
    for kernel, _ in all_cuda_kernels():
        if kernel is not train_device.train_steps_kernel and hasattr(kernel, "enable_caching"):
            kernel.enable_caching()
            switched.append(kernel.py_func.__name__)
    return switched


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


def compile_all_ptx(architectures=((8, 0), (9, 0))) -> list[tuple[str, str, str, str]]:
    """Compile every kernel for each architecture, and assemble it where ``ptxas`` is
    installed: (arch, kernel name, 'ok' or the error, what ``ptxas`` said it costs a
    thread, or '' where it was not assembled)."""
    results = []
    for arch in architectures:
        for kernel, signature in all_cuda_kernels():
            name, outcome, cost = kernel.py_func.__name__, "ok", ""
            try:
                ptx = compile_ptx(kernel, signature, arch)
                cost = assembled(ptx, arch) if ptxas_path() else ""
            except Exception as exc:  # report every failure, not just the first
                outcome = f"{type(exc).__name__}: {exc}"
            results.append((f"sm_{arch[0]}{arch[1]}", name, outcome, cost))
    return results


def ptxas_path() -> str | None:
    """CUDA's PTX assembler: on the PATH, or under ``$CUDA_HOME`` / ``$CUDA_PATH``."""
    homes = [os.environ.get(name) for name in ("CUDA_HOME", "CUDA_PATH")]
    found = [shutil.which("ptxas")] + [str(Path(home, "bin", "ptxas")) for home in homes if home]
    return next((path for path in found if path and os.access(path, os.X_OK)), None)


class AssemblyError(RuntimeError):
    """``ptxas`` refused a kernel's PTX (its message says why)."""


_REGISTERS = re.compile(r"Used (\d+) registers")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def assembled(ptx: str, arch) -> str:
    """Assemble ``ptx`` for ``arch`` with ``ptxas`` as the driver's linker does (``-c``:
    a device function NVVM left uninlined stays a call, and a cooperative kernel's grid
    sync is linked from libcudadevrt at load) and say what a thread costs: the kernel's
    registers, the largest stack frame and the spills of it and the functions it calls,
    e.g. ``44 registers, 48 B stack, no spills``. Raises AssemblyError where it fails."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder, "kernel.ptx"), Path(folder, "kernel.o")
        source.write_text(ptx)
        done = subprocess.run([ptxas_path(), f"-arch=sm_{arch[0]}{arch[1]}", "-v", "-c",
                               "-o", str(target), str(source)], capture_output=True, text=True)
    if done.returncode:
        raise AssemblyError(done.stderr.strip()[-2000:])
    frames = [tuple(map(int, frame)) for frame in _FRAME.findall(done.stderr)]
    stack = max((frame[0] for frame in frames), default=0)
    stored, loaded = sum(frame[1] for frame in frames), sum(frame[2] for frame in frames)
    spills = f"spills {stored} B stored, {loaded} B loaded" if stored or loaded else "no spills"
    registers = (_REGISTERS.findall(done.stderr) or ["?"])[-1]  # (another ptxas's wording)
    return f"{registers} registers, {stack} B stack, {spills}"
