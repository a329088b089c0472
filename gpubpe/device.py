"""Encoding and decoding on a CUDA device: what runs where, in what chunks, what a failure means.

A :class:`~gpubpe.Tokenizer` whose backend is ``cuda`` hands whole batches to a
:class:`DeviceCodec` (``encode_pieces``; ``kernels/encode/batch_cuda.py`` lists
the steps). What runs where, per batch:

- Host: special tokens in host text (``find_specials_cpu``) and cutting
  documents into pieces, when special tokens are in play; a normalizer and HF's prefix space (imported
  vocabularies that ask for them); custom ``regex`` patterns (they never reach
  the device).
- Device: word starts (``kernels.encode.pretok_cuda.word_start_flags_cuda``: safe
  cuts, then a thread per cut-out chunk runs the CPU's exact scanner), the words' spans and keys, lookups
  in the device word cache, dedupe of the misses (atomicCAS hash table), BPE of
  the distinct new words (``encode_word_list_cuda``, a thread per word; a word
  that is a whole token first becomes it, as on the CPU), every occurrence's ids
  written at its offset (count, exclusive scan, write), the documents' offsets,
  and the new words entering the cache.
- Words longer than ``DEVICE_MAX_WORD_BYTES`` keep today's rule: when a batch
  has such new words, the packed new words come down and go through
  ``encode_words`` (short ones back to the device, long ones the CPU's heap; a
  thread would scan them quadratically), and the ids go back up.
- A long word's 56-bit key that matches a different word (a hash collision) is
  detected on the device; the batch then takes the host path, exact as always.

Syncs per batch (``gpubpe.device_stats()``), the same for 3 or 60 documents or
any number of words: the item count, the new words' sizes, the id count
(three reads of a few int64 each), then ids and offsets when they go to the
host (none with ``device=True``). A batch with long new words adds two reads.
The pre-tokenizer reads nothing. ``tests/test_device_stats.py`` holds the counts.

The device word cache (``DeviceWordCache``) is kept between batches: at most
``DEVICE_CACHE_WORDS`` words and ``DEVICE_CACHE_POOL_BYTES`` bytes (as many
ids), about 34 MB of device memory; a batch whose new words do not fit
restarts it (emptied, then the batch's words admitted) unless the cache
answered at least half of the batch's words (then it stays as it is, as the
host cache does). ``cache_stats()`` reports its size and restarts.

Text already on the device (``encode_buffer`` with a CuPy uint8 array) is
encoded without coming to the host; device document ranges come down once
(two small reads). Special tokens in it are found on the device
(``find_specials``: a thread per byte marks candidates, one read counts them,
one more brings them down when there are any; the leftmost non-overlapping are
kept, as ``find_specials_cpu`` keeps them). A custom pattern, a normalizer, HF's prefix
space or special-token flags, or a disallowed special token found (the host
path raises with its message) copy the text to the host once. Decoding device ids
(``gather_device_bytes``) checks the ids and sizes its output in one read.
The word-list step (``encode_words``) remains as before. Host ids are decoded
on the host (``Tokenizer._gather_bytes`` says why).

Everything runs in chunks sized from the device's free memory at the time
(never a constant): a batch plans ``BATCH_DEVICE_BYTES_PER_BYTE`` per input
byte, chunks are whole documents, so a batch larger than device memory still
goes through. ``GPUBPE_DEVICE_BYTES`` caps the device memory gpubpe plans for,
on a GPU (enforced there with CuPy's memory-pool limit) and in the simulator
alike, so chunking can be exercised anywhere. The rule, byte and class tables
are copied to the device once per tokenizer.

A stream of batches (``gpubpe.encode_files``, ``gpubpe encode --backend cuda``) goes
through a :class:`DeviceBatchStream`: the reader thread copies each batch's text into
a reused page-locked (pinned) buffer and queues its copy up on an *up* stream; the
main thread encodes it on a *compute* stream (``launch`` and CuPy calls follow the
current stream) as text already on the device, so ``encode_pieces`` above runs
unchanged; its ids and offsets go down into reused pinned buffers on a *down* stream,
and the writer thread waits for them and writes. Events order the three streams on
the device. So on the device, batch n+1's copy up and batch n-1's copy down run beside
batch n's kernels (the H100's copy engines, one each way), and on the host the next
batch is read and the last one written while the device works. Syncs per streamed
batch: the batch's three reads above, one wait for a free text buffer (the reader)
and one for the batch's ids (the writer): five, as before (three plus ids plus
offsets); one more per run when the stream closes. As in any batch, allowed special
tokens add one or two reads (``find_specials``), new words over
``DEVICE_MAX_WORD_BYTES`` four, the bit-level codec one. ``tests/test_encode_stream.py``
holds the count. Memory: ``STREAM_SLOTS`` (2) text buffers, pinned on the host and
on the device, and as many pinned id buffers on the host, reused and grown only for
a larger batch (by ``STREAM_HEADROOM``); a batch's device ids are its own (CuPy's
pool reuses them), at most three batches' at a time. ``encode_files`` states the
byte bound. With a custom pattern, a normalizer or HF's prefix space the text must reach
the host, so ``Tokenizer.batch_stream`` hands out a :class:`HostBatchStream` there
(the device still encodes the distinct words).

A device failure (out of memory, a fault, a lost device) raises
:class:`~gpubpe.errors.DeviceError` naming the step and the device's message;
nothing of the call's output is kept, and the tokenizer stays usable (its word
caches only ever hold finished words). ``gpubpe.encode_files`` keeps the
documents finished before the failure (see there).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np

from .backend import Backend
from .errors import ConfigError, DeviceError
from .kernels._cuda import (
    SimulatedDeviceArray,
    copy_to_device_async,
    copy_to_host_async,
    device_empty,
    device_full,
    device_zeros,
    exclusive_scan,
    kernel_view,
    launch,
    new_stream,
    on_stream,
    pinned_empty,
    read_scalar,
    record_event,
    to_device,
    to_host,
    wait_event,
    wait_on_device,
)
from .kernels.encode import (
    ENCODE_DEVICE_BYTES_PER_BYTE,
    ENCODE_DEVICE_BYTES_PER_WORD,
    RuleTable,
    encode_word_list_cpu,
    encode_word_list_cuda,
    interleaved_word_lists,
    join_word_lists,
    pack_words_cpu,
)
from .kernels.encode import batch_cuda as batch
from .kernels.encode.cuda import copy_token_bytes_kernel
from .kernels.encode.pretok_cuda import table_cells_for, word_start_flags_cuda

# RuleTable fields only the CPU's word BPE reads (``bpe.bpe_scan_word``; ~10 MB for
# cl100k): the device gets them empty.
_CPU_ONLY_RULE_FIELDS = ("whole_shapes", "pair_cells", "pair_signatures", "output_ids")
# The device word cache: at most this many words, and this many bytes (and as many ids).
DEVICE_CACHE_WORDS = 1 << 18
DEVICE_CACHE_POOL_BYTES = 16 * DEVICE_CACHE_WORDS
# A full device cache restarts for a batch's new words only when it answered fewer than
# this share of the batch's words (the host cache's rule: else it keeps serving well).
DEVICE_CACHE_MIN_HIT_RATE = 0.5
# Longer words are encoded on the CPU (see the module docstring).
DEVICE_MAX_WORD_BYTES = 64
# Misses above twice the expected ones that a batch table has room for (a small
# chunk's table is small anyway).
BATCH_TABLE_SLACK = 1024
# Share of the free device memory one chunk may take (the rest: CuPy's pool, other work).
DEVICE_MEMORY_SHARE = 0.5
# Bytes a chunk's plan keeps back for what the per-byte costs do not see: CuPy's pool
# rounds every allocation up to 512 bytes, and the sort of word lengths takes scratch.
DEVICE_CHUNK_RESERVE = 64 << 10
# Free bytes the simulator reports (NUMBA_ENABLE_CUDASIM=1 has no device to ask).
SIMULATED_DEVICE_BYTES = 1 << 30
DEVICE_BYTES_VARIABLE = "GPUBPE_DEVICE_BYTES"
# Batches a stream (``DeviceBatchStream``) holds buffers for, each way: one batch's text
# goes up while another is encoded, one batch's ids come down while the one before is
# written. More would only hold more memory: the device encodes one batch at a time.
STREAM_SLOTS = 2
# A reused buffer that is too small grows to the size needed plus this share.
STREAM_HEADROOM = 0.25


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


def _check_fits(largest: int, budget: int) -> None:
    if largest > budget:
        raise DeviceError(f"not enough free device memory: one item needs {largest:,} bytes "
                          f"and {budget:,} may be used ({DEVICE_MEMORY_SHARE:.0%} of what is "
                          f"free, less {DEVICE_CHUNK_RESERVE:,} kept back, within "
                          f"{DEVICE_BYTES_VARIABLE} if set); free device memory, raise "
                          f"{DEVICE_BYTES_VARIABLE}, or use backend='cpu'")


def is_device_array(array) -> bool:
    """Whether ``array`` lives on the device: a CuPy array, or the simulator's guarded one."""
    return isinstance(array, SimulatedDeviceArray) or type(array).__module__.split(".")[0] == "cupy"


