"""Backend choice: which array module and which kernels run the heavy work.

``resolve_backend("auto" | "cpu" | "cuda")`` returns a :class:`Backend`.

- ``cpu``: Numba over NumPy arrays, every core.
- ``cuda``: Numba-CUDA kernels over CuPy arrays on a GPU. With
  ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's CUDA simulator on
  NumPy arrays (slow; for debugging kernels and for tests without a GPU).
  Where neither is possible it raises :class:`~gpubpe.errors.BackendUnavailable`
  naming the reason (no cupy, no device, driver too old) and the versions of
  the CUDA stack.
- ``auto``: CUDA when a real device is usable, else the CPU; ``reason`` says
  which was picked and why.

"Usable" means more than importable: once per process, before the first
``cuda`` backend is handed out, the probe (``gpubpe.kernels.probe``) compiles
a small kernel, then runs it and a grid-sync kernel on the device. A stack
that cannot compile (numba-cuda 0.30.4 with numpy 2.5 fails so) or cannot
link ``libcudadevrt`` or launch is reported here, not deep inside training.
The hint to install the CUDA extra is logged at INFO and shown by
``gpubpe doctor``; ``auto`` does not print it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from importlib import metadata
from typing import ClassVar

import numpy as np

from ._threads import thread_count
from .errors import BackendUnavailable, ConfigError

BACKEND_NAMES = ("auto", "cpu", "cuda")
INSTALL_HINT = ("to use a GPU, install the CUDA extra matching the driver: "
                "pip install 'gpubpe[cuda12]' (or 'gpubpe[cuda13]')")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backend:
    """Where the heavy work runs, and the operations that differ there: this class is the
    host (NumPy arrays, Numba's CPU kernels), :class:`DeviceBackend` a CUDA device.

    Callers ask the backend for its training state, its codec and its syncs; none
    branches on its name (which is what metadata and messages show)."""

    name: str
    xp: object
    reason: str
    simulated: bool = False
    on_device: ClassVar[bool] = False

    def train_state(self, word_counts, vocab_size: int, min_count: int, scaffold: bool,
                    merges_per_step: int | None, launcher: str | None,
                    max_token_length: int = 0):
        """The merge loop's state here, and the merges it runs a step (``launcher`` is a
        device's; the host has one loop). ``max_token_length``: HF's (0: none)."""
        from .trainer import CPU_MERGES_PER_STEP, CpuTrainState

        state = CpuTrainState(word_counts, vocab_size, min_count, scaffold, max_token_length)
        return state, merges_per_step or CPU_MERGES_PER_STEP

    def codec(self, rules):
        """The device codec a tokenizer hands its batches to: None, the host encodes."""
        return None

    def synchronize(self, where: str) -> None:
        """Wait for the work queued here before a clock stops: the host has none queued."""


class DeviceBackend(Backend):
    """A CUDA device (CuPy arrays), or the Numba CUDA simulator (NumPy arrays)."""

    on_device = True

    def train_state(self, word_counts, vocab_size: int, min_count: int, scaffold: bool,
                    merges_per_step: int | None, launcher: str | None,
                    max_token_length: int = 0):
        from .trainer import DEVICE_MERGES_PER_STEP, DeviceTrainState

        step = merges_per_step or DEVICE_MERGES_PER_STEP
        state = DeviceTrainState(word_counts, vocab_size, min_count, scaffold, self.xp, step,
                                 launcher, max_token_length)
        return state, step

    def codec(self, rules):
        from .device import DeviceCodec

        return DeviceCodec(self, rules)

    def synchronize(self, where: str) -> None:
        if not self.simulated:  # the simulator runs each launch to its end: no sync counted
            from .kernels._cuda import synchronize

            synchronize(self.xp, where)


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def cuda_unavailable_reason() -> str | None:
    """Why a real CUDA device cannot be used here (before the probe), or None when it can."""
    try:
        import cupy
    except ImportError:
        return "cupy is not installed"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy raises its own CUDARuntimeError subclasses
        return f"no usable CUDA device or driver ({exc})"
    if count == 0:
        return "no CUDA device is visible"
    return None


_probe_outcome: dict[str, str | None] = {}


def probe_cuda() -> str | None:
    """Compile and run the probe kernels, once per process: None when they work, else why."""
    if "outcome" not in _probe_outcome:
        _probe_outcome["outcome"] = _run_probe()
    return _probe_outcome["outcome"]


def _run_probe() -> str | None:
    try:
        from .kernels import probe

        probe.compile_probe()
    except Exception as exc:  # whatever the stack raises is the cause to report
        return f"compiling a test kernel failed: {type(exc).__name__}: {_first_lines(exc)}"
    try:
        probe.run_probe()
    except Exception as exc:
        return (f"running the test kernels (a plain and a grid-sync kernel, which needs "
                f"libcudadevrt) failed: {type(exc).__name__}: {_first_lines(exc)}")
    from .kernels.cuda_kernels import enable_disk_cache

    enable_disk_cache()  # GPUBPE_CUDA_CACHE=1 only
    return None


def _first_lines(exc: Exception, n: int = 3) -> str:
    return " ".join(str(exc).strip().splitlines()[:n])


def library_versions() -> dict[str, str]:
    """Versions of the libraries the CUDA path depends on ('not installed' where absent)."""
    import numba

    versions = {"numpy": np.__version__, "numba": numba.__version__,
                "numba-cuda": _distribution_version("numba-cuda"), "cupy": "not installed",
                "driver": "unknown", "runtime": "unknown"}
    try:
        import cupy
    except ImportError:
        return versions
    versions["cupy"] = cupy.__version__
    for key, read in (("driver", cupy.cuda.runtime.driverGetVersion),
                      ("runtime", cupy.cuda.runtime.runtimeGetVersion)):
        try:
            number = int(read())
            versions[key] = f"{number // 1000}.{number % 1000 // 10}"
        except Exception:  # no driver: the version stays 'unknown'
            pass
    return versions


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions_line() -> str:
    return ", ".join(f"{name} {version}" for name, version in library_versions().items())


# The process that was handed a cuda backend first (its id), if any.
_cuda_used_in: dict[str, int] = {}
FORKED_AFTER_CUDA = (
    "backend='cuda' cannot run in this process: it was forked after its parent used CUDA, "
    "which a forked child cannot (CUDA's rule). Fix: start worker processes with "
    "multiprocessing's 'spawn' (torch DataLoader: multiprocessing_context='spawn'), or encode "
    "in them with tok.with_backend('cpu')")


def forked_after_cuda() -> bool:
    """Whether this process is a fork of one that was handed a cuda backend (the simulator's
    too, so that tests see what a device does): CUDA's state does not follow a fork."""
    return _cuda_used_in.get("pid", os.getpid()) != os.getpid()


def resolve_backend(name: str = "auto") -> Backend:
    """Turn a backend name into a :class:`Backend`, or raise a clear error."""
    if name not in BACKEND_NAMES:
        raise ConfigError(f"backend={name!r} is not one of {BACKEND_NAMES}")
    if name == "cpu":
        return Backend("cpu", np, "asked for the CPU")
    if forked_after_cuda():  # the simulator's too, so that tests see what a device does
        if name == "cuda":
            raise BackendUnavailable(FORKED_AFTER_CUDA)
        return Backend("cpu", np, "auto picked the CPU: this process was forked after its "
                                  "parent used CUDA, which a forked child cannot")
    if simulator_enabled():
        if name == "cuda":
            _cuda_used_in.setdefault("pid", os.getpid())
            return DeviceBackend("cuda", np, "the Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)",
                                 True)
        return Backend("cpu", np, "auto picked the CPU: the CUDA simulator is on; "
                                  "auto never picks it")
    reason = cuda_unavailable_reason() or probe_cuda()
    if reason is None:
        import cupy

        _cuda_used_in.setdefault("pid", os.getpid())
        return DeviceBackend("cuda", cupy, "a CUDA device is usable (the probe kernels ran)")
    if name == "cuda":
        raise BackendUnavailable(f"backend='cuda' cannot run here: {reason}. Versions: "
                                 f"{versions_line()}. Fix: {INSTALL_HINT}, with a numpy the "
                                 "numba-cuda release supports (see `gpubpe doctor`); or use "
                                 "backend='cpu'")
    logger.info("backend auto picked the CPU (%s); %s", reason, INSTALL_HINT)
    return Backend("cpu", np, f"auto picked the CPU: {reason}")


def resolve_training_backend(name: str = "auto") -> Backend:
    """The backend a training (word counts and merges) runs on: ``resolve_backend(name)``,
    except that "auto" trains on the CPU.

    Measured on an H200 node (bench/RESULTS.md, session 20): the device's merge loop took
    50.4 us a merge on the demo corpus (1.1 MB, 4,096 ids), the CPU's 12.8 on the same
    node; no corpus has been timed yet where the device's loop wins. ``backend="cuda"``
    trains on the device."""
    if name == "auto":
        return Backend("cpu", np, "auto trains on the CPU: faster than the device's merge "
                                  "loop wherever both were timed (bench/RESULTS.md)")
    return resolve_backend(name)


def available_backends() -> dict[str, str]:
    """Each backend name mapped to 'available' or the reason it is not."""
    if simulator_enabled():
        return {"cpu": "available", "cuda": "available (simulator: NUMBA_ENABLE_CUDASIM=1)"}
    reason = cuda_unavailable_reason() or probe_cuda()
    return {"cpu": "available", "cuda": "available" if reason is None else f"unavailable: {reason}"}


def device_facts() -> tuple[list[dict], str | None]:
    """Each visible CUDA device (name, memory, compute capability, SMs), or why none is listed."""
    try:
        import cupy
    except ImportError:
        return [], "cupy is not installed"
    try:
        devices = []
        for index in range(cupy.cuda.runtime.getDeviceCount()):
            props = cupy.cuda.runtime.getDeviceProperties(index)
            with cupy.cuda.Device(index):
                free, total = cupy.cuda.runtime.memGetInfo()
            name = props["name"]
            devices.append({"index": index,
                            "name": name.decode() if isinstance(name, bytes) else str(name),
                            "memory_bytes": int(total), "free_bytes": int(free),
                            "compute_capability": f"{props['major']}.{props['minor']}",
                            "sm_count": int(props["multiProcessorCount"])})
        return devices, None
    except Exception as exc:  # no driver, a lost device: report it, do not fail doctor
        return [], f"{type(exc).__name__}: {_first_lines(exc)}"


def kernel_cache_state() -> str:
    """Whether the CUDA kernels' builds are kept on disk (``GPUBPE_CUDA_CACHE``)."""
    if os.environ.get("GPUBPE_CUDA_CACHE") == "1":
        return ("on (GPUBPE_CUDA_CACHE=1): builds kept on disk, loaded by later processes; "
                "not yet tried on a GPU")
    return ("off: each process builds the CUDA kernels it launches; GPUBPE_CUDA_CACHE=1 keeps "
            "the builds on disk (opt-in, not yet tried on a GPU)")


def doctor_report() -> dict:
    """What ``gpubpe doctor`` prints: backends, devices, versions and the probe's result."""
    from ._pystr import str_kernels_state

    devices, devices_error = device_facts()
    unavailable = None if simulator_enabled() else cuda_unavailable_reason()
    if simulator_enabled():
        probe = "not run: the CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1)"
    elif unavailable:
        probe = f"not run: {unavailable}"
    else:
        probe = probe_cuda() or "ok: a small kernel and a grid-sync kernel compiled and ran"
    backends = available_backends()
    return {"versions": library_versions(), "backends": backends,
            "auto": resolve_backend("auto").reason, "probe": probe, "devices": devices,
            "devices_error": devices_error, "simulator": simulator_enabled(),
            "threads": thread_count(None),
            "str_kernels": str_kernels_state(),
            "device_bytes_cap": os.environ.get("GPUBPE_DEVICE_BYTES") or None,
            "kernel_cache": kernel_cache_state(),
            "hint": None if backends["cuda"].startswith("available") else INSTALL_HINT}
