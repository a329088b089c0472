"""Backend choice: which array module and which kernels run the heavy work.

``resolve_backend("auto" | "cpu" | "cuda")`` returns a :class:`Backend`. ``auto``
picks CUDA when a device is usable and the CPU otherwise, and says which in
``Backend.reason``. The CPU backend is Numba over NumPy arrays, using every
core. The CUDA backend (Numba-CUDA kernels over CuPy arrays) is added by the
GPU work; until a device is usable, asking for it raises
:class:`~gpubpe.errors.BackendUnavailable` with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .errors import BackendUnavailable, ConfigError

BACKEND_NAMES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Backend:
    """The array module and the name of the kernels a computation uses."""

    name: str
    xp: object
    reason: str


def cuda_unavailable_reason() -> str | None:
    """Why CUDA cannot be used here, or None when it can."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "the CUDA backend's kernels are not part of this build yet (GPU issue)"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "cupy is not installed (pip install 'gpubpe[cuda12]')"
    try:
        from numba import cuda

        if not cuda.is_available():
            return "no CUDA device or driver is usable (numba.cuda.is_available() is False)"
    except Exception as exc:  # numba raises assorted errors when the driver is broken
        return f"the CUDA driver could not be loaded: {exc}"
    return "the CUDA backend's kernels are not part of this build yet (GPU issue)"


def resolve_backend(name: str = "auto") -> Backend:
    """Turn a backend name into a :class:`Backend`, or raise a clear error."""
    if name not in BACKEND_NAMES:
        raise ConfigError(f"backend={name!r} is not one of {BACKEND_NAMES}")
    if name == "cpu":
        return Backend("cpu", np, "asked for the CPU")
    reason = cuda_unavailable_reason()
    if name == "cuda":
        raise BackendUnavailable(f"backend='cuda' cannot run here: {reason}")
    return Backend("cpu", np, f"auto picked the CPU: {reason}")


def available_backends() -> dict[str, str]:
    """Each backend name mapped to 'available' or the reason it is not."""
    reason = cuda_unavailable_reason()
    return {"cpu": "available", "cuda": "available" if reason is None else f"unavailable: {reason}"}