@dataclass
class DeviceWordCache:
    """Encoded words kept on the device across batches: ``WordCache``'s layout, device arrays.

    Bounded: ``max_words`` words, ``pool_bytes`` bytes and as many ids. When a
    batch's new words do not fit, the cache is kept as it is if it answered at
    least ``DEVICE_CACHE_MIN_HIT_RATE`` of the batch's words, else emptied (a
    restart) and the words enter if they fit an empty cache. The counts are kept
    on the host (the hit rate comes with a read the batch makes anyway).
    """

    table: object  # uint64, 2 per cell: word key, slot
    byte_offsets: object  # int64, max_words + 1
    id_offsets: object  # int64, max_words + 1
    pool_bytes: object  # uint8
    pool_ids: object  # uint32
    words: int = 0
    bytes_used: int = 0
    ids_used: int = 0
    restarts: int = 0

    @classmethod
    def empty(cls, xp, max_words: int, pool_bytes: int) -> DeviceWordCache:
        n_cells = 1 << (2 * max_words - 1).bit_length()
        return cls(device_full(xp, 2 * n_cells, batch.EMPTY_KEY, xp.uint64),
                   device_zeros(xp, max_words + 1, xp.int64),
                   device_zeros(xp, max_words + 1, xp.int64),
                   device_empty(xp, pool_bytes, xp.uint8), device_empty(xp, pool_bytes, xp.uint32))

    @property
    def max_words(self) -> int:
        return self.byte_offsets.size - 1

    @property
    def device_bytes(self) -> int:
        """Device memory the cache holds (its size, for reports)."""
        return sum(int(a.nbytes) for a in (self.table, self.byte_offsets, self.id_offsets,
                                           self.pool_bytes, self.pool_ids))

    def fits(self, n_words: int, n_bytes: int, n_ids: int) -> bool:
        return (self.words + n_words <= self.max_words
                and self.bytes_used + n_bytes <= self.pool_bytes.size
                and self.ids_used + n_ids <= self.pool_ids.size)

    def clear(self) -> None:
        self.table.fill(batch.EMPTY_KEY)  # on the device: no read
        self.words = self.bytes_used = self.ids_used = 0

    def stats(self) -> dict[str, int]:
        return {"words": self.words, "bytes": self.bytes_used, "ids": self.ids_used,
                "max_words": self.max_words, "restarts": self.restarts,
                "device_bytes": self.device_bytes}


