"""Pools of exactly ``n`` threads, one per size, kept for the process.

Issue 18: the 2-thread paths run a share on the calling thread and the rest on ``threads -
1`` pool threads; a pool with more threads than that let a third busy thread share two
cores (a writing share of ``encode_arrays`` then waited 2-5 ms for a core). The pools
live as long as the process, so no call pays for starting threads.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def helper_pool(n_workers: int) -> ThreadPoolExecutor:
    """The process's pool of exactly ``n_workers`` threads (made on first use)."""
    with _LOCK:
        if n_workers not in _POOLS:
            _POOLS[n_workers] = ThreadPoolExecutor(n_workers, thread_name_prefix="gpubpe-helper")
        return _POOLS[n_workers]
