"""Encoding and decoding on a CUDA device: what goes there, in what chunks, what a failure means.

A :class:`~gpubpe.Tokenizer` whose backend is ``cuda`` hands two steps to a
:class:`DeviceCodec`:

- BPE on the batch's distinct new words (``kernels.encode.encode_word_list_cuda``,
  a thread per word). Words longer than ``DEVICE_MAX_WORD_BYTES`` take the CPU
  path (a thread would scan them quadratically; the CPU uses a heap), and the
  two results are put back in word order. Splitting text into words, the word
  cache and writing ids per document stay on the host: they are byte scans and
  lookups that the CPU kernels do near memory speed.
- Decoding: ids to bytes (``kernels.encode.gather_token_bytes_cuda``).

Both run in chunks sized from the device's free memory at the time (never a
constant), so a batch larger than device memory still goes through.
``GPUBPE_DEVICE_BYTES`` caps the device memory gpubpe plans for, on a GPU
(enforced there with CuPy's memory-pool limit) and in the simulator alike, so
chunking can be exercised anywhere. The rule and byte tables are copied to the
device once per tokenizer.

Host round trips, counted by ``gpubpe.device_stats()``: encoding makes two
syncs per chunk (the output offsets, then the ids they size) and copies the
chunk's words and starts to the device; decoding makes three per chunk (the
output size, the bytes, the positions). A batch that fits in one chunk pays
exactly that; ``tests/test_device_stats.py`` holds the counts.

A device failure (out of memory, a fault, a lost device) raises
:class:`~gpubpe.errors.DeviceError` naming the step and the device's message;
nothing of the call's output is kept, and the tokenizer stays usable (its word
cache only ever holds finished words). ``gpubpe.encode_files`` keeps the
documents finished before the failure (see there).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from .backend import Backend
from .errors import ConfigError, DeviceError
from .kernels._cuda import kernel_view, to_device, to_host
from .kernels.encode import (
    DECODE_DEVICE_BYTES_PER_ID,
    ENCODE_DEVICE_BYTES_PER_BYTE,
    ENCODE_DEVICE_BYTES_PER_WORD,
    RuleTable,
    encode_word_list_cpu,
    encode_word_list_cuda,
    gather_token_bytes_cuda,
    join_word_lists,
    pack_words_cpu,
)

# Longer words are encoded on the CPU (see the module docstring).
DEVICE_MAX_WORD_BYTES = 64
# Share of the free device memory one chunk may take (the rest: CuPy's pool, other work).
DEVICE_MEMORY_SHARE = 0.5
# Bytes a chunk's plan keeps back for what the per-byte costs do not see: CuPy's pool
# rounds every allocation up to 512 bytes, and the sort of word lengths takes scratch.
DEVICE_CHUNK_RESERVE = 64 << 10
# Free bytes the simulator reports (NUMBA_ENABLE_CUDASIM=1 has no device to ask).
SIMULATED_DEVICE_BYTES = 1 << 30
DEVICE_BYTES_VARIABLE = "GPUBPE_DEVICE_BYTES"


def device_bytes_cap() -> int | None:
    """``GPUBPE_DEVICE_BYTES`` as an int (the device memory gpubpe may hold), or None."""
    text = os.environ.get(DEVICE_BYTES_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return max(int(text), 0)
    except ValueError:
        raise ConfigError(f"{DEVICE_BYTES_VARIABLE}={text!r} is not a number of bytes; "
                          "set it to an int such as 4000000000, or unset it") from None


def held_device_bytes(backend: Backend) -> int:
    """Device bytes gpubpe's arrays hold now (CuPy's pool in use; 0 in the simulator)."""
    if backend.simulated:
        return 0
    return int(backend.xp.get_default_memory_pool().used_bytes())


def free_device_bytes(backend: Backend) -> int:
    """Bytes the device can hand out now, within ``GPUBPE_DEVICE_BYTES`` when it is set.

    On a GPU: free memory plus what CuPy's pool holds unused; the cap also becomes
    the pool's limit (0: none), so an allocation past it fails as out of memory.
    """
    cap = device_bytes_cap()
    if backend.simulated:
        return SIMULATED_DEVICE_BYTES if cap is None else cap
    cupy = backend.xp
    pool = cupy.get_default_memory_pool()
    pool.set_limit(size=cap or 0)
    free, _ = cupy.cuda.runtime.memGetInfo()
    free = int(free) + int(pool.free_bytes())
    return free if cap is None else max(min(free, cap - int(pool.used_bytes())), 0)


def device_error_types() -> tuple[type, ...]:
    """The exceptions CuPy and Numba-CUDA raise when the device fails."""
    found: list[type] = []
    try:
        from numba.cuda.cudadrv.driver import CudaAPIError

        found.append(CudaAPIError)
    except ImportError:  # a Numba without CUDA support
        pass
    try:
        import cupy

        found += [cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError,
                  cupy.cuda.memory.OutOfMemoryError]
    except ImportError:
        pass
    return tuple(found)


@contextmanager
def reporting_device_errors(what: str) -> Iterator[None]:
    """Turn a device library's failure inside the block into a DeviceError about ``what``."""
    try:
        yield
    except device_error_types() as exc:
        raise DeviceError(f"the CUDA device failed while {what}: {type(exc).__name__}: {exc}. "
                          "Nothing of this call was kept; retry, or use backend='cpu'") from exc


