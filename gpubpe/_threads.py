"""Pools of exactly ``n`` threads, one per size, kept for the process.

Issue 18: the 2-thread paths run a share on the calling thread and the rest on ``threads -
1`` pool threads; a pool with more threads than that let a third busy thread share two
cores (a writing share of ``encode_arrays`` then waited 2-5 ms for a core). The pools
live as long as the process, so no call pays for starting threads.
"""

from __future__ import annotations

import collections
import heapq
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

_POOLS: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def helper_pool(n_workers: int) -> ThreadPoolExecutor:
    """The process's pool of exactly ``n_workers`` threads (made on first use)."""
    with _LOCK:
        if n_workers not in _POOLS:
            _POOLS[n_workers] = ThreadPoolExecutor(n_workers, thread_name_prefix="gpubpe-helper")
        return _POOLS[n_workers]


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
