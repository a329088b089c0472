"""encode_files' stages on the CPU: the reader alone, and the writer thread against writing
on the caller's thread (the loop before #17 part 4), side by side, files checked equal.

    python bench/stream_bench.py [--megabytes 48] [--threads 2]

Corpus: ``tests/data/multiscript.txt`` repeated, as a ``.txt`` of its lines and as
``.txt``/``.jsonl`` of ~2 KB documents; a 4,096-id vocabulary trained on the file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import gpubpe
from gpubpe.encode_files import (
    _read_ahead,
    _TokenFileWriter,
    encode_files,
    read_batches,
    token_dtype,
)

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "multiscript.txt"


def corpora(folder: Path, megabytes: float) -> dict[str, Path]:
    text = DATA.read_text(encoding="utf-8")
    reps = int(megabytes * 1e6 // len(text.encode())) + 1
    flat = text.replace("\n", " ")
    docs = [flat[i:i + 2000] for i in range(0, len(flat), 2000)] * reps
    paths = {"lines .txt": folder / "lines.txt", "2 KB .txt": folder / "docs.txt",
             "2 KB .jsonl": folder / "docs.jsonl"}
    paths["lines .txt"].write_text(text * reps, encoding="utf-8")
    paths["2 KB .txt"].write_text("".join(d + "\n" for d in docs), encoding="utf-8")
    paths["2 KB .jsonl"].write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n"
                                            for d in docs), encoding="utf-8")
    return paths


def caller_writes(tok, corpus: Path, out: Path, threads: int) -> None:
    """The loop before the writer thread: encode, then write, on one thread."""
    writer = _TokenFileWriter(out, token_dtype(tok.n_vocab))
    for batch, data in _read_ahead(read_batches([corpus]), lambda data: data):
        encoded = tok.encode_buffer(data, batch.doc_starts, batch.doc_ends, num_threads=threads)
        writer.append(encoded.ids, encoded.offsets)
    writer.commit()


def best_of(repeats: int, run) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gpubpe-stream-bench-"))
    paths = corpora(folder, args.megabytes)
    print("| reader alone | MB/s |\n|---|---:|")
    for name, path in paths.items():
        seconds = best_of(args.repeats, lambda path=path: sum(
            batch.doc_ends.size for batch in read_batches([path])))
        print(f"| {name} | {path.stat().st_size / 1e6 / seconds:.0f} |")
    tok = gpubpe.train(DATA.read_text(encoding="utf-8").splitlines(keepends=True), 4096,
                       progress=False, backend="cpu")
    corpus = paths["lines .txt"]
    runs = {"writes on the caller's thread (before)":
            lambda out: caller_writes(tok, corpus, out, args.threads),
            "writer thread (encode_files)":
            lambda out: encode_files(tok, [corpus], out, progress=False,
                                     num_threads=args.threads)}
    outputs = {name: folder / f"out{i}.npy" for i, name in enumerate(runs)}
    for name, run in runs.items():
        run(outputs[name])  # JIT warm-up, and the files to compare
    first, second = (np.fromfile(p, np.uint8) for p in outputs.values())
    if not np.array_equal(first, second):
        raise SystemExit("the two loops wrote different files")
    times = {name: [] for name in runs}
    for _ in range(args.repeats):  # alternating, cold word cache each time
        for name, run in runs.items():
            tok.clear_cache()
            times[name].append(best_of(1, lambda run=run, out=outputs[name]: run(out)))
    size = corpus.stat().st_size / 1e6
    base = min(next(iter(times.values())))
    print(f"\n{size:.0f} MB, {args.threads} threads, best of {args.repeats}\n")
    print("| loop | best s | MB/s | ratio |\n|---|---:|---:|---:|")
    for name, seconds in times.items():
        print(f"| {name} | {min(seconds):.2f} | {size / min(seconds):.0f} | "
              f"{base / min(seconds):.2f}x |")


if __name__ == "__main__":
    main()
