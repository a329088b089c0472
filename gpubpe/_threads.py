"""The process's threads: how many a call runs on, and the pools it runs them in (one of
exactly ``n`` threads per size, one as wide as the cores), kept for the process.

Issue 18: the 2-thread paths run a share on the calling thread and the rest on ``threads -
1`` pool threads; a pool with more threads than that let a third busy thread share two
cores (a writing share of ``encode_arrays`` then waited 2-5 ms for a core). The pools
live as long as the process, so no call pays for starting threads.

A forked child (multiprocessing's default start on Linux: PyTorch's DataLoader workers)
has none of its parent's threads: a task given to a pool the parent had started waited
forever, the first call on 2 threads hung. A child forgets the pools and makes its own.
"""

from __future__ import annotations

import collections
import functools
import heapq
import os
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ConfigError

_POOLS: dict[int, ThreadPoolExecutor] = {}
_WIDE: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def check_num_threads(num_threads) -> None:
    """ConfigError unless ``num_threads`` is None (every core) or a positive int."""
    if num_threads is None:
        return
    if isinstance(num_threads, bool) or not isinstance(num_threads, int | np.integer) \
            or num_threads < 1:
        raise ConfigError(f"num_threads={num_threads!r} is not a thread count; use a positive "
                          "int, or None for every core")


def thread_count(num_threads) -> int:
    """The threads to run on: ``num_threads`` (checked), None for every core this process
    may use, and never more than those cores. More threads than cores only take turns:
    on the 2-core VM, ``count_words`` of 8 MB of lines took 60 ms on 2 threads and 84 on
    4 or 8 (issue 18: never slower with more threads)."""
    check_num_threads(num_threads)
    cores = usable_cores()
    return min(int(num_threads or cores), cores)


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity (read each call: it may be changed
    while the process runs), and no more than its cgroup's CPU quota allows (a container's
    ``--cpus``, a Kubernetes CPU limit: a GPU node's pod often has a few of the host's many
    cores; every core's thread there only waits its turn)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = cores or os.cpu_count() or 1
    return min(cores, _own_quota_cpus() or cores)


@functools.lru_cache(maxsize=1)
def _own_quota_cpus() -> int | None:
    """This process's CPU quota in CPUs (``quota_cpus``), read once: files, not a syscall."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as lines:
            return quota_cpus(lines.read().splitlines(), Path("/sys/fs/cgroup"))
    except OSError:  # not Linux, or no /proc
        return None


def quota_cpus(cgroup_lines: list[str], root: Path) -> int | None:
    """The CPUs a CPU quota allows (rounded down, at least 1, as Rust's
    ``std::thread::available_parallelism`` counts them), from ``/proc/self/cgroup``'s lines and the
    cgroup file system at ``root``: cgroup v2's ``cpu.max`` ("max 100000" or "200000
    100000"), v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none), in the
    process's own cgroup, then at the root (a container's namespace shows it as "/");
    None without a quota."""
    places = []
    for line in cgroup_lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            places += [(root / relative / "cpu.max", None), (root / "cpu.max", None)]
        elif "cpu" in controllers.split(","):
            for folder in (root / controllers, root / "cpu", root / "cpu,cpuacct"):
                places += [(folder / relative / "cpu.cfs_quota_us",
                            folder / relative / "cpu.cfs_period_us"),
                           (folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us")]
    for first, second in places:
        try:
            quota, period = (first.read_text().split() if second is None else
                             (first.read_text().strip(), second.read_text().strip()))
        except (OSError, ValueError):
            continue
        if quota in ("max", "-1") or not quota.lstrip("-").isdigit() or not period.isdigit():
            return None
        return max(1, int(quota) // max(int(period), 1))
    return None


def helper_pool(n_workers: int) -> ThreadPoolExecutor:
    """The process's pool of exactly ``n_workers`` threads (made on first use)."""
    with _LOCK:
        if n_workers not in _POOLS:
            _POOLS[n_workers] = ThreadPoolExecutor(n_workers, thread_name_prefix="gpubpe-helper")
        return _POOLS[n_workers]


def wide_pool(n_workers: int) -> ThreadPoolExecutor:
    """The process's pool as wide as the cores, or ``n_workers`` threads when more."""
    global _WIDE
    with _LOCK:
        if _WIDE is None or _WIDE._max_workers < n_workers:
            _WIDE = ThreadPoolExecutor(max(n_workers, usable_cores()),
                                       thread_name_prefix="gpubpe")
        return _WIDE


