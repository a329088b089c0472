"""What many cores would pay on the calling thread: a paper bound for hosts we lack.

Issue 18 asks for 10x on 16 cores over one thread (short documents). With no such host,
this runs ``count_words``, ``encode_arrays`` (cold cache) and ``decode_batch`` on the
sweep's lines (``encode_bench.thread_sweep``'s: tests/data/multiscript.txt, varied) with
the thread count forced past this machine's cores (``thread_count`` patched: the shares,
parts and merges of N threads run, taking turns on the cores there are), and measures the
CPU time the calling thread spends in the steps only it runs. Those steps do not shrink
with more cores, so ``one-thread wall / their sum`` bounds the speedup on N cores,
whatever the parallel kernels do (a bound, not a prediction: memory bandwidth and the
cores' shared caches cost more).

    python bench/serial_steps.py [--megabytes 8] [--threads 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from encode_bench import MULTISCRIPT, machine, sweep_vocabulary

from gpubpe import _pystr, _threads, pretokenize, tokenizer

# The steps only the calling thread runs, by operation: (module or class, function name).
# count_words: taking the corpus's items and cutting them into shares, adding each
# chunk's words into the tally, the dict at the end. encode_arrays: the pieces of the
# batch, the distinct new words' glue, the admission to the cache (or, in parts, its
# slots), the list's UTF-8 (each
# less the calling thread's own part of the work all threads share: PARALLEL).
# decode_batch: making the strs (PyUnicode_New, under the GIL). count_words of a file:
# reading its batches and cutting them (until session 14; now the tasks read their own
# byte ranges), the adds and the dict.
COUNT_FILE = "count_words (the lines as one .txt file)"
SERIAL_STEPS = {
    "count_words (list of str lines)": [
        (pretokenize, "_item_chunks"), (pretokenize._ShareSizes, "shares"),
        (pretokenize._WordTally, "add"), (pretokenize._WordTally, "as_dict")],
    COUNT_FILE: [
        (pretokenize, "_read_lines"), (pretokenize._WordCounting, "batch_tasks"),
        (pretokenize._WordTally, "add"), (pretokenize._WordTally, "as_dict")],
    "encode_arrays (lines, cold cache)": [
        (tokenizer.Tokenizer, "_pieces"), (tokenizer, "_distinct_new_words"),
        (tokenizer, "_admit_new_words"), (tokenizer, "admission_slots"),
        (tokenizer, "utf8_documents")],
    "decode_batch (the lines' ids, to str)": [(_pystr, "new_texts")],
}
# Work that runs on every thread, the calling thread taking a share like the others: its
# time there is not serial (inside the steps above, or around them).
PARALLEL = [(tokenizer, "new_words_of_part"), (tokenizer, "word_parts"),
            (tokenizer, "global_word_slots"), (_pystr, "write_str_utf8"),
            (_pystr, "str_utf8_bound"), (pretokenize._ChunkShares, "_counted"),
            (pretokenize._WordCounting, "_counted_share"),
            (pretokenize, "_with_known_words"),
            (tokenizer, "word_refs_scan_cpu"), (tokenizer, "count_piece_tokens_cpu"),
            (tokenizer, "write_piece_tokens_cpu"), (tokenizer, "encode_word_list_cpu"),
            (tokenizer, "cache_admit_part"),
            (_pystr, "text_plan"), (_pystr, "fill_claimed")]
ALL_ELSE = "the rest of its time (submitting, waiting, glue)"
# Serial steps whose PARALLEL calls inside run on the calling thread alone (count_words'
# shares read a sample of str headers with the kernel that encode_arrays runs in parts):
# until session 14 those reads were counted as parallel, the bound too high (bench/RESULTS.md).
ALONE_INSIDE = {"shares"}


@contextmanager
def _wrapping(wrapped, timed):
    """Each ``(owner, name, flag)`` of ``wrapped`` replaced by ``timed(name, function,
    flag)`` for the ``with`` block, then put back."""
    wrapped = [step for step in wrapped if step[1] in step[0].__dict__]  # an older commit's
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in wrapped]
    try:
        for (owner, name, function), (_, _, flag) in zip(saved, wrapped):
            setattr(owner, name, timed(name, function, flag))
        yield
    finally:
        for owner, name, function in saved:
            setattr(owner, name, function)


class CallerClock:
    """CPU seconds the calling thread spends in the wrapped serial steps (generators: in
    their ``next``), less the wrapped calls inside them; a serial step inside parallel
    work (a merge's adds on the calling thread when it ended a chunk's last share) is
    not counted. Other threads are not counted."""

    def __init__(self, serial, parallel):
        self.seconds = {name: 0.0 for _, name in serial}
        self.parallel_seconds = 0.0  # in PARALLEL work, on this thread
        self.wrapped = [(owner, name, False) for owner, name in serial] + \
            [(owner, name, True) for owner, name in parallel]
        self.frames: list[list] = []  # [name, parallel, start, time in wrapped calls]

    def wrapping(self):
        return _wrapping(self.wrapped, lambda name, function, parallel:
                         self._timed(name, function, parallel))

    def _enter(self, name: str, parallel: bool) -> None:
        self.frames.append([name, parallel, time.thread_time(), 0.0])

    def _exit(self) -> None:
        name, parallel, start, inner = self.frames.pop()
        spent = time.thread_time() - start
        if not parallel and not any(frame[1] for frame in self.frames):
            self.seconds[name] += spent - inner
        if parallel and not any(frame[1] for frame in self.frames):
            self.parallel_seconds += spent
        if self.frames:
            self.frames[-1][3] += spent

    def _timed(self, name, function, parallel):
        caller = threading.main_thread()

        def generator(*args, **kwargs):
            items = function(*args, **kwargs)
            while True:
                if threading.current_thread() is not caller:
                    yield from items
                    return
                self._enter(name, parallel)
                try:
                    item = next(items)
                except StopIteration:
                    return
                finally:
                    self._exit()
                yield item

        def plain(*args, **kwargs):
            if threading.current_thread() is not caller or parallel and any(
                    frame[0] in ALONE_INSIDE for frame in self.frames):
                return function(*args, **kwargs)
            self._enter(name, parallel)
            try:
                return function(*args, **kwargs)
            finally:
                self._exit()

        return generator if inspect.isgeneratorfunction(function) else plain


# count_words' share tasks run Python between their kernels (str -> UTF-8 set-up, the
# segments, the calls), holding the GIL: on many threads those parts take turns, so
# their sum is serial too. Timed on every thread: the tasks, less the nogil kernels in
# them (NumPy calls counted as holding it).
TASKS = {"count_words (list of str lines)": [
    (pretokenize._WordCounting, "_counted_items"), (pretokenize, "_merged_runs")],
    COUNT_FILE: [(pretokenize._WordCounting, "_counted_share"),
                 (pretokenize._WordCounting, "_counted_range"), (pretokenize, "_merged_runs")]}
NOGIL_KERNELS = [(pretokenize, "count_scanned_words"), (pretokenize, "packed_words"),
                 (pretokenize, "packed_bytes"), (pretokenize, "count_str_share"),
                 (pretokenize, "count_line_share"),
                 (pretokenize, "add_words"), (_pystr, "str_utf8_bound"),
                 (pretokenize, "line_ends"),
                 (pretokenize, "_range_lines"),
                 (_pystr, "write_str_utf8")]


class TaskClock:
    """CPU seconds every thread spends in the wrapped tasks, less the wrapped nogil
    kernels inside them: the tasks' GIL-held time."""

    def __init__(self, tasks):
        self.wrapped = [(owner, name, False) for owner, name in tasks] + \
            [(owner, name, True) for owner, name in NOGIL_KERNELS]
        self.held = 0.0
        self.lock = threading.Lock()
        self.local = threading.local()

    def wrapping(self):
        return _wrapping(self.wrapped, lambda _, function, kernel: self._timed(function, kernel))

    def _timed(self, function, kernel):
        def timed(*args, **kwargs):
            frames = self.local.__dict__.setdefault("frames", [])
            if kernel and not frames:  # a kernel outside the tasks: not theirs
                return function(*args, **kwargs)
            frames.append([time.thread_time(), 0.0])
            try:
                return function(*args, **kwargs)
            finally:
                start, inner = frames.pop()
                spent = time.thread_time() - start
                if frames:
                    frames[-1][1] += spent
                if not kernel:
                    with self.lock:
                        self.held += spent - inner

        return timed


