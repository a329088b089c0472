"""gpubpe.dask.encode_files on a LocalCluster against single-process encode_files, same cores.

Corpus (no download): the first ``--megabytes`` of this interpreter's Python
sources (standard library ~31 MB, then installed packages) and
``tests/data/multiscript.txt`` (1.2 MB, English + CJK + more), cut into
``--files`` files on line boundaries.
Tokenizer: trained here on the first ``--train-mb`` of it (``--vocab`` tokens). Both runs start with a cold word
cache (the single-process tokenizer's is cleared; every Dask job scatters a
fresh tokenizer), after a warm-up run that loads the Numba JIT everywhere.
Outputs are checked byte for byte equal before any time is reported. Runs
alternate (single, dask, single, dask, ...); the best of ``--repeats`` each.
Besides wall time, CPU seconds: this process's for the single run; the
workers' processes' plus this one's (client and scheduler) for a Dask run. On
a shared machine wall times swing with the load; CPU seconds say what the
distributed run costs over the single one on the same cores.

    python bench/dask_bench.py [--megabytes 128] [--files 8] [--split-mb 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sysconfig
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import gpubpe

HERE = Path(__file__).resolve().parent
TEXT = HERE.parent / "tests" / "data" / "multiscript.txt"


def make_corpus(folder: Path, files: int, megabytes: float = 32) -> list[Path]:
    """Python sources (the standard library's, then the installed packages', sorted paths)
    and the multiscript text, the first ``megabytes`` of them as ``files`` files of about
    equal size: distinct text, so no run is all cache hits."""
    paths = sysconfig.get_paths()
    sources = sorted(p for p in Path(paths["stdlib"]).rglob("*.py")
                     if "site-packages" not in p.parts)
    sources += sorted(Path(paths["purelib"]).rglob("*.py"))
    chunks, size = [TEXT.read_bytes()], 0
    for source in sources:
        if size >= megabytes * 1e6:
            break
        chunks.append(source.read_bytes())
        size += len(chunks[-1])
    data = b"".join(chunks[1:]) + chunks[0]
    paths, start = [], 0
    for index in range(files):
        end = len(data) * (index + 1) // files
        end = data.find(b"\n", end) + 1 if index + 1 < files else len(data)
        path = folder / f"part{index}.txt"
        path.write_bytes(data[start:end])
        paths.append(path)
        start = end
    return paths


def time_single(tok, paths, out: Path, threads: int) -> tuple[float, float]:
    """(wall s, CPU s of this process) of one single-process run."""
    tok.clear_cache()
    started, cpu = time.perf_counter(), time.process_time()
    gpubpe.encode_files(tok, paths, out, num_threads=threads, progress=False)
    return time.perf_counter() - started, time.process_time() - cpu


def time_dask(tok, paths, out: Path, client, split_bytes: int) -> tuple[float, float]:
    """(wall s, CPU s of the workers' processes and of this one, which holds the scheduler)."""
    import gpubpe.dask as gd

    before = client.run(time.process_time)
    started, cpu = time.perf_counter(), time.process_time()
    gd.encode_files(tok, paths, out, client=client, split_bytes=split_bytes, overwrite=True)
    wall, here = time.perf_counter() - started, time.process_time() - cpu
    after = client.run(time.process_time)
    return wall, here + sum(after[w] - before[w] for w in after)


def main() -> None:
    import dask
    from distributed import Client, LocalCluster

    import gpubpe.dask as gd

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--megabytes", type=float, default=128.0)
    parser.add_argument("--train-mb", type=float, default=4.0)
    parser.add_argument("--split-mb", type=float, default=16.0)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    split_bytes = int(args.split_mb * (1 << 20))
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        paths = make_corpus(folder, args.files, args.megabytes)
        total = sum(p.stat().st_size for p in paths)
        head = paths[0].read_bytes()[:int(args.train_mb * 1e6)].split(b"\n")
        tok = gpubpe.train([line + b"\n" for line in head], args.vocab, progress=False)
        times = {"single": []}
        pairs: dict[str, list] = {}  # (single, dask) timed back to back: a ratio per pair
        time_single(tok, paths[:1], folder / "warm.npy", args.workers)  # JIT loaded here
        for environ in ("Dask's default", "gpubpe.dask.worker_config()"):
            config = gd.worker_config() if environ.startswith("gpubpe") else {}
            with dask.config.set(config), \
                    LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                 dashboard_address=None) as cluster, Client(cluster) as client:
                time_dask(tok, paths[:1], folder / "warm", client, split_bytes // 4)  # JIT
                times[environ] = []
                for _ in range(args.repeats):
                    times["single"].append(
                        time_single(tok, paths, folder / "single.npy", args.workers))
                    times[environ].append(
                        time_dask(tok, paths, folder / "sharded", client, split_bytes))
                    pairs.setdefault(environ, []).append((times["single"][-1],
                                                          times[environ][-1]))
                check_equal(folder / "single.npy", folder / "sharded")
        report(args, total, split_bytes, times)
        report_pairs(pairs)


def check_equal(single: Path, sharded: Path) -> None:
    ids, offsets = gpubpe.load_tokens(single)
    shard_ids, shard_offsets = gpubpe.load_tokens(sharded)
    if np.asarray(shard_ids).tobytes() != np.asarray(ids).tobytes() \
            or shard_offsets.tobytes() != np.asarray(offsets).tobytes():
        raise SystemExit("the sharded output differs from the single-process one")


def report(args, total: int, split_bytes: int, times: dict[str, list]) -> None:
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; corpus {total / 1e6:.1f} MB in {args.files} files, "
          f"split {split_bytes / 2**20:g} MiB, vocab {args.vocab}")
    print("| run | best wall s | MB/s | wall vs single | best CPU s | CPU: single / this | "
          "all runs (wall/CPU s) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    wall_single = min(w for w, _ in times["single"])
    cpu_single = min(c for _, c in times["single"])
    for name, runs in times.items():
        label = (f"single-process encode_files, {args.workers} threads" if name == "single" else
                 f"gpubpe.dask, LocalCluster({args.workers} workers x 1 thread), {name} env")
        wall, cpu = min(w for w, _ in runs), min(c for _, c in runs)
        print(f"| {label} | {wall:.2f} | {total / 1e6 / wall:.1f} | {wall_single / wall:.2f}x | "
              f"{cpu:.2f} | {cpu_single / cpu:.2f}x | "
              f"{', '.join(f'{w:.2f}/{c:.2f}' for w, c in runs)} |")


def report_pairs(pairs: dict[str, list]) -> None:
    """Single / Dask per back-to-back pair: the median says more than the bests under load."""
    print("\n| Dask env | wall single/dask per pair | median | CPU single/dask per pair | "
          "median |")
    print("|---|---|---:|---|---:|")
    for name, runs in pairs.items():
        walls = [single[0] / dask[0] for single, dask in runs]
        cpus = [single[1] / dask[1] for single, dask in runs]
        print(f"| {name} | {', '.join(f'{r:.2f}' for r in walls)} | "
              f"**{np.median(walls):.2f}x** | {', '.join(f'{r:.2f}' for r in cpus)} | "
              f"{np.median(cpus):.2f}x |")


if __name__ == "__main__":
    main()
