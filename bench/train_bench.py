"""Training benchmark: gpubpe's CPU path against HF tokenizers, side by side.

For each vocabulary size, each tool trains in its own child process (so peak
memory is its own) on the same corpus with the same settings; the merges are
checked identical before any time is reported. gpubpe's word counting and merge
loop are timed apart, and the Numba JIT cost is measured apart by a first
child that trains on a tiny corpus (compiled kernels are cached on disk, so a
user pays it once).

    python bench/train_bench.py [--corpus english|PATH] [--sizes 8192 32000] [--threads N]
                                [--repeats 3] [--pattern gpt2]

``--pattern`` names the split (gpt2, cl100k, deepseek...); HF gets the pre-tokenizer that
gpubpe exports for it (``gpt2``: ByteLevel; the others: their Split steps, then ByteLevel).
``--normalizer NFKC`` and ``--max-token-length N`` give both tools that normalizer / limit
(HF: its normalizer of that name, BpeTrainer's ``max_token_length``); no Scaffold row then
with a normalizer.

``--merge-loop`` times the merge loop alone (words counted once, then
``train_from_counts``) for the CPU step and the device step with each launcher,
and counts the device's launches and syncs per merge (``gpubpe.device_stats``).
In the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) only the counts mean
anything; use ``--max-bytes`` to keep its input tiny:

    python bench/train_bench.py --merge-loop --corpus english --sizes 32000
    NUMBA_ENABLE_CUDASIM=1 python bench/train_bench.py --merge-loop --max-bytes 3000 \\
        --sizes 556 --step 64
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent


def corpus_path(name: str) -> Path:
    path = Path(name)
    if path.exists():
        return path
    built = HERE / "corpora" / f"{name}.txt"
    if not built.exists():
        subprocess.run([sys.executable, str(HERE / "corpora.py"), name], check=True)
    return built


def best_of(repeats: int, tool: str, corpus: Path, size: int, threads: int,
            pattern: str = "gpt2") -> dict:
    """The fastest of ``repeats`` runs (this 2-core machine is noisy; the minimum is stable)."""
    runs = [run_child(tool, corpus, size, threads, pattern) for _ in range(repeats)]
    return min(runs, key=lambda report: report["seconds"])


def run_child(tool: str, corpus: Path, size: int, threads: int, pattern: str = "gpt2",
              **env_extra: str) -> dict:
    """Run one training in a child; returns its JSON report plus peak RSS (MiB)."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads),
               **env_extra)
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", tool, "--corpus", str(corpus),
         "--sizes", str(size), "--threads", str(threads), "--pattern", pattern],
        stdout=subprocess.PIPE, env=env, text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"{tool} child failed with status {status}")
    report = json.loads(output)
    report["peak_rss_mib"] = usage.ru_maxrss / 1024
    return report


def options() -> dict:
    """The training options both tools get (``--normalizer``, ``--max-token-length``), as the
    parent passed them to its children."""
    return json.loads(os.environ.get("TRAIN_BENCH_OPTIONS", "{}"))


def child(tool: str, corpus: Path, size: int, threads: int, pattern: str) -> None:
    if tool in ("gpubpe", "scaffold"):
        import gpubpe  # loading the cached JIT code is timed by the "jit" child, not here

        started = time.perf_counter()
        tok = gpubpe.train([str(corpus)], size, progress=False, num_threads=threads,
                           scaffold=tool == "scaffold", pattern=pattern, **options())
        merges = [[a.hex(), b.hex()] for a, b in tok.merges]
        report = {"seconds": time.perf_counter() - started,
                  "counting": tok.metadata["seconds_counting"],
                  "merging": tok.metadata["seconds_merging"]}
    elif tool == "jit":
        started = time.perf_counter()
        import gpubpe

        gpubpe.train(["a warm-up corpus, a warm-up corpus"], 260, progress=False)
        merges, report = [], {"seconds": time.perf_counter() - started}
    else:
        started = time.perf_counter()
        merges, report = hf_train(corpus, size, pattern), {}
        report["seconds"] = time.perf_counter() - started
    report["merges"] = merges
    print(json.dumps(report))


