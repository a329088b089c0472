"""First-call time of the CUDA path in a new process, with and without the kernels' disk cache.

Each process builds the kernels it launches (NVVM, then the driver's link); on the H200 lent
in session 20 that held ``gpubpe bench`` silent for over 60 s. ``GPUBPE_CUDA_CACHE=1`` keeps
each build on disk (``gpubpe.kernels.cuda_kernels.enable_disk_cache``). This runs the same
child three times in fresh processes: without the cache, with it empty (it builds and saves),
with it filled (it loads). Each child times its first ``encode_arrays`` on the CUDA backend
(2 MB of multiscript lines, a 4,096-id vocabulary) and its first 64 device merges (the
phased launcher: the persistent kernel is never cached), then the same calls again (warm).
Ids are checked equal to the CPU's. Needs a GPU; the numbers are the device's.

    python bench/kernel_cache_bench.py [--copies 12] [--simulator]

``--simulator``: a dry run of the script on Numba's CUDA simulator (give ``--copies 0.001``);
its numbers mean nothing (the simulator caches nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def child(copies: float) -> None:
    sys.path.insert(0, str(HERE))
    from encode_bench import MULTISCRIPT, sweep_vocabulary

    from gpubpe.backend import resolve_backend
    from gpubpe.trainer import train_from_counts

    lines = MULTISCRIPT.read_text(encoding="utf-8").splitlines(keepends=True)
    lines = (lines * int(copies + 1))[:max(int(len(lines) * copies), 1)]
    cpu = sweep_vocabulary("cpu")
    tok = sweep_vocabulary("cuda")
    counts = {line.encode(): 1 for line in lines[:400]}
    merges = 64 if len(counts) > 100 else 4
    times = {}
    for call in ("first", "warm"):
        start = time.perf_counter()
        ids = tok.encode_arrays(lines)
        times[f"encode_arrays, {call}"] = time.perf_counter() - start
        start = time.perf_counter()
        rules = train_from_counts(counts, 256 + merges, backend=resolve_backend("cuda"),
                                  launcher="phased",
                                  progress=False)
        times[f"{merges} device merges, {call}"] = time.perf_counter() - start
    expected = cpu.encode_arrays(lines)
    same = all(np.array_equal(a, b) for a, b in zip(ids, expected))
    same = same and rules.tolist() == train_from_counts(counts, 256 + merges,
                                                        progress=False).tolist()
    print(json.dumps({"times": times, "equal_to_cpu": bool(same)}))


def run_child(args, cached: bool) -> dict:
    """One child process (the CPU kernels' builds load from Numba's cache: the first child,
    not timed, writes them where none were)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1" if args.simulator else "0")
    env.pop("GPUBPE_CUDA_CACHE", None)
    if cached:
        env["GPUBPE_CUDA_CACHE"] = "1"
    out = subprocess.run([sys.executable, __file__, "--child", "--copies", str(args.copies)],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def remove_cuda_builds() -> int:
    """Delete the CUDA kernels' files from Numba's caches (``__pycache__`` beside the
    modules; the CPU kernels' stay): how many."""
    from gpubpe.kernels.cuda_kernels import all_cuda_kernels

    names = {kernel.py_func.__name__ for kernel, _ in all_cuda_kernels()}
    found = [path for path in (HERE.parent / "kernels").rglob("__pycache__/*.nb[ic]")
             if path.name.split(".")[1].rsplit("-", 1)[0] in names]
    for path in found:
        path.unlink()
    return len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=float, default=12.0,
                        help="multiscript.txt's lines this many times (12: ~2 MB)")
    parser.add_argument("--simulator", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.copies)
        return
    run_child(args, False)  # the CPU kernels' builds, where Numba's cache had none
    runs = {"no cache": run_child(args, False)}
    print(f"removed {remove_cuda_builds()} cached CUDA kernel files first")
    runs["cache empty (builds, saves)"] = run_child(args, True)
    runs["cache filled (loads)"] = run_child(args, True)
    names = list(next(iter(runs.values()))["times"])
    print("| process | " + " | ".join(f"{name}, s" for name in names) + " | ids equal CPU |")
    print("|---|" + "---:|" * len(names) + "---|")
    for label, run in runs.items():
        cells = " | ".join(f"{run['times'][name]:.2f}" for name in names)
        print(f"| {label} | {cells} | {run['equal_to_cpu']} |")


if __name__ == "__main__":
    main()