@contextmanager
def forced_threads(pool: int | None = None):
    """``thread_count`` of pretokenize and tokenizer without the cap at the cores; with
    ``pool``, the pool threads capped at that (the shares, parts and merges are those of
    the threads forced, run by fewer: their steps' CPU time without the cache and
    scheduler costs of many threads taking turns on few cores)."""
    check = _threads.check_num_threads
    saved = pretokenize.thread_count, tokenizer.thread_count, _threads.helper_pool
    uncapped = lambda n: check(n) or int(n)  # noqa: E731
    pretokenize.thread_count = tokenizer.thread_count = uncapped
    if pool is not None:
        _threads.helper_pool = _pystr.helper_pool = lambda n: saved[2](min(n, pool))
    try:
        yield
    finally:
        pretokenize.thread_count, tokenizer.thread_count, _threads.helper_pool = saved
        _pystr.helper_pool = saved[2]


def sweep_lines(megabytes: float) -> list[str]:
    lines = MULTISCRIPT.read_text(encoding="utf-8").splitlines(keepends=True)
    copies = int(megabytes * 1e6 / MULTISCRIPT.stat().st_size) + 1
    return [line if r == 0 else line.replace(" ", f" {r % 97} ", 1)
            for r in range(copies) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=8.0)
    parser.add_argument("--threads", type=int, default=16, help="threads forced (default 16)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default="", help="the operations whose name holds this")
    parser.add_argument("--pool", type=int, default=None,
                        help="pool threads really run (default: the threads forced, less one)")
    args = parser.parse_args()
    docs = sweep_lines(args.megabytes)
    folder = tempfile.TemporaryDirectory(prefix="gpubpe-serial-")  # removed at exit
    lines_file = Path(folder.name) / "lines.txt"
    lines_file.write_text("".join(docs), encoding="utf-8")
    n_bytes = sum(len(d.encode()) for d in docs)
    tok = sweep_vocabulary()
    line_ids = tok.encode_arrays(docs)

    def encode(threads):
        tok.clear_cache()
        return tok.encode_arrays(docs, num_threads=threads)

    operations = {
        "count_words (list of str lines)":
            lambda t: pretokenize.count_words(docs, num_threads=t),
        COUNT_FILE: lambda t: pretokenize.count_words(lines_file, num_threads=t),
        "encode_arrays (lines, cold cache)": encode,
        "decode_batch (the lines' ids, to str)":
            lambda t: tok.decode_batch(line_ids, num_threads=t),
    }
    print(f"\n### Steps on the calling thread: {n_bytes / 1e6:.1f} MB in {len(docs):,} lines, "
          f"{args.threads} threads forced on {machine()}"
          f"{'' if args.pool is None else f' (their pool run by {args.pool})'}, "
          f"medians of {args.repeats}\n")
    print(f"| operation | one thread, wall ms | calling thread's own steps at {args.threads} "
          "threads, CPU ms | their sum | bound on that many cores |")
    print("|---|---:|---|---:|---:|")
    with forced_threads(args.pool):
        for label, run in operations.items():
            if args.only not in label:
                continue
            one = _median_wall(run, 1, args.repeats)
            steps = _median_steps(run, args.threads, args.repeats, SERIAL_STEPS[label],
                                  TASKS.get(label, []))
            total = sum(steps.values())
            named = " + ".join(f"{name} {ms:.1f}" for name, ms in steps.items())
            print(f"| {label} | {one:.1f} | {named} | {total:.1f} | <= {one / total:.1f}x |")


def _median_wall(run, threads: int, repeats: int) -> float:
    run(threads)
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(threads)
        walls.append(time.perf_counter() - start)
    return float(np.median(walls)) * 1e3


def _median_steps(run, threads: int, repeats: int, serial, tasks) -> dict[str, float]:
    run(threads)
    rounds = []
    for _ in range(repeats):
        clock, task_clock = CallerClock(serial, PARALLEL), TaskClock(tasks)
        with clock.wrapping(), task_clock.wrapping():
            start = time.thread_time()
            run(threads)
            spent = time.thread_time() - start
        clock.seconds[ALL_ELSE] = spent - clock.parallel_seconds - sum(clock.seconds.values())
        if tasks:
            clock.seconds["tasks' GIL-held parts (all threads)"] = task_clock.held
        rounds.append(clock.seconds)
    return {name: float(np.median([r[name] for r in rounds])) * 1e3 for name in rounds[0]}


if __name__ == "__main__":
    main()