def run_all(function, calls: list[tuple]) -> list:
    """``function(*args)`` for every args tuple: the first on the calling thread, the rest pooled.

    The calling thread is running already; handing every call to the pool cost
    up to a whole share on the 2-core VM (ja, cl100k, 2 threads: the two BPE
    shares of 3.5 ms often ran one after the other, the second worker woken on
    the first one's core: 7.2 -> 4.3 ms for the step).
    """
    if len(calls) == 1:
        return [function(*calls[0])]
    pool = wide_pool(len(calls))  # a spare: admission runs beside the ids (tokenizer._encode_pieces)
    others = [pool.submit(function, *args) for args in calls[1:]]
    first = function(*calls[0])  # the calling thread is awake already: one hand-off fewer
    return [first, *(future.result() for future in others)]


def _forget_pools() -> None:
    """In a forked child: the parent's pool threads are not here; new pools on first use."""
    global _WIDE, _LOCK
    _POOLS.clear()
    _WIDE = None
    _LOCK = threading.Lock()  # another parent thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_pools)


class HelpedPool:
    """Tasks on the process's pool of ``n_workers`` threads, one fewer than the work's,
    results taken in order: the calling thread, while it waits, runs the costliest task
    no pool thread has started (``submit``'s ``cost``; the newest of equal cost), the pool
    threads take them oldest first. ``cancel`` at the end (in a ``finally``): no task the
    caller gave runs on once it has returned or raised.

    Issue 18, counting a list of str on 2 cores: with a pool thread per core the
    reading thread (str -> UTF-8, adding shares, ~40% of one core) made three busy
    threads on two cores, and the counting took ~25% more CPU time than on one thread
    (with the batches read beforehand, the same CPU time). One pool thread fewer, and the
    reader counting whatever no pool thread has taken, keeps a thread a core.

    Costliest first (the longest task first, as a list scheduler does): counting 8.4 MB
    of lines on 2 threads, batches of 1, 2, 4 and 1.4 MB in two shares each, the newest
    share was the last batch's small one, so the calling thread took a 4 MB batch's
    second share last, ~5 ms after the pool thread took its first, and the pool thread
    waited those ~5 ms at the end (a timeline of the shares, bench/RESULTS.md).
    """

    def __init__(self, n_workers: int):
        self.pool = helper_pool(n_workers)
        self.tasks: collections.deque[_Task] = collections.deque()
        # The tasks the calling thread may run, costliest then newest first: (-cost,
        # -order, a weak reference), taken out as they are tried (a pool thread may have
        # started one since; a task whose result was taken is gone). Issue 18: sorting the
        # pending tasks at each try was 1.5 ms a count of 8.4 MB on 16 threads.
        self.unstarted: list[tuple[int, int, weakref.ref]] = []
        self.submitted = 0

    def __len__(self) -> int:
        return len(self.tasks)

    def submit(self, function, *args, cost: int = 0) -> None:
        task = _Task(self.pool.submit(function, *args), function, args)
        self.tasks.append(task)
        self.submitted += 1
        heapq.heappush(self.unstarted, (-cost, -self.submitted, weakref.ref(task)))

    def oldest_result(self):
        oldest = self.tasks[0]
        while not oldest.finished() and self._run_one_unstarted():
            pass
        return self.tasks.popleft().result()

    def cancel(self) -> None:
        """Cancel the tasks no thread has started and wait for the ones running (the
        pool is the process's: nothing else waits for them)."""
        running = [task.future for task in self.tasks
                   if task.future is not None and not task.future.cancel()]
        wait(running)
        self.tasks.clear()
        self.unstarted.clear()

    def _run_one_unstarted(self) -> bool:
        while self.unstarted:
            task = heapq.heappop(self.unstarted)[2]()
            if task is not None and task.run_here():
                return True
        return False


@dataclass
class _Task:
    future: Future | None  # None once run on the calling thread
    function: object
    args: tuple
    value: object = None

    def finished(self) -> bool:
        return self.future is None or self.future.done()

    def run_here(self) -> bool:
        """Run it on this thread if no pool thread has started it."""
        if self.future is None or not self.future.cancel():
            return False
        self.future, self.value = None, self.function(*self.args)
        return True

    def result(self):
        return self.value if self.future is None else self.future.result()
