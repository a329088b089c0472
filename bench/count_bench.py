"""Word counting for training, CPU against the device (issue 17: 308 MB at >= 2 GB/s).

Writes a corpus file of ``--megabytes`` (the demo text repeated, or ``--corpus``),
then counts it with ``gpubpe.pretokenize.count_words`` on the CPU (every core)
and with ``backend="cuda"``; the counts (words, counts and order) are checked
equal before any time is kept. Rows:

- ``file -> counts``: the whole call, host reader and copies included;
- ``device batches -> counts``: the batches already on the device, only
  ``DeviceWordCounter.add`` + ``result`` timed (the device's own speed).

Each is warmed up first (JIT); ``result()`` reads the counts back, so the
device is synchronised before a clock stops. Under the simulator
(``NUMBA_ENABLE_CUDASIM=1``, tiny ``--megabytes``) only the counts mean anything.

    python bench/count_bench.py [--corpus FILE] [--megabytes 308] [--pattern gpt2]
                                [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import gpubpe
from gpubpe import pretokenize
from gpubpe.backend import resolve_backend
from gpubpe.kernels._cuda import to_device
from gpubpe.kernels.encode.pretok_cuda import DeviceWordCounter


def write_corpus(source: Path, megabytes: float, folder: Path) -> Path:
    """``source`` repeated up to ``megabytes`` (whole lines), as one file."""
    text = source.read_bytes()
    path = folder / "corpus.txt"
    with path.open("wb") as out:
        written = 0
        while written < megabytes * 1e6:
            piece = text[:max(0, int(megabytes * 1e6) - written)]
            piece = piece[:piece.rfind(b"\n") + 1] or piece
            out.write(piece)
            written += len(piece)
    return path


def timed(run, repeats: int):
    """(best seconds, last result, device stats of the last run)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        with gpubpe.device_stats() as stats:
            started = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - started)
    return best, result, stats


def device_batches(path: Path, xp):
    """The corpus's batches on the device, as ``count_words`` cuts them (no special tokens)."""
    batches = []
    for batch in pretokenize.iter_batches([path], batch_bytes=pretokenize._DEVICE_BATCH_BYTES):
        starts, ends = pretokenize.segments(batch, None)
        batches.append((to_device(xp, np.frombuffer(batch.data, dtype=np.uint8)),
                        to_device(xp, starts, np.int64), to_device(xp, ends, np.int64)))
    return batches


def count_on_device(batches, pattern: str, xp):
    scanner = pretokenize.scanner_for(pretokenize.resolve_pattern(pattern))
    counter = DeviceWordCounter(scanner, pretokenize._device_scanner_table(xp, scanner), xp)
    for batch in batches:
        counter.add(*batch)
    return counter.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path,
                        default=Path(gpubpe.__file__).parent / "data" / "demo.txt")
    parser.add_argument("--megabytes", type=float, default=308)
    parser.add_argument("--pattern", default="gpt2")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    xp = resolve_backend("cuda").xp  # raises, naming the reason, where no device is usable
    with tempfile.TemporaryDirectory() as folder:
        path = write_corpus(args.corpus, args.megabytes, Path(folder))
        size = path.stat().st_size
        for backend in ("cpu", "cuda"):  # warm up: JIT compiles
            pretokenize.count_words([args.corpus.read_bytes()[:4000]], args.pattern,
                                    backend=backend)
        cpu_s, cpu, _ = timed(lambda: pretokenize.count_words([path], args.pattern),
                              args.repeats)
        gpu_s, gpu, stats = timed(
            lambda: pretokenize.count_words([path], args.pattern, backend="cuda"), args.repeats)
        if list(gpu.items()) != list(cpu.items()):
            raise SystemExit("device counts differ from the CPU's: no time kept")
        batches = device_batches(path, xp)
        dev_s, _, dev_stats = timed(lambda: count_on_device(batches, args.pattern, xp),
                                    args.repeats)
    n_batches = len(batches)
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, {args.megabytes:g} MB of {args.corpus.name}, "
          f"pattern {args.pattern}, {len(cpu)} distinct words, {n_batches} batches, "
          f"best of {args.repeats}")
    print("| what | seconds | MB/s | vs CPU | syncs | launches |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = [("CPU, file -> counts", cpu_s, None), ("cuda, file -> counts", gpu_s, stats),
            ("cuda, device batches -> counts", dev_s, dev_stats)]
    for name, seconds, counted in rows:
        syncs = counted.syncs if counted else ""
        launches = counted.n_launches if counted else ""
        print(f"| {name} | {seconds:.3f} | {size / seconds / 1e6:.1f} | "
              f"{cpu_s / seconds:.2f}x | {syncs} | {launches} |")


if __name__ == "__main__":
    main()