def hf_train(corpus: Path, size: int, pattern: str = "gpt2") -> list[list[str]]:
    from tokenizers import Tokenizer, pre_tokenizers, trainers

    from gpubpe._reference import gpt2_byte_to_unicode
    from gpubpe.interop import _hf_pre_tokenizer

    given = options()
    normalizer = given.get("normalizer") and {"type": given["normalizer"]}
    hf = Tokenizer.from_str(json.dumps({"version": "1.0", "pre_tokenizer": _hf_pre_tokenizer(
        pattern), "normalizer": normalizer, "model": {"type": "BPE", "vocab": {},
                                                      "merges": []}}))
    limit = {"max_token_length": given["max_token_length"]} \
        if given.get("max_token_length") else {}
    trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=0, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), **limit)
    hf.train([str(corpus)], trainer)
    byte_of = {c: b for b, c in gpt2_byte_to_unicode().items()}
    merges = json.loads(hf.to_str())["model"]["merges"]
    pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    return [[bytes(byte_of[c] for c in part).hex() for part in pair] for pair in pairs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="english")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 32000])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3, help="best of N runs (default: 3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--merge-loop", action="store_true",
                        help="time the merge loop alone, CPU and device, with launch/sync counts")
    parser.add_argument("--max-bytes", type=int, help="--merge-loop: use the corpus' first bytes")
    parser.add_argument("--step", type=int, help="--merge-loop: merges per step")
    parser.add_argument("--launchers", nargs="+", default=["cooperative", "phased"],
                        choices=["cooperative", "phased"],
                        help="--merge-loop: the device's launchers to time (default: both)")
    parser.add_argument("--pattern", default="gpt2", help="the split's name (default: gpt2)")
    parser.add_argument("--normalizer", choices=["NFC", "NFD", "NFKC", "NFKD"],
                        help="both tools normalize each document so")
    parser.add_argument("--max-token-length", type=int, help="both tools get this limit")
    args = parser.parse_args()
    given = {key: value for key, value in (("normalizer", args.normalizer),
                                           ("max_token_length", args.max_token_length)) if value}
    if given and not args.child:
        os.environ["TRAIN_BENCH_OPTIONS"] = json.dumps(given)  # the children read it
    corpus = corpus_path(args.corpus)
    if args.merge_loop:
        return merge_loop(corpus, args.sizes, args.max_bytes, args.step, args.repeats,
                          args.launchers)
    if args.child:
        return child(args.child, corpus, args.sizes[0], args.threads, args.pattern)
    with tempfile.TemporaryDirectory() as empty_cache:
        cold = run_child("jit", corpus, 260, args.threads, NUMBA_CACHE_DIR=empty_cache)
    warm = run_child("jit", corpus, 260, args.threads)
    rows = []
    for size in args.sizes:
        ours = best_of(args.repeats, "gpubpe", corpus, size, args.threads, args.pattern)
        theirs = best_of(args.repeats, "hf", corpus, size, args.threads, args.pattern)
        if ours["merges"] != theirs["merges"]:
            raise SystemExit(f"vocab {size}: merges differ from HF; no timing reported")
        scaffold = ours if args.normalizer else \
            best_of(args.repeats, "scaffold", corpus, size, args.threads, args.pattern)
        rows.append({"vocab_size": size, "merges": len(ours["merges"]),
                     "gpubpe_s": ours["seconds"], "counting_s": ours["counting"],
                     "merging_s": ours["merging"], "hf_s": theirs["seconds"],
                     "speedup": theirs["seconds"] / ours["seconds"],
                     "gpubpe_rss_mib": ours["peak_rss_mib"], "hf_rss_mib": theirs["peak_rss_mib"],
                     "scaffold_s": scaffold["seconds"],
                     "scaffold_over_bpe": scaffold["seconds"] / ours["seconds"]})
    print(f"pattern: {args.pattern}; options: {given or 'none'}")
    print_table(corpus, args.threads, (cold["seconds"], warm["seconds"]), rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def print_table(corpus: Path, threads: int, jit_seconds: tuple, rows: list[dict]) -> None:
    import tokenizers

    import gpubpe

    print(f"corpus: {corpus.name} ({corpus.stat().st_size / 1e6:.1f} MB); machine: "
          f"{platform.machine()}, {os.cpu_count()} cores; threads: {threads}; date: {date.today()}")
    print(f"gpubpe {gpubpe.__version__}, tokenizers {tokenizers.__version__}; merges identical "
          f"to HF at every size; best of the repeats. Numba JIT, not included below: {jit_seconds[0]:.1f} s to "
          f"compile once (empty cache), {jit_seconds[1]:.2f} s per process to load the cache")
    print()
    print("| vocab | merges | gpubpe s (count + merge) | HF s | speedup | gpubpe peak MiB "
          "| HF peak MiB | Scaffold-BPE s | Scaffold / BPE |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['vocab_size']} | {r['merges']} | {r['gpubpe_s']:.2f} ({r['counting_s']:.2f} + "
              f"{r['merging_s']:.2f}) | {r['hf_s']:.2f} | {r['speedup']:.2f}x | "
              f"{r['gpubpe_rss_mib']:.0f} | {r['hf_rss_mib']:.0f} | {r['scaffold_s']:.2f} | "
              f"{r['scaffold_over_bpe']:.2f} |")


def merge_loop(corpus: Path, sizes: list[int], max_bytes: int | None, step: int | None,
               repeats: int, launchers: list[str]) -> None:
    """Per-merge time, launches and syncs of the merge loop on each backend available."""
    import numba

    import gpubpe
    from gpubpe.backend import resolve_backend
    from gpubpe.errors import BackendUnavailable
    from gpubpe.pretokenize import count_words
    from gpubpe.trainer import train_from_counts

    if corpus.suffix == ".gz":  # a large corpus carried to a GPU node, compressed
        import gzip

        with gzip.open(corpus, "rt", encoding="utf-8", errors="replace") as file:
            text = file.read()
    else:
        text = corpus.read_text(encoding="utf-8", errors="replace")
    docs = text[:max_bytes].splitlines(True) if max_bytes else [text]
    word_counts = count_words(docs)
    simulated = bool(numba.config.ENABLE_CUDASIM)
    runs = [("cpu", None, None)]
    try:
        runs += [("cuda", launcher, resolve_backend("cuda")) for launcher in launchers]
    except BackendUnavailable as error:
        print(f"cuda: {error}")
    print(f"corpus: {corpus.name}{f' (first {max_bytes} bytes)' if max_bytes else ''}, "
          f"{len(word_counts)} distinct words; machine: {platform.machine()}, "
          f"{os.cpu_count()} cores; date: {date.today()}; simulator: {simulated}")
    print("| backend | launcher | vocab | merges | per merge | launches / merge | syncs / merge |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for size in sizes:
        expected = None
        for name, launcher, backend in runs:
            kwargs = dict(progress=False, backend=backend, launcher=launcher,
                          merges_per_step=step)
            train_from_counts({b"warm up": 2, b"up": 1}, 260, **kwargs)  # JIT, apart
            best = float("inf")
            for _ in range(1 if (simulated and name == "cuda") else repeats):
                with gpubpe.device_stats() as stats:
                    started = time.perf_counter()
                    rules = train_from_counts(word_counts, size, **kwargs)
                    best = min(best, time.perf_counter() - started)
            expected = rules if expected is None else expected
            if rules.tolist() != expected.tolist():
                raise SystemExit(f"{name}/{launcher}: rules differ from the CPU's; no timing")
            per = stats.per(len(rules))
            timing = ("n/a (simulator)" if simulated and name == "cuda"
                      else f"{1e6 * best / max(len(rules), 1):.1f} us")
            print(f"| {name} | {launcher or '-'} | {size} | {len(rules)} | {timing} | "
                  f"{per['launches']:.3f} | {per['syncs']:.4f} |")


if __name__ == "__main__":
    main()
