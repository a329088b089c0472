"""Backend choice: which array module and which kernels run the heavy work.

``resolve_backend("auto" | "cpu" | "cuda")`` returns a :class:`Backend`.

- ``cpu``: Numba over NumPy arrays, every core.
- ``cuda``: Numba-CUDA kernels over CuPy arrays on a GPU. With
  ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's CUDA simulator on
  NumPy arrays (slow; for debugging kernels and for tests without a GPU).
  Where neither is possible it raises :class:`~gpubpe.errors.BackendUnavailable`
  naming the reason (no cupy, no device, driver too old).
- ``auto``: CUDA when a real device is usable, else the CPU; ``reason`` says
  which was picked and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .errors import BackendUnavailable, ConfigError

BACKEND_NAMES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Backend:
    """The array module a computation uses, and which kernels (by target name)."""

    name: str
    xp: object
    reason: str
    simulated: bool = False


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def cuda_unavailable_reason() -> str | None:
    """Why a real CUDA device cannot be used here, or None when it can."""
    try:
        import cupy
    except ImportError:
        return "cupy is not installed (pip install 'gpubpe[cuda12]' or 'gpubpe[cuda13]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy raises its own CUDARuntimeError subclasses
        return f"no usable CUDA device or driver ({exc})"
    if count == 0:
        return "no CUDA device is visible"
    return None


def resolve_backend(name: str = "auto") -> Backend:
    """Turn a backend name into a :class:`Backend`, or raise a clear error."""
    if name not in BACKEND_NAMES:
        raise ConfigError(f"backend={name!r} is not one of {BACKEND_NAMES}")
    if name == "cpu":
        return Backend("cpu", np, "asked for the CPU")
    if name == "cuda" and simulator_enabled():
        return Backend("cuda", np, "the Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)", True)
    reason = None if simulator_enabled() else cuda_unavailable_reason()
    if reason is None and not simulator_enabled():
        import cupy

        return Backend("cuda", cupy, "a CUDA device is usable")
    if name == "cuda":
        raise BackendUnavailable(f"backend='cuda' cannot run here: {reason}")
    why = reason or "the CUDA simulator is on; auto never picks it"
    return Backend("cpu", np, f"auto picked the CPU: {why}")


def available_backends() -> dict[str, str]:
    """Each backend name mapped to 'available' or the reason it is not."""
    reason = cuda_unavailable_reason()
    if simulator_enabled():
        cuda = "available (simulator: NUMBA_ENABLE_CUDASIM=1)"
    else:
        cuda = "available" if reason is None else f"unavailable: {reason}"
    return {"cpu": "available", "cuda": cuda}