def chunk_bounds(costs: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Contiguous (lo, hi) ranges of items whose summed device ``costs`` fit in ``budget``."""
    _check_fits(int(costs.max()) if costs.size else 0, budget)
    cumulative = np.cumsum(costs)
    bounds = []
    lo = 0
    while lo < costs.size:
        base = cumulative[lo - 1] if lo else 0
        hi = int(np.searchsorted(cumulative, base + budget, side="right"))
        bounds.append((lo, max(hi, lo + 1)))
        lo = bounds[-1][1]
    return bounds


def even_chunk_bounds(n_items: int, cost: int, budget: int) -> list[tuple[int, int]]:
    """``chunk_bounds`` for items that all cost ``cost`` (no array of costs)."""
    _check_fits(cost, budget)
    step = budget // cost
    return [(lo, min(lo + step, n_items)) for lo in range(0, n_items, step)]


def _check_fits(largest: int, budget: int) -> None:
    if largest > budget:
        raise DeviceError(f"not enough free device memory: one item needs {largest:,} bytes "
                          f"and {budget:,} may be used ({DEVICE_MEMORY_SHARE:.0%} of what is "
                          f"free, less {DEVICE_CHUNK_RESERVE:,} kept back, within "
                          f"{DEVICE_BYTES_VARIABLE} if set); free device memory, raise "
                          f"{DEVICE_BYTES_VARIABLE}, or use backend='cpu'")


class DeviceCodec:
    """The device half of one tokenizer: its tables on the device, and the chunked steps."""

    def __init__(self, backend: Backend, rules: RuleTable):
        self.backend = backend
        self._host_rules = rules
        self._rules: RuleTable | None = None
        self._byte_table = None

    def _budget(self) -> int:
        """Device bytes one chunk may plan for now (see DEVICE_CHUNK_RESERVE)."""
        share = int(free_device_bytes(self.backend) * DEVICE_MEMORY_SHARE)
        return max(share - DEVICE_CHUNK_RESERVE, 0)

    # ------------------------------------------------------------ encoding
    def encode_words(self, data: np.ndarray, word_at: np.ndarray, word_len: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """BPE on each word ``data[word_at[w]:][:word_len[w]]``: host ``(ids uint32, offsets int64)``."""
        long = word_len > DEVICE_MAX_WORD_BYTES
        if not long.any():
            return self._encode_on_device(data, word_at, word_len)
        short = ~long
        parts = [(short, self._encode_on_device(data, word_at[short], word_len[short])),
                 (long, encode_word_list_cpu(data, word_at[long], word_len[long],
                                             self._host_rules))]
        return _interleaved(parts, word_at.size)

    def _encode_on_device(self, data, word_at, word_len):
        xp = self.backend.xp
        with reporting_device_errors(f"encoding {word_at.size:,} words"):
            costs = word_len * ENCODE_DEVICE_BYTES_PER_BYTE + ENCODE_DEVICE_BYTES_PER_WORD
            bounds = chunk_bounds(costs, self._budget())
            rules = self._device_rules()
            parts = []
            for lo, hi in bounds:
                packed, word_start = pack_words_cpu(data, word_at[lo:hi], word_len[lo:hi])
                ids, offsets = encode_word_list_cuda(to_device(xp, packed),
                                                     to_device(xp, word_start), rules, xp)
                offsets = to_host(offsets, "encoded word offsets")  # sync
                parts.append((to_host(ids[:offsets[-1]], "encoded word ids"), offsets))  # sync
        return join_word_lists(parts)

    def _device_rules(self) -> RuleTable:
        if self._rules is None:
            xp = self.backend.xp
            self._rules = RuleTable(*(kernel_view(to_device(xp, table))
                                      for table in self._host_rules))
        return self._rules

    # ------------------------------------------------------------ decoding
    def gather_bytes(self, ids: np.ndarray, doc_offsets: np.ndarray, table_bytes: np.ndarray,
                     table_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bytes of valid int64 ids, and each document's byte offsets (host arrays)."""
        xp = self.backend.xp
        with reporting_device_errors(f"decoding {ids.size:,} ids"):
            longest = int(np.diff(table_offsets).max()) if table_offsets.size > 1 else 0
            bounds = even_chunk_bounds(ids.size, DECODE_DEVICE_BYTES_PER_ID + longest,
                                       self._budget())
            if self._byte_table is None:
                self._byte_table = (kernel_view(to_device(xp, table_bytes)),
                                    to_device(xp, table_offsets))
            device_bytes, device_offsets = self._byte_table
            pieces, positions = [], [np.zeros(1, dtype=np.int64)]
            for lo, hi in bounds:
                out, chunk_positions = gather_token_bytes_cuda(
                    to_device(xp, ids[lo:hi]), device_bytes, device_offsets, xp)
                pieces.append(to_host(out, "decoded bytes"))  # sync
                positions.append(to_host(chunk_positions[1:], "decoded byte positions")
                                 + positions[-1][-1])  # sync
        positions = np.concatenate(positions)
        out = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
        return out, positions[doc_offsets]


def _interleaved(parts, n_words: int) -> tuple[np.ndarray, np.ndarray]:
    """Results for disjoint word subsets (boolean masks) put back in word order."""
    lengths = np.zeros(n_words, dtype=np.int64)
    for mask, (_, offsets) in parts:
        lengths[mask] = np.diff(offsets)
    offsets = np.zeros(n_words + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.empty(offsets[-1], dtype=np.uint32)
    for mask, (part_ids, part_offsets) in parts:
        part_lengths = np.diff(part_offsets)
        shift = np.repeat(offsets[:-1][mask] - part_offsets[:-1], part_lengths)
        ids[np.arange(part_ids.size) + shift] = part_ids
    return ids, offsets