class DeviceCodec:
    """The device half of one tokenizer: its tables on the device, and the chunked steps."""

    def __init__(self, backend: Backend, rules: RuleTable):
        self.backend = backend
        self._host_rules = rules
        self._rules: RuleTable | None = None
        self._byte_table = None
        self._scanner_tables: dict[int, object] = {}
        self._gaps = None
        self._cache: DeviceWordCache | None = None
        self._miss_rate = 1.0  # share of the last chunk's words the device cache missed
        self._lock = threading.Lock()
        self.cache_words = DEVICE_CACHE_WORDS
        self.cache_pool_bytes = DEVICE_CACHE_POOL_BYTES

    # ------------------------------------------------------------ whole batches
    def encode_pieces(self, data, pieces, doc_first_piece: np.ndarray, scanner: int,
                      table: np.ndarray, dtype, on_device: bool):
        """Ids of a batch on the device end to end: ``(ids, document offsets)``, or None.

        ``data``: the batch's bytes as a device uint8 array; ``pieces``: host int64
        ``(piece_start, piece_end, piece_special)``; ``scanner``/``table``: the named
        pre-tokenizer. Ids come back as device arrays when ``on_device``, else host
        arrays. None: a long word's key matched another word's (a 56-bit hash
        collision, about 1e-5 per million distinct long words); the caller takes the
        host path for this batch.
        """
        n_docs = doc_first_piece.size - 1
        with self._lock, reporting_device_errors(f"encoding {n_docs:,} documents "
                                                 f"({int(data.size):,} bytes)"):
            parts = []
            for lo, hi in self._document_chunks(pieces, doc_first_piece):
                part = self._encode_chunk(data, pieces, doc_first_piece[lo:hi + 1], scanner,
                                          table, dtype)
                if part is None:
                    return None
                parts.append(part)
            ids, offsets = self._joined(parts)
            if on_device:
                return ids, offsets
            return to_host(ids, "batch ids"), to_host(offsets, "batch offsets")  # sync x2

    def find_specials(self, data, doc_start, doc_end, token_bytes, token_offsets, first_byte
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Special-token matches in device text, as ``find_specials_cpu`` finds them.

        Host ``(match_at, match_token)``: leftmost, longest first, not overlapping,
        inside the documents (host int64 ranges). A thread per byte marks candidates;
        one read counts them, one more brings them down (none when there are none).
        """
        xp = self.backend.xp
        with self._lock, reporting_device_errors("finding special tokens"):
            tables = [to_device(xp, a) for a in (doc_start, doc_end, token_bytes, token_offsets,
                                                 first_byte.astype(np.uint8))]
            match_token = device_empty(xp, data.size, xp.int64)
            launch(batch.special_candidates_kernel, data.size, data, *tables, match_token)
            match_index = exclusive_scan(xp, match_token >= 0)
            n = read_scalar(match_index, -1, "special-token candidates")  # sync
            if n == 0:
                return np.zeros(0, np.int64), np.zeros(0, np.int64)
            match_at = device_empty(xp, n, xp.int64)
            match_which = device_empty(xp, n, xp.int64)
            launch(batch.list_candidates_kernel, data.size, match_token, match_index, match_at,
                   match_which)
            found = to_host(xp.concatenate((match_at, match_which)),
                            "special-token matches")  # sync
        return _leftmost_matches(found[:n], found[n:], np.diff(token_offsets))

    def upload(self, array):
        """A host array copied to the device (counted)."""
        return to_device(self.backend.xp, array)

    def batch_stream(self) -> DeviceBatchStream:
        """Pinned buffers and streams for a run of batches (``gpubpe.encode_files``)."""
        return DeviceBatchStream(self.backend)

    def clear_cache(self) -> None:
        with self._lock:
            if self._cache is not None:
                self._cache.clear()

    def cache_stats(self) -> dict[str, int]:
        """The device word cache's words, bytes, ids, bound, restarts and device bytes."""
        with self._lock:
            return {} if self._cache is None else self._cache.stats()

    def _document_chunks(self, pieces, doc_first_piece) -> list[tuple[int, int]]:
        """Contiguous document ranges whose device plan fits the free memory."""
        piece_start, piece_end, _ = pieces
        n_docs = doc_first_piece.size - 1
        if n_docs == 0:
            return [(0, 0)]
        piece_bytes = (piece_end - piece_start) * batch.BATCH_DEVICE_BYTES_PER_BYTE \
            + batch.BATCH_DEVICE_BYTES_PER_PIECE
        cumulative = np.concatenate([[0], np.cumsum(piece_bytes)])
        costs = cumulative[doc_first_piece[1:]] - cumulative[doc_first_piece[:-1]]
        return chunk_bounds(costs, self._budget())

    def _joined(self, parts):
        """The chunks' (ids, offsets, n_ids) as one ragged batch on the device."""
        xp = self.backend.xp
        if len(parts) == 1:
            return parts[0][:2]
        shifts = np.cumsum([0] + [n_ids for _, _, n_ids in parts[:-1]])
        ids = xp.concatenate([part_ids for part_ids, _, _ in parts])
        offsets = xp.concatenate([parts[0][1][:1]] + [offsets[1:] + int(shift)
                                                     for (_, offsets, _), shift in
                                                     zip(parts, shifts)])
        return ids, offsets

    def _encode_chunk(self, data, pieces, doc_first_piece, scanner, table, dtype):
        """One chunk of documents: (ids, document offsets, number of ids), or None."""
        xp = self.backend.xp
        p_lo, p_hi = int(doc_first_piece[0]), int(doc_first_piece[-1])
        piece_start, piece_end, piece_special = (part[p_lo:p_hi] for part in pieces)
        b_lo = int(piece_start[0]) if p_hi > p_lo else 0
        b_hi = int(piece_end[-1]) if p_hi > p_lo else 0
        chunk = data[b_lo:b_hi]
        piece_start, piece_end = piece_start - b_lo, piece_end - b_lo
        doc_first = to_device(xp, doc_first_piece - p_lo)
        flags = self._word_start_flags(chunk, piece_start, piece_end, piece_special, scanner,
                                       table)
        device_pieces = [to_device(xp, part) for part in (piece_start, piece_end, piece_special)]
        launch(batch.mark_special_starts_kernel, p_hi - p_lo, device_pieces[0],
               device_pieces[2], flags)
        item_index = exclusive_scan(xp, flags)
        n_items = read_scalar(item_index, -1, "batch items")  # sync
        if n_items == 0:
            return device_empty(xp, 0, dtype), device_zeros(xp, doc_first.size, xp.int64), 0
        items = self._items(chunk, flags, item_index, n_items, device_pieces)
        found = self._new_words(chunk, items, n_items)
        if found is None:
            return None
        ids, piece_out, n_ids = self._scatter(items, found, n_items, device_pieces, dtype)
        return ids, piece_out[doc_first], n_ids

    def _word_start_flags(self, chunk, piece_start, piece_end, piece_special, scanner, table):
        """Device flags: 1 where a word starts in an ordinary piece (the pre-tokenizer)."""
        xp = self.backend.xp
        if scanner not in self._scanner_tables:
            self._scanner_tables[scanner] = to_device(xp, table)
        text = (piece_special < 0) & (piece_end > piece_start)
        return word_start_flags_cuda(chunk, to_device(xp, piece_start[text]),
                                to_device(xp, piece_end[text]), scanner,
                                self._scanner_tables[scanner], xp)

    def _items(self, chunk, flags, item_index, n_items: int, device_pieces) -> dict:
        """Steps 1-3 of ``kernels.encode.batch_cuda``: items, their spans, keys, cache slots."""
        xp = self.backend.xp
        items = {"start": device_empty(xp, n_items, xp.int64)}
        launch(batch.item_starts_kernel, flags.size, flags, item_index, items["start"])
        items["len"] = device_empty(xp, n_items, xp.int64)
        items["special"] = device_empty(xp, n_items, xp.int64)
        launch(batch.item_spans_kernel, n_items, items["start"], device_pieces[1],
               device_pieces[2], items["len"], items["special"])
        cache = self._word_cache()
        items["key"] = device_empty(xp, n_items, xp.uint64)
        items["slot"] = device_empty(xp, n_items, xp.int64)
        launch(batch.item_lookup_kernel, n_items, chunk, items["start"], items["len"],
               items["special"], cache.table, cache.byte_offsets, cache.pool_bytes, items["key"],
               items["slot"])
        return items

    def _new_words(self, chunk, items, n_items: int) -> dict | None:
        """Steps 4-5: the cache misses deduplicated, packed and encoded (None: a collision).

        The batch table is sized for the misses the last chunk's hit rate
        predicts, not for every item: a warm cache answers most words, and the
        table's fill, scan and listing are passes over its cells. The miss
        count itself is known only after the lookups, past this batch's only
        host read before the table (the item count, which sizes the lookups);
        reading it would cost a sync per batch. If the table proves too small
        (a claim gives up, ``batch.MAX_PROBES``), the step runs again with
        room for every item: one more sync, only then.
        """
        n_cells = self._batch_table_cells(n_items)
        found = self._dedupe(chunk, items, n_items, n_cells)
        if found["table_full"]:
            found = self._dedupe(chunk, items, n_items, table_cells_for(n_items))
        if found["collisions"]:
            return None
        n_new, n_words, n_hits = found["n_words"], found["n_items_words"], found["n_hits"]
        self._miss_rate = 1.0 - n_hits / n_words if n_words else self._miss_rate
        word_start = found["word_start"][:n_new + 1]
        packed = device_empty(self.backend.xp, found["n_bytes"], self.backend.xp.uint8)
        launch(batch.pack_new_words_kernel, n_new, chunk, items["start"], found["word_rep"],
               word_start, packed)
        ids, offsets = self._encode_packed(packed, word_start, found["n_long"])
        return {"item_cell": found["item_cell"], "cell_word": found["cell_word"], "ids": ids,
                "offsets": offsets, "packed": packed, "word_start": word_start,
                "key": found["word_key"][:n_new], "n_words": n_new, "n_bytes": found["n_bytes"],
                "hit_rate": n_hits / n_words if n_words else 1.0}

    def _batch_table_cells(self, n_items: int) -> int:
        """Cells of the batch table: twice the expected misses (the last chunk's miss rate)
        at half load, never more than for every item; every item on a cold cache."""
        if self._word_cache().words == 0:
            return table_cells_for(n_items)
        expected_misses = int(n_items * self._miss_rate) + 1
        return min(table_cells_for(n_items),
                   table_cells_for(2 * expected_misses + BATCH_TABLE_SLACK))

    def _dedupe(self, chunk, items, n_items: int, n_cells: int) -> dict:
        """Step 4 and the listing of step 5 in a table of ``n_cells``; one sync."""
        xp = self.backend.xp
        new_keys = device_full(xp, n_cells, batch.EMPTY_KEY, xp.uint64)
        new_rep = device_full(xp, n_cells, batch.NO_ITEM, xp.int64)
        item_cell = device_empty(xp, n_items, xp.int64)
        control = device_zeros(xp, 2, xp.int64)
        launch(batch.claim_new_words_kernel, n_items, items["key"], items["slot"],
               items["special"], new_keys, new_rep, item_cell, control)
        launch(batch.check_new_words_kernel, n_items, chunk, items["start"], items["len"],
               item_cell, new_rep, control)
        distinct_index = exclusive_scan(xp, new_keys != batch.EMPTY_KEY)
        n_slots = min(n_items, n_cells)  # distinct words: at most one per cell
        found = {"word_rep": device_empty(xp, n_slots, xp.int64),
                 "word_key": device_empty(xp, n_slots, xp.uint64),
                 "cell_word": device_empty(xp, n_cells, xp.int64), "item_cell": item_cell}
        word_len = device_zeros(xp, n_slots, xp.int64)
        launch(batch.list_new_words_kernel, n_cells, new_keys, new_rep, distinct_index,
               items["len"], found["word_rep"], word_len, found["word_key"], found["cell_word"])
        found["word_start"] = exclusive_scan(xp, word_len)
        n_long = (word_len > DEVICE_MAX_WORD_BYTES).sum(dtype=xp.int64).reshape(1)
        n_hits = (items["slot"] >= 0).sum(dtype=xp.int64).reshape(1)
        n_words = (items["special"] < 0).sum(dtype=xp.int64).reshape(1)
        counts = to_host(xp.concatenate((distinct_index[-1:], found["word_start"][-1:], control,
                                         n_long, n_hits, n_words)),
                         "batch new words").tolist()  # sync
        names = ("n_words", "n_bytes", "collisions", "table_full", "n_long", "n_hits",
                 "n_items_words")
        found.update(zip(names, counts))
        return found

    def _encode_packed(self, packed, word_start, n_long: int):
        """BPE of the packed new words on the device; with long words among them, the
        words go through ``encode_words`` instead (long ones take the CPU's heap)."""
        xp = self.backend.xp
        if n_long == 0:
            return encode_word_list_cuda(packed, word_start, self._device_rules(), xp)
        host_bytes = to_host(packed, "long new words: bytes")  # sync
        host_start = to_host(word_start, "long new words: starts")  # sync
        ids, offsets = self.encode_words(host_bytes, host_start[:-1], np.diff(host_start))
        return to_device(xp, ids), to_device(xp, offsets)

    def _scatter(self, items, found, n_items: int, device_pieces, dtype):
        """Step 6: every item's ids at its offset, each piece's first id; then step 7."""
        xp = self.backend.xp
        cache = self._word_cache()
        per_item = (items["special"], items["slot"], found["item_cell"], found["cell_word"],
                    cache.id_offsets)
        item_n_ids = device_empty(xp, n_items, xp.int64)
        launch(batch.item_id_counts_kernel, n_items, *per_item, found["offsets"], item_n_ids)
        item_out = exclusive_scan(xp, item_n_ids)
        n_ids, n_new_ids = to_host(xp.concatenate((item_out[-1:], found["offsets"][-1:])),
                                   "batch id count").tolist()  # sync
        out = device_empty(xp, n_ids, dtype)
        launch(batch.write_item_ids_kernel, n_items, *per_item, cache.pool_ids, found["offsets"],
               found["ids"], item_out, out)
        piece_out = device_empty(xp, device_pieces[0].size + 1, xp.int64)
        launch(batch.piece_offsets_kernel, device_pieces[0].size + 1, items["start"],
               device_pieces[0], item_out, piece_out)
        self._admit(found, n_new_ids)
        return out, piece_out, n_ids

    def _admit(self, found, n_new_ids: int) -> None:
        """Step 7: the batch's new words into the device cache (restarting it when full)."""
        cache = self._word_cache()
        n_words, n_bytes = found["n_words"], found["n_bytes"]
        if n_words == 0:
            return
        if not cache.fits(n_words, n_bytes, n_new_ids):
            if found["hit_rate"] >= DEVICE_CACHE_MIN_HIT_RATE:
                return  # full, but still answering most words: keep it as it is
            cache.clear()
            cache.restarts += 1
            if not cache.fits(n_words, n_bytes, n_new_ids):
                return
        launch(batch.cache_admit_kernel, n_words, found["packed"], found["word_start"],
               found["key"], found["ids"], found["offsets"], np.int64(cache.words),
               np.int64(cache.bytes_used), np.int64(cache.ids_used), cache.table,
               cache.byte_offsets, cache.id_offsets, cache.pool_bytes, cache.pool_ids)
        cache.words += n_words
        cache.bytes_used += n_bytes
        cache.ids_used += n_new_ids

    def _word_cache(self) -> DeviceWordCache:
        if self._cache is None:
            self._cache = DeviceWordCache.empty(self.backend.xp, self.cache_words,
                                                self.cache_pool_bytes)
        return self._cache

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
        return interleaved_word_lists(parts, word_at.size)

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
            self._rules = RuleTable(*(kernel_view(to_device(
                xp, table[:0] if name in _CPU_ONLY_RULE_FIELDS else table))
                for name, table in zip(RuleTable._fields, self._host_rules)))
        return self._rules

    # ------------------------------------------------------------ decoding
    def gather_device_bytes(self, ids, doc_offsets, table_bytes, table_offsets, gaps):
        """The bytes of device ids and each document's byte offsets, as device arrays.

        ``ids``: any integer dtype; ``doc_offsets``: int64, host or device. One read (the
        first bad id's position and the output size together); a bad id (out of range,
        or a gap of an imported layout) raises ValueError naming it and its position.
        """
        xp = self.backend.xp
        with self._lock, reporting_device_errors(f"decoding {int(ids.size):,} device ids"):
            device_bytes, device_offsets = self._device_byte_table(table_bytes, table_offsets)
            if self._gaps is None:
                self._gaps = to_device(xp, gaps)
            safe, first_bad = _first_bad_id(xp, ids, self._gaps)
            lengths = device_offsets[safe + 1] - device_offsets[safe]
            positions = exclusive_scan(xp, lengths)
            first, total = to_host(xp.concatenate((first_bad, positions[-1:])),
                                   "device decode size").tolist()  # sync
            if first < ids.size:
                bad = read_scalar(ids, first, "bad id")  # sync (errors only)
                raise ValueError(f"id {bad} at position {first} is no token of this tokenizer: "
                                 f"its ids are 0..{gaps.size - 1} (less any gaps of an imported "
                                 "layout); were the ids made by another vocabulary?")
            out = device_empty(xp, total, xp.uint8)
            launch(copy_token_bytes_kernel, safe.size, safe, device_bytes, device_offsets,
                   positions, out)
            if not is_device_array(doc_offsets):
                doc_offsets = to_device(xp, np.asarray(doc_offsets, dtype=np.int64))
            return out, positions[doc_offsets]

    def _device_byte_table(self, table_bytes, table_offsets):
        if self._byte_table is None:
            xp = self.backend.xp
            self._byte_table = (kernel_view(to_device(xp, table_bytes)),
                                to_device(xp, table_offsets))
        return self._byte_table


class HostBatchStream:
    """Batches through a backend without a device: the text and the ids stay where they are.

    The interface :func:`gpubpe.encode_files` drives, as :class:`DeviceBatchStream`:
    ``upload`` (reader thread), ``encoding`` and ``download`` (main thread), ``wait`` and
    ``release`` of what ``download`` returns (writer thread), ``close``.
    """

    device = False

    def upload(self, data: bytes):
        return data

    def encoding(self, text):
        return nullcontext(text)

    def download(self, ids: np.ndarray, offsets: np.ndarray, dtype=None) -> _HostIds:
        return _HostIds(ids, offsets)

    def close(self) -> None:
        pass


@dataclass
class _HostIds:
    ids: np.ndarray
    offsets: np.ndarray

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ids, self.offsets

    def release(self) -> None:
        pass


@dataclass
class _TextSlot:
    """One batch's text in flight: reused pinned and device buffers, and when they are free."""

    copied: object  # event: the last copy up from ``host`` has ended
    used: object  # event: the device is done with ``device``
    host: np.ndarray | None = None
    device: object = None
    size: int = 0


@dataclass
class _IdSlot:
    """One batch's ids and offsets on their way down: reused pinned buffers."""

    copied: object  # event: the last copy down into them has ended
    ids: np.ndarray | None = None
    offsets: np.ndarray | None = None


class DeviceBatchStream:
    """Batches through the device with copies that overlap the work of other batches.

    Three streams of its own: ``upload`` (on the reader thread) copies a batch's text
    from a reused pinned buffer on the *up* stream while the batch before is encoded
    on the *compute* stream; ``download`` queues its ids and offsets into reused pinned
    buffers on the *down* stream, which the writer thread waits for (``wait``) while
    the next batch is encoded. Events order the streams on the device; the host waits
    twice per batch: for a text buffer to be free before refilling it (in practice long
    free), and for a batch's ids before writing them. ``close`` waits once for both copy
    streams. ``STREAM_SLOTS`` text slots and id slots: when both are taken, ``upload`` or
    ``download`` waits for one (the memory bound).
    """

    device = True

    def __init__(self, backend: Backend, slots: int = STREAM_SLOTS):
        xp = self.xp = backend.xp
        self.compute, self._up, self._down = new_stream(xp), new_stream(xp), new_stream(xp)
        self._text: queue.Queue = queue.Queue()
        self._ids: queue.Queue = queue.Queue()
        for _ in range(slots):  # events recorded on idle streams: passed at once
            self._text.put(_TextSlot(record_event(self._up), record_event(self._up)))
            self._ids.put(_IdSlot(record_event(self._down)))
        self._closed = threading.Event()

    def upload(self, data: bytes) -> _TextSlot:
        """Queue a copy of ``data`` to the device through a free text slot (reader thread)."""
        slot = self._take(self._text)
        n = len(data)
        with reporting_device_errors(f"copying {n:,} bytes of text to the device"):
            wait_event(slot.copied, "stream: text buffer free")  # sync
            slot.host = _reserved(slot.host, n, np.uint8, self._pinned)
            slot.host[:n] = np.frombuffer(data, dtype=np.uint8)
            with on_stream(self._up):
                wait_on_device(self._up, slot.used)
                slot.device = _reserved(slot.device, n, np.uint8, self._device_buffer)
                copy_to_device_async(slot.host[:n], slot.device[:n], self._up)
                slot.copied = record_event(self._up)
        slot.size = n
        return slot

    @contextmanager
    def encoding(self, slot: _TextSlot):
        """The slot's text on the device, with the compute stream current (main thread)."""
        try:
            with on_stream(self.compute):
                wait_on_device(self.compute, slot.copied)
                yield slot.device[:slot.size]
        finally:
            with reporting_device_errors("freeing a text buffer"):
                slot.used = record_event(self.compute)
            self._text.put(slot)

    def download(self, ids, offsets, dtype=None) -> _DeviceIds:
        """Queue copies of a batch's device ids (as ``dtype``, converted on the device:
        uint16 halves the bytes) and offsets into a free id slot."""
        slot = self._take(self._ids)
        with reporting_device_errors(f"copying {int(ids.size):,} ids to the host"):
            with on_stream(self.compute):
                ids = ids.astype(dtype or ids.dtype, copy=False)
                offsets = offsets.astype(np.int64, copy=False)
            ready = record_event(self.compute)
            slot.ids = _reserved(slot.ids, ids.size, ids.dtype, self._pinned)
            slot.offsets = _reserved(slot.offsets, offsets.size, np.int64, self._pinned)
            with on_stream(self._down):
                wait_on_device(self._down, ready)
                copy_to_host_async(ids, slot.ids[:ids.size], self._down)
                copy_to_host_async(offsets, slot.offsets[:offsets.size], self._down)
                slot.copied = record_event(self._down)
        return _DeviceIds(self, slot, ids, offsets)

    def close(self) -> None:
        """Stop handing out slots; wait for the copies still queued (one sync), then free
        the buffers while their streams are alive."""
        self._closed.set()
        with reporting_device_errors("finishing the copies of a stream"):
            wait_on_device(self._down, record_event(self._up))
            wait_event(record_event(self._down), "stream: closed")  # sync
        for slots in (self._text, self._ids):
            while not slots.empty():
                slots.get_nowait()

    def _take(self, slots: queue.Queue):
        while not self._closed.is_set():
            try:
                return slots.get(timeout=0.1)
            except queue.Empty:
                continue
        raise DeviceError("the batch stream was closed while a batch waited for a buffer")

    def _pinned(self, n: int, dtype):
        return pinned_empty(self.xp, n, dtype)

    def _device_buffer(self, n: int, dtype):
        return device_empty(self.xp, n, dtype)


class _DeviceIds:
    """A batch's ids on their way down; the device arrays are held until the copy ends."""

    def __init__(self, stream: DeviceBatchStream, slot: _IdSlot, ids, offsets):
        self._stream, self._slot = stream, slot
        self._device = (ids, offsets)
        self._sizes = (int(ids.size), int(offsets.size))

    def wait(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids and offsets in pinned host memory, valid until ``release``."""
        with reporting_device_errors("copying a batch's ids to the host"):
            wait_event(self._slot.copied, "stream: batch ids on the host")  # sync
        self._device = None
        n_ids, n_offsets = self._sizes
        return self._slot.ids[:n_ids], self._slot.offsets[:n_offsets]

    def release(self) -> None:
        """Give the pinned buffers back (after ``wait``, or unread when a run stops)."""
        if self._device is not None:  # unread: the copy into them must end first
            try:
                wait_event(self._slot.copied, "stream: dropped batch")  # sync (failures only)
            except device_error_types():
                pass  # the device failed; its error is reported where it was seen
        self._stream._ids.put(self._slot)


def _reserved(array, n: int, dtype, make):
    """``array`` when it holds ``n`` items of ``dtype``, else a new one with headroom."""
    if array is not None and array.size >= n and array.dtype == dtype:
        return array
    return make(max(n + int(n * STREAM_HEADROOM), 1), dtype)


def _leftmost_matches(match_at, match_token, token_length):
    """The candidates a left-to-right scan keeps: each one that starts past the last kept."""
    ends = match_at + token_length[match_token]
    if (match_at[1:] >= ends[:-1]).all():  # nothing overlaps (the usual case)
        return match_at, match_token
    keep, last_end = [], -1
    for k, (at, end) in enumerate(zip(match_at.tolist(), ends.tolist())):
        if at >= last_end:
            keep.append(k)
            last_end = end
    return match_at[keep], match_token[keep]


def _first_bad_id(xp, ids, gaps):
    """(ids as safe int64 gather indices, 1-element device array: first bad position or n)."""
    ids = ids.astype(xp.int64)
    bad = (ids < 0) | (ids >= gaps.size)
    safe = xp.where(bad, 0, ids)
    bad |= gaps[safe]
    positions = xp.arange(ids.size, dtype=xp.int64)
    first = xp.where(bad, positions, ids.size).min() if ids.size else xp.zeros((), xp.int64)
    return safe, first.reshape(1)
