"""CUDA target of the pre-tokenizers: piece starts and word counts of segments on the device.

The device runs the CPU's own scanner (``kernels.pretok``) in parallel, in two
steps (the plan the ``pretok`` docstring sets out):

1. Cut the text where a piece boundary is certain: every segment start, and
   every ``is_safe_cut`` position (a space after a non-space, a letter before
   punctuation or a newline, a newline before text...: the two characters
   around the byte decide), a local test run by one thread per byte. Segment
   ends are marked as stops.
2. One thread per chunk between consecutive cuts runs ``pretok.piece_end``
   from the chunk's start to its end, marking each piece start. Because a
   safe cut is a boundary whatever came before, the pieces equal
   ``pretok.split_ends`` on the whole segment (tested on every Unicode
   general category, invalid UTF-8 and random text in the simulator).

Marks (uint8, one per byte, ``piece_marks_cuda``): ``PIECE_START`` where a
piece starts inside a segment, ``SEGMENT_STOP`` at the first byte after a
segment that no segment continues, 0 elsewhere. Words for counting are the
spans between consecutive nonzero marks that start at a ``PIECE_START``.

Segments are ``[seg_start[k], seg_end[k])`` byte ranges (documents, or text
between special tokens), int64 device arrays; they must not overlap (empty
ones are skipped); bytes outside every segment are never split or counted.
Nothing on the device checks this: the callers (``gpubpe.pretokenize``,
``gpubpe.device``) build them so.

Kernels, launch shapes and scratch (n = bytes, S = segments, B = marks):

- ``segment_bounds_kernel``: a thread per segment, grid-stride. Marks its start,
  and +1/-1 at its ends into ``depth`` (int32, n + 1; atomics, since one
  segment's end may be the next one's start); ``cumsum(depth)`` then says which
  bytes lie inside a segment (int32, n).
- ``mark_cuts_kernel``: a thread per byte, grid-stride: safe cuts and stops.
- ``compact_marks_kernel``: a thread per byte, grid-stride: the positions of
  the nonzero marks, at their exclusive prefix count (scan int64, n + 1;
  positions int64, n + 1). Scan + scatter: no data-sized host read.
- ``piece_starts_kernel``: a thread per chunk, grid-stride over the chunk count
  the scan left on the device (launched for n items: no host read to size it).
- Counting (``DeviceWordCounter``, one table for a whole corpus, batch after
  batch; ``count_words_cuda`` counts one batch with it). The words are the
  spans between consecutive nonzero marks that start at a ``PIECE_START``
  (the marks compacted again). ``count_insert_kernel``, a thread per mark,
  claims the word's key in an open-addressing table with atomicCAS (the key
  of ``encode.words.word_key``: words of up to 7 bytes are their own key,
  longer ones a 56-bit hash), adds 1 to its int64 count and keeps its first
  corpus offset by atomic min; the claiming thread lists the cell as new.
  ``long_word_check_kernel`` compares every long word with its cell's word
  (a 56-bit collision: ``WordCollision``, and ``gpubpe`` counts on the CPU).
  ``append_words_kernel``, a thread per new word, copies its bytes into the
  device pool of distinct words. ``rehash_kernel`` (a thread per old cell)
  doubles the table when a batch could fill it past half.
  ``gather_words_kernel`` (a thread per cell) lists the words by slot; a sort
  by first offset gives the CPU counter's order (first occurrence).
  Scratch per batch: marks 1 B, depth + inside 8 B, scan + positions 16 B per
  byte (a second scan + positions when counting); the table 40 B per cell.

Syncs: ``word_start_flags_cuda`` none (its result stays on the device).
Counting: two per batch (the mark count, which sizes the table; the new
words' count and bytes with the collision flag, which size the pool), two at
the end (the words' offsets and counts; their bytes): constant per batch,
tested. Launches: 4 Numba kernels for the flags (+ CuPy's cumsum, scan and
comparisons), 8 per counted batch (+1 when the table grows), 1 at the end.

Paper estimate for an H100 (``shared/GPU_FACTS.md``: 2.7 TB/s device copy,
a launch 17-43 us, a sync 17 us) -- an estimate, nothing here was timed on a
GPU. Per byte, the data-sized passes move about: bounds + cumsum 12 B, cuts
2 B, scan 9 B + scatter ~3 B (twice when counting), flags 2 B: ~30-45 B per
byte, ~15 ms per GB at 2.7 TB/s. The chunk kernel runs the CPU scanner's
~10-30 instructions per byte in each thread; English chunks are ~6 bytes and
neighbouring threads scan neighbouring chunks (a warp reads ~2 cache lines at
a time); 132 SMs x 2048 threads at ~1 byte per ~20 cycles each bound it near
20 GB/s. Counting adds ~3 atomics per word (~60 M words in 308 MB); the hot
words' cells (" the") serialise a few million atomics each, a few ms. So the
device part should clear the issue's 2 GB/s by a margin; the host part may
not: ``count_words`` reads each 64 MB batch on one thread (file read, newline
scan, ``segments``) and copies it through pageable memory with no overlap,
likely ~1-2 GB/s on its own. Finding newlines on the device and pinned,
overlapped copies are the next steps when a GPU can measure it
(``bench/count_bench.py --megabytes 308`` times both rows, checked equal). Text
without ASCII spaces (Chinese, Japanese) was one chunk per document while the
only safe cut was a space after ASCII; with the cuts before punctuation and
after newlines (``pretok`` notes) its chunks are clauses: on the zh and ja
lines of ``tests/data/multiscript.txt`` (238 KB each, as one document) the
mean chunk went from 58 / 84 bytes to 10.5 / 16 (cl100k, o200k; GPT-2 8.6 /
13.5) and the longest from 1,961 / 2,855 bytes to 99 / 177
(``bench/chunk_lengths.py``, ``bench/RESULTS.md``). A run of letters is never
cut (a letter run never ends at a letter), so a 1 MB document with no
punctuation, space or newline is still one thread's work.

Performance notes:
- PTX without a device: Numba compiles the ``@njit`` helpers that a kernel
  calls as device functions and asks the current device for its compute
  capability first, which fails where there is none; inlining every helper at
  Numba IR level instead took 53-207 s per kernel (``pretok`` notes).
  ``cuda_kernels.compile_ptx`` hands Numba the target architecture instead,
  so each helper compiles once and NVVM inlines it: the chunk kernel (all
  three scanners) compiles in ~8 s of CPU time per architecture (8-25 s wall on
  the loaded 2-core VM), the other kernels of this module in under 1 s each.
- ``mark_cuts_kernel`` decodes two characters per byte (the one before, the
  one at p: bytes p-4 .. p+3, which a warp's neighbouring threads read from the
  same cache lines) where it compared two bytes before: some 30-60
  instructions per byte instead of ~5, an estimate, not timed. English text
  gets more cuts too (a letter before a space or punctuation), so its chunks
  are pieces: the chunk kernel then runs one ``piece_end`` per thread, and the
  marks compacted are the piece starts, as many as before.
- The chunk kernel writes its piece starts into the marks it reads its chunks
  from: a piece start lies strictly inside its chunk, never at another chunk's
  start, so no thread reads what another writes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import cuda, njit

from .._cuda import (
    device_empty,
    device_full,
    device_function,
    device_zeros,
    exclusive_scan,
    launch,
    read_scalar,
    to_host,
)
from ..hashing import EMPTY_KEY, claim_cell, mix64, word_key
from ..pretok import is_safe_cut, piece_end
from .words import equal_bytes

PIECE_START = 1
SEGMENT_STOP = 2
SEGMENT_START = 3  # until the chunk kernel: a segment start, told apart from the cuts
NO_POSITION = np.iinfo(np.int64).max
MIN_TABLE_CELLS = 16
# batch_control[] of a counted batch, read back in one copy.
N_NEW, NEW_BYTES, COLLIDED = 0, 1, 2

_piece_end = device_function(piece_end)
_is_safe_cut = device_function(is_safe_cut)
_word_key = device_function(word_key)
_mix64 = device_function(mix64)
_same_bytes = device_function(equal_bytes)


# ---------------------------------------------------------------- piece starts


@cuda.jit
def segment_bounds_kernel(seg_start, seg_end, depth, marks):
    """Mark each non-empty segment's start (``SEGMENT_START``); +1 at its start and -1 at
    its end into ``depth``.

    Launch: a thread per segment, grid-stride. ``depth`` (int32, n + 1) starts at 0.
    """
    for k in range(cuda.grid(1), seg_start.size, cuda.gridsize(1)):
        start = seg_start[k]
        end = seg_end[k]
        if start < end:
            marks[start] = SEGMENT_START
            cuda.atomic.add(depth, start, 1)
            cuda.atomic.add(depth, end, -1)


@njit(inline="always")
def _cut_window_inline(data, inside, marks, p):
    """(first, end): the bytes around p that lie in p's segment, as far as ``is_safe_cut``
    reads (the character before p, the one at p).

    Walks over continuation bytes only, stopping at a segment start
    (``SEGMENT_START``) or a byte outside every segment. The kernel writes
    cuts only at bytes that start a character, so the marks it reads here are
    never written while it runs.
    """
    first = p - 1
    while first > p - 4 and (data[first] & 0xC0) == 0x80 and marks[first] != SEGMENT_START:
        first -= 1
    end = p + 1
    while (end < p + 4 and end < data.size and (data[end] & 0xC0) == 0x80
           and inside[end] != 0 and marks[end] != SEGMENT_START):
        end += 1
    return first, end


_cut_window = device_function(_cut_window_inline)


@cuda.jit
def mark_cuts_kernel(data, inside, scanner, table, marks):
    """Mark safe cuts inside segments (``PIECE_START``) and segment stops (``SEGMENT_STOP``).

    ``inside[p]`` is nonzero for a byte inside a segment. A byte inside that is
    not a segment start has its predecessor in the same segment. Launch: a
    thread per byte, grid-stride; no scratch.
    """
    for p in range(cuda.grid(1), data.size, cuda.gridsize(1)):
        if inside[p] != 0:
            if marks[p] == 0:
                first, end = _cut_window(data, inside, marks, p)
                if _is_safe_cut(data, p, first, end, scanner, table):
                    marks[p] = PIECE_START
        elif p > 0 and inside[p - 1] != 0:
            marks[p] = SEGMENT_STOP


@cuda.jit
def compact_marks_kernel(marks, scan, positions):
    """positions[scan[p]] = p for every nonzero mark; positions[scan[n]] = n (the end).

    ``scan`` is the exclusive prefix count of nonzero marks (n + 1). Launch: a
    thread per byte, grid-stride; ``positions`` int64, n + 1 (the worst case).
    """
    n = marks.size
    for p in range(cuda.grid(1), n, cuda.gridsize(1)):
        if marks[p] != 0:
            positions[scan[p]] = p
        if p == 0:
            positions[scan[n]] = n


@cuda.jit
def piece_starts_kernel(data, positions, scan, scanner, table, marks):
    """Scan each chunk that starts with ``PIECE_START`` by ``piece_end``; mark its piece starts.

    Chunk c is ``[positions[c], positions[c + 1])``; there are ``scan[n]``
    chunks, read on the device. Launch: a thread per chunk, grid-stride,
    sized for n (no host read); no scratch.
    """
    n_chunks = scan[scan.size - 1]
    for c in range(cuda.grid(1), n_chunks, cuda.gridsize(1)):
        start = positions[c]
        if marks[start] == SEGMENT_START:
            marks[start] = PIECE_START  # only this thread reads its chunk's start
        if marks[start] == PIECE_START:
            end = positions[c + 1]
            at = _piece_end(scanner, data, start, end, table)
            while at < end:
                marks[at] = PIECE_START
                at = _piece_end(scanner, data, at, end, table)


def _positions_of_marks(marks, xp):
    """(scan, positions): the exclusive count of nonzero marks, and where they are (device)."""
    scan = exclusive_scan(xp, marks != 0)
    positions = device_empty(xp, marks.size + 1, xp.int64)
    launch(compact_marks_kernel, marks.size, marks, scan, positions)
    return scan, positions


def cut_marks_cuda(data, seg_start, seg_end, scanner, table, xp):
    """Step 1's uint8 marks: ``SEGMENT_START``, ``PIECE_START`` at safe cuts,
    ``SEGMENT_STOP`` after segments. No sync."""
    n = data.size
    marks = device_zeros(xp, n, xp.uint8)
    depth = device_zeros(xp, n + 1, xp.int32)
    launch(segment_bounds_kernel, seg_start.size, seg_start, seg_end, depth, marks)
    inside = xp.cumsum(depth[:n], dtype=xp.int32)
    launch(mark_cuts_kernel, n, data, inside, scanner, table, marks)
    return marks


def piece_marks_cuda(data, seg_start, seg_end, scanner, table, xp):
    """uint8 marks of ``data``: ``PIECE_START`` at piece starts, ``SEGMENT_STOP`` after
    segments. All on the device, no sync (see the module notes)."""
    n = data.size
    marks = cut_marks_cuda(data, seg_start, seg_end, scanner, table, xp)
    scan, positions = _positions_of_marks(marks, xp)
    launch(piece_starts_kernel, n, data, positions, scan, scanner, table, marks)
    return marks


def word_start_flags_cuda(data, seg_start, seg_end, scanner, table, xp):
    """uint8 device array of len(data): 1 where a piece (word) starts inside a segment, else 0.

    ``data`` uint8, ``seg_start``/``seg_end`` int64 device arrays (segments must
    not overlap); ``scanner`` is a ``pretok`` scanner id (``piece_end``)
    and ``table`` its class table on the device (``gpubpe.pretokenize.scanner_table``).
    Equal to ``pretok.split_ends`` on every segment. No sync.
    """
    marks = piece_marks_cuda(data, seg_start, seg_end, scanner, table, xp)
    return (marks == PIECE_START).astype(xp.uint8)


# ---------------------------------------------------------------- word counts
#
# One table for the whole corpus, on the device: cell -> key (uint64), count
# (int64), first (the word's first occurrence as a corpus byte offset: batches
# end to end), length, slot (its index among the distinct words, -1 until its
# bytes are in the pool). A batch's new words get slots in the order their
# claims landed (not deterministic), and their bytes are appended to a byte
# pool; the result is ordered by ``first``, which is deterministic.


@cuda.jit
def count_insert_kernel(data, positions, scan, marks, base, keys, counts, first, lengths,
                        new_cells, batch_control):
    """Count each word of the batch in the table; list the cells this batch claims.

    Word k spans ``[positions[k], positions[k + 1])`` when it starts at a
    ``PIECE_START``. Its cell is claimed with atomicCAS on the word key; the
    claiming thread lists the cell (``new_cells``, count at
    batch_control[N_NEW]) and adds its length to batch_control[NEW_BYTES].
    Every word adds 1 to its count and keeps ``base + start`` as ``first`` by
    atomic min. Launch: a thread per mark, grid-stride, sized for the mark
    count; the table has room for the new words (at most half full after).
    """
    for k in range(cuda.grid(1), scan[scan.size - 1], cuda.gridsize(1)):
        start = positions[k]
        if marks[start] != PIECE_START:
            continue
        stop = positions[k + 1]
        key = np.uint64(_word_key(data, start, stop))  # the simulator returns a Python int
        cell, claimed = claim_cell(keys, key)
        if claimed:
            new_cells[cuda.atomic.add(batch_control, N_NEW, 1)] = cell
            cuda.atomic.add(batch_control, NEW_BYTES, stop - start)
            lengths[cell] = stop - start
        cuda.atomic.add(counts, cell, 1)
        cuda.atomic.min(first, cell, base + start)




@cuda.jit
def long_word_check_kernel(data, positions, scan, marks, base, keys, first, lengths, slot,
                           word_start, pool, batch_control):
    """Set batch_control[COLLIDED] when a long word of the batch is not its cell's word.

    A cell's word is in the pool (``slot >= 0``, an earlier batch's) or at
    ``first - base`` in this batch (claimed now); the length is ``lengths``.
    Words of up to 7 bytes are their own key. Launch: a thread per mark,
    grid-stride, after ``count_insert_kernel``.
    """
    mask = np.uint64(keys.size - 1)
    for k in range(cuda.grid(1), scan[scan.size - 1], cuda.gridsize(1)):
        start = positions[k]
        length = positions[k + 1] - start
        if marks[start] != PIECE_START or length <= 7:
            continue
        key = np.uint64(_word_key(data, start, start + length))
        cell = _mix64(key) & mask
        while keys[cell] != key:
            cell = (cell + np.uint64(1)) & mask
        same = lengths[cell] == length
        if same and slot[cell] >= 0:
            same = _same_bytes(data, start, pool, word_start[slot[cell]], length)
        elif same:
            same = _same_bytes(data, start, data, first[cell] - base, length)
        if not same:
            batch_control[COLLIDED] = 1


@cuda.jit
def append_words_kernel(data, base, new_cells, new_at, first, lengths, n_words, slot,
                        word_start, pool):
    """Give each cell claimed by the batch the next slot; copy its bytes to ``new_at[j]``.

    Launch: a thread per new cell, grid-stride; ``new_at`` (int64) is the pool
    offset of each, a prefix sum of their lengths.
    """
    for j in range(cuda.grid(1), new_cells.size, cuda.gridsize(1)):
        cell = new_cells[j]
        at = new_at[j]
        source = first[cell] - base
        for i in range(lengths[cell]):
            pool[at + i] = data[source + i]
        slot[cell] = n_words + j
        word_start[n_words + j] = at


@cuda.jit
def rehash_kernel(keys, counts, first, lengths, slot, new_keys, new_counts, new_first,
                  new_lengths, new_slot):
    """Move every entry into a larger table. Launch: a thread per old cell, grid-stride."""
    mask = np.uint64(new_keys.size - 1)
    for old in range(cuda.grid(1), keys.size, cuda.gridsize(1)):
        key = keys[old]
        if key == EMPTY_KEY:
            continue
        cell = _mix64(key) & mask
        while cuda.atomic.cas(new_keys, cell, EMPTY_KEY, key) != EMPTY_KEY:
            cell = (cell + np.uint64(1)) & mask
        new_counts[cell] = counts[old]
        new_first[cell] = first[old]
        new_lengths[cell] = lengths[old]
        new_slot[cell] = slot[old]


@cuda.jit
def gather_words_kernel(keys, counts, first, lengths, slot, word_first, word_len, word_count):
    """The first offset, length and count of the word in each slot. Launch: a thread per cell."""
    for cell in range(cuda.grid(1), keys.size, cuda.gridsize(1)):
        if keys[cell] != EMPTY_KEY:
            word_first[slot[cell]] = first[cell]
            word_len[slot[cell]] = lengths[cell]
            word_count[slot[cell]] = counts[cell]


def table_cells_for(n_words: int) -> int:
    """Cells of the counting table: a power of two at least twice ``n_words``."""
    return max(MIN_TABLE_CELLS, 1 << int(2 * n_words - 1).bit_length())


class WordCollision(Exception):
    """Two different long words shared a 56-bit key: count with the CPU instead."""


class DeviceWordCounter:
    """Word counts of batch after batch, kept on the device until :meth:`result`.

    ``add`` takes a batch's device bytes and segments (as
    :func:`word_start_flags_cuda`): two syncs (the mark count, which sizes the
    table; the batch's new words and collision flag, which size the pool).
    ``result`` makes two more. Raises :class:`WordCollision` from ``add`` when
    a long word's 56-bit key is another word's (the counts are then unusable).
    """

    def __init__(self, scanner: int, table, xp, words: int = 1 << 16, pool_bytes: int = 1 << 20):
        """``words`` and ``pool_bytes``: first room for distinct words and their bytes
        (each grows by doubling on the device when a batch needs more)."""
        self.scanner, self.table, self.xp = scanner, table, xp
        self.n_words = 0  # distinct words so far (host)
        self.pool_used = 0  # bytes of their pool (host)
        self.bytes_seen = 0  # corpus offset of the next batch (host)
        n_cells = table_cells_for(words)
        self._new_table(n_cells)
        self.slot = device_full(xp, n_cells, -1, xp.int64)
        self.word_start = device_empty(xp, words + 1, xp.int64)
        self.pool = device_empty(xp, pool_bytes, xp.uint8)

    def _new_table(self, n_cells: int) -> None:
        xp = self.xp
        self.keys = device_full(xp, n_cells, EMPTY_KEY, xp.uint64)
        self.counts = device_zeros(xp, n_cells, xp.int64)
        self.first = device_full(xp, n_cells, NO_POSITION, xp.int64)
        self.lengths = device_zeros(xp, n_cells, xp.int64)

    def _reserve_cells(self, n_words: int) -> None:
        """Grow the table (rehash on the device) so it holds ``n_words`` at half load."""
        n_cells = table_cells_for(n_words)
        if n_cells <= self.keys.size:
            return
        old = (self.keys, self.counts, self.first, self.lengths, self.slot)
        self._new_table(n_cells)
        self.slot = device_full(self.xp, n_cells, -1, self.xp.int64)
        launch(rehash_kernel, old[0].size, *old, self.keys, self.counts, self.first,
               self.lengths, self.slot)

    def _reserve_words(self, n_words: int, pool_bytes: int) -> None:
        if n_words + 1 > self.word_start.size:
            self.word_start = _grown(self.xp, self.word_start, n_words + 1, self.n_words)
        if pool_bytes > self.pool.size:
            self.pool = _grown(self.xp, self.pool, pool_bytes, self.pool_used)

    def add(self, data, seg_start, seg_end) -> None:
        """Count the words of one batch (device uint8 bytes, int64 segments)."""
        xp = self.xp
        marks = piece_marks_cuda(data, seg_start, seg_end, self.scanner, self.table, xp)
        scan, positions = _positions_of_marks(marks, xp)
        n_marks = read_scalar(scan, -1, "marks (sizes the word table)")  # sync
        self._reserve_cells(self.n_words + n_marks)
        new_cells = device_empty(xp, max(n_marks, 1), xp.int64)
        batch_control = device_zeros(xp, 3, xp.int64)
        words = (data, positions, scan, marks, self.bytes_seen)
        launch(count_insert_kernel, n_marks, *words, self.keys, self.counts, self.first,
               self.lengths, new_cells, batch_control)
        launch(long_word_check_kernel, n_marks, *words, self.keys, self.first, self.lengths,
               self.slot, self.word_start, self.pool, batch_control)
        n_new, new_bytes, collided = to_host(batch_control, "new words, collision").tolist()  # sync
        if collided:
            raise WordCollision("two different words shared a 56-bit word key")
        self._reserve_words(self.n_words + n_new, self.pool_used + new_bytes)
        new_cells = new_cells[:n_new]
        new_at = exclusive_scan(xp, self.lengths[new_cells])[:n_new] + self.pool_used
        launch(append_words_kernel, n_new, data, self.bytes_seen, new_cells, new_at, self.first,
               self.lengths, self.n_words, self.slot, self.word_start, self.pool)
        self.n_words += n_new
        self.pool_used += new_bytes
        self.bytes_seen += data.size

    def result(self) -> DeviceCounts:
        """The distinct words so far, in order of first occurrence in the corpus (the CPU
        counter's order), on the host. Two syncs."""
        xp, n = self.xp, self.n_words
        per_slot = device_empty(xp, (3, max(n, 1)), xp.int64)
        launch(gather_words_kernel, self.keys.size, self.keys, self.counts, self.first,
               self.lengths, self.slot, per_slot[0], per_slot[1], per_slot[2])
        order = xp.argsort(per_slot[0, :n])
        in_order = xp.stack([per_slot[0, :n][order], self.word_start[:n][order],
                             per_slot[1, :n][order], per_slot[2, :n][order]])
        first, pool_start, length, count = to_host(in_order, "distinct words, counts")  # sync
        pool = to_host(self.pool[:self.pool_used], "distinct words' bytes")  # sync
        return DeviceCounts(pool, pool_start, length, count, first)


class DeviceCounts(NamedTuple):
    """Distinct words and counts, host arrays in order of first occurrence."""

    pool: np.ndarray  # uint8: the words' bytes
    pool_start: np.ndarray  # int64: word w is pool[pool_start[w]:pool_start[w] + length[w]]
    length: np.ndarray  # int64
    count: np.ndarray  # int64
    first: np.ndarray  # int64: the corpus byte offset of its first occurrence


def _grown(xp, array, min_size: int, used: int):
    """A larger device copy of ``array`` (doubling), its first ``used`` entries kept."""
    grown = device_empty(xp, max(2 * array.size, min_size), array.dtype)
    grown[:used] = array[:used]
    return grown


def count_words_cuda(data, seg_start, seg_end, scanner, table, xp):
    """Distinct words of one batch with int64 counts, counted on the device.

    Arguments as :func:`word_start_flags_cuda`. Returns host arrays ``(word_at,
    word_len, word_count, collided)``: the words and counts of ``pretok.count_scanned_words``
    (without its keys), in order of first occurrence. ``collided``: two
    long words shared a 56-bit key; the arrays are then empty. Four syncs.
    """
    counter = DeviceWordCounter(scanner, table, xp)
    try:
        counter.add(data, seg_start, seg_end)
    except WordCollision:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, True
    counts = counter.result()
    return counts.first, counts.length, counts.count, False


# Every @cuda.jit kernel of this module with its launch signature (PTX test: sm_80, sm_90).
PRETOK_CUDA_SIGNATURES = {
    segment_bounds_kernel: "void(int64[::1], int64[::1], int32[::1], uint8[::1])",
    mark_cuts_kernel: "void(uint8[::1], int32[::1], int64, uint8[::1], uint8[::1])",
    compact_marks_kernel: "void(uint8[::1], int64[::1], int64[::1])",
    piece_starts_kernel: "void(uint8[::1], int64[::1], int64[::1], int64, uint8[::1], "
                         "uint8[::1])",
    count_insert_kernel: "void(uint8[::1], int64[::1], int64[::1], uint8[::1], int64, "
                         "uint64[::1], int64[::1], int64[::1], int64[::1], int64[::1], "
                         "int64[::1])",
    long_word_check_kernel: "void(uint8[::1], int64[::1], int64[::1], uint8[::1], int64, "
                            "uint64[::1], int64[::1], int64[::1], int64[::1], int64[::1], "
                            "uint8[::1], int64[::1])",
    append_words_kernel: "void(uint8[::1], int64, int64[::1], int64[::1], int64[::1], "
                         "int64[::1], int64, int64[::1], int64[::1], uint8[::1])",
    rehash_kernel: "void(uint64[::1], int64[::1], int64[::1], int64[::1], int64[::1], "
                   "uint64[::1], int64[::1], int64[::1], int64[::1], int64[::1])",
    gather_words_kernel: "void(uint64[::1], int64[::1], int64[::1], int64[::1], int64[::1], "
                         "int64[::1], int64[::1], int64[::1])",
}
